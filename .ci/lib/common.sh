# shellcheck shell=bash
# Helpers shared by .ci/stages/*.sh (sourced, not run).

# copy_tree SRC DEST: the working tree without build outputs or git data, so that a
# variant build never touches (nor reuses) the main tree's objects.
copy_tree() {
    mkdir -p "$2"
    tar -C "$1" --exclude=./build --exclude=./.git --exclude='./.venv*' --exclude='*.so' \
        --exclude='./src/cpe/*.c' --exclude='./src/cpe/*.html' --exclude=./.hypothesis \
        --exclude=./.pytest_cache -cf - . | tar -C "$2" -xf -
}

# as_root COMMAND...: COMMAND as root: directly when root already (this kind of
# machine), else through sudo without a password (GitHub's hosted runners).
as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif command -v sudo > /dev/null && sudo -n true 2> /dev/null; then
        sudo -n "$@"
    else
        echo "needs root (or password-less sudo) for: $*" >&2
        return 1
    fi
}

# requirements PYTHON [EXTRA...]: cpe's build requirements, run-time dependencies,
# [test] extra and any other EXTRAs, one per line, read from pyproject.toml (so
# that they never drift).
requirements() {
    "$1" - "${@:2}" <<'PY'
import sys
import tomllib
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)
wanted = project["build-system"]["requires"] + project["project"]["dependencies"]
for extra in ["test", *sys.argv[1:]]:
    wanted += project["project"]["optional-dependencies"][extra]
print("\n".join(wanted))
PY
}

# venv_with_requirements PYTHON DIR [EXTRA...]: a fresh venv at DIR holding
# requirements() (with those EXTRAs).
venv_with_requirements() {
    "$1" -m venv "$2"
    "$2/bin/python" -m pip install -q --upgrade pip
    requirements "$2/bin/python" "${@:3}" > "$2/requirements.txt"
    "$2/bin/python" -m pip install -q -r "$2/requirements.txt"
}

# install_cpe VENV_DIR SRC_DIR: build and install cpe from SRC_DIR into the venv with
# the current CFLAGS/LDFLAGS/CPE_CYTHON_CHECKS, from scratch (no stale objects or C).
install_cpe() {
    (cd "$2" && rm -rf build src/cpe/*.c src/cpe/*.so \
        && "$1/bin/python" -m pip install -q --no-build-isolation --no-deps --force-reinstall .)
}

# The test files that stages 45 and 47 run with pytest-run-parallel, each test in
# several threads at once (the others spawn processes, time calls or read the
# process's memory, which threads of one test would disturb), and its options.
# Tests that trace allocations run on one thread: tracemalloc counts every
# thread's allocations, and starting and stopping it from several threads at
# once crashes CPython 3.13t (a dozen lines without cpe or NumPy do).
# shellcheck disable=SC2034
RUN_PARALLEL_TESTS=(
    tests/test_values.py tests/test_accuracy.py tests/test_errors.py
    tests/test_conventions.py tests/test_grids.py tests/test_rope.py
    tests/test_paths.py tests/test_regressions.py
)
# shellcheck disable=SC2034
RUN_PARALLEL_PLUGIN="pytest-run-parallel==0.10.0"
# shellcheck disable=SC2034
RUN_PARALLEL_OPTIONS=(--parallel-threads=4 -o thread_unsafe_functions=tracemalloc.start)
