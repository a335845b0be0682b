"""A downstream Cython package can ``cimport cpe.kernels`` from the installed cpe.

The test copies a small downstream package (``tests/cython_example/``: one Cython
module, its ``pyproject.toml``, ``setup.py`` and ``MANIFEST.in``) to a temporary
folder, builds its sdist and then its wheel from that sdist with setuptools and
Cython in a subprocess of this interpreter (no build isolation: it
compiles against the cpe installed here, through the ``kernels.pxd`` that ships in
the package), imports it and checks that the kernels it calls without the GIL give
the same values as ``cpe``'s Python API and as ``math.sin``/``math.cos``.
It is skipped only when this machine has no C compiler.
"""

from __future__ import annotations

import importlib.util
import math
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import cpe

# A small downstream package, as real files: a Cython module that cimports
# cpe.kernels, its pyproject.toml, setup.py and MANIFEST.in.
EXAMPLE = pathlib.Path(__file__).resolve().parent / "cython_example"


def _has_c_compiler() -> bool:
    """Whether setuptools will find a C compiler for this interpreter."""
    if sys.platform == "win32":
        import setuptools  # noqa: F401  # provides distutils, also on Python >= 3.12

        # isort: split
        from distutils.ccompiler import new_compiler
        from distutils.errors import DistutilsPlatformError

        try:
            new_compiler().initialize()  # finds MSVC or raises
        except DistutilsPlatformError:
            return False
        return True
    command = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shutil.which(shlex.split(command)[0]) is not None


