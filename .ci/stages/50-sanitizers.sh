#!/usr/bin/env bash
# ASan + UBSan. Builds cpe with the sanitizers (gcc; recipe and flags from
# shared/BUILD-NOTES.md) in a copy of the repository, into a venv of its own;
# checks that the tests import that build; then runs the test suite under the
# sanitizers (see the end for why once). Any sanitizer report fails the stage.
#
# Left out here: tests/test_leaks.py (ASan's allocator quarantines freed memory, so
# RSS grows by design; the leak meters run in the plain suite). Skipped by the
# tests themselves: the RLIMIT_AS test (ASan reserves terabytes of address space).
# setup.py appends -O3 after CFLAGS, so the objects are built at -O3, not -O1.
set -euo pipefail
root=$(pwd)
work="${CPE_CI_WORK:?CPE_CI_WORK is set by .ci/run}/sanitizers"
# shellcheck source=.ci/lib/common.sh
# shellcheck source=.ci/lib/common.sh disable=SC1091
. "$root/.ci/lib/common.sh"

rm -rf "$work"
mkdir -p "$work/reports"
copy_tree "$root" "$work/src"
venv_with_requirements python "$work/venv"
py="$work/venv/bin/python"

libasan=$(gcc -print-file-name=libasan.so)
[ -f "$libasan" ] || { echo "libasan.so not found (gcc -print-file-name)" >&2; exit 1; }
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -fno-wrapv -g -O1"

# Tests deliberately ask for 2**63-byte arrays: with allocator_may_return_null
# ASan returns NULL (NumPy raises MemoryError) and only warns, instead of aborting.
# Reports go to files: pytest's output capture would swallow them otherwise.
sanitized() {
    env LD_PRELOAD="$libasan" PYTHONMALLOC=malloc \
        ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:log_path=$work/reports/asan" \
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$work/reports/ubsan" \
        "$@"
}

# Any error in a report file fails the stage (allocation warnings do not).
check_reports() {
    if grep -lE "ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer" "$work/reports/"* 2>/dev/null; then
        cat "$work/reports/"*
        echo "sanitizer reports above ($1)" >&2
        exit 1
    fi
    rm -f "$work/reports/"*
}

# Canary: a report is caught at all (a heap overflow in ctypes.memmove, which ASan intercepts).
if sanitized "$py" -c "import ctypes; b = ctypes.create_string_buffer(100); ctypes.memmove(b, b'x' * 200, 200)" 2>/dev/null; then
    echo "canary: a heap-buffer-overflow went unnoticed: ASan is not active" >&2
    exit 1
fi
grep -q "heap-buffer-overflow" "$work/reports/"asan.* || { echo "canary: no ASan report written" >&2; exit 1; }
rm -f "$work/reports/"*

run_suite() {  # $1: CPE_CYTHON_CHECKS
    echo "-- sanitized build, CPE_CYTHON_CHECKS=$1"
    local start=$SECONDS
    CPE_CYTHON_CHECKS=$1 CFLAGS="$flags" LDFLAGS="$flags" install_cpe "$work/venv" "$work/src"
    echo "   built in $((SECONDS - start)) s"
    # The modules the tests import are this venv's, sanitized, with the checks asked for.
    (cd "$work/src" && sanitized "$py" - "$1" <<'PY'
import subprocess
import sys

import cpe._args
import cpe._core
import cpe._engine
import cpe.kernels

checks = sys.argv[1] == "1"
for module in (cpe._args, cpe._core, cpe._engine, cpe.kernels):
    path = module.__file__
    assert path.startswith(sys.prefix), f"{path} is not the sanitized venv's ({sys.prefix})"
    symbols = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout
    assert "__asan_init" in symbols and "__ubsan_handle_" in symbols, f"{path} is not sanitized"
    print(f"   imports {path}: ASan+UBSan, Cython checks {'on' if checks else 'off'}")
PY
    )
    start=$SECONDS
    (cd "$work/src" && sanitized env CPE_HYPOTHESIS_PROFILE=ci "$py" -m pytest -q -p no:cacheprovider \
        --capture=sys tests --ignore=tests/test_leaks.py \
        --deselect tests/test_cli.py::test_plot_writes_a_png_of_the_requested_size \
        --deselect tests/test_cli.py::test_readme_command_lines_run \
        --deselect tests/test_threads.py::test_a_child_forked_while_a_thread_makes_digit_rows_does_not_hang)
    check_reports "CPE_CYTHON_CHECKS=$1"
    echo "   suite passed with no sanitizer report in $((SECONDS - start)) s"
}

# Once, as shipped. The kernels work on raw pointers and the Python layer indexes
# no memoryview, so CPE_CYTHON_CHECKS=1 generates the very same C: a second run
# with it would test nothing new. test_leaks is left out (ASan keeps freed memory
# on purpose), and so are the two plot tests: matplotlib's own ft2font extension
# trips ASan (an unsanitized cpe shows the same report), which is not ours to fix.
# So is the test that forks while another thread runs cpe: GCC 12's ASan
# allocator takes no lock around fork(), so a child forked while the other thread
# is inside malloc waits forever on the allocator's mutex; the suite's other runs
# keep it.
run_suite 0
