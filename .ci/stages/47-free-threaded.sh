#!/usr/bin/env bash
# cpe on a free-threaded CPython, where its kernels and caches really run in
# parallel (the wheels include cp314t). No free-threaded CPython is packaged for
# this machine, so 3.13t is built from Debian's source package of python3.13
# (~3 minutes on 2 cores) and kept for later runs. Then, in a venv of it:
# importing cpe leaves the GIL disabled (both modules are declared compatible);
# the whole suite passes; the run-parallel tests pass with 4 threads at once; and
# every kernel path gives the bits of the GIL build in the active venv.
set -euo pipefail
root=$(pwd)
work="${CPE_CI_WORK:?CPE_CI_WORK is set by .ci/run}/free-threaded"
# shellcheck source=.ci/lib/common.sh disable=SC1091
. "$root/.ci/lib/common.sh"

rm -rf "$work"
mkdir -p "$work"

# build_free_threaded_python PREFIX: Debian trixie's python3.13 source, configured
# with --disable-gil, installed at PREFIX; PREFIX/.complete marks a finished build.
build_free_threaded_python() {
    local prefix=$1 src="$work/cpython"
    local mirror
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    mkdir -p "$src/lists/partial"
    printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
        "$mirror" /usr/share/keyrings/debian-archive-keyring.gpg > "$src/trixie.sources"
    # A private source list and package lists: the machine's apt state is untouched.
    local apt=(-o "Dir::Etc::SourceList=$src/trixie.sources" -o Dir::Etc::SourceParts=-
               -o "Dir::State::Lists=$src/lists" -o APT::Sandbox::User=root)
    apt-get "${apt[@]}" -q update > "$src/apt.log"
    (cd "$src" && apt-get "${apt[@]}" -q source --download-only python3.13 >> "$src/apt.log")
    tar -C "$src" -xf "$src"/python3.13_*.orig.tar.xz
    rm -rf "$prefix"
    if ! (cd "$src"/Python-3.13.* \
            && ./configure --disable-gil --prefix="$prefix" --with-ensurepip=install \
            && make -j"$(nproc)" && make install) > "$src/build.log" 2>&1; then
        tail -n 40 "$src/build.log" >&2
        echo "building CPython 3.13t failed" >&2
        return 1
    fi
    touch "$prefix/.complete"
}

prefix="${XDG_CACHE_HOME:-$HOME/.cache}/cpe-ci/python3.13t"
if [ ! -e "$prefix/.complete" ]; then
    echo "building CPython 3.13t at $prefix"
    build_free_threaded_python "$prefix"
fi
python_ft="$prefix/bin/python3.13t"
"$python_ft" -c 'import sys, sysconfig; assert sysconfig.get_config_var("Py_GIL_DISABLED") == 1
print(sys.version)'

copy_tree "$root" "$work/src"
"$python_ft" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --upgrade pip
requirements "$work/venv/bin/python" > "$work/requirements.txt"
# Wheels only: pip then takes the newest release of each with a cp313t wheel (the
# newest Hypothesis has none, and its source needs Rust crates from elsewhere).
"$work/venv/bin/python" -m pip install -q --only-binary=:all: -r "$work/requirements.txt" \
    "pytest-run-parallel==0.10.0"
install_cpe "$work/venv" "$work/src"

# From $work: the tests import the installed build, not the copied sources.
cd "$work"
"$work/venv/bin/python" -W error -c '
import sys
import cpe, cpe._core, cpe.kernels
assert not sys._is_gil_enabled(), "importing cpe enabled the GIL"
print("GIL disabled after importing", cpe.__name__, cpe.__version__)'
"$work/venv/bin/python" -m pytest -q -p no:cacheprovider --rootdir="$work/src" "$work/src/tests"
"$work/venv/bin/python" -m pytest -q -p no:cacheprovider --rootdir="$work/src" \
    "${RUN_PARALLEL_OPTIONS[@]}" "${RUN_PARALLEL_TESTS[@]/#/$work/src/}"

python "$root/.ci/lib/bits_digest.py" > "$work/gil.txt"
"$work/venv/bin/python" "$root/.ci/lib/bits_digest.py" > "$work/free-threaded.txt"
if ! diff "$work/gil.txt" "$work/free-threaded.txt"; then
    echo "the free-threaded build gives other bits than the GIL build" >&2
    exit 1
fi
echo "the same bits in $(wc -l < "$work/gil.txt") groups"