def _build(folder: pathlib.Path, hook: str, target: pathlib.Path) -> pathlib.Path:
    """Run setuptools' PEP 517 ``hook`` in ``folder`` (this interpreter, no build
    isolation: against the cpe installed here); the file it made in ``target``."""
    target.mkdir()
    script = f"from setuptools import build_meta; print(build_meta.{hook}({str(target)!r}))"
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=folder, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, f"downstream {hook} failed:\n{run.stdout}\n{run.stderr}"
    return target / run.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def downstream(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The example package, built as a user's package is: its sdist, then its wheel
    from the unpacked sdist; the module imported from the wheel."""
    if not _has_c_compiler():
        pytest.skip("no C compiler found: cannot build a downstream Cython extension")
    root = tmp_path_factory.mktemp("downstream")
    source = root / "source"  # a copy: no build files in the tests' folder
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("*.c", "*.so", "build"))
    sdist = _build(source, "build_sdist", root / "sdist")
    with tarfile.open(sdist) as archive:
        # (the "data" filter where this Python has it: the default from 3.14)
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        archive.extractall(root / "unpacked", **safe)
        names = {name.split("/", 1)[-1] for name in archive.getnames()}
    assert {"downstream.pyx", "setup.py", "pyproject.toml"} <= names, names
    unpacked = next((root / "unpacked").iterdir())
    wheel = _build(unpacked, "build_wheel", root / "wheel")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(root / "installed")
    built = list((root / "installed").glob("downstream.*"))
    extension = next((path for path in built if path.suffix in {".so", ".pyd"}), None)
    assert extension is not None, f"no extension module among {built}"
    spec = importlib.util.spec_from_file_location("downstream", extension)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pxd_that_downstream_code_compiles_against_is_installed() -> None:
    package = pathlib.Path(cpe.__file__).parent
    assert (package / "kernels.pxd").is_file()


def test_enum_values_compiled_into_downstream_code(downstream: ModuleType) -> None:
    # Compile-time constants of the ABI: no capsule carries them, so a changed
    # value would silently break every package built against an older cpe.
    assert downstream.CONSTANTS == {
        "CPE_OK": 0,
        "CPE_ERR_ARGUMENT": -1,
        "CPE_ERR_NOMEM": -2,
        "CPE_ERR_RANGE": -3,
        "CPE_ANGLE_LIMIT": 2.0**53,
        "CPE_LAYOUT_INTERLEAVED": 0,
        "CPE_LAYOUT_SIN_COS": 1,
        "CPE_LAYOUT_COS_SIN": 2,
    }


FILLS = (
    "fill_table_f64",
    "fill_table_f32",
    "fill_positions_f64",
    "fill_positions_f32",
    "fill_rope_f64",
    "fill_rope_f32",
)
ROPE = tuple(name for name in FILLS if "rope" in name)


def _statuses(
    downstream: ModuleType,
    *,
    null_out: bool = False,
    null_second: bool = False,
    position: float = 5.0,
    scale: float = 1.0,
    nan_frequency: bool = False,
    nan_low: bool = False,
    rows: int = 3,
    width: int = 8,
) -> dict[str, int]:
    return downstream.statuses(  # type: ignore[no-any-return]
        null_out, null_second, position, scale, nan_frequency, nan_low, rows, width
    )


def test_every_function_returns_ok_for_valid_arguments(downstream: ModuleType) -> None:
    statuses = _statuses(downstream)
    assert set(statuses) == {"frequencies", *FILLS}
    assert statuses == dict.fromkeys(statuses, 0)


def test_null_outputs_are_refused(downstream: ModuleType) -> None:
    statuses = _statuses(downstream, null_out=True)
    assert statuses == {"frequencies": 0, **dict.fromkeys(FILLS, -1)}
    # RoPE's sin table alone: once it was written as [sin | cos] into the cos table.
    statuses = _statuses(downstream, null_second=True)
    assert statuses == {**dict.fromkeys(statuses, 0), **dict.fromkeys(ROPE, -1)}


def test_non_finite_positions_are_refused(downstream: ModuleType) -> None:
    statuses = _statuses(downstream, position=math.nan)
    assert statuses == {"frequencies": 0, **dict.fromkeys(FILLS, -1)}


def test_angles_beyond_2_53_are_a_range_error(downstream: ModuleType) -> None:
    # 2**52 rows times a frequency of 4.
    statuses = _statuses(downstream, position=2.0**52, scale=4.0)
    assert statuses == {**dict.fromkeys(statuses, 0), **dict.fromkeys(FILLS, -3)}
    # Rows up to 2**51 (a table of 3 from 2**51 - 2): angles up to 2**53, accepted.
    statuses = _statuses(downstream, position=2.0**51 - 2, scale=4.0)
    assert statuses == dict.fromkeys(statuses, 0)


def test_a_nan_frequency_is_a_range_error(downstream: ModuleType) -> None:
    # (In the middle: the range check reads every frequency.)
    statuses = _statuses(downstream, nan_frequency=True)
    assert statuses == {**dict.fromkeys(statuses, 0), **dict.fromkeys(FILLS, -3)}


def test_a_non_finite_low_part_is_a_range_error(downstream: ModuleType) -> None:
    # Only w_hi was checked: a NaN w_lo gave CPE_OK and rows of NaN.
    statuses = _statuses(downstream, nan_low=True)
    assert statuses == {**dict.fromkeys(statuses, 0), **dict.fromkeys(FILLS, -3)}


@pytest.mark.parametrize(("rows", "width"), [(2**33, 2**31), (1, 2**61), (2**62, 2)])
def test_outputs_larger_than_memory_are_refused(
    downstream: ModuleType, rows: int, width: int
) -> None:
    # rows * width was not checked: such sizes segfaulted writing past the buffer.
    statuses = _statuses(downstream, rows=rows, width=width)
    assert statuses == {**dict.fromkeys(statuses, 0), **dict.fromkeys(FILLS, -1)}


def test_frequencies_beyond_a_double_are_a_range_error(downstream: ModuleType) -> None:
    assert downstream.frequencies_status(4, 5e-324, 0.5) == -3  # w_1 = 1 / base**2 = inf
    assert downstream.frequencies_status(4, 10000.0, 2.0) == 0
    assert downstream.frequencies_status(4, 0.0, 2.0) == -1
    assert downstream.frequencies_status(-1, 10000.0, 2.0) == -1


_NOMEM_CALL = textwrap.dedent("""
    import importlib.util, os, resource, sys
    spec = importlib.util.spec_from_file_location("downstream", sys.argv[1])
    downstream = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(downstream)
    width = 1 << 22  # 32 MiB of scratch for one row of sines and cosines
    w, out, status = downstream.table_of_width(width)
    assert status == 0, status
    held = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (held + (8 << 20), hard))
    status = downstream.table_status(w, out, width)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    print(status)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
