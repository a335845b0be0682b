"""Accuracy against mpmath, with the bounds promised in the README.

float64: <= 1e-15 absolute for |p| <= 1e6 and D <= 4096, on every code path
(single positions, arrays, tables built by angle addition).
float32: <= 3.0e-8 (correct rounding of the exact value) for |p| <= 1e6.
float16: <= half an ulp of float16 plus 1e-15.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import cpe
from exact import error

WIDTHS = [1, 2, 3, 4, 5, 63, 64, 511, 512, 1023, 2048, 4096]
F64_BOUND = 1e-15
F32_BOUND = 3.0e-8


def sample_columns(rng: np.random.Generator, D: int) -> list[int]:
    """The boundary columns and a few random ones."""
    return sorted({0, min(1, D - 1), D - 2 if D > 1 else 0, D - 1, *rng.integers(0, D, 6).tolist()})


def integer_positions(rng: np.random.Generator) -> list[int]:
    edges = [0, 1, -1, 2, 10**6, -(10**6), 10**6 - 1, 355, 710, 104348]
    return edges + rng.integers(-(10**6), 10**6 + 1, 60).tolist()


@pytest.mark.parametrize("D", WIDTHS)
def test_float64_integer_positions(D, report_error):
    rng = np.random.default_rng(D)
    for p in integer_positions(rng):
        row = cpe.positional_encoding(p, D)
        worst = max(error(row[k], p, D, k) for k in sample_columns(rng, D))
        report_error("float64, integer |p| <= 1e6", worst, F64_BOUND)


@pytest.mark.parametrize("D", [1, 3, 64, 512, 4096])
def test_float64_real_positions(D, report_error):
    rng = np.random.default_rng(1000 + D)
    positions = np.concatenate(
        [rng.uniform(-1e4, 1e4, 40), rng.uniform(-1, 1, 10), [998.39, -0.5, 1e-300]]
    )
    rows = cpe.positional_encoding(positions, D)
    for p, row in zip(positions.tolist(), rows, strict=True):
        worst = max(error(row[k], p, D, k) for k in sample_columns(rng, D))
        report_error("float64, real |p| <= 1e4", worst, F64_BOUND)


@pytest.mark.parametrize(
    ("start", "n", "D"),
    [
        (0, 5000, 512),
        (10**6 - 3000, 3001, 64),
        (-(10**6), 2500, 4096),
        (123456, 17, 7),
        (-50, 100, 1),
        (999_000, 1000, 1023),
    ],
)
def test_float64_tables(start, n, D, report_error):
    rng = np.random.default_rng(n + D)
    table = cpe.positional_encoding_table(n, D, start=start)
    rows = sorted({0, n - 1, *rng.integers(0, n, 40).tolist()})
    for i in rows:
        worst = max(error(table[i, k], start + i, D, k) for k in sample_columns(rng, D))
        report_error("float64 table (angle addition), |p| <= 1e6", worst, F64_BOUND)


@pytest.mark.parametrize("D", [2, 5, 512, 4096])
def test_float32_correctly_rounded(D, report_error):
    rng = np.random.default_rng(2000 + D)
    positions = np.array(integer_positions(rng))
    rows = cpe.positional_encoding(positions, D, dtype=np.float32)
    table = cpe.positional_encoding_table(300, D, start=10**6 - 300, dtype=np.float32)
    for p, row in zip(positions.tolist(), rows, strict=True):
        worst = max(error(row[k], p, D, k) for k in sample_columns(rng, D))
        report_error("float32, |p| <= 1e6", worst, F32_BOUND)
    for i in rng.integers(0, 300, 30).tolist():
        worst = max(error(table[i, k], 10**6 - 300 + i, D, k) for k in sample_columns(rng, D))
        report_error("float32 table, |p| <= 1e6", worst, F32_BOUND)


def test_float16_within_half_ulp(report_error):
    rng = np.random.default_rng(7)
    D = 64
    positions = np.array(integer_positions(rng))
    rows = cpe.positional_encoding(positions, D, dtype=np.float16)
    for p, row in zip(positions.tolist(), rows, strict=True):
        for k in sample_columns(rng, D):
            half_ulp = float(np.spacing(np.float16(abs(row[k])))) / 2
            report_error(
                "float16: error beyond half an ulp", error(row[k], p, D, k) - half_ulp, 1e-15
            )


def test_other_bases(report_error):
    rng = np.random.default_rng(11)
    for base in [2.0, 10.0, 500000.0, 1e9, 1.0, 0.5]:
        D = 128
        for p in [0, 7, 4097, 10**6]:
            row = cpe.positional_encoding(p, D, base=base)
            worst = max(error(row[k], p, D, k, base) for k in sample_columns(rng, D))
            report_error("float64, other bases", worst, F64_BOUND)


def test_naive_float64_is_measurably_worse():
    """The bound is meaningful: the textbook float64 formula misses it at 1e6."""
    import reference as _reference

    p, D = 10**6, 512
    naive = _reference.positional_encoding(p, D)
    worst = max(error(naive[k], p, D, k) for k in range(0, D, 7))
    assert worst > 1e-12


@pytest.mark.parametrize(
    ("low", "high", "count", "D"),
    [
        (-(10**6), 10**6, 6000, 64),
        (0, 4096, 3000, 512),
        (999_000, 10**6, 20000, 8),
        (0, 65535, 8000, 256),
    ],
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_many_integer_positions(low, high, count, D, dtype, report_error):
    """Large arrays of integer ids (the digit-table path of the kernel)."""
    rng = np.random.default_rng(count + D)
    ids = rng.integers(low, high + 1, size=count)
    ids[:2] = [low, high]
    rows = cpe.positional_encoding(ids.reshape(-1, 2), D, dtype=dtype).reshape(count, D)
    bound = F64_BOUND if dtype == np.float64 else F32_BOUND
    for i in sorted({0, 1, *rng.integers(0, count, 40).tolist()}):
        worst = max(error(rows[i, k], int(ids[i]), D, k) for k in sample_columns(rng, D))
        report_error(f"{np.dtype(dtype).name}, arrays of integer ids", worst, bound)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"convention": "marian"},
        {"convention": "fairseq"},
        {"convention": "adm"},
        {"layout": "cos_sin", "freq_shift": 0.5, "scale": 1000.0},
        {"layout": "interleaved", "freq_shift": 1.0, "base": 500000.0},
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()),
)
@pytest.mark.parametrize("D", [5, 64, 1023])
def test_every_convention_is_as_accurate(kwargs, D, report_error):
    from exact import convention_value

    rng = np.random.default_rng(D)
    expand = dict(kwargs)
    preset = {"marian": ("sin_cos", None), "fairseq": ("sin_cos", 1.0), "adm": ("cos_sin", 0.0)}
    if "convention" in expand:
        expand["layout"], expand["freq_shift"] = preset[expand.pop("convention")]
    limit = 1e6 / expand.get("scale", 1.0)
    positions = [
        0,
        1,
        int(limit),
        -int(limit),
        *rng.integers(-int(limit), int(limit), 20).tolist(),
        998.39,
    ]
    rows = cpe.positional_encoding(np.array(positions, dtype=np.float64), D, **kwargs)
    table = cpe.positional_encoding_table(600, D, start=int(limit) - 600, **kwargs)
    for p, row in [
        *zip(positions, rows, strict=True),
        (int(limit) - 1, table[-1]),
        (int(limit) - 301, table[299]),
    ]:
        for k in sample_columns(rng, D):
            exact = convention_value(p, D, k, **expand)
            worst = float(abs(mpmath.mpf(float(row[k])) - exact))
            report_error("float64, every convention", worst, F64_BOUND)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_first_and_cached_table_paths(dtype, report_error):
    """The first request makes the digit levels, a repeat takes them from the cache.

    A base used nowhere else makes the encoding new to this process.
    """
    base = 12345.678 if dtype == np.float64 else 23456.789
    D, n, start = 96, 600, 10**6 - 600
    first = cpe.positional_encoding_table(n, D, start=start, base=base, dtype=dtype)
    again = cpe.positional_encoding_table(n, D, start=start, base=base, dtype=dtype)
    ids = cpe.positional_encoding(
        np.arange(start, start + n)[::-1].copy(), D, base=base, dtype=dtype
    )[::-1]
    bound = F64_BOUND if dtype == np.float64 else F32_BOUND
    rng = np.random.default_rng(5)
    for name, table in [
        ("levels made for it", first),
        ("levels from the cache", again),
        ("ids", ids),
    ]:
        for i in sorted({0, n - 1, *rng.integers(0, n, 25).tolist()}):
            worst = max(error(table[i, k], start + i, D, k, base) for k in sample_columns(rng, D))
            report_error(f"{np.dtype(dtype).name} table, {name}", worst, bound)


def near_quarter_turns(rng: np.random.Generator) -> list[float]:
    """Positions within a few ulp of k*pi/2, where the argument reduction of the
    row loop (cpe_rows.h) must keep every bit, on both sides of its 1.6e6 limit."""
    quarter = mpmath.pi / 2
    ks = [1, 2, 3, 4, 5, 7, 1000, 65535, 2**19, 2**20 - 1, 2**20, 2**20 + 1, 1_300_000]
    ks += rng.integers(1, 2**21, 20).tolist()
    positions = []
    for k in ks:
        p = float(k * quarter)
        positions += [p, float(np.nextafter(p, 0.0)), float(np.nextafter(p, np.inf)), -p]
    return positions


@pytest.mark.parametrize("D", [2, 8, 64])
def test_float64_near_multiples_of_half_pi(D, report_error):
    # w_0 = 1, so column 0 and 1 see the angle p itself; other columns see p w_j.
    rng = np.random.default_rng(77 + D)
    positions = near_quarter_turns(rng)
    rows = cpe.positional_encoding(np.array(positions), D)
    for p, row in zip(positions, rows, strict=True):
        worst = max(error(row[k], p, D, k) for k in range(min(D, 8)))
        report_error("float64, p near k*pi/2 (argument reduction)", worst, F64_BOUND)


def _integers_near_quarter_turns() -> list[int]:
    """The integers below 2**53 closest to multiples of pi/2: the numerators of the
    continued-fraction convergents of pi/2."""
    mpmath.mp.dps = 50
    x, (p0, p1) = mpmath.pi / 2, (1, 0)
    numerators = []
    while True:
        a = int(mpmath.floor(x))
        p0, p1 = a * p0 + p1, p0
        if p0 > 2**53:
            return numerators
        numerators.append(p0)
        x = 1 / (x - a)


@pytest.mark.parametrize("D", [2, 64])
def test_float64_near_multiples_of_half_pi_up_to_2_to_the_53(D, report_error):
    """Angles beyond the row loop's reduction (1.6e6) that lie close to a multiple
    of pi/2, up to the limit 2**53: the integers closest to one, and the doubles
    nearest k pi/2 for k up to 2**52, both signs."""
    rng = np.random.default_rng(D)
    positions = [float(p) for p in _integers_near_quarter_turns() if p > 1_600_000]
    for k in [2**21 + 1, 2**30 + 3, 2**40 + 5, 2**52 - 1, *rng.integers(2**22, 2**52, 12)]:
        p = float(int(k) * (mpmath.pi / 2))
        positions += [p, float(np.nextafter(p, 0.0))]
    positions = [q for p in positions for q in (p, -p) if abs(p) <= 2**53]
    rows = cpe.positional_encoding(np.array(positions), D)
    for p, row in zip(positions, rows, strict=True):
        worst = max(error(row[k], p, D, k) for k in range(2))
        report_error("float64, p near k*pi/2 up to 2**53", worst, F64_BOUND)
        single = cpe.positional_encoding(int(p) if p == int(p) else p, D)
        np.testing.assert_array_equal(single, row)


LIMIT_BASES = [10000.0, 500000.0, 1.0001, 1.5, 0.5, 2.0, 1e-300, 1e300]


@pytest.mark.parametrize("base", [*LIMIT_BASES, 3.876141122586136e-52, 2.6775e-29])
@pytest.mark.parametrize("D", [64, 4096, 32768])
def test_frequencies_are_double_doubles_within_2_to_the_minus_104(base, D):
    """Each w_j = base ** (-2j / D), as the double-double hi + lo of the encoding,
    is within 2**-104 of its exact value (relative), at every j: what keeps the
    angles near 2**53 within ~5e-16 (frequencies that are subnormal doubles, whose
    angles are below 2**-960, are within 2**-1072 instead)."""
    from exact import frequency

    w = cpe._core.paper_frequencies(D, base, "D")
    n = D // 2
    for j in sorted({*range(0, n, max(1, n // 300)), n - 1, 687}.intersection(range(n))):
        exact = frequency(j, D, base)
        got = mpmath.mpf(float(w[0, j])) + mpmath.mpf(float(w[1, j]))
        assert abs(got - exact) <= max(2.0**-104 * exact, mpmath.mpf(2) ** -1072), (j, base)


def _largest_positions(w_max: float, rng: np.random.Generator) -> list[float]:
    """Positions whose largest angle is at or near the limit 2**53 (integers up
    to 2**53, beyond that real values), both signs."""
    top = min(2.0**53, 2.0**53 / w_max)
    if top >= 4:
        top = float(np.floor(top))
        near = [top, top - 1, top - 2**20, *np.floor(top * rng.uniform(0.5, 1, 4))]
        real = [top - 0.5, top * 0.75 + 0.25]
    else:  # (tiny positions: angles of huge frequencies)
        near, real = [], [top, top * (1 - 2**-20), top * 0.625]
    return [s * p for p in near + real for s in (1, -1)]


@pytest.mark.parametrize("base", LIMIT_BASES)
@pytest.mark.parametrize("D", [2, 64, 512, 4096, 8192])
def test_float64_bound_holds_up_to_the_angle_limit(base, D, report_error):
    """The float64 bound holds at every accepted position, up to |p * w_j| = 2**53,
    for bases far from the paper's and widths beyond 4096: the frequencies are
    within ~2**-105 of base ** (-2j / D), so the angles near 2**53 are within
    ~3e-16 of the exact ones."""
    import mpmath

    from exact import frequency

    rng = np.random.default_rng(D)
    w = [frequency(j, D, base) for j in range(D // 2)]
    w_max = float(max(w))
    positions = _largest_positions(w_max, rng)
    n = D // 2
    by_angle = sorted(range(n), key=lambda j: -w[j])
    columns = sorted({*by_angle[:6], 0, n - 1, *rng.integers(0, n, 6).tolist()})
    rows = cpe.positional_encoding(positions, D, base=base)  # an array
    for i, p in enumerate(positions):
        single = cpe.positional_encoding(int(p) if p == int(p) else p, D, base=base)
        np.testing.assert_array_equal(single, rows[i])  # (the same bits, as ever)
        for j in columns:
            angle = mpmath.mpf(p) * w[j]
            got = (float(rows[i, 2 * j]), float(rows[i, 2 * j + 1]))
            worst = max(abs(got[0] - mpmath.sin(angle)), abs(got[1] - mpmath.cos(angle)))
            report_error("float64, angles up to 2**53", float(worst), F64_BOUND)
    # A table ending next to the largest integer position (its end is exclusive).
    if positions[0] >= 64 and positions[0] == int(positions[0]):
        last = int(positions[2])
        table = cpe.positional_encoding_table(16, D, start=last - 15, base=base)
        np.testing.assert_array_equal(table[-1], rows[2])
