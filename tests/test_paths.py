"""Every fast path gives the bits of the portable path and meets the accuracy bounds.

On x86-64, outputs of 16 MiB and more are written with streaming (non-temporal)
stores when their memory is already mapped (buffers.on_line), and with ordinary
stores into memory nothing has written yet (buffers.fresh), with the widest SIMD
copy the CPU has; CPE_DISABLE_STREAM=1 turns streaming off and
CPE_DISABLE_SIMD=1 / CPE_DISABLE_AVX512=1 / CPE_DISABLE_AVX512BF16=1 select
narrower copies, so the same request made in subprocesses with each must give
identical bytes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import buffers
import cpe
import cpe._engine
from exact import error

# Each streamed into a mapped buffer, unless its name says otherwise.
BIG_REQUESTS = {
    # New arrays, as users ask for them (mapped or not, as the allocator has them).
    "table f64, new array": "cpe.positional_encoding_table(2048, 1024, start=10**6 - 2048)",
    "table f32, new array": (
        "cpe.positional_encoding_table(4096, 1024, start=10**6 - 4096, dtype=np.float32)"
    ),
    "table f64, fresh out=": (
        "cpe.positional_encoding_table(2048, 1024, start=10**6 - 2048,"
        " out=fresh((2048, 1024), np.float64))"
    ),
    "table f32, rows not 16-byte aligned": (
        "cpe.positional_encoding_table(2000, 2102, start=10**6 - 2000, dtype=np.float32,"
        " out=on_line((2000, 2102), np.float32, 0))"
    ),
    "ids f64": (
        "cpe.positional_encoding(np.arange(10**6 - 2100, 10**6)[::-1].copy(), 1024,"
        " out=on_line((2100, 1024), np.float64, 0))"
    ),
    "ids f64, fresh out=": (
        "cpe.positional_encoding(np.arange(10**6 - 2100, 10**6)[::-1].copy(), 1024,"
        " out=fresh((2100, 1024), np.float64))"
    ),
    "table f64, new encoding": (
        "cpe.positional_encoding_table(2048, 1026, base=777.0,"
        " out=on_line((2048, 1026), np.float64, 0))"
    ),
    # Digit levels too wide to keep, made for the request; then made by the kernel
    # (63 rows: fewer than a request that uses levels).
    "table f64, wide": (
        "cpe.positional_encoding_table(480, 4608, start=10**6 - 480,"
        " out=on_line((480, 4608), np.float64, 0))"
    ),
    "table f32, few wide rows": (
        "cpe.positional_encoding_table(63, 66592, dtype=np.float32,"
        " out=on_line((63, 66592), np.float32, 0))"
    ),
    # Streamed chunks from outputs on a cache line and 8 bytes past one.
    "table f64, out= on a cache line": (
        "cpe.positional_encoding_table(2048, 1024, start=10**6 - 2048, out=on_line((2048, 1024),"
        " np.float64, 0))"
    ),
    "table f32, out= 8 bytes past a line": (
        "cpe.positional_encoding_table(4096, 1024, start=10**6 - 4096, dtype=np.float32,"
        " out=on_line((4096, 1024), np.float32, 8))"
    ),
    # Rows of one digit (p < 256, multiples of 256) among rows of two (D <= 128).
    "ids f64, one and two digits": (
        "cpe.positional_encoding(np.arange(40000) * 7 % 600, 64,"
        " out=on_line((40000, 64), np.float64, 0))"
    ),
    "ids f32, one and two digits": (
        "cpe.positional_encoding(np.arange(40000) * 7 % 600, 128, dtype=np.float32,"
        " out=on_line((40000, 128), np.float32, 0))"
    ),
    # Every layout is built a chunk of rows at a time and streamed: the blocked
    # ones, and rows that are no whole number of 16-byte units (chunks of 2 rows
    # and more, the output ending in a partial unit).
    "table f64 sin_cos": (
        "cpe.positional_encoding_table(2048, 1024, start=10**6 - 2048, layout='sin_cos',"
        " out=on_line((2048, 1024), np.float64, 0))"
    ),
    "table f32 cos_sin, odd width": (
        "cpe.positional_encoding_table(4099, 1025, start=10**6 - 4099, dtype=np.float32,"
        " layout='cos_sin', out=on_line((4099, 1025), np.float32, 0))"
    ),
    # Interleaved rows wider than a chunk: streamed a piece of 64 pairs at a time.
    "table f64, rows of 40 pieces and 32 pairs": (
        "cpe.positional_encoding_table(700, 4*1024 + 1024 + 64, start=10**6 - 700,"
        " out=on_line((700, 4*1024 + 1024 + 64), np.float64, 0))"
    ),
    "table f32, rows of 24 pieces and 2 pairs": (
        "cpe.positional_encoding_table(1500, 3076, dtype=np.float32,"
        " out=on_line((1500, 3076), np.float32, 0))"
    ),
    "table f64, odd width and rows": (
        "cpe.positional_encoding_table(2047, 1027, start=10**6 - 2047,"
        " out=on_line((2047, 1027), np.float64, 0))"
    ),
    # RoPE tables of 16 MiB together: built in a buffer, 8 KiB of rows at a time,
    # and streamed; blocks of 32 rows (head_dim > 128) end in a partial chunk,
    # and rows of 520 bytes take chunks of an even number of rows.
    "rope f32 half": (
        "np.stack(cpe.rope_cos_sin(16384, 128, start=10**6 - 16384, dtype=np.float32,"
        " out=mapped_pair((16384, 128), np.float32)))"
    ),
    "rope f32 half, fresh out=": (
        "np.stack(cpe.rope_cos_sin(16384, 128, start=10**6 - 16384, dtype=np.float32,"
        " out=fresh_pair((16384, 128), np.float32)))"
    ),
    "rope f64 interleaved": (
        "np.stack(cpe.rope_cos_sin(8192, 128, start=10**6 - 8192, layout='interleaved',"
        " out=mapped_pair((8192, 128), np.float64)))"
    ),
    "rope f32, partial chunks": (
        "np.stack(cpe.rope_cos_sin(16384, 132, start=10**6 - 16384, dtype=np.float32,"
        " out=mapped_pair((16384, 132), np.float32)))"
    ),
    "rope f32, rows of 520 bytes": (
        "np.stack(cpe.rope_cos_sin(16200, 130, dtype=np.float32,"
        " out=mapped_pair((16200, 130), np.float32)))"
    ),
}
# RoPE tables of position ids, streamed the same way and ending in a partial
# chunk (16 and 8 rows a chunk here): ids of one, two and three digits, negative
# ones too, and dense spans of ids across 0 (with some 0s). Name: (ids, keywords).
ROPE_IDS = {
    "rope ids f32 half": (
        "np.arange(16389) * 7919 % 131071 - 65535",
        "dtype=np.float32, out=mapped_pair((16389, 128), np.float32)",
    ),
    "rope ids f32 half, fresh out=": (
        "np.arange(16389) * 7919 % 131071 - 65535",
        "dtype=np.float32, out=fresh_pair((16389, 128), np.float32)",
    ),
    "rope ids f64 interleaved": (
        "np.arange(8195) * 7919 % 131071 - 65535",
        "layout='interleaved', out=mapped_pair((8195, 128), np.float64)",
    ),
    "rope ids f32 half, a span past 65536": (
        "(np.arange(16389) * 7919 % 160001 - 80000) * (np.arange(16389) % 1000 != 500)",
        "dtype=np.float32, out=mapped_pair((16389, 128), np.float32)",
    ),
    "rope ids f64 interleaved, a span past 65536": (
        "np.arange(8195) * 7919 % 200001 - 100000",
        "layout='interleaved', out=mapped_pair((8195, 128), np.float64)",
    ),
}
BIG_REQUESTS.update(
    {
        name: f"np.stack(cpe.rope_cos_sin({ids}, 128, {keywords}))"
        for name, (ids, keywords) in ROPE_IDS.items()
    }
)

# buffers.py's source, for the subprocesses.
BUFFERS_SOURCE = Path(buffers.__file__).read_text()

SCRIPT = (
    BUFFERS_SOURCE
    + """
