"""The public API of cpe as data, and makers of arbitrary arguments for it.

Every reliability suite (test_properties, test_threads, test_leaks, test_huge
and fuzz/fuzz_cpe.py) builds its calls from the two tables here:

* ``SPECS``: one ``CallSpec`` per public function;
* ``PARAMETERS``: one ``Parameter`` per argument name (``out=`` is built apart,
  because its value depends on the output the other arguments ask for).

A new keyword is one ``PARAMETERS`` line plus its name in the ``keywords`` of the
functions that take it; a new function is one ``SPECS`` line (and
``test_every_public_function_has_a_call_spec`` fails until it exists). The oracle
``tests/reference.py`` is called with the same names.

Values are drawn through a ``Chooser`` so that the same makers serve Hypothesis
(shrinkable draws), atheris (a FuzzedDataProvider) and seeded ``random`` (threads,
leaks). Sizes stay small (at most 64 positions, D <= 70) or are so large that no
machine can allocate them (8 * D >= 2**57 bytes, beyond any address space), so no
maker ever asks for more than a few kilobytes.
"""

from __future__ import annotations

import array
import copy
import math
import operator
import random
import struct
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, Protocol, TypeVar

import numpy as np

import cpe
import reference as _reference
from cpe._conventions import CONVENTIONS

T = TypeVar("T")
LIMIT = 2**53  # largest exact integer position
NO_OUT = object()  # "out= not passed", as distinct from out=None


# ---- where the randomness comes from ----


class Chooser(Protocol):
    def integer(self, lo: int, hi: int) -> int: ...  # lo <= x <= hi
    def uniform(self, lo: float, hi: float) -> float: ...  # finite, lo <= x <= hi
    def real(self) -> float: ...  # any double: NaN, +-inf, subnormal, huge


def pick(c: Chooser, options: Sequence[T]) -> T:
    return options[c.integer(0, len(options) - 1)]


def one_of(c: Chooser, *makers: Callable[[Chooser], Any]) -> Any:
    return pick(c, makers)(c)


SPECIAL_REALS = (
    0.0,
    -0.0,
    1.0,
    -1.5,
    math.nan,
    math.inf,
    -math.inf,
    5e-324,
    2.2250738585072014e-308,
    1e-300,
    1.7976931348623157e308,
    2.0**53,
    1e300,
)


class RandomChooser:
    """Seeded, for suites that need many reproducible calls without Hypothesis."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def uniform(self, lo: float, hi: float) -> float:
        return self.rng.uniform(lo, hi)

    def real(self) -> float:
        r = self.rng.random()
        if r < 0.25:
            return self.rng.choice(SPECIAL_REALS)
        if r < 0.6:
            return self.rng.uniform(-1e6, 1e6)
        return struct.unpack("<d", self.rng.getrandbits(64).to_bytes(8, "little"))[0]


# ---- argument makers: valid (must be accepted) and hostile (anything) ----


class Index:
    """A user type that is an integer only through __index__."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"Index({self.value})"


def _quiet_cast(value: Any, dtype: Any) -> Any:
    # NumPy warns when a cast overflows; the overflow is the point here.
    with np.errstate(all="ignore"):
        return np.asarray(value).astype(dtype)[()]


def _finite(c: Chooser, bound: float) -> float:
    x = c.real()
    if not math.isfinite(x):
        return 0.0
    return x if abs(x) <= bound else math.fmod(x, bound)


INTEGER_DTYPES = ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", ">i2", ">i8", ">u4")
FLOAT_DTYPES = ("f8", "f4", "f2", ">f4", ">f8", "g")  # g: long double
OTHER_DTYPES = ("?", "c16", "O", "U3", "M8[D]", "m8[s]", "V8")


def _shape(c: Chooser) -> tuple[int, ...]:
    return tuple(c.integer(0, 4) for _ in range(c.integer(0, 3)))


def _valid_element(c: Chooser, dtype: np.dtype) -> Any:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(int(info.min), -LIMIT), min(int(info.max), LIMIT)
        return one_of(
            c, lambda c: c.integer(max(lo, -1000), min(hi, 1000)), lambda c: c.integer(lo, hi)
        )
    widest = min(1e300, float(np.finfo(dtype).max) / 2)
    return one_of(
        c,
        lambda c: c.uniform(-min(widest, 1e6), min(widest, 1e6)),
        lambda c: float(c.integer(-1000, 1000)),
        lambda c: _finite(c, widest),
    )


def _strided(a: np.ndarray) -> np.ndarray:
    if a.ndim == 0:
        return a
    big = np.zeros((*a.shape[:-1], 2 * a.shape[-1]), a.dtype)
    big[..., ::2] = a
    return big[..., ::2]


def _reversed(a: np.ndarray) -> np.ndarray:
    return a if a.ndim == 0 else a[::-1].copy()[::-1]


def _read_only(a: np.ndarray) -> np.ndarray:
    b = a.copy()
    b.flags.writeable = False
    return b


def _broadcast(a: np.ndarray) -> np.ndarray:
    if a.ndim == 0 or a.size == 0:
        return a
    return np.broadcast_to(a[..., :1], a.shape)  # zero stride on the last axis


LAYOUTS: tuple[Callable[[np.ndarray], np.ndarray], ...] = (
    lambda a: a,
    np.asfortranarray,
    _strided,
    _reversed,
    _read_only,
    _broadcast,
)


def _array(c: Chooser, dtype: Any, element: Callable[[Chooser, np.dtype], Any]) -> np.ndarray:
    dt = np.dtype(dtype)
    shape = _shape(c)
    flat = [element(c, dt) for _ in range(math.prod(shape))]
    a = np.array([_quiet_cast(x, dt) for x in flat], dtype=dt).reshape(shape)
    return pick(c, LAYOUTS)(a)


def _nested(c: Chooser, rows: int, columns: int) -> list[list[float]]:
    return [[c.uniform(-1e4, 1e4) for _ in range(columns)] for _ in range(rows)]


class Fickle:
    """A duck-typed sequence (a __len__ and a __getitem__: all NumPy asks of one)
    whose items are ``first`` when first read and ``later`` after (a bool, an
    integer beyond 2**53, NaN): a call that reads its positions twice (to convert
    them, then to check them) gets caught. Its copies (the contract's snapshot
    of the arguments, which the oracle reads) start unread."""

    def __init__(self, first: list[float], later: list[Any]) -> None:
        self.first, self.later = first, later
        self.read = [False] * len(first)

    def __len__(self) -> int:
        return len(self.first)

    def __getitem__(self, index: int) -> Any:
        if not isinstance(index, int) or not 0 <= index < len(self.first):
            raise IndexError(index)
        again = self.read[index]
        self.read[index] = True
        return self.later[index] if again else self.first[index]

    def __repr__(self) -> str:
        return f"Fickle({self.first!r}, later={self.later!r})"

    def __eq__(self, other: object) -> bool:  # (what it holds, not what was read)
        return isinstance(other, Fickle) and (self.first, self.later) == (other.first, other.later)

    __hash__ = None  # type: ignore[assignment]

    def __deepcopy__(self, memo: dict[int, Any]) -> Fickle:
        return Fickle(list(self.first), list(self.later))  # (unread)


def fresh(value: Any) -> Any:
    """A list as new: a copy whose Fickles are unread (other values as they are)."""
    if not isinstance(value, list):
        return value
    try:
        return copy.deepcopy(value)
    except TypeError:  # (it holds what cannot be copied: a memoryview, say)
        return value


def _fickle_rows(c: Chooser) -> list[Fickle]:
    """Rows of positions, each a Fickle (inside a list, so that the snapshot the
    oracle reads is a copy of them, unread)."""
    columns = c.integer(1, 3)
    return [
        Fickle(
            [c.uniform(-1e4, 1e4) for _ in range(columns)],
            [pick(c, (True, 2**60, math.nan, -(2**62))) for _ in range(columns)],
        )
        for _ in range(c.integer(1, 3))
    ]


