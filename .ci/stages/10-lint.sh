#!/usr/bin/env bash
# Lint: ruff (Python, stubs, tests), cython-lint (.pyx, .pxd), mypy --strict (the
# stubs and the pure-Python modules), pyright --strict on a user's scripts,
# configured in pyproject.toml (.ci/pyright-user.json), and shellcheck
# on the CI scripts when it is installed.
# The tools are pinned and installed in a virtual environment of their own.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${CPE_CI_WORK:-$(mktemp -d)}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

# Findings tolerated, each only in the file and for the rule named (an extended
# regular expression matched against one line of `path:line:column: message`).
# Empty: every finding fails the stage. The stage prints entries that no longer
# match anything, so that they can be deleted.
pending=()

# The typing gate runs on the newest NumPy (a user's script meets it first),
# which needs a newer CPython than the machine's python3 may be: the newest one
# on PATH or in pyenv (on GitHub, setup-python's 3.13). The packaging stage keeps
# the oldest NumPy supported.
lint_python=
for version in 3.14 3.13 3.12; do
    if "python$version" -c "" 2> /dev/null; then  # (not a pyenv shim that fails)
        lint_python="python$version"
        break
    fi
    found=$(pyenv versions --bare 2> /dev/null | grep -E "^${version//./\\.}\.[0-9]+$" | sort -V | tail -n 1 || true)
    if [ -n "$found" ]; then
        lint_python="$(pyenv prefix "$found")/bin/python3"
        break
    fi
done
[ -n "$lint_python" ] || { echo "lint: needs CPython 3.12 or newer for NumPy 2.5" >&2; exit 1; }
echo "lint: $("$lint_python" --version)"
venv="$work/lint-venv"
"$lint_python" -m venv "$venv"
"$venv/bin/python" -m pip install -q \
    ruff==0.17.6 cython-lint==0.22.1 mypy==2.4.1 numpy==2.5.5 basedpyright==1.40.2
export PATH="$venv/bin:$PATH"  # cython-lint runs pycodestyle from PATH

# Runs a linter; fails on any finding that is not pending.
check() {
    local name=$1 status=0 output unexpected
    shift
    output=$("$@" 2>&1) || status=$?
    output=$(printf '%s\n' "$output" | sed "s|^$(pwd)/||")
    findings=$(printf '%s\n' "$output" | grep -E '^[^ ]+:[0-9]+:[0-9]+: ' || true)
    unexpected=$findings
    for pattern in "${pending[@]}"; do
        unexpected=$(printf '%s\n' "$unexpected" | grep -Ev -- "$pattern" || true)
    done
    if [ -n "$unexpected" ] || { [ "$status" -ne 0 ] && [ -z "$findings" ]; }; then
        printf '%s\n' "$output"
        echo "$name: FAILED" >&2
        return 1
    fi
    echo "$name: clean ($(printf '%s' "$findings" | grep -c . || true) pending findings tolerated)"
    all_findings+=$findings$'\n'
}

all_findings=
check "ruff check" ruff check --no-cache --output-format concise .
ruff format --check --no-cache . >/dev/null || { ruff format --diff --no-cache . >&2; echo "ruff format: FAILED" >&2; exit 1; }
echo "ruff format: clean"
check "cython-lint" cython-lint src/cpe/*.pyx src/cpe/*.pxd tests/cython_example/*.pyx
# mypy checks src/cpe as a package: the stubs, __init__, _version, the Python modules.
mypy --strict --no-incremental --cache-dir=/dev/null src/cpe
# A user's script that calls every public function as the runtime accepts it, and
# calls the runtime refuses, each of which must be a type error.
mypy --strict --no-incremental --cache-dir=/dev/null tests/typed_usage.py tests/typed_misuse.py
echo "mypy --strict: clean"
# pyright (basedpyright: pyright with Node.js from a wheel, so that nothing is
# downloaded at run time), strict, on the same user's scripts: the misuses must
# be errors (an unneeded ignore is one) and the uses clean.
basedpyright -p .ci/pyright-user.json --pythonpath "$venv/bin/python" \
    tests/typed_usage.py tests/typed_misuse.py
echo "pyright --strict: clean"

# The CI shell scripts, where shellcheck is installed (apt's shellcheck; optional).
if command -v shellcheck > /dev/null; then
    shellcheck .ci/run .ci/stages/*.sh
    echo "shellcheck: clean"
else
    echo "shellcheck: not installed, shell scripts not checked"
fi

for pattern in "${pending[@]}"; do
    if ! printf '%s' "$all_findings" | grep -Eq -- "$pattern"; then
        echo "note: the pending finding '$pattern' is fixed: delete it from $0"
    fi
done