import hashlib, sys
import cpe
import cpe._engine
for expression in sys.argv[1:]:
    array = eval(expression)
    print(hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest())
"""
)


def namespace() -> dict:
    """What the request expressions may use, in this process."""
    return {
        name: getattr(buffers, name) for name in ("on_line", "fresh", "mapped_pair", "fresh_pair")
    } | {"cpe": cpe, "np": np}


SWITCHES = (
    "CPE_DISABLE_STREAM",
    "CPE_DISABLE_SIMD",
    "CPE_DISABLE_AVX512",
    "CPE_DISABLE_AVX512BF16",
)


def run_python(script: str, arguments: list[str], env: dict[str, str]) -> str:
    """What ``script`` prints, run by this Python with ``arguments`` and ``env``."""
    return subprocess.run(
        [sys.executable, "-c", script, *arguments],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    ).stdout


def subprocess_digests(requests: dict[str, str], switches: tuple[str, ...]) -> list[str]:
    """Digests of the requests made in a subprocess with these switches set (and
    no other), then the name of the row loop that subprocess used."""
    env = {k: v for k, v in os.environ.items() if k not in SWITCHES}
    env.update(dict.fromkeys(switches, "1"))
    script = SCRIPT + "print(cpe._engine._row_loop())\n"
    return run_python(script, list(requests.values()), env).split()


def digests(*switches: str) -> list[str]:
    """Digests of BIG_REQUESTS made in a subprocess with these switches set."""
    return subprocess_digests(BIG_REQUESTS, switches)[:-1]


def test_streaming_and_plain_stores_give_the_same_bits():
    # Streamed with the widest SIMD copy, with AVX2, with SSE2; and not streamed.
    widest = digests()
    assert digests("CPE_DISABLE_AVX512") == widest
    assert digests("CPE_DISABLE_SIMD") == widest
    assert digests("CPE_DISABLE_STREAM") == widest


def streams(array: np.ndarray) -> bool:
    return cpe._engine._streams(array.reshape(-1).view(np.uint8))


def test_large_outputs_are_streamed_only_into_mapped_memory():
    # Streaming stores are what x86-64 has (and what CPE_DISABLE_STREAM turns off).
    can_stream = platform.machine().lower() in ("x86_64", "amd64") and not os.environ.get(
        "CPE_DISABLE_STREAM"
    )
    big = buffers.fresh((16 << 20) // 8, np.float64)
    if sys.platform.startswith("linux"):  # elsewhere cpe cannot tell: it streams
        assert not streams(big)
    big[::512] = 1.0  # one write a page maps them all
    assert streams(big) == can_stream
    assert not streams(buffers.on_line(((16 << 20) - 64) // 8, np.float64, 0))  # too small
    assert streams(buffers.on_line((16 << 20) // 8, np.float64, 0)) == can_stream


# New outputs of 16 MiB and more (each as a list of its arrays).
LARGE_NEW_OUTPUTS = {
    "one position": "[cpe.positional_encoding(5, 2**22)]",
    "one position, 16 MiB": "[cpe.positional_encoding(5, 2**21)]",
    "one position f16, 16 MiB of float16": "[cpe.positional_encoding(5, 2**23, dtype=np.float16)]",
    "one real position f32": "[cpe.positional_encoding(2.5, 2**23, dtype=np.float32)]",
    "table f64": "[cpe.positional_encoding_table(2048, 1024, start=5)]",
    "table f16": "[cpe.positional_encoding_table(8192, 1024, dtype=np.float16)]",
    "ids f32": "[cpe.positional_encoding(np.arange(4096 * 5), 256, dtype=np.float32)]",
    "grid": "[cpe.sincos_2d(64, 64, 1024)]",
    "rope table": "list(cpe.rope_cos_sin(16384, 128, dtype=np.float32))",
    "rope ids": "list(cpe.rope_cos_sin(np.arange(32768).reshape(8, 4096), 64))",
    # sin follows cos in one buffer: rounded up to a cache line after it
    "rope odd rows": "list(cpe.rope_cos_sin(2**21 + 1, 2, dtype=np.float32))",
    "rope odd ids": "list(cpe.rope_cos_sin(np.arange(2**21 + 1), 2, dtype=np.float32))",
    "rope multimodal odd ids": "list(cpe.rope_cos_sin(np.zeros((3, 2049), int), 2050, "
    "dtype=np.float32, rope_parameters={'mrope_section': [1025, 0, 0]}))",
}

# Prints, for each output of the expressions in argv[2:], whether its arrays
# start on a huge page boundary, whether their buffer is longer than they are
# by more than a cache line (moved there), and whether they start on a line.
# With argv[1] == "mapped", glibc first serves blocks below 32 MiB from its heap
# and keeps them there once freed, and a written 24 MiB block is freed: the next
# new output gets memory already mapped (or "no mallopt" is printed, as under
# ASan). With "no room", NumPy cannot allocate more than 16 MiB and a cache line
# of bytes at once.
ALIGNMENT_SCRIPT = """
import ctypes, sys
import numpy as np
import cpe
from cpe._core import _huge_page_bytes
if sys.argv[1] == "no room":
    numpy_empty = np.empty
    def empty(shape, dtype=float, **keywords):
        if np.dtype(dtype) == np.uint8 and np.prod(shape) > (16 << 20) + 64:
            raise MemoryError("no room")
        return numpy_empty(shape, dtype, **keywords)
    np.empty = empty
