#!/usr/bin/env bash
# valgrind memcheck of the test suite against the ordinary (shipped) build of cpe.
# Uses the system's own python3 (Debian's 3.11 here, Ubuntu's on GitHub's runners;
# pyenv's is noisy under valgrind) in a venv, with
# PYTHONMALLOC=malloc so that every Python allocation is checked, and the
# suppressions in .ci/valgrind-python.supp (ld.so and glibc false positives) and
# those generated from a run of this Python without cpe.
# Any memcheck error fails the stage (--error-exitcode=99).
#
# Run here: values, errors, huge requests, docs, and the property tests with a few
# examples each (profile "valgrind"): every public function, every error path and
# both kernels, in about 90 s. Left out: test_accuracy (80 s of mpmath through the
# same kernels as test_values), test_threads (valgrind runs one thread at a time,
# so the GIL check cannot hold), test_leaks (timing and RSS meters).
set -euo pipefail
root=$(pwd)
work="${CPE_CI_WORK:?CPE_CI_WORK is set by .ci/run}/valgrind"
# shellcheck source=.ci/lib/common.sh
# shellcheck source=.ci/lib/common.sh disable=SC1091
. "$root/.ci/lib/common.sh"

missing=()
for package in valgrind python3-venv python3-dev; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "-- apt-get install ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
system_python=/usr/bin/python3
"$system_python" -c 'import sys; assert sys.prefix == "/usr", sys.prefix'

rm -rf "$work"
mkdir -p "$work"
copy_tree "$root" "$work/src"
venv_with_requirements "$system_python" "$work/venv"
start=$SECONDS
CFLAGS="-g" install_cpe "$work/venv" "$work/src"
echo "-- built cpe for $("$work/venv/bin/python" -c 'import sys; print(sys.executable, sys.version.split()[0])') in $((SECONDS - start)) s"

# This Python's own reports, generated: whatever memcheck reports for pytest on a
# test that imports NumPy but not cpe is the interpreter's, NumPy's or the C
# library's (another distribution's Python may report what Debian's does not).
# Six frames each, so that they match the same error reached from other callers.
mkdir -p "$work/baseline"
cat > "$work/baseline/test_baseline.py" <<'PY'
import numpy as np


def test_without_cpe():
    values = np.sin(np.arange(4096.0)).reshape(64, 64)
    assert values.T @ values is not None and "é" * 40 != "e" * 40
PY
(cd "$work/baseline" && env PYTHONMALLOC=malloc valgrind --tool=memcheck --num-callers=6 \
    --gen-suppressions=all --suppressions="$root/.ci/valgrind-python.supp" \
    --log-file="$work/baseline/memcheck.%p.log" \
    "$work/venv/bin/python" -m pytest -q -p no:cacheprovider test_baseline.py) > /dev/null
awk '/^\{/ {inside = 1} inside {print} /^\}/ {inside = 0}' "$work"/baseline/memcheck.*.log \
    > "$work/generated.supp"
echo "-- $(grep -c '^{' "$work/generated.supp" || true) suppressions generated from a run without cpe"

start=$SECONDS
status=0
(cd "$work/src" && env PYTHONMALLOC=malloc CPE_HYPOTHESIS_PROFILE=valgrind \
    valgrind --tool=memcheck --error-exitcode=99 --num-callers=40 \
        --suppressions="$root/.ci/valgrind-python.supp" \
        --suppressions="$work/generated.supp" --log-file="$work/memcheck.%p.log" \
        "$work/venv/bin/python" -m pytest -q -p no:cacheprovider \
        tests/test_values.py tests/test_errors.py tests/test_huge.py tests/test_docs.py \
        tests/test_properties.py) || status=$?
grep -h "ERROR SUMMARY" "$work"/memcheck.*.log || true
if [ "$status" -ne 0 ]; then
    [ "$status" -eq 99 ] && cat "$work"/memcheck.*.log
    echo "valgrind stage failed (exit $status; 99 = memcheck errors)" >&2
    exit "$status"
fi
echo "-- memcheck: no errors, in $((SECONDS - start)) s"