def valid_positions(c: Chooser) -> Any:
    return one_of(
        c,
        lambda c: c.integer(-1000, 1000),
        lambda c: c.integer(-LIMIT, LIMIT),
        lambda c: _finite(c, 1e300),
        lambda c: _array(c, pick(c, INTEGER_DTYPES + FLOAT_DTYPES), _valid_element),
        lambda c: [c.integer(-1000, 1000) for _ in range(c.integer(0, 5))],
        lambda c: _nested(c, c.integer(1, 3), c.integer(0, 3)),
        lambda c: array.array("d", [c.uniform(-1e4, 1e4) for _ in range(c.integer(0, 4))]),
        _fickle_rows,
    )


def _any_element(c: Chooser, dtype: np.dtype) -> Any:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return c.integer(int(info.min), int(info.max))
    if dtype.kind == "f":
        return c.real()
    return 0


class MaskedInside:
    """An array-like whose ``__array__`` is a masked array (its mask would be lost)."""

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        return np.ma.masked_array([1.0, 2.0], mask=[False, True])

    def __eq__(self, other: object) -> bool:  # copies are equal (contract.snapshot)
        return type(other) is MaskedInside

    __hash__ = object.__hash__


BAD_POSITIONS = (
    True,
    np.False_,
    None,
    "3",
    b"3",
    1 + 2j,
    Fraction(1, 3),
    Decimal("1.5"),
    object(),
    LIMIT + 1,
    -LIMIT - 1,
    2**63,
    2**64,
    -(10**30),
    math.nan,
    math.inf,
    -math.inf,
    np.longdouble("1e400"),
    -np.longdouble("1e4000"),
    np.float16(np.inf),
    [[1, 2], [3]],
    [1, None],
    [True, 2],
    [],
    [[]],
    [1, "a"],
    [2**64],
    [1.0, math.nan],
    [[1], [2.5]],
    {1: 2},
    {1, 2},
    range(3),
    b"",
    memoryview(b"abc"),
    # Buffer-like elements of a list: NumPy would convert them unchecked.
    [memoryview(np.array([LIMIT + 1, 3])), [0.5, 1.5]],
    [memoryview(np.array([True, False])), [1, 2]],
    [MaskedInside(), [1.0, 2.0]],
)


def hostile_positions(c: Chooser) -> Any:
    return one_of(
        c,
        valid_positions,
        lambda c: pick(c, BAD_POSITIONS),
        lambda c: c.real(),
        lambda c: _quiet_cast(c.real(), pick(c, FLOAT_DTYPES)),
        lambda c: _array(c, pick(c, INTEGER_DTYPES + FLOAT_DTYPES), _any_element),
        lambda c: _array(c, pick(c, OTHER_DTYPES), _any_element),
        lambda c: memoryview(np.arange(float(c.integer(0, 4)))),
    )


HUGE_COUNTS = (2**54, 2**57, 2**60 - 1, 2**60, 2**61, 2**62, 2**63 - 1, 2**63, 2**64, 10**30)
BAD_COUNTS = (
    True,
    False,
    np.True_,
    None,
    4.0,
    4.5,
    math.nan,
    math.inf,
    "4",
    b"4",
    [4],
    (4,),
    4 + 0j,
    Fraction(4),
    Decimal(4),
    np.float64(4.0),
    np.array([4]),
    object(),
)


def _integer_like(c: Chooser, x: int) -> Any:
    return pick(c, (int, np.int64, np.int16, np.array, Index))(x)


def _hostile_count(valid: Callable[[Chooser], int]) -> Callable[[Chooser], Any]:
    return lambda c: one_of(
        c,
        valid,
        lambda c: c.integer(-5, 70),
        lambda c: pick(c, HUGE_COUNTS),
        lambda c: -pick(c, HUGE_COUNTS),
        lambda c: pick(c, BAD_COUNTS),
        lambda c: _integer_like(c, c.integer(-3, 70)),
        lambda c: np.uint64(pick(c, (2**63, 2**64 - 1))),
    )


def valid_width(c: Chooser) -> int:
    return c.integer(1, 64)


def valid_rows(c: Chooser) -> int:
    return c.integer(0, 40)  # > 16 rows takes the angle-addition path


def valid_start(c: Chooser) -> Any:
    return one_of(
        c,
        lambda c: c.integer(-1000, 1000),
        lambda c: c.integer(-(10**6), 10**6),
        lambda c: c.integer(-LIMIT, -LIMIT + 100),
        lambda c: c.integer(LIMIT - 200, LIMIT - 100),  # start + n stays <= 2**53
        lambda c: _integer_like(c, c.integer(-100, 100)),
    )


BAD_STARTS = (
    LIMIT + 1,
    -LIMIT - 1,
    2**63,
    -(2**64),
    10**30,
    True,
    np.False_,
    1.0,
    1.5,
    math.nan,
    "0",
    None,
    [0],
    np.float64(0.0),
    np.uint64(2**64 - 1),
    object(),
)


def hostile_start(c: Chooser) -> Any:
    return one_of(
        c, valid_start, lambda c: pick(c, BAD_STARTS), lambda c: c.integer(-(2**64), 2**64)
    )


GOOD_BASES = (
    10000.0,
    10000,
    2.0,
    1.0,
    0.5,
    1e6,
    500000.0,
    np.float32(10000.0),
    np.float64(10.0),
    np.int64(10),
    np.uint16(100),
    Fraction(10000),
    np.array(10000.0),
    np.array(100),
)
BAD_BASES = (
    0,
    0.0,
    -0.0,
    -1,
    -1e-300,
    10**400,
    -(10**400),
    True,
    np.bool_(False),
    None,
    "1e4",
    b"1e4",
    1j,
    [1e4],
    (1e4,),
    np.array([1e4]),
    np.array(True),
    Decimal("1e4"),
    object(),
    np.longdouble("1e400"),
    np.float16(np.inf),
    np.float64(np.nan),
    math.inf,
)


def valid_base(c: Chooser) -> Any:
    return one_of(c, lambda c: c.uniform(0.5, 1e6), lambda c: pick(c, GOOD_BASES))


def hostile_base(c: Chooser) -> Any:
    return one_of(c, valid_base, lambda c: c.real(), lambda c: pick(c, BAD_BASES))


GOOD_DTYPES = (
    np.float64,
    np.float32,
    np.float16,
    "float64",
    "float32",
    "float16",
    "f8",
    "f4",
    "f2",
    "<f8",
    "=f4",
    "d",
    "e",
    float,
    None,
    np.dtype("f4"),
    np.dtype("f8", metadata={"unit": "radian"}),
)
BAD_DTYPES = (
    ">f8",
    ">f4",
    "int8",
    np.int32,
    "complex128",
    "banana",
    "",
    object,
    np.longdouble,
    "V8",
    "O",
    "S8",
    np.dtype([("a", "f8")]),
    3,
    1.5,
    [],
    "M8[D]",
    "(2)f8",
    "f8,,",
    ("f8", -1),
)


def valid_dtype(c: Chooser) -> Any:
    return pick(c, GOOD_DTYPES)


def hostile_dtype(c: Chooser) -> Any:
    return one_of(c, valid_dtype, lambda c: pick(c, BAD_DTYPES))


# workers=: the values are the same bits for any count (tested in test_workers).
GOOD_WORKERS = (None, 1, 2, -1, np.int64(3), 10**9)
BAD_WORKERS = (0, -(10**6), 1.5, True, "2", [2], np.float64(2.0))


