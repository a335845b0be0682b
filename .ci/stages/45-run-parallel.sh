#!/usr/bin/env bash
# The module is declared free-threading compatible, so its tests must also pass
# when every test runs in several threads at once (pytest-run-parallel): values,
# accuracy, errors, conventions, grids, RoPE, fast paths and regressions, each
# called concurrently with itself, sharing cpe's caches. On this GIL build it
# races the caches and the GIL releases; 47-free-threaded.sh runs the same tests
# without a GIL. Runs with cpe installed in the active venv, from the repository root.
set -euo pipefail
# shellcheck source=.ci/lib/common.sh disable=SC1091
. .ci/lib/common.sh
python -m pip install -q "$RUN_PARALLEL_PLUGIN"
python -m pytest -q -p no:cacheprovider "${RUN_PARALLEL_OPTIONS[@]}" "${RUN_PARALLEL_TESTS[@]}"
