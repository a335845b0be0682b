#!/usr/bin/env bash
# cpe on a free-threaded CPython, where its kernels and caches really run in
# parallel (the wheels include cp314t). CPE_FREE_THREADED_PYTHON names one to use
# (GitHub's runners); otherwise, as no free-threaded CPython is packaged for this
# machine, 3.13t is built from Debian's source package of python3.13 (~3 minutes
# on 2 cores) and kept for later runs. Then, in a venv of it:
# importing cpe leaves the GIL disabled (both modules are declared compatible);
# the whole suite passes; the run-parallel tests pass with 4 threads at once; and
# every kernel path gives the bits of the GIL build in the active venv.
set -euo pipefail
unset PYTHON_GIL  # the GIL must stay disabled by cpe's own declaration
root=$(pwd)
work="${CPE_CI_WORK:?CPE_CI_WORK is set by .ci/run}/free-threaded"
# shellcheck source=.ci/lib/common.sh disable=SC1091
. "$root/.ci/lib/common.sh"

rm -rf "$work"
mkdir -p "$work"

configure_options=(--disable-gil --with-ensurepip=install)

# usable_free_threaded_python PREFIX: a finished build (PREFIX/.complete names its
# configure options) without the GIL, with the modules pip and the tests need.
usable_free_threaded_python() {
    [ "$(cat "$1/.complete" 2>/dev/null)" = "${configure_options[*]}" ] \
        && "$1/bin/python3.13t" -c 'import sysconfig, ssl, zlib, bz2, lzma, ctypes, sqlite3
assert sysconfig.get_config_var("Py_GIL_DISABLED") == 1' 2>/dev/null
}

# build_free_threaded_python PREFIX: Debian trixie's python3.13 source, configured
# with configure_options, installed at PREFIX.
build_free_threaded_python() {
    local prefix=$1 src="$work/cpython"
    local mirror
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources \
        2>/dev/null || true)
    if [ -z "$mirror" ]; then
        echo "no Debian mirror (URIs:) in /etc/apt/sources.list.d/debian.sources" >&2
        return 1
    fi
    mkdir -p "$src/lists/partial" "$src/cache"
    printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
        "$mirror" /usr/share/keyrings/debian-archive-keyring.gpg > "$src/trixie.sources"
    # A private source list, package lists and cache: the machine's apt state is
    # untouched.
    local apt=(-o "Dir::Etc::SourceList=$src/trixie.sources" -o Dir::Etc::SourceParts=-
               -o "Dir::State::Lists=$src/lists" -o "Dir::Cache=$src/cache"
               -o APT::Sandbox::User=root)
    apt-get "${apt[@]}" -q update > "$src/apt.log"
    (cd "$src" && apt-get "${apt[@]}" -q source --download-only python3.13 >> "$src/apt.log")
    tar -C "$src" -xf "$src"/python3.13_*.orig.tar.xz
    rm -rf "$prefix"
    if ! (cd "$src"/Python-3.13.* \
            && ./configure --prefix="$prefix" "${configure_options[@]}" \
            && make -j"$(nproc)" && make install) > "$src/build.log" 2>&1; then
        tail -n 40 "$src/build.log" >&2
        echo "building CPython 3.13t failed" >&2
        return 1
    fi
    echo "${configure_options[*]}" > "$prefix/.complete"
}

# CPE_FREE_THREADED_PYTHON: a free-threaded CPython to use instead (GitHub's
# runners get one from actions/setup-python, see .github/workflows/ci.yml).
if [ -n "${CPE_FREE_THREADED_PYTHON:-}" ]; then
    python_ft=$CPE_FREE_THREADED_PYTHON
    "$python_ft" -c 'import sysconfig
assert sysconfig.get_config_var("Py_GIL_DISABLED") == 1, "not a free-threaded build"' || {
        echo "CPE_FREE_THREADED_PYTHON=$python_ft is not a free-threaded CPython" >&2
        exit 1
    }
else
    prefix="${XDG_CACHE_HOME:-$HOME/.cache}/cpe-ci/python3.13t"
    if ! usable_free_threaded_python "$prefix"; then
        echo "building CPython 3.13t at $prefix"
        build_free_threaded_python "$prefix"
        usable_free_threaded_python "$prefix" || {
            echo "the CPython 3.13t built at $prefix lacks the GIL-free build or a module" >&2
            exit 1
        }
    fi
    python_ft="$prefix/bin/python3.13t"
fi
"$python_ft" -c 'import sys; print(sys.version)'

copy_tree "$root" "$work/src"
"$python_ft" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --upgrade pip
requirements "$work/venv/bin/python" > "$work/requirements.txt"
# Wheels only: pip then takes the newest release of each with a wheel for 3.13t
# (the newest Hypothesis has none, and its source needs Rust crates from elsewhere).
"$work/venv/bin/python" -m pip install -q --only-binary=:all: -r "$work/requirements.txt" \
    "$RUN_PARALLEL_PLUGIN"
install_cpe "$work/venv" "$work/src"

# From $work: the tests import the installed build, not the copied sources.
cd "$work"
"$work/venv/bin/python" -W error -c '
import sys
import cpe, cpe._args, cpe._core, cpe._engine, cpe.kernels
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