@pytest.mark.skipif(
    "libasan" in os.environ.get("LD_PRELOAD", ""),
    reason="AddressSanitizer reserves terabytes of address space: RLIMIT_AS cannot apply",
)
def test_scratch_memory_that_cannot_be_had_is_nomem(downstream: ModuleType) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _NOMEM_CALL, downstream.__file__],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["-2"], done.stdout + done.stderr


@pytest.mark.parametrize(("n", "D", "start"), [(1, 4, 0), (7, 9, -3), (300, 64, 1000), (50, 1, 5)])
def test_table_kernel_matches_the_python_api(
    downstream: ModuleType, n: int, D: int, start: int
) -> None:
    out = np.full((n, D), np.nan)
    status = downstream.table_f64(out, float(start), downstream.CONSTANTS["CPE_LAYOUT_INTERLEAVED"])
    assert status == 0
    # The bare kernel makes its own digit rows, the Python layer keeps them:
    # the same bits.
    np.testing.assert_array_equal(out, cpe.positional_encoding_table(n, D, start=start))
    out32 = np.full((n, D), np.nan, dtype=np.float32)
    status = downstream.table_f32(
        out32, float(start), downstream.CONSTANTS["CPE_LAYOUT_INTERLEAVED"]
    )
    assert status == 0
    np.testing.assert_array_equal(
        out32, cpe.positional_encoding_table(n, D, start=start, dtype=np.float32)
    )


def test_the_documented_example(downstream: ModuleType) -> None:
    out = np.empty((2048, 512), dtype=np.float32)
    assert downstream.encoding_table(out, start=10) is out
    expected = cpe.positional_encoding_table(2048, 512, start=10, dtype=np.float32)
    # As documented: the bits of the Python API.
    np.testing.assert_array_equal(out, expected)
    empty = np.empty((0, 4), dtype=np.float32)
    assert downstream.encoding_table(empty) is empty
    with pytest.raises(ValueError, match="status -1"):
        downstream.encoding_table(np.empty((2, 4), dtype=np.float32), base=-1.0)


