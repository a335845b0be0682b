#!/usr/bin/env bash
# A bounded, coverage-guided fuzz run of every public function (fuzz/fuzz_cpe.py,
# atheris/libFuzzer) against the cpe installed in the CI venv. A finding (a broken
# contract, an unexpected exception, a warning, a crash) fails the stage; the input
# that caused it is kept as $CPE_CI_WORK/fuzz/crash-* and its traceback is printed.
# CPE_FUZZ_SECONDS sets the budget (60 s by default).
set -euo pipefail
work="${CPE_CI_WORK:?CPE_CI_WORK is set by .ci/run}/fuzz"
rm -rf "$work"
mkdir -p "$work/corpus"

python -m pip install -q atheris
python -c 'import atheris, cpe, hypothesis, pytest'  # harness needs: atheris, cpe, the [test] extra

# A fixed seed makes the gate reproducible (CPE_FUZZ_SEED=0 explores afresh).
python fuzz/fuzz_cpe.py "$work/corpus" -seed="${CPE_FUZZ_SEED:-1}" \
    -max_total_time="${CPE_FUZZ_SECONDS:-60}" -timeout=30 -rss_limit_mb=3072 \
    -artifact_prefix="$work/" -print_final_stats=1 >"$work/fuzz.log" 2>&1 || {
    status=$?
    grep -v "^INFO: Instrumenting" "$work/fuzz.log" | tail -n 60
    echo "fuzzing found a problem (exit $status); the input is kept in $work:" >&2
    find "$work" -maxdepth 1 -name 'crash-*' -o -maxdepth 1 -name 'timeout-*' -o -maxdepth 1 -name 'oom-*' >&2
    exit "$status"
}
grep -E "^(fuzzing cpe|Done|stat::number_of_executed_units|stat::new_units_added|stat::peak_rss_mb)" "$work/fuzz.log"
