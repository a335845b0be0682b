#!/usr/bin/env bash
# cpe built with clang, the compiler of the macOS wheels (zig's clang from PyPI:
# no system clang here): the suite passes, and every copy of the SIMD loops gives
# the bits of the gcc build in the active venv. Then the extension's C compiled
# for aarch64 Linux, where none of the x86 dispatch is compiled: no error and no
# warning (nothing can run it here).
set -euo pipefail
root=$(pwd)
work="${CPE_CI_WORK:?CPE_CI_WORK is set by .ci/run}/clang"
# shellcheck source=.ci/lib/common.sh disable=SC1091
. "$root/.ci/lib/common.sh"

rm -rf "$work"
copy_tree "$root" "$work/src"
# With the bfloat16 extra (ml_dtypes): the suite then checks clang's bfloat16
# stores too, every copy of them (bits_digest.py below leaves bfloat16 out).
venv_with_requirements python3 "$work/venv" bfloat16
"$work/venv/bin/python" -m pip install -q "ziglang==0.17.1"
cc="$work/cc"
# For the baseline x86-64 (or aarch64) CPU, as wheels are built: without it zig
# builds for this machine's CPU, where every SIMD feature is enabled throughout
# and a copy missing its target attribute would go unnoticed.
printf '#!/bin/sh\nexec "%s" -m ziglang cc -mcpu=baseline "$@"\n' "$work/venv/bin/python" > "$cc"
chmod +x "$cc"
"$cc" --version | head -n 1

CC="$cc" LDSHARED="$cc -shared" install_cpe "$work/venv" "$work/src"
so=$("$work/venv/bin/python" -c "import cpe.kernels as k; print(k.__file__)")
readelf -p .comment "$so" | grep -q clang || { echo "$so was not built by clang" >&2; exit 1; }

# The suite (test_cimport builds its downstream module with clang too). From
# $work: the tests import the installed build, not the copied sources.
(cd "$work" && CC="$cc" LDSHARED="$cc -shared" "$work/venv/bin/python" -m pytest -q \
    -p no:cacheprovider --rootdir="$work/src" "$work/src/tests")

# The same bits as gcc's build, with every copy of the loops.
for setting in "" CPE_DISABLE_AVX512=1 CPE_DISABLE_SIMD=1; do
    (cd "$work" && env ${setting:+"$setting"} python "$root/.ci/lib/bits_digest.py") \
        > "$work/gcc.txt"
    (cd "$work" && env ${setting:+"$setting"} "$work/venv/bin/python" \
        "$root/.ci/lib/bits_digest.py") > "$work/clang.txt"
    if ! diff "$work/gcc.txt" "$work/clang.txt"; then
        echo "clang's build gives other bits than gcc's (${setting:-every copy enabled})" >&2
        exit 1
    fi
    echo "${setting:-every copy enabled}: the same bits in $(wc -l < "$work/gcc.txt") groups"
done

# aarch64 Linux: compile only, every warning is an error.
include_numpy=$("$work/venv/bin/python" -c "import numpy; print(numpy.get_include())")
include_python=$("$work/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
generated="$work/src/build/cython/src/cpe"
for source in "$generated"/_engine.c "$generated"/kernels.c "$generated"/_args.c \
    "$generated"/_core.c; do
    "$cc" -target aarch64-linux-gnu -c -O3 -ffp-contract=off -Wall -Werror \
        -I"$generated" -I"$include_numpy" -I"$include_python" \
        -o "$work/$(basename "$source" .c).aarch64.o" "$source"
done
file "$work"/*.aarch64.o
