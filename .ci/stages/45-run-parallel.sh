#!/usr/bin/env bash
# The module is declared free-threading compatible, so its tests must also pass
# when every test runs in several threads at once (pytest-run-parallel): values,
# accuracy, errors, conventions, grids, RoPE, fast paths and regressions, each
# called concurrently with itself, sharing cpe's caches. (No free-threaded CPython
# can be had here; on a GIL build this still races the caches and the GIL releases.)
# Runs with cpe installed in the active venv, from the repository root.
set -euo pipefail
python -m pip install -q "pytest-run-parallel==0.10.0"
python -m pytest -q -p no:cacheprovider --parallel-threads=4 \
    tests/test_values.py tests/test_accuracy.py tests/test_errors.py \
    tests/test_conventions.py tests/test_grids.py tests/test_rope.py \
    tests/test_paths.py tests/test_regressions.py