if sys.argv[1] == "mapped":
    libc = ctypes.CDLL(None)
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    if not (libc.mallopt(M_MMAP_THRESHOLD, 32 << 20) and libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)):
        sys.exit(print("no mallopt"))
    np.ones(24 << 20, np.uint8)
kept = [eval(expression) for expression in sys.argv[2:]]
huge = _huge_page_bytes()
for arrays in kept:
    longer = arrays[0].base.nbytes > sum(a.nbytes for a in arrays) + 64
    print(" ".join(f"{a.ctypes.data % huge == 0 if huge else None}/{longer}/"
                   f"{a.ctypes.data % 64 == 0}" for a in arrays))
if sys.argv[1] == "no room":
    out = np.zeros(kept[0][0].shape)
    assert eval(sys.argv[2].replace(")]", ", out=out)]"))[0] is out
    print("same values" if np.array_equal(kept[0][0], out) else "different values")
"""


def alignment(mode: str, expressions: list[str]) -> list[str]:
    # Without the allocator's debugging fills, which write (so map) new memory.
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_PERTURB_", "GLIBC_TUNABLES")}
    return run_python(ALIGNMENT_SCRIPT, [mode, *expressions], env).splitlines()


@pytest.mark.parametrize("name", LARGE_NEW_OUTPUTS)
def test_large_new_outputs_are_arrays_like_np_empty_s(name):
    # Whatever memory they got (their values are held to the bounds by
    # BIG_REQUESTS' new arrays and by test_accuracy). On Linux always views of
    # a byte buffer, so that what a call returns does not depend on it.
    arrays = eval(LARGE_NEW_OUTPUTS[name], namespace())
    for array in arrays:
        assert array.flags.c_contiguous
        assert array.flags.writeable
        assert array.flags.aligned
        if sys.platform.startswith("linux"):
            assert not array.flags.owndata
            assert array.base.dtype == np.uint8
    if name.startswith("rope"):
        assert not np.shares_memory(arrays[0], arrays[1])
    small = cpe.positional_encoding_table(1024, 1024)  # 8 MiB: np.empty's own
    assert small.flags.owndata


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_one_position_just_below_the_view_size_is_np_empty_s_own(dtype):
    # One position's new output is made without a shape tuple; it must be what
    # the same position as a 0-d array gets (prepare_out's path), bits included.
    if dtype == "bfloat16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16
    width = (16 << 20) // np.dtype(dtype).itemsize - 1
    row = cpe.positional_encoding(5, width, dtype=dtype)
    same = cpe.positional_encoding(np.array(5), width, dtype=dtype)
    assert type(row) is np.ndarray
    assert row.shape == same.shape == (width,)
    assert row.dtype == same.dtype == np.dtype(dtype)
    assert row.flags.owndata
    assert same.flags.owndata
    assert row.flags.c_contiguous
    assert row.flags.writeable
    assert row.flags.aligned
    assert row.tobytes() == same.tobytes()


@pytest.mark.skipif(not cpe._core._huge_page_bytes(), reason="no transparent huge pages")
def test_large_new_outputs_in_new_memory_start_on_a_huge_page_boundary():
    # In a new process nothing large was freed yet: every large output gets new
    # memory, which cpe moves to a huge page boundary in a longer buffer. (One
    # process each: a call's large temporaries, once freed, are memory that the
    # allocator may hand the next output mapped.)
    lines = [alignment("new", [expression])[0] for expression in LARGE_NEW_OUTPUTS.values()]
    assert len(lines) == len(LARGE_NEW_OUTPUTS)
    for name, line in zip(LARGE_NEW_OUTPUTS, lines, strict=True):
        first, *others = line.split()
        assert first == "True/True/True", name
        assert all(other.endswith("/True/True") for other in others), name  # (RoPE's sin)


@pytest.mark.skipif(not cpe._core._huge_page_bytes(), reason="no transparent huge pages")
def test_large_new_outputs_take_numpy_s_size_when_there_is_no_room_for_more():
    # The longer buffer is refused (MemoryError): the output gets the size
    # NumPy found room for, with the same values.
    expression = LARGE_NEW_OUTPUTS["table f64"]
    line, same = alignment("no room", [expression])
    assert line.endswith("/False/True")  # on a cache line still
    assert same == "same values"


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"),
    reason="glibc's mallopt sets up the mapped memory",
)
def test_large_new_outputs_keep_memory_that_is_already_mapped():
    # It takes no page faults at all: better than huge ones.
    lines = alignment("mapped", [LARGE_NEW_OUTPUTS["table f64"]])
    if lines == ["no mallopt"]:
        pytest.skip("mallopt is not glibc's here (a sanitizer's allocator)")
    assert len(lines) == 1
    assert lines[0].endswith("/False/True")  # on a cache line still


def test_in_process_results_match_the_subprocess():
    # Guards against the subprocesses all taking a path this process does not.
    here = [
        hashlib.sha256(np.ascontiguousarray(eval(e, namespace())).tobytes()).hexdigest()
        for e in BIG_REQUESTS.values()
    ]
    assert here == digests()


def rope_column(k: int, head_dim: int, layout: str, table: int) -> int:
    """The encoding column (sin at 2j, cos at 2j + 1) of column k of RoPE's cos
    (table 0) or sin (table 1) table."""
    j = k % (head_dim // 2) if layout == "half" else k // 2
    return 2 * j + (1 - table)


@pytest.mark.parametrize("name", [name for name in BIG_REQUESTS if name.startswith("rope")])
def test_big_rope_tables_meet_the_bounds(name, report_error):
    tables = eval(BIG_REQUESTS[name], namespace())
    _, n, head_dim = tables.shape
    layout = "interleaved" if "interleaved" in name else "half"
    first = 10**6 - n if "start" in BIG_REQUESTS[name] else 0
    positions = eval(ROPE_IDS[name][0]) if name in ROPE_IDS else first + np.arange(n)
    rng = np.random.default_rng(len(name))
    bound = 3.0e-8 if tables.dtype == np.float32 else 1e-15
    for table in (0, 1):
        for i in [*rng.integers(0, n, 30).tolist(), n - 1]:  # the last chunk too
            for k in rng.integers(0, head_dim, 6).tolist():
                report_error(
                    f"{tables.dtype.name}, outputs >= 16 MiB",
                    error(
                        tables[table, i, k],
                        int(positions[i]),
                        head_dim,
                        rope_column(k, head_dim, layout, table),
                    ),
                    bound,
                )


@pytest.mark.parametrize("name", [name for name in BIG_REQUESTS if not name.startswith("rope")])
def test_big_outputs_meet_the_bounds(name, report_error):
    array = eval(BIG_REQUESTS[name], namespace())
    rng = np.random.default_rng(len(name))
    D = array.shape[-1]
    if "digits" in name:
        positions = np.arange(40000) * 7 % 600
    elif name.startswith("ids"):
        positions = np.arange(10**6 - 2100, 10**6)[::-1]
    else:
        positions = np.arange(array.shape[0]) + (
            10**6 - array.shape[0] if "start" in BIG_REQUESTS[name] else 0
        )
    base = 777.0 if "777" in BIG_REQUESTS[name] else 10000.0
    bound = 3.0e-8 if array.dtype == np.float32 else 1e-15
    n_sin = (D + 1) // 2
    n_cos = D - n_sin
    for i in rng.integers(0, array.shape[0], 30).tolist():
        for k in rng.integers(0, D, 6).tolist():
            # The column's place in the interleaved layout, which error() reads.
            if "sin_cos" in BIG_REQUESTS[name]:
                k_interleaved = 2 * k if k < n_sin else 2 * (k - n_sin) + 1
            elif "cos_sin" in BIG_REQUESTS[name]:
                k_interleaved = 2 * k + 1 if k < n_cos else 2 * (k - n_cos)
            else:
                k_interleaved = k
            report_error(
                f"{array.dtype.name}, outputs >= 16 MiB",
                error(array[i, k], int(positions[i]), D, k_interleaved, base),
                bound,
            )


# Requests whose rows come from the sine/cosine row loop of cpe_rows.h (which has
# an AVX2 + FMA copy on x86-64 and a portable one), including angles beyond its
# reduction limit, tiny and zero angles, and frequency sets made for the occasion.
ROW_LOOP_REQUESTS = {
    "single integer": "cpe.positional_encoding(123457, 4096)",
    "single real": "cpe.positional_encoding(-9876.54321, 1023)",
    "beyond the reduction limit": "cpe.positional_encoding(3.5e6, 512)",
    "huge and tiny angles": "cpe.positional_encoding([2.0**23, 1e-300, 0.0, -7e6], 64, base=1e-9)",
    "few table rows": "cpe.positional_encoding_table(7, 300, start=-500)",
    "table": "cpe.positional_encoding_table(5000, 512, start=10**6)",
    "float32 ids": "cpe.positional_encoding(np.arange(0, 10**6, 997), 130, dtype=np.float32)",
    "odd conventions": (
        "cpe.positional_encoding([1.5, 2.5e5], 77, base=3.0, convention='fairseq', scale=-2.5)"
    ),
    # Chains of 1 to 4 digit rows, pair counts that leave a remainder after the
    # last full vector (GCC once fused these products into FMA in the SIMD copies).
    "single positions, chains of rows": (
        "np.concatenate([cpe.positional_encoding(p, D, dtype=t) for t in (np.float64, np.float32)"
        " for D in (3, 22, 63, 1023) for p in (0, 7, 23, 300, 4097, 12345, 65535, -22)])"
    ),
    "blocked layouts": (
        "np.concatenate([cpe.positional_encoding(np.arange(-70, 70) * 13, D, layout=lay)"
        " for lay in ('sin_cos', 'cos_sin') for D in (9, 30)], axis=None)"
    ),
    "table, odd width": "cpe.positional_encoding_table(300, 1023, start=5)",
}


def sixteen_bit_tables(dtype: str) -> str:
    """Tables of ``dtype``: float64 rows narrowed once on the way out, with
    attention factors that take RoPE's values to the dtype's largest finite
    values and among its subnormals."""
    yarn = "'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 4096"
    return (
        f"np.concatenate([cpe.positional_encoding_table(3001, 130, start=-1500, dtype={dtype}),"
        f" *[t for a in (1.0, 0.98 * float(np.finfo({dtype}).max), 1e-39, 3e-41, 1e-6, 3e-8)"
        f" for t in cpe.rope_cos_sin(np.arange(0, 10**6, 331), 66,"
        f" rope_parameters={{{yarn}, 'attention_factor': a}}, dtype={dtype})]],"
        " axis=None).view(np.uint16)"
    )


ROW_LOOP_REQUESTS["float16 tables"] = sixteen_bit_tables("np.float16")
if importlib.util.find_spec("ml_dtypes") is not None:
    ROW_LOOP_REQUESTS["bfloat16 tables"] = sixteen_bit_tables("__import__('ml_dtypes').bfloat16")


def test_every_copy_of_the_row_loop_gives_the_same_bits():
    *widest, widest_loop = subprocess_digests(ROW_LOOP_REQUESTS, ())
    *avx512, avx512_loop = subprocess_digests(ROW_LOOP_REQUESTS, ("CPE_DISABLE_AVX512BF16",))
    *avx2, avx2_loop = subprocess_digests(ROW_LOOP_REQUESTS, ("CPE_DISABLE_AVX512",))
    *portable, portable_loop = subprocess_digests(ROW_LOOP_REQUESTS, ("CPE_DISABLE_SIMD",))
    assert portable_loop == "portable"
    assert avx2_loop in ("avx2", "portable")
    assert avx512_loop in ("avx512", "avx2", "portable")
    assert widest_loop == cpe._engine._row_loop()
    assert widest == avx512 == avx2 == portable
    here = [
        hashlib.sha256(np.ascontiguousarray(eval(e, namespace())).tobytes()).hexdigest()
        for e in ROW_LOOP_REQUESTS.values()
    ]
    assert here == widest


def test_the_widest_copy_the_cpu_runs_is_chosen():
    # What cpuid and xgetbv give, against what Linux reports (its flags leave out
    # what the operating system does not save).
    cpuinfo = Path("/proc/cpuinfo")
    if platform.machine() != "x86_64" or not cpuinfo.exists():
        pytest.skip("reads Linux's /proc/cpuinfo of an x86-64 CPU")
    line = next(x for x in cpuinfo.read_text().splitlines() if x.startswith("flags"))
    flags = set(line.split(":", 1)[1].split())
    if {"avx512f", "avx512dq", "avx512vl", "avx512bw", "avx512_bf16"} <= flags:
        widest = "avx512bf16"
    elif {"avx512f", "avx512dq", "avx512vl"} <= flags:
        widest = "avx512"
    elif {"avx2", "fma", "f16c"} <= flags:
        widest = "avx2"
    else:
        widest = "portable"
    assert subprocess_digests({}, ()) == [widest]
    assert subprocess_digests({}, ("CPE_DISABLE_AVX512BF16",)) == [
        "avx512" if widest == "avx512bf16" else widest
    ]


def narrow_requests() -> dict[str, str]:
    """Every float16 and bfloat16 bit pattern, and float32 patterns spread over
    all of them (NaNs, infinities and subnormals among them), rotated in both
    layouts and added to, in rows of 13 pairs: the narrow kernels' vector loops
    (8 or 4 pairs at a time) and their scalar ends."""
    every_float32 = "(np.arange(2521 * 26, dtype=np.uint64) * 2654435761 % 2**32).astype(np.uint32)"
    patterns = {"np.float32": every_float32, "np.float16": "(np.arange(2521 * 26) % 65536)"}
    if importlib.util.find_spec("ml_dtypes") is not None:
        patterns["__import__('ml_dtypes').bfloat16"] = patterns["np.float16"]
    requests = {}
    for dtype, bits in patterns.items():
        width = "np.uint32" if dtype == "np.float32" else "np.uint16"
        x = f"{bits}.astype({width}).view({dtype}).reshape(2521, 26)"
        calls = [f"cpe.apply_rope({x}, start=99991, layout={layout!r})"
                 for layout in ("half", "interleaved")]  # fmt: skip
        calls.append(f"cpe.add_positional_encoding({x}, start=7, x_scale=0.75)")
        if importlib.util.find_spec("torch") is not None:
            # Under flush-to-zero (and denormals-are-zero), as torch sets it, every
            # pattern at a sine of position 0 (zero: even columns, so once as it is
            # and once moved by one) times 1 - 2**-30: values just below each
            # pattern, such as the smallest normal float, whose rounding to odd
            # must not make a subnormal that would be flushed.
            # (Turned off again: the requests after it run in the same process.)
            ftz = "__import__('torch').set_flush_denormal"
            every = f"{bits}[:65536].astype({width}).view({dtype})"
            x0 = f"(lambda p: np.stack([p, np.roll(p, 1)])[:, None, :])({every})"
            added = f"cpe.add_positional_encoding({x0}, x_scale=1 - 2**-30)"
            calls.append(f"({ftz}(True), {added}, {ftz}(False))[1]")
        for call in calls:
            # Every NaN as one: which of a pair's NaNs passes on is the compiler's.
            requests[call] = f"(lambda r: np.where(np.isnan(r), np.nan, r))({call}.astype(float))"
    return requests


def test_every_copy_of_the_narrow_kernels_gives_the_same_bits():
    requests = narrow_requests()
    *widest, _ = subprocess_digests(requests, ())
    *avx512, _ = subprocess_digests(requests, ("CPE_DISABLE_AVX512BF16",))
    *avx2, _ = subprocess_digests(requests, ("CPE_DISABLE_AVX512",))
    *portable, _ = subprocess_digests(requests, ("CPE_DISABLE_SIMD",))
    assert widest == avx512 == avx2 == portable


CHECK_SCRIPT = """
import numpy as np
import cpe
for n in (1, 7, 8, 9, 33):
    for index in range(n):
        for bad, text in ((np.nan, "finite"), (np.inf, "finite"), (-2.0**60, "2**53")):
            positions = np.full(n, 3.0)
            positions[index] = bad
            try:
                cpe.positional_encoding(positions, 16)
            except ValueError as e:
                assert text in str(e), e
            else:
                raise AssertionError((n, index, bad))