def valid_workers(c: Chooser) -> Any:
    return pick(c, GOOD_WORKERS)


def hostile_workers(c: Chooser) -> Any:
    return one_of(c, valid_workers, lambda c: pick(c, BAD_WORKERS))


def _not_a_count(position: Any) -> Any:
    """rope_cos_sin reads an integer scalar as a row count: make scalars floats."""
    if isinstance(position, list):  # (not a scalar, and never read here: see Fickle)
        return position
    try:
        scalar = np.ndim(position) == 0
    except ValueError:  # a ragged sequence: not a scalar, and not a count
        return position
    if scalar and not isinstance(position, (bool, np.bool_)):
        try:
            return float(operator.index(position))
        except TypeError:
            return position
    return position


def valid_rope_n(c: Chooser) -> Any:
    return one_of(c, valid_rows, lambda c: _not_a_count(valid_positions(c)))


def hostile_rope_n(c: Chooser) -> Any:
    # Anything that is not an integer count is taken for position ids, whose
    # errors name "n (the positions)".
    return one_of(
        c,
        valid_rope_n,
        lambda c: _not_a_count(hostile_positions(c)),
        lambda c: c.integer(-5, 70),
        lambda c: pick(c, HUGE_COUNTS),
        lambda c: -pick(c, HUGE_COUNTS),
        lambda c: pick(c, (True, False, np.True_, np.False_)),
        lambda c: _integer_like(c, c.integer(-3, 70)),
        lambda c: np.uint64(pick(c, (2**63, 2**64 - 1))),
    )


