#!/usr/bin/env bash
# Smoke run of the benchmark: every kind of measurement runs end to end and the
# JSON for tools is complete. Timings never fail this stage (the benchmark is a
# report); a crash, competitors that disagree or malformed JSON do.
# Runs with cpe installed in the active venv, from the repository root.
set -euo pipefail
results="$CPE_CI_WORK/bench.json"
# The quick run takes well under a minute; the limit only catches a hang.
timeout 300 python benchmarks/bench.py --quick --json "$results"
# The installed command runs the same benchmark (one kind, to stay quick).
timeout 120 cpe bench --quick --only grid > /dev/null
python benchmarks/check_results.py --kinds single,table,positions,grid,rope,cold "$results"