def test_table_kernel_matches_the_definition(downstream: ModuleType) -> None:
    n, D, start = 40, 10, 123
    out = np.empty((n, D))
    assert downstream.table_f64(out, float(start), 0) == 0
    for i in range(n):
        for k in range(D):
            angle = (start + i) * 10000.0 ** (-2 * (k // 2) / D)
            expected = math.sin(angle) if k % 2 == 0 else math.cos(angle)
            assert out[i, k] == pytest.approx(expected, abs=1e-14), (i, k)


def test_positions_kernel_matches_the_python_api(downstream: ModuleType) -> None:
    positions = np.array([0.0, 1.5, -7.25, 1e4, 123456.0, -0.001])
    out = np.full((positions.size, 11), np.nan)
    assert downstream.positions_f64(out, positions, 0) == 0
    np.testing.assert_array_equal(out, cpe.positional_encoding(positions, 11))
    out32 = np.full((positions.size, 11), np.nan, dtype=np.float32)
    assert downstream.positions_f32(out32, positions, 0) == 0
    np.testing.assert_array_equal(out32, cpe.positional_encoding(positions, 11, dtype=np.float32))


@pytest.mark.parametrize("D", [8, 9])
def test_layouts_are_permutations_of_the_interleaved_columns(
    downstream: ModuleType, D: int
) -> None:
    n, n_freq = 30, (D + 1) // 2
    # The same kernel in the interleaved layout: the other layouts must hold
    # exactly the same values, only in other columns.
    interleaved = np.full((n, D), np.nan)
    assert (
        downstream.table_f64(interleaved, -10.0, downstream.CONSTANTS["CPE_LAYOUT_INTERLEAVED"])
        == 0
    )
    sines, cosines = interleaved[:, 0::2], interleaved[:, 1::2]
    sin_cos = np.full((n, D), np.nan)
    assert downstream.table_f64(sin_cos, -10.0, downstream.CONSTANTS["CPE_LAYOUT_SIN_COS"]) == 0
    np.testing.assert_array_equal(sin_cos[:, :n_freq], sines)
    np.testing.assert_array_equal(sin_cos[:, n_freq:], cosines)
    cos_sin = np.full((n, D), np.nan)
    assert downstream.table_f64(cos_sin, -10.0, downstream.CONSTANTS["CPE_LAYOUT_COS_SIN"]) == 0
    np.testing.assert_array_equal(cos_sin[:, : D - n_freq], cosines)
    np.testing.assert_array_equal(cos_sin[:, D - n_freq :], sines)


def test_kernels_reject_bad_arguments_and_write_nothing(downstream: ModuleType) -> None:
    error = downstream.CONSTANTS["CPE_ERR_ARGUMENT"]
    out = np.full((3, 8), 7.0)
    assert downstream.table_f64(out, 0.0, 3) == error  # no such layout
    assert downstream.table_f64(out, 0.5, 0) == error  # start must be an integer
    assert downstream.table_with_n_freq(out, 5) == error  # 2 * n_freq > width + 1
    assert downstream.table_with_n_freq(out, -1) == error
    np.testing.assert_array_equal(out, 7.0)
    positions = np.array([0.0, np.nan, 1.0])
    assert downstream.positions_f64(out, positions, 0) == error
    np.testing.assert_array_equal(out, 7.0)
    assert downstream.frequencies_status(-1, 10000.0, 4.0) == error
    assert downstream.frequencies_status(4, 0.0, 4.0) == error
    assert downstream.frequencies_status(4, 10000.0, math.inf) == error
    assert downstream.frequencies_status(4, 10000.0, 4.0) == 0


def _offset_table(shape: tuple[int, int], dtype: type, offset: int) -> np.ndarray:
    """A C-contiguous array ``offset`` bytes past a 64-byte line, filled with NaN."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(shape[0] * shape[1] * itemsize + 128, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    table = raw[start : start + shape[0] * shape[1] * itemsize].view(dtype).reshape(shape)
    table[...] = np.nan
    return table


@pytest.mark.parametrize(
    ("n", "head_dim", "dtype", "offsets"),
    [
        (300, 64, np.float64, (0, 0)),  # small: rows written in place
        (9, 6, np.float32, (4, 12)),
        # 16 MiB and more together: built in a buffer and streamed when both
        # tables start on a 16-byte boundary (and rows are multiples of 16 bytes),
        # written in place otherwise
        (8192, 128, np.float64, (16, 48)),
        (8192, 128, np.float64, (16, 8)),
        (16384, 132, np.float32, (0, 16)),  # blocks of 32 rows, chunks of 15
        (16384, 132, np.float32, (4, 4)),
    ],
)
@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_kernel_on_the_callers_buffers(
    downstream: ModuleType,
    n: int,
    head_dim: int,
    dtype: type,
    offsets: tuple[int, int],
    interleaved: bool,
) -> None:
    start = 10**6 - n
    cos = _offset_table((n, head_dim), dtype, offsets[0])
    sin = _offset_table((n, head_dim), dtype, offsets[1])
    assert downstream.rope_tables(cos, sin, None, float(start), 500000.0, interleaved) == 0
    layout = "interleaved" if interleaved else "half"
    expected = cpe.rope_cos_sin(n, head_dim, base=500000.0, start=start, dtype=dtype, layout=layout)
    np.testing.assert_array_equal(cos, expected[0])
    np.testing.assert_array_equal(sin, expected[1])


@pytest.mark.parametrize(
    "positions",
    [
        np.array([0.0, 5.0, -3.0, 65535.0, 1234.0]),  # digits, negated sines
        np.arange(-1000.0, 1000.0),  # a dense span
        np.arange(69000.0, 71000.0),  # beyond the levels: a high part
        np.array([1e6 + 0.5, -(2.0**40), 7.25]),  # real positions: rows made directly
    ],
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_positions_kernel_on_the_callers_buffers(
    downstream: ModuleType,
    positions: np.ndarray,
    dtype: type,
    interleaved: bool,
) -> None:
    n, head_dim = len(positions), 12
    # Rows off 16-byte boundaries (element-aligned, as C requires)
    item = np.dtype(dtype).itemsize
    cos = _offset_table((n, head_dim), dtype, item)
    sin = _offset_table((n, head_dim), dtype, 3 * item)
    status = downstream.rope_tables(cos, sin, positions, 0.0, 500000.0, interleaved)
    assert status == 0
    layout = "interleaved" if interleaved else "half"
    expected = cpe.rope_cos_sin(positions, head_dim, base=500000.0, dtype=dtype, layout=layout)
    np.testing.assert_array_equal(cos, expected[0])
    np.testing.assert_array_equal(sin, expected[1])


def test_rope_positions_kernel_rejects_before_writing(downstream: ModuleType) -> None:
    cos, sin = np.full((2, 4), 7.0), np.full((2, 4), 7.0)
    for positions in (np.array([1.0, np.nan]), np.array([np.inf, 1.0])):
        status = downstream.rope_tables(cos, sin, positions, 0.0, 10000.0, False)
        assert status == downstream.CONSTANTS["CPE_ERR_ARGUMENT"]
    odd_cos, odd_sin = np.full((2, 5), 7.0), np.full((2, 5), 7.0)  # head_dim must be even
    status = downstream.rope_tables(odd_cos, odd_sin, np.zeros(2), 0.0, 10000.0, False)
    assert status == downstream.CONSTANTS["CPE_ERR_ARGUMENT"]
    for array in (cos, sin, odd_cos, odd_sin):
        assert (array == 7.0).all()


C_API_DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "c-api.md"


@pytest.mark.skipif(
    not C_API_DOC.exists(), reason="docs/c-api.md is not beside the tests (installed elsewhere)"
)
def test_the_documented_example_is_the_code_built_here() -> None:
    section = C_API_DOC.read_text().split("## A complete example", 1)[1].split("\n## ", 1)[0]
    example = section.split("```cython\n", 1)[1].split("```", 1)[0]
    body = example[example.index("def encoding_table") :]
    assert body.strip() in (EXAMPLE / "downstream.pyx").read_text()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_the_c_rotation_is_apply_rope(downstream: ModuleType, dtype: Any, layout: str) -> None:
    # (seq, heads, head_dim) and the same values as (heads, seq, head_dim) seen
    # through a transposed view: rows by position or by head, the same bits.
    x = np.random.default_rng(4).standard_normal((37, 3, 16)).astype(dtype)
    interleaved = layout == "interleaved"
    for inverse in (False, True):
        want = cpe.apply_rope(x, start=5000, seq_axis=0, layout=layout, inverse=inverse)
        got = x.copy()
        assert downstream.rotate(got, None, 5000.0, 10000.0, interleaved, inverse) == 0
        np.testing.assert_array_equal(got, want)
        by_head = np.ascontiguousarray(x.transpose(1, 0, 2)).transpose(1, 0, 2)
        assert downstream.rotate(by_head, None, 5000.0, 10000.0, interleaved, inverse) == 0
        np.testing.assert_array_equal(by_head, want)
    positions = np.random.default_rng(5).uniform(-1e6, 1e6, 37)
    got = x.copy()
    assert downstream.rotate(got, positions, 0.0, 10000.0, interleaved, False) == 0
    np.testing.assert_array_equal(got, cpe.apply_rope(x, positions, seq_axis=0, layout=layout))


def test_the_c_rotation_refuses_with_nothing_written(downstream: ModuleType) -> None:
    x = np.ones((4, 2, 8))
    for call, status in (
        (lambda: downstream.rotate(x, None, 0.0, 10000.0, False, False, True), -1),  # NULL x
        (lambda: downstream.rotate(x, np.full(4, np.nan), 0.0, 10000.0, False, False), -1),
        (lambda: downstream.rotate(x, np.full(4, 2.0**60), 0.0, 10000.0, False, False), -3),
        (lambda: downstream.rotate(x, None, 0.5, 10000.0, False, False), -1),  # not integral
        (lambda: downstream.rotate(np.ones((4, 2, 7)), None, 0.0, 10000.0, False, False), -1),
    ):
        assert call() == status
        np.testing.assert_array_equal(x, 1.0)