def _multiple_of(k: int, valid: Callable[[Chooser], int]) -> Callable[[Chooser], int]:
    return lambda c: k * max(1, valid(c) // k)


valid_width_4 = _multiple_of(4, valid_width)
valid_width_16 = _multiple_of(16, valid_width)
valid_head_dim = _multiple_of(2, valid_width)


def _hostile_width(valid: Callable[[Chooser], int]) -> Callable[[Chooser], Any]:
    hostile = _hostile_count(valid)
    return lambda c: one_of(c, hostile, lambda c: valid(c) + c.integer(1, 3))  # not a multiple


def valid_grid_side(c: Chooser) -> int:
    return c.integer(0, 6)


def valid_video_side(c: Chooser) -> int:
    return c.integer(0, 4)


def valid_extra_tokens(c: Chooser) -> int:
    return c.integer(0, 3)


LAYOUTS_1D = (None, "interleaved", "sin_cos", "cos_sin")
BAD_LAYOUTS = ("", "INTERLEAVED", "sin-cos", "mae", "half", 0, 1.5, b"sin_cos", object(), True)
GRID_LAYOUTS = ("mae", "timm", "timm_interleaved")
ROPE_LAYOUTS = ("half", "interleaved")
LIST_LAYOUTS = (["sin_cos"], ("mae",), ["half"], np.array(["mae", "timm"]), np.array(["half", "x"]))


def _valid_choice(options: Sequence[Any]) -> Callable[[Chooser], Any]:
    return lambda c: pick(c, options)


def _hostile_choice(options: Sequence[Any], arrays: bool) -> Callable[[Chooser], Any]:
    bad = BAD_LAYOUTS + LIST_LAYOUTS + (None,)
    if arrays:
        bad += (np.array(["sin_cos", "mae"]), np.array([]))
    return lambda c: one_of(c, _valid_choice(options), lambda c: pick(c, bad))


BAD_REALS = (
    math.nan,
    math.inf,
    -math.inf,
    True,
    np.False_,
    None,
    "1",
    b"1",
    1j,
    [1.0],
    np.array([1.0]),
    10**400,
    Decimal(1),
    object(),
    np.longdouble("1e400"),
    np.float64(np.nan),
)


def valid_freq_shift(c: Chooser) -> Any:
    # Shifts s <= 1 keep every frequency within [min(1, 1/base), max(1, 1/base)],
    # as the paper's do; draw_call raises D when D // 2 - s <= 0.
    return one_of(
        c,
        lambda c: pick(c, (None, 0.0, 1.0, 0, 1, np.float32(1.0), Fraction(1, 2), np.array(0.5))),
        lambda c: c.uniform(-100.0, 1.0),
    )


def hostile_freq_shift(c: Chooser) -> Any:
    return one_of(
        c,
        valid_freq_shift,
        lambda c: pick(c, BAD_REALS),
        lambda c: -abs(c.real()),
        lambda c: pick(c, (int, float, np.float64))(c.integer(2, 80)),
        lambda c: c.integer(2, 40) - pick(c, (1e-5, 0.5, 0.99999)),  # D // 2 - s just above 0
        lambda c: pick(c, (1e300, 2.0**63, 10**30)),
    )


def _not_tiny_or_huge(x: float) -> float:
    # Any scale: frequencies that leave the double range are a ValueError naming
    # base, scale and D (cpe.positional_encoding(1, 8, scale=5e-324)).
    return x


def _no_vanishing_scale(x: float) -> float:
    # uniform() can return subnormals such as 5e-324: with them the smallest
    # frequency underflows to 0, which is a ValueError (see _not_tiny_or_huge),
    # not a valid call. Valid scales are 0 or at least 1e-290 in magnitude.
    return 0.0 if abs(x) < 1e-290 else x


def valid_scale(c: Chooser) -> Any:
    return one_of(
        c,
        lambda c: pick(c, (1.0, 0.0, -1.0, 2, 0.5, np.float32(2.0), Fraction(1, 3), np.array(1.5))),
        lambda c: _no_vanishing_scale(c.uniform(-1000.0, 1000.0)),
    )


def hostile_scale(c: Chooser) -> Any:
    return one_of(
        c, valid_scale, lambda c: pick(c, BAD_REALS), lambda c: _not_tiny_or_huge(c.real())
    )


def valid_convention(c: Chooser) -> Any:
    return pick(c, (None, *CONVENTIONS))


def hostile_convention(c: Chooser) -> Any:
    bad = ("", "Paper", "bert", "sin_cos", 1, b"paper", ["paper"], object(), True, math.nan)
    return one_of(c, valid_convention, lambda c: pick(c, bad))


def _bounded_positive(x: float) -> float:
    # Any value: coordinate steps or coordinates beyond the double range are a
    # ValueError naming the scales (cpe.sincos_2d(3, 3, 8, base_size=1e300,
    # interpolation_scale=1e-200)).
    return x


def valid_interpolation_scale(c: Chooser) -> Any:
    return one_of(
        c,
        lambda c: pick(c, (1.0, 1, 2.0, 0.5, np.float64(1.5), np.float32(0.25), Fraction(1, 2))),
        lambda c: c.uniform(0.25, 8.0),
    )


def hostile_interpolation_scale(c: Chooser) -> Any:
    return one_of(
        c,
        valid_interpolation_scale,
        lambda c: pick(c, (*BAD_REALS, 0, 0.0, -0.0, -1.0, -1e-300)),
        lambda c: _bounded_positive(c.real()),
    )


def valid_base_size(c: Chooser) -> Any:
    return one_of(
        c,
        lambda c: pick(c, (None, 16, 16.0, 1, np.float32(8.0), Fraction(3, 2))),
        lambda c: c.uniform(0.5, 64.0),
    )


def hostile_base_size(c: Chooser) -> Any:
    return one_of(c, valid_base_size, hostile_interpolation_scale)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _real(value: Any) -> float:
    if isinstance(value, np.ndarray):
        value = value[()]
    return float(value)


def _rope_positions(n: Any) -> Any:
    """How cpe.rope_cos_sin reads n: a Python int (a count) or float64 positions."""
    if isinstance(n, int) and not isinstance(n, bool):
        return int(n)
    return _as_float64(n)


# Schemes whose frequencies are at most the paper's and whose width is head_dim
# (so the bounds and shapes above hold); test_rope_scaling covers the others.
GOOD_ROPE_PARAMETERS = (
    None,
    {},
    {"rope_type": "linear", "factor": 2.0},
    {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
    {"rope_type": "proportional", "partial_rotary_factor": 0.5},
)
BAD_ROPE_PARAMETERS = (
    {"rope_type": "ntk"},
    {"rope_type": "linear"},
    {"rope_type": "linear", "factor": -1.0},
    {"rope_type": "linear", "factor": math.nan},
    {"rope_type": "linear", "factor": "2"},
    {"factr": 2.0},
    {"partial_rotary_factor": 2.0},
    {"rope_type": "dynamic", "factor": 2.0},
    [("rope_type", "linear")],
    "linear",
    1.0,
    {1: 2},
    {"rope_type": None},
    {"rope_type": ["linear"]},
)


# Attention factors that overflow float16 (or float32 and bfloat16): refused for
# those dtypes by name, their values in float64 (and float32) times the factor.
HUGE_ATTENTION = (
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
     "attention_factor": 1e5},
    {"rope_type": "linear", "factor": 2.0, "attention_factor": 1e300},
    {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "mscale": 1e200,
     "mscale_all_dim": 0.0},
)  # fmt: skip


class LyingMapping(Mapping[Any, Any]):
    """rope_parameters whose items (and keys, and length) say one config and whose
    lookups (``[]``, ``get``) another: cpe reads a mapping once, through its
    items(), and must make the tables of what it read (and keep none of the
    other in its caches for later callers: every later honest call is checked
    too)."""

    def __init__(self, said: dict[Any, Any], looked_up: Any) -> None:
        self.said, self.looked_up = said, looked_up

    def __getitem__(self, key: Any) -> Any:
        return self.looked_up[key]

    def get(self, key: Any, default: Any = None) -> Any:
        return self.looked_up.get(key, default)

    def __iter__(self) -> Any:
        return iter(self.said)

    def __len__(self) -> int:
        return len(self.said)

    def items(self) -> Any:
        return self.said.items()

    def __repr__(self) -> str:
        return f"LyingMapping({self.said!r}, looked_up={self.looked_up!r})"


def _lying_rope_parameters(c: Chooser) -> LyingMapping:
    said = pick(c, [p for p in GOOD_ROPE_PARAMETERS if p is not None])
    others = [p for p in (*GOOD_ROPE_PARAMETERS, *BAD_ROPE_PARAMETERS) if isinstance(p, dict)]
    return LyingMapping(dict(said), dict(pick(c, others)))


def _read_once(parameters: Any) -> Any:
    """rope_parameters as cpe reads them (a mapping: through its items())."""
    return dict(parameters.items()) if isinstance(parameters, LyingMapping) else parameters


def valid_rope_parameters(c: Chooser) -> Any:
    return one_of(c, lambda c: pick(c, GOOD_ROPE_PARAMETERS), _lying_rope_parameters)


def hostile_rope_parameters(c: Chooser) -> Any:
    return one_of(
        c,
        valid_rope_parameters,
        lambda c: pick(c, BAD_ROPE_PARAMETERS),
        lambda c: pick(c, HUGE_ATTENTION),
    )


def valid_optional_length(c: Chooser) -> Any:
    return one_of(c, lambda c: None, lambda c: c.integer(1, 1 << 20))


def _hostile_optional_length(c: Chooser) -> Any:
    bad = (-1, 1.5, "8", True, math.nan, 2**70, [4], object())
    return one_of(c, valid_optional_length, lambda c: pick(c, bad))


def hostile_inv_freq(c: Chooser) -> Any:
    bad = (
        [],
        [1.0],
        np.full(3, math.nan),
        ["a", "b"],
        np.ones((2, 2)),
        1.0,
        object(),
        np.array([math.inf, 1.0]),
    )
    return one_of(c, lambda c: None, lambda c: pick(c, bad))


def hostile_axes_dim(c: Chooser) -> Any:
    # Never valid, whatever the other arguments (test_rope_multimodal checks good ones).
    bad = ((), [3], [16.0, 16], "16", object(), [[2, 2]], [0, 2], [-2], 5, {"a": 2})
    return one_of(c, lambda c: None, lambda c: pick(c, bad))


def hostile_layer_type(c: Chooser) -> Any:
    # Never valid: the drawn rope_parameters are never keyed by layer type
    # (test_apply and test_rope_scaling check per-layer ones).
    bad = ("full_attention", "", 3, b"full_attention", object(), ["sliding_attention"])
    return one_of(c, lambda c: None, lambda c: pick(c, bad))


def _identity(value: Any) -> Any:
    return value


# ---- the tables ----


@dataclass(frozen=True)
class Parameter:
    valid: Callable[[Chooser], Any]  # a value every call must accept
    hostile: Callable[[Chooser], Any]  # any value, valid ones included
    words: tuple[str, ...]  # an error about this argument names one of these
    to_oracle: Callable[[Any], Any] | None  # how tests/reference.py takes it (None: not at all)


def _as_float64(position: Any) -> np.ndarray:
    a = np.asarray(position)
    if a.dtype.kind not in "iuf":
        raise TypeError(f"not real positions: {a.dtype}")
    with np.errstate(over="ignore"):  # long doubles beyond the float64 range
        return a.astype(np.float64)


def _count(
    valid: Callable[[Chooser], int], name: str
) -> tuple[Callable[[Chooser], Any], Callable[[Chooser], Any], tuple[str, ...], Any]:
    """A size argument: its makers, its words (a too large output names "output")."""
    return valid, _hostile_count(valid), (name, "output"), operator.index


PARAMETERS: dict[str, Parameter] = {
    "position": Parameter(valid_positions, hostile_positions, ("position",), _as_float64),
    "n": Parameter(valid_rows, _hostile_count(valid_rows), ("n", "output"), operator.index),
    "D": Parameter(valid_width, _hostile_count(valid_width), ("D", "output"), operator.index),
    "start": Parameter(valid_start, hostile_start, ("start",), operator.index),
    # "position * frequency must be at most 2**53": a position times a frequency.
    "base": Parameter(valid_base, hostile_base, ("base", "frequency"), float),
    "dtype": Parameter(valid_dtype, hostile_dtype, ("dtype",), None),
    "workers": Parameter(valid_workers, hostile_workers, ("workers",), None),
    "layout": Parameter(
        _valid_choice(LAYOUTS_1D), _hostile_choice(LAYOUTS_1D, True), ("layout",), _identity
    ),
    "freq_shift": Parameter(valid_freq_shift, hostile_freq_shift, ("freq_shift",), _optional_float),
    # "position * frequency must be ...": scale multiplies every frequency (as base does).
    "scale": Parameter(valid_scale, hostile_scale, ("scale", "frequency"), _real),
    "convention": Parameter(valid_convention, hostile_convention, ("convention",), _identity),
    "grid_h": Parameter(*_count(valid_grid_side, "grid_h")),
    "grid_w": Parameter(*_count(valid_grid_side, "grid_w")),
    "extra_tokens": Parameter(*_count(valid_extra_tokens, "extra_tokens")),
    "base_size": Parameter(valid_base_size, hostile_base_size, ("base_size",), _optional_float),
    "interpolation_scale": Parameter(
        valid_interpolation_scale, hostile_interpolation_scale, ("interpolation_scale",), _real
    ),
    "t": Parameter(*_count(valid_video_side, "t")),
    "h": Parameter(*_count(valid_video_side, "h")),
    "w": Parameter(*_count(valid_video_side, "w")),
    "temporal_interpolation_scale": Parameter(
        valid_interpolation_scale,
        hostile_interpolation_scale,
        ("temporal_interpolation_scale",),
        _real,
    ),
    "spatial_interpolation_scale": Parameter(
        valid_interpolation_scale,
        hostile_interpolation_scale,
        ("spatial_interpolation_scale",),
        _real,
    ),
    "head_dim": Parameter(
        valid_head_dim, _hostile_width(valid_head_dim), ("head_dim", "output"), operator.index
    ),
    "rope_parameters": Parameter(
        valid_rope_parameters, hostile_rope_parameters, ("rope_parameters",), _read_once
    ),
    "max_position_embeddings": Parameter(
        valid_optional_length, _hostile_optional_length, ("max_position_embeddings",), _identity
    ),
    "seq_len": Parameter(valid_optional_length, _hostile_optional_length, ("seq_len",), _identity),
    # Given frequencies are drawn only wrong (test_rope_scaling checks good ones).
    "inv_freq": Parameter(lambda c: None, hostile_inv_freq, ("inv_freq",), None),
    "axes_dim": Parameter(lambda c: None, hostile_axes_dim, ("axes_dim",), None),
    "layer_type": Parameter(lambda c: None, hostile_layer_type, ("layer_type",), None),
}
# Arguments whose name is shared with another function but whose values are not.
OVERRIDES: dict[str, dict[str, Parameter]] = {
    "sincos_2d": {
        "D": Parameter(
            valid_width_4, _hostile_width(valid_width_4), ("D", "output"), operator.index
        ),
        "layout": Parameter(
            _valid_choice(GRID_LAYOUTS),
            _hostile_choice(GRID_LAYOUTS, False),
            ("layout",),
            _identity,
        ),
    },
    "sincos_3d": {
        "D": Parameter(
            valid_width_16, _hostile_width(valid_width_16), ("D", "output"), operator.index
        ),
    },
    "rope_cos_sin": {
        "n": Parameter(valid_rope_n, hostile_rope_n, ("n", "output"), _rope_positions),
        # With positions for n, start must be 0 (_constrain_rope).
        "start": Parameter(valid_start, hostile_start, ("start",), operator.index),
        "layout": Parameter(
            _valid_choice(ROPE_LAYOUTS),
            _hostile_choice(ROPE_LAYOUTS, False),
            ("layout",),
            _identity,
        ),
    },
}
OUT_WORDS = ("out",)


def _frequencies(D: int, base: float, freq_shift: float | None) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _reference.frequencies(D, base, freq_shift)


def angle_factor(D: int, base: float, freq_shift: float | None = None) -> float:
    """Bound on w_j * (1 + |ln w_j|): the oracle rounds the exponent -2j/D (or
    -j/(D//2 - s)), which moves w_j by |ln w_j| * 2**-53 relative."""
    w = _frequencies(D, base, freq_shift)
    with np.errstate(all="ignore"):
        factor = np.max(w * (1.0 + np.abs(np.log(w)))) if w.size else 1.0
    return float(max(1.0, factor)) if math.isfinite(factor) else math.inf


def peak_frequency(D: int, base: float, freq_shift: float | None = None) -> float:
    """The largest frequency of an encoding (0 when it has none)."""
    w = _frequencies(D, base, freq_shift)
    return float(np.max(np.abs(w))) if w.size else 0.0


ANGLE_LIMIT = 2.0**53  # the largest |position * frequency| cpe accepts


def _largest(a: np.ndarray) -> float:
    return float(np.max(np.abs(a))) if a.size else 0.0


def _encoding_shift(a: Mapping[str, Any]) -> float | None:
    if a.get("convention") is not None:
        return CONVENTIONS[a["convention"]].freq_shift
    return a.get("freq_shift")


def _encoding_factor(a: Mapping[str, Any]) -> float:
    """angle_factor times |scale|, for the frequencies the keywords select."""
    factor = angle_factor(a["D"], a.get("base", 10000.0), _encoding_shift(a))
    return abs(a.get("scale", 1.0)) * factor


def _encoding_peak(a: Mapping[str, Any]) -> float:
    return abs(a.get("scale", 1.0)) * peak_frequency(
        a["D"], a.get("base", 10000.0), _encoding_shift(a)
    )


def _table_reach(a: Mapping[str, Any]) -> float:
    """The largest |position| of a table (0 when it has no rows)."""
    start = a.get("start", 0)
    return float(max(abs(start), abs(start + a["n"] - 1))) if a["n"] else 0.0


def _coordinate_reach(size: int, a: Mapping[str, Any], scale: str) -> float:
    """Largest coordinate of a grid axis of ``size`` tokens."""
    step = 1.0 if a.get("base_size") is None or not size else a["base_size"] / size
    return max(0, size - 1) * step / a.get(scale, 1.0)


def _sincos_2d_bound(a: Mapping[str, Any], factor: Callable[..., float] = angle_factor) -> float:
    reach = max(
        _coordinate_reach(a["grid_h"], a, "interpolation_scale"),
        _coordinate_reach(a["grid_w"], a, "interpolation_scale"),
    )
    shift = a.get("freq_shift")
    return reach * factor(a["D"] // 2, a.get("base", 10000.0), 0.0 if shift is None else shift)


def _sincos_3d_bound(a: Mapping[str, Any], factor: Callable[..., float] = angle_factor) -> float:
    base = a.get("base", 10000.0)
    time = _coordinate_reach(a["t"], a, "temporal_interpolation_scale")
    space = max(
        _coordinate_reach(a["h"], a, "spatial_interpolation_scale"),
        _coordinate_reach(a["w"], a, "spatial_interpolation_scale"),
    )
    quarter = a["D"] // 4
    return max(time * factor(quarter, base), space * factor((a["D"] - quarter) // 2, base))


def _rope_shape(a: Mapping[str, Any]) -> tuple[int, ...]:
    n = a["n"]
    rows = (n,) if isinstance(n, int) else np.shape(n)
    return (*rows, a["head_dim"])


def _rope_bound(a: Mapping[str, Any], peak: bool = False) -> float:
    """angle_factor (or with ``peak``, peak_frequency) of RoPE's frequencies, times
    the largest |position| and the attention factor."""
    n = a["n"]
    reach = _table_reach(a) if isinstance(n, int) else _largest(np.asarray(n))
    if not reach:
        return 0.0
    seq_len = a.get("seq_len")
    if seq_len is None:  # the request's length, as cpe and the oracle take it
        seq_len = a.get("start", 0) + n if isinstance(n, int) else float(np.max(n)) + 1
    with np.errstate(all="ignore"):
        w, attention = _reference.rope_scheme_frequencies(
            a["head_dim"],
            a.get("base", 10000.0),
            a.get("rope_parameters"),
            a.get("max_position_embeddings"),
            seq_len,
        )
        w = np.abs(w)
        if peak:
            factor = float(np.max(w)) if w.size else 0.0
        else:
            factor = float(np.max(w * (1.0 + np.abs(np.log(w))))) if w.size else 1.0
            factor = max(1.0, factor) * attention
    return reach * factor if math.isfinite(factor) else math.inf


def _size(value: Any) -> int | None:
    """``value`` as an int if it is one (so that draw_call can adjust sizes), else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _constrain_encoding(args: dict[str, Any], mode: str, hostile: str | None) -> None:
    """Make the valid arguments agree with each other (convention, freq_shift, D)."""
    if mode == "arbitrary":
        return
    if (
        hostile not in ("convention", "layout", "freq_shift")
        and args.get("convention") is not None
        and (args.get("layout") is not None or args.get("freq_shift") is not None)
    ):
        del args["convention"]  # it cannot be combined with layout or freq_shift
    shift = args.get("freq_shift")
    from_convention = isinstance(args.get("convention"), str) and args["convention"] in CONVENTIONS
    if from_convention:
        shift = CONVENTIONS[args["convention"]].freq_shift
    if hostile in ("D", "freq_shift") or shift is None:
        return
    if hostile == "convention" and from_convention:
        return  # too small a D for it: cpe's error names the convention

    try:
        needed = 2 * (math.floor(float(shift)) + 1)  # the smallest D with D // 2 > shift
    except (TypeError, ValueError, OverflowError):
        return
    if "D" in args and _size(args["D"]) is not None and _size(args["D"]) < needed:
        args["D"] = needed


def _constrain_rope(args: dict[str, Any], mode: str, hostile: str | None) -> None:
    """With positions for n, a valid start is 0 (the default); yarn's ramp needs a
    base other than 1."""
    if mode == "arbitrary":
        return
    parameters = _read_once(args.get("rope_parameters"))
    if (
        hostile not in ("base", "rope_parameters")
        and isinstance(parameters, dict)
        and parameters.get("type") == "yarn"
        and float(args.get("base", 10000.0)) == 1.0
    ):
        args["base"] = 10000.0
    if hostile == "start" or "start" not in args:
        return
    n = args.get("n")
    try:  # (a list is never read here: its items may change when read, see Fickle)
        count = not isinstance(n, list) and np.ndim(n) == 0 and _size(n) is not None
    except ValueError:  # ragged positions
        count = False
    if not count:
        args["start"] = 0


def _constrain_grid(*sides: str) -> Callable[[dict[str, Any], str, str | None], None]:
    # Any sides: an empty grid with a huge side is an empty output, made at once.
    return _no_constraint


def _constrain_2d_grid(args: dict[str, Any], mode: str, hostile: str | None) -> None:
    """A valid freq_shift s needs D // 4 - s > 0 (from D = 8 on): D grows to fit it."""
    shift = args.get("freq_shift")
    if mode == "arbitrary" or hostile in ("D", "freq_shift") or shift is None:
        return
    try:
        needed = 4 * (math.floor(float(shift)) + 1)
    except (TypeError, ValueError, OverflowError):
        return
    if "D" in args and _size(args["D"]) is not None and 8 <= _size(args["D"]) < needed:
        args["D"] = needed


def _no_constraint(args: dict[str, Any], mode: str, hostile: str | None) -> None:
    return None


def _multiple(D: int, k: int) -> int:
    return max(k, D - D % k)


@dataclass(frozen=True)
class CallSpec:
    name: str  # in cpe and in tests/reference.py
    positional: tuple[str, ...]
    keywords: tuple[str, ...]  # keyword-only, besides dtype and out
    shape: Callable[[Mapping[str, Any]], tuple[int, ...]]  # of the output, from oracle arguments
    angle_bound: Callable[[Mapping[str, Any]], float]  # largest |angle| times angle_factor
    largest_angle: Callable[[Mapping[str, Any]], float]  # largest |position * frequency|
    example: Callable[[int, int], dict[str, Any]]  # valid arguments for a (rows, D) output
    overlappable: str | None = None  # an array argument that may share memory with out=
    has_out: bool = True  # takes out= (a tuple of ``outputs`` arrays when > 1)
    outputs: int = 1  # > 1: returns a tuple of that many arrays, each of ``shape``
    width: str = "D"  # the argument that sets the last dimension of the output
    width_multiple: int = 1  # which the width must be a multiple of
    avoided_out_kinds: tuple[str, ...] = ()  # out= kinds not drawn (known cpe bugs)
    # (args, mode, hostile name) -> None: adjusts drawn arguments in place, so that
    # valid ones agree with each other and known cpe bugs are not drawn.
    constrain: Callable[[dict[str, Any], str, str | None], None] = _no_constraint

    @property
    def function(self) -> Callable[..., Any]:
        return getattr(cpe, self.name)

    @property
    def oracle(self) -> Callable[..., Any]:
        return getattr(_reference, self.name)

    @property
    def parameters(self) -> tuple[str, ...]:
        return self.positional + self.keywords + ("dtype",)

    def parameter(self, name: str) -> Parameter:
        return OVERRIDES.get(self.name, {}).get(name) or PARAMETERS[name]

    def call(self, args: Mapping[str, Any], out: Any = NO_OUT) -> Any:
        """Call cpe; an argument missing from ``args`` is left at its default. Each
        call gets lists anew (their Fickles unread), so that the same arguments
        serve many calls."""
        positional = [fresh(args[name]) for name in self.positional]
        keywords = {name: fresh(args[name]) for name in (*self.keywords, "dtype") if name in args}
        if out is not NO_OUT:
            keywords["out"] = out
        return self.function(*positional, **keywords)

    def arrays(self, result: Any) -> tuple[Any, ...]:
        """The output arrays of a result (a tuple of ``outputs`` of them, or one)."""
        if self.outputs == 1:
            return (result,)
        assert type(result) is tuple, type(result)
        assert len(result) == self.outputs, len(result)
        return result

    def oracle_arguments(self, args: Mapping[str, Any]) -> dict[str, Any]:
        converted = {}
        for name, value in args.items():
            convert = self.parameter(name).to_oracle
            if convert is not None:
                converted[name] = convert(fresh(value))
        return converted

    def expected(self, oracle_args: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
        positional = [oracle_args[name] for name in self.positional]
        keywords = {name: oracle_args[name] for name in self.keywords if name in oracle_args}
        with np.errstate(all="ignore"):
            return self.arrays(self.oracle(*positional, **keywords))


ENCODING_KEYWORDS = ("layout", "freq_shift", "scale", "convention", "workers")

SPECS: tuple[CallSpec, ...] = (
    CallSpec(
        "positional_encoding",
        ("position", "D"),
        ("base", *ENCODING_KEYWORDS),
        shape=lambda a: (*a["position"].shape, a["D"]),
        angle_bound=lambda a: _largest(a["position"]) * _encoding_factor(a),
        largest_angle=lambda a: (
            _largest(a["position"]) and (_largest(a["position"]) * _encoding_peak(a))
        ),
        example=lambda rows, D: {"position": np.arange(rows), "D": D},
        overlappable="position",
        constrain=_constrain_encoding,
    ),
    CallSpec(
        "positional_encoding_table",
        ("n", "D"),
        ("start", "base", *ENCODING_KEYWORDS),
        shape=lambda a: (a["n"], a["D"]),
        angle_bound=lambda a: _table_reach(a) * _encoding_factor(a),
        largest_angle=lambda a: _table_reach(a) and _table_reach(a) * _encoding_peak(a),
        example=lambda rows, D: {"n": rows, "D": D},
        constrain=_constrain_encoding,
    ),
    CallSpec(
        "sincos_2d",
        ("grid_h", "grid_w", "D"),
        (
            "base",
            "layout",
            "extra_tokens",
            "base_size",
            "interpolation_scale",
            "freq_shift",
            "workers",
        ),
        shape=lambda a: (a.get("extra_tokens", 0) + a["grid_h"] * a["grid_w"], a["D"]),
        angle_bound=_sincos_2d_bound,
        # No axis is encoded when the grid has no tokens.
        largest_angle=lambda a: (
            _sincos_2d_bound(a, peak_frequency) if a["grid_h"] * a["grid_w"] else 0.0
        ),
        example=lambda rows, D: {"grid_h": rows, "grid_w": 1, "D": _multiple(D, 4)},
        width_multiple=4,
        constrain=_constrain_2d_grid,
    ),
    CallSpec(
        "sincos_3d",
        ("t", "h", "w", "D"),
        ("base", "temporal_interpolation_scale", "spatial_interpolation_scale", "workers"),
        shape=lambda a: (a["t"], a["h"] * a["w"], a["D"]),
        angle_bound=_sincos_3d_bound,
        largest_angle=lambda a: (
            _sincos_3d_bound(a, peak_frequency) if a["t"] * a["h"] * a["w"] else 0.0
        ),
        example=lambda rows, D: {"t": rows, "h": 1, "w": 1, "D": _multiple(D, 16)},
        width_multiple=16,
        constrain=_constrain_grid("t", "h", "w"),
    ),
    CallSpec(
        "rope_cos_sin",
        ("n", "head_dim"),
        (
            "base",
            "start",
            "layout",
            "rope_parameters",
            "max_position_embeddings",
            "seq_len",
            "inv_freq",
            "axes_dim",
            "layer_type",
            "workers",
        ),
        shape=_rope_shape,
        angle_bound=_rope_bound,
        largest_angle=lambda a: _rope_bound(a, peak=True),
        example=lambda rows, D: {"n": rows, "head_dim": _multiple(D, 2)},
        overlappable="n",
        outputs=2,
        width="head_dim",
        width_multiple=2,
        constrain=_constrain_rope,
    ),
)
SPEC_IDS = [spec.name for spec in SPECS]


def output_dtype(args: Mapping[str, Any], out: OutCase | None = None) -> np.dtype:
    """The dtype of the result: dtype=, or without it (None) float64, or out's."""
    if args.get("dtype") is None and out is not None:
        return np.asarray(out.arrays()[0]).dtype
    return np.dtype(args.get("dtype", np.float64))


# ---- out= of every kind ----

GUARD = 64  # bytes of known pattern on each side of an out= array
PATTERN = 0xA5


@dataclass
class OutCase:
    kind: str
    value: Any  # what is passed as out=
    owner: np.ndarray | None = None  # the bytes the array lives in
    before: Any = None  # copy of owner (or of value) when made
    parts: tuple[OutCase, ...] = ()  # for several outputs: one case each

    @property
    def is_wrong(self) -> bool:
        return self.kind not in ("good", "overlap", "masked", "buffer")

    def arrays(self) -> tuple[Any, ...]:
        """What the call must return: out= itself, or the arrays of the tuple."""
        return tuple(part.value for part in self.parts) if self.parts else (self.value,)

    def unchanged(self) -> bool:
        if self.parts:
            return all(part.unchanged() for part in self.parts)
        if self.owner is not None:
            return bool(np.array_equal(self.owner, self.before))
        if isinstance(self.value, (np.ndarray, memoryview)):
            return self.value.tobytes() == self.before
        if isinstance(self.value, (list, bytearray, array.array)):
            return bool(self.value == self.before)
        return True

    def guards_intact(self) -> bool:
        """Nothing was written outside the array's own bytes."""
        if self.parts:
            return all(part.guards_intact() for part in self.parts)
        if self.owner is None or not isinstance(self.value, (np.ndarray, memoryview)):
            return True
        view = np.asarray(self.value)
        start = view.__array_interface__["data"][0] - self.owner.__array_interface__["data"][0]
        reach = [s * (n - 1) for s, n in zip(view.strides, view.shape, strict=True)]
        low = start + sum(min(0, r) for r in reach)
        high = start + sum(max(0, r) for r in reach) + view.itemsize
        if view.size == 0:
            low = high = start
        return bool(
            np.array_equal(self.owner[:low], self.before[:low])
            and np.array_equal(self.owner[high:], self.before[high:])
        )


def _owned(shape: tuple[int, ...], dtype: Any, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    dt = np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize
    owner = np.full(nbytes + 2 * GUARD + 8, PATTERN, np.uint8)
    view = owner[GUARD + offset : GUARD + offset + nbytes].view(dt).reshape(shape)
    return view, owner


def _case(kind: str, view: Any, owner: np.ndarray | None) -> OutCase:
    if owner is not None:
        return OutCase(kind, view, owner, owner.copy())
    if isinstance(view, (np.ndarray, memoryview)):
        return OutCase(kind, view, None, view.tobytes())
    if isinstance(view, array.array):
        return OutCase(kind, view, None, array.array(view.typecode, view))
    if isinstance(view, (list, bytearray)):
        return OutCase(kind, view, None, type(view)(view))
    return OutCase(kind, view, None, None)


def _wrong_shapes(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    candidates = [
        (*shape[:-1], shape[-1] + 1),
        (*shape, 1),
        shape[1:],
        (1, *shape),
        tuple(reversed(shape)),
        (),
        (0, *shape[1:]),
    ]
    return [s for s in candidates if s != shape]


OTHER_OUT_DTYPES = ("f8", "f4", "f2", ">f8", ">f4", "i8", "c16", "u1")


def _matrix(view: np.ndarray) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        return view.view(np.matrix)


class LyingShape(np.ndarray):
    """An out= that claims a shape its memory does not have."""

    claimed: tuple[int, ...] = ()

    @property  # type: ignore[override]
    def shape(self) -> tuple[int, ...]:
        return type(self).claimed


class LyingDtype(np.ndarray):
    """An out= of bytes that claims to be float64."""

    @property  # type: ignore[override]
    def dtype(self) -> np.dtype:
        return np.dtype(np.float64)


class HidingOverlap(np.ndarray):
    """An out= that tells NumPy's overlap checks it shares no memory."""

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func is np.may_share_memory or func is np.shares_memory:
            return False
        return super().__array_function__(func, types, args, kwargs)


def make_out(c: Chooser, kind: str, shape: tuple[int, ...], dtype: np.dtype) -> OutCase:
    """An out= of the given kind for an output of ``shape`` and ``dtype``."""
    if kind == "good":
        return _case(kind, *_owned(shape, dtype))
    if kind == "wrong_shape":
        return _case(kind, *_owned(pick(c, _wrong_shapes(shape)), dtype))
    if kind == "wrong_dtype":
        others = [d for d in OTHER_OUT_DTYPES if np.dtype(d) != dtype]
        return _case(kind, *_owned(shape, pick(c, others)))
    if kind == "object_dtype":
        return _case(kind, np.full(shape, 7.0, dtype=object), None)
    if kind == "strided" and shape:
        view, owner = _owned((*shape[:-1], 2 * shape[-1]), dtype)
        return _case(kind, view[..., ::2], owner)
    if kind == "fortran" and shape:
        view, owner = _owned(tuple(reversed(shape)), dtype)
        return _case(kind, view.T, owner)
    if kind == "reversed" and shape:
        view, owner = _owned(shape, dtype)
        return _case(kind, view[::-1], owner)
    if kind == "read_only":
        view, owner = _owned(shape, dtype)
        view.flags.writeable = False  # the memory itself stays writable: cpe must not write
        return _case(kind, view, owner)
    if kind == "misaligned":
        return _case(kind, *_owned(shape, dtype, offset=pick(c, (1, 2, 4))))
    if kind in ("buffer", "read_only_buffer") and dtype.char != "E":  # no bfloat16 buffers
        view, owner = _owned(shape, dtype)
        shared = memoryview(view)  # out= through the buffer protocol
        return _case(kind, shared if kind == "buffer" else shared.toreadonly(), owner)
    if kind == "not_an_array":
        size = math.prod(shape)
        value = pick(
            c,
            (
                lambda: [0.0] * size,
                lambda: tuple([0.0] * size),
                lambda: bytearray(size * dtype.itemsize),
                lambda: array.array("b", bytes(size)),  # int8: never an output dtype
                lambda: 0.0,
                lambda: "out",
                lambda: np.float64(0.0),
                lambda: {"out": 1},
            ),
        )()
        return _case(kind, value, None)
    if kind == "matrix" and len(shape) == 2:
        view, owner = _owned(shape, dtype)
        return _case(kind, _matrix(view), owner)
    if kind == "masked":
        view, owner = _owned(shape, dtype)
        return _case(kind, np.ma.masked_array(view), owner)
    if kind == "lying_shape" and shape and math.prod(shape) > 1:
        view, owner = _owned((1,) * len(shape), dtype)
        liar = type("LyingShape", (LyingShape,), {"claimed": shape})
        return _case(kind, view.view(liar), owner)
    if kind == "lying_dtype" and shape:
        view, owner = _owned(shape, np.int8)
        return _case(kind, view.view(LyingDtype), owner)
    return make_out(c, "good", shape, dtype)  # kinds that need a dimension the shape lacks


WRONG_OUT_KINDS = (
    "wrong_shape",
    "wrong_dtype",
    "object_dtype",
    "strided",
    "fortran",
    "reversed",
    "read_only",
    "misaligned",
    "read_only_buffer",
    "not_an_array",
    "matrix",
    "lying_shape",
    "lying_dtype",
)
RIGHT_OUT_KINDS = ("none", "good", "masked", "buffer")


def overlap_out(c: Chooser, spec: CallSpec, args: dict[str, Any], dtype: np.dtype) -> OutCase:
    """A good out= whose memory also holds the positions it is computed from."""
    name = spec.overlappable
    assert name is not None
    positions = np.asarray(args[name])
    if positions.dtype.kind not in "iuf" or positions.ndim == 0 or positions.size == 0:
        positions = np.arange(c.integer(1, 4))
    values = np.asarray([c.integer(-1000, 1000) for _ in range(positions.size)]).reshape(
        positions.shape
    )
    shape = spec.shape({**spec.oracle_arguments({**args, name: values})})
    if not shape or shape[-1] < 1:
        return make_out(c, "good", shape, dtype)  # no room for the positions
    view, owner = _owned(shape, dtype)
    flat = view.reshape(-1)
    if pick(c, ("prefix", "column")) == "prefix":
        flat[: values.size] = values.reshape(-1)
        args[name] = flat[: values.size].reshape(values.shape)
    else:
        view[..., 0] = values
        args[name] = view[..., 0]  # strided view into out
    if c.integer(0, 1):
        view = view.view(HidingOverlap)
    return _case("overlap", view, owner)


# ---- whole calls ----

HOSTILE_MODES = ("valid", "one_bad", "arbitrary")
MAX_OUT_BYTES = 1 << 20


def _guess_output(
    spec: CallSpec, args: Mapping[str, Any]
) -> tuple[tuple[int, ...], np.dtype] | None:
    """The (small) output the arguments ask for, or None."""
    try:
        shape = tuple(spec.shape(spec.oracle_arguments(args)))
        dtype = output_dtype(args)
    except Exception:
        return None
    if dtype.kind != "f" or not shape or any(not 0 <= n <= 1 << 20 for n in shape):
        return None
    if math.prod(shape) * dtype.itemsize > MAX_OUT_BYTES:
        return None
    return shape, dtype


def draw_call(
    c: Chooser, spec: CallSpec, mode: str
) -> tuple[dict[str, Any], OutCase | None, str | None]:
    """Arguments, an out= case (None: not passed) and the one argument to blame.

    mode "valid": every argument valid, out= absent or right (the call must succeed);
    "one_bad": one argument (or out=) hostile, the others valid, so an error must
    name it; "arbitrary": every argument hostile, any may be left out.
    """
    hostile_name = None
    if mode == "one_bad":
        hostile_name = pick(c, spec.parameters + (("out",) if spec.has_out else ()))
    args: dict[str, Any] = {}
    for name in spec.parameters:
        param = spec.parameter(name)
        required = name in spec.positional
        if mode == "arbitrary":
            if required or c.integer(0, 3):
                args[name] = param.hostile(c)
        elif name == hostile_name:
            args[name] = param.hostile(c)
        elif required or c.integer(0, 1):
            args[name] = param.valid(c)
    spec.constrain(args, mode, hostile_name)
    if not spec.has_out:
        return args, None, hostile_name
    guess = _guess_output(spec, args)
    shape, dtype = guess or ((2, 4), np.dtype(np.float64))
    wrong = WRONG_OUT_KINDS + (TUPLE_OUT_KINDS if spec.outputs > 1 else ())
    if mode == "valid":
        kinds = RIGHT_OUT_KINDS + (("overlap",) if spec.overlappable else ())
    elif mode == "one_bad" and hostile_name != "out":
        kinds = RIGHT_OUT_KINDS
    elif mode == "one_bad":
        kinds = wrong
    else:
        kinds = RIGHT_OUT_KINDS + wrong + (("overlap",) if spec.overlappable else ())
    kind = pick(c, [k for k in kinds if k not in spec.avoided_out_kinds])
    if kind == "none" or (guess is None and kind not in wrong):
        return args, None, hostile_name  # no right out= exists for an output that cannot be made
    given = args.get("dtype") is not None
    if not given and kind in RIGHT_OUT_KINDS and c.integer(0, 1):  # out= sets the dtype
        dtype = np.dtype(pick(c, ("f8", "f4", "f2")))
    if spec.outputs > 1:
        return args, make_out_tuple(c, spec, args, kind, shape, dtype), hostile_name
    if kind == "wrong_dtype" and not given:  # (any dtype of cpe's would set it)
        out = _case(kind, *_owned(shape, pick(c, (">f8", ">f4", "i8", "c16", "u1"))))
        return args, out, hostile_name
    if kind == "overlap":
        if guess is None or spec.overlappable not in args:
            out = make_out(c, "good", shape, dtype)
        else:
            out = overlap_out(c, spec, args, dtype)
    else:
        out = make_out(c, kind, shape, dtype)
    return args, out, hostile_name


# Wrong only as the out= of several outputs: not a tuple of the right length, or
# arrays that share memory.
TUPLE_OUT_KINDS = ("not_a_tuple", "shared")


def make_out_tuple(
    c: Chooser,
    spec: CallSpec,
    args: dict[str, Any],
    kind: str,
    shape: tuple[int, ...],
    dtype: np.dtype,
) -> OutCase:
    """An out= of the given kind for ``spec.outputs`` outputs: a tuple of arrays,
    all good but one of that kind (for "overlap", one whose memory holds the
    positions); or, for TUPLE_OUT_KINDS, a wrong container or shared memory."""
    count = spec.outputs
    if kind == "not_a_tuple":
        good = [make_out(c, "good", shape, dtype) for _ in range(count + 1)]
        value = pick(
            c,
            (
                lambda: good[0].value,  # one array
                lambda: [part.value for part in good[:count]],  # a list
                lambda: tuple(part.value for part in good[: count - 1]),  # too few
                lambda: tuple(part.value for part in good),  # too many
                lambda: (None, *(part.value for part in good[1:count])),  # a part left out
            ),
        )()
        return OutCase(kind, value, parts=tuple(good))
    if kind == "shared":
        view, owner = _owned(shape, dtype)
        views = [view] * count  # the same array twice
        if view.nbytes > 8 and c.integer(0, 1):
            # Two arrays that overlap in all but their first 8 bytes (_owned
            # leaves 8 spare bytes after the array).
            start = GUARD + 8
            views[1] = owner[start : start + view.nbytes].view(dtype).reshape(shape)
        parts = tuple(OutCase(kind, v, owner, owner.copy()) for v in views)
        return OutCase(kind, tuple(views), parts=parts)
    index = c.integer(0, count - 1)
    if kind == "overlap":
        special = overlap_out(c, spec, args, dtype)
        shape = special.value.shape  # of the positions now in it
        # They may have replaced a count: a valid start is then 0.
        spec.constrain(args, "valid", None)
    else:
        special = make_out(c, kind, shape, dtype)
    parts = tuple(
        special if i == index else make_out(c, "good", shape, dtype) for i in range(count)
    )
    return OutCase(kind, tuple(part.value for part in parts), parts=parts)