print("checked")
"""


@pytest.mark.parametrize("switches", [(), ("CPE_DISABLE_AVX512",), ("CPE_DISABLE_SIMD",)])
def test_every_copy_of_the_positions_check_finds_a_bad_one(switches):
    # (test_errors checks the messages with the widest copy, in this process)
    env = {k: v for k, v in os.environ.items() if k not in SWITCHES}
    env.update(dict.fromkeys(switches, "1"))
    assert run_python(CHECK_SCRIPT, [], env).split() == ["checked"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("D", [1, 7, 64, 512, 4096])
def test_single_positions_are_rows_of_large_requests(D, dtype):
    # A single integer position with |p| < 65536 makes just the digit-level rows
    # it needs; a request of 64 positions or more makes all of them. Either way
    # the rows and the products are the same, so the values are the same bits.
    # (Digit rows: two levels of 256 for D <= 128, three of 128 up to D = 512, four
    # of 32 above; 256, 4096, 65280 and 61455 leave digits of radix 16 or 256
    # zero, 128, 16384 and 16511 those of radix 128, 32, 1024, 31775 and 33792
    # those of radix 32.)
    singles = [0, 1, 15, 16, 255, 256, 4096, 4097, 12345, 61455, 65280, 65535, -1, -16, -65535]
    singles += [31, 32, 1024, 31775, 32768, 33792, -1056, 128, 16384, 16511, 2097151, -16512]
    ids = np.array(singles * 6)
    rows = cpe.positional_encoding(ids, D, dtype=dtype)
    for p, row in zip(singles, rows, strict=False):
        np.testing.assert_array_equal(cpe.positional_encoding(p, D, dtype=dtype), row)
        np.testing.assert_array_equal(cpe.positional_encoding([p, p], D, dtype=dtype)[1], row)


def test_negative_integer_positions_mirror_positive_ones_exactly():
    for D in (5, 64, 1024):
        for p in (1, 17, 4096, 65535, 65536, 10**6):
            pos, neg = cpe.positional_encoding(p, D), cpe.positional_encoding(-p, D)
            np.testing.assert_array_equal(neg[0::2], -pos[0::2])
            np.testing.assert_array_equal(neg[1::2], pos[1::2])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_first_single_position_of_an_encoding_gives_the_cached_bits(dtype):
    # The first single position of an encoding is made from digit rows in scratch
    # memory, the next ones from the cached levels: the same rows and products.
    for i, p in enumerate([0, 7, 4096, 12345, -54321, 65535]):
        for D in (3, 64, 1030):
            base = 9000.0 + 17 * i + D  # a new encoding for every first call
            first = cpe.positional_encoding(p, D, base=base, dtype=dtype)
            second = cpe.positional_encoding(p, D, base=base, dtype=dtype)
            third = cpe.positional_encoding(p, D, base=base, dtype=dtype)
            many = cpe.positional_encoding(np.full(64, p), D, base=base, dtype=dtype)
            np.testing.assert_array_equal(first, second)
            np.testing.assert_array_equal(first, third)
            np.testing.assert_array_equal(first, many[0])


# Digits that leave others zero, in every shape of digit levels (cpe_fill.h's
# cpe_level_shape): radix 256 and 16, then radix 128, then radix 32.
SPARSE_DIGITS = [0, 1, 256, 4096, 4097, 3840, 61455, 65280, 65535, -257]
SPARSE_DIGITS += [128, 16384, 16511, 2097151, 2097152, -16512]
SPARSE_DIGITS += [32, 1024, 31775, 32800, 33792, -1056]


def sampled_columns(D: int) -> range:
    """All columns of narrow encodings; every 7th (both kinds) of wide ones."""
    return range(D) if D <= 600 else range(0, D, 7)


@pytest.mark.parametrize("D", [6, 64, 130, 512, 2050])
def test_an_array_makes_the_level_rows_of_every_digit_it_uses(D, report_error):
    # A new encoding (new base): its first request is an array, so every digit
    # row it reads is made by that request, not left over from earlier calls.
    base = 10000.0 + D / 3.0
    ids = np.array(SPARSE_DIGITS * 7)
    rows = cpe.positional_encoding(ids, D, base=base)
    for p, row in zip(SPARSE_DIGITS, rows, strict=False):
        for k in sampled_columns(D):
            report_error("float64, arrays of sparse digits", error(row[k], p, D, k, base), 1e-15)


@pytest.mark.parametrize(
    ("n", "D"), [(64, 8), (300, 64), (70_000, 6), (5000, 130), (2000, 1030), (700, 2050)]
)
def test_tables_make_the_level_rows_they_read(n, D, report_error):
    # A new encoding per table: the table kernel reads the first two digit levels
    # (radix 256 for D <= 128, 128 up to D = 512, 32 above), made for this table
    # alone.
    base = 20000.0 + n + D
    table = cpe.positional_encoding_table(n, D, base=base)
    rng = np.random.default_rng(n)
    for i in [0, n - 1, *rng.integers(0, n, 40).tolist()]:
        for k in sampled_columns(D):
            value = error(table[i, k], i, D, k, base)
            report_error("float64, tables from new levels", value, 1e-15)
