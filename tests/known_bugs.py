"""Bugs in cpe found by the reliability suites and not fixed yet.

Each entry has a minimal reproducer, run by test_known_bugs.py as a strict xfail:
it fails while the bug is there, and the run turns red the day it is fixed (XPASS),
so that the entry is deleted. ``hit`` lets the property tests and the fuzzer step
over calls that would only rediscover a known bug; delete an entry and they cover
those calls again.
"""

from __future__ import annotations

import math
import numbers
import tracemalloc
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import cpe
from call_specs import CallSpec, OutCase


@dataclass(frozen=True)
class KnownBug:
    id: str
    summary: str
    applies: Callable[[CallSpec, Mapping[str, Any], OutCase | None], bool]
    reproduce: Callable[[], None]  # fails (raises) while the bug is present


def _real(value: Any) -> float | None:
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except (OverflowError, ValueError):
        return None


def _count(value: Any) -> int | None:
    try:
        return int(value.__index__())
    except Exception:
        return None


# ---- subnormal base: NaN frequencies pass the overflow check ----

def _subnormal_base_applies(spec: CallSpec, args: Mapping[str, Any], out: OutCase | None) -> bool:
    base = _real(args.get("base", 10000.0))
    width = _count(args.get("D"))
    return base is not None and 0.0 < base < 6e-309 and width is not None and width >= 3


def cache_key_hits_known_bug(key: tuple[Any, ...]) -> bool:
    """A frequency-cache entry (n_freq, base, den, scale) made by this bug: NaN, and cached."""
    return 0.0 < key[1] < 6e-309 and key[0] >= 2


def _subnormal_base_reproduce() -> None:
    # sin(0) = 0 and cos(0) = 1 for every frequency; cpe returns [0, 1, nan, nan].
    np.testing.assert_array_equal(cpe.positional_encoding(0, 4, base=5e-309), [0.0, 1.0, 0.0, 1.0])


# ---- an empty output still costs O(D) memory and time ----

def _empty_huge_width_applies(spec: CallSpec, args: Mapping[str, Any], out: OutCase | None) -> bool:
    width = _count(args.get("D"))
    if width is None or width <= 2**20:
        return False
    try:
        shape = spec.shape(spec.oracle_arguments(args))
    except Exception:
        return False  # another argument is invalid: cpe rejects it before any frequency
    return math.prod(shape[:-1]) == 0


def _empty_huge_width_reproduce() -> None:
    tracemalloc.start()
    try:
        result = cpe.positional_encoding_table(0, 2**24)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.shape == (0, 2**24)
    assert peak < 1 << 20, f"an empty (0, 2**24) table allocated {peak / 2**20:.0f} MiB"
    # 2**40 columns of nothing: an empty array, or a ValueError naming D, not MemoryError.
    try:
        assert cpe.positional_encoding([], 2**40).shape == (0, 2**40)
    except ValueError as exc:
        assert "D" in str(exc)


# ---- dtype specs that NumPy rejects with something other than TypeError ----

def _dtype_error(value: Any) -> BaseException | None:
    try:
        np.dtype(value)
    except TypeError:
        return None
    except BaseException as exc:  # SyntaxError, ValueError, ...
        return exc
    return None


def _dtype_parse_applies(spec: CallSpec, args: Mapping[str, Any], out: OutCase | None) -> bool:
    return "dtype" in args and _dtype_error(args["dtype"]) is not None


def _dtype_parse_reproduce() -> None:
    for spec in ("f8,,", ("f8", -1)):  # np.dtype raises SyntaxError, ValueError
        with pytest.raises(TypeError, match="dtype"):
            cpe.positional_encoding(1, 2, dtype=spec)


# ---- an ndarray subclass whose reshape(-1) stays 2-D ----

def _matrix_out_applies(spec: CallSpec, args: Mapping[str, Any], out: OutCase | None) -> bool:
    return out is not None and isinstance(out.value, np.matrix)


def _matrix_out_reproduce() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        out = np.matrix(np.full((2, 4), 7.0))
    # Either fill it, or reject it naming out= (today: "Buffer has wrong number of dimensions").
    try:
        result = cpe.positional_encoding_table(2, 4, out=out)
    except (TypeError, ValueError) as exc:
        assert "out" in str(exc), str(exc)
    else:
        assert result is out
        np.testing.assert_array_equal(np.asarray(out), cpe.positional_encoding_table(2, 4))


# ---- long double positions beyond float64: a RuntimeWarning escapes ----

def _longdouble_applies(spec: CallSpec, args: Mapping[str, Any], out: OutCase | None) -> bool:
    position = args.get("position")
    if not isinstance(position, (np.ndarray, np.generic)) or np.asarray(position).dtype != np.longdouble:
        return False
    with np.errstate(all="ignore"):
        return not np.all(np.isfinite(np.asarray(position, dtype=np.float64)))


def _longdouble_reproduce() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a library's validation should not warn
        with pytest.raises(ValueError, match="position"):
            cpe.positional_encoding(np.array([np.longdouble("1e400")]), 4)


# ---- more dimensions than NumPy allows: the error does not name position ----

def _max_dims() -> int:
    for ndim in (64, 32):
        try:
            np.empty((1,) * ndim)
            return ndim
        except ValueError:
            continue
    raise RuntimeError("cannot find NumPy's dimension limit")


def _max_ndim_applies(spec: CallSpec, args: Mapping[str, Any], out: OutCase | None) -> bool:
    position = args.get("position")
    return isinstance(position, np.ndarray) and position.ndim >= _max_dims()


def _max_ndim_reproduce() -> None:
    position = np.zeros((1,) * _max_dims())
    with pytest.raises(ValueError, match="position"):
        cpe.positional_encoding(position, 2)


# ---- huge broadcast positions are copied before the request is rejected ----

def _broadcast_copy_applies(spec: CallSpec, args: Mapping[str, Any], out: OutCase | None) -> bool:
    return False  # the makers never build more than 64 positions


def _broadcast_copy_reproduce() -> None:
    positions = np.broadcast_to(np.int64(0), (2048, 2048))  # 8 bytes of memory, 4M positions
    out = np.full((4, 4), 7.0)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="out must have shape"):
            cpe.positional_encoding(positions, 4, out=out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(out, 7.0)
    assert peak < 4 << 20, f"a rejected call allocated {peak / 2**20:.0f} MiB first"


KNOWN_BUGS: tuple[KnownBug, ...] = (
    KnownBug("subnormal-base-nan",
             "base below exp(-709.78) ~ 5.6e-309: ln(base) is NaN in double-double, the "
             "frequencies w_j (j >= 1) are NaN, _check_angles misses it (Python max() ignores "
             "NaN) and the output holds NaN", _subnormal_base_applies, _subnormal_base_reproduce),
    KnownBug("empty-output-huge-D",
             "an empty output (n = 0 or no positions) still allocates and fills 8*D bytes of "
             "frequencies: 128 MiB for D = 2**24, MemoryError/ValueError('array is too big') "
             "for D >= 2**33", _empty_huge_width_applies, _empty_huge_width_reproduce),
    KnownBug("dtype-parse-errors",
             "_as_dtype catches only TypeError from np.dtype: dtype='f8,,' raises SyntaxError "
             "and dtype=('f8', -1) a ValueError that does not name dtype",
             _dtype_parse_applies, _dtype_parse_reproduce),
    KnownBug("matrix-out",
             "out= of an ndarray subclass whose reshape(-1) stays 2-D (numpy.matrix) passes "
             "the checks, then fails with Cython's 'Buffer has wrong number of dimensions'",
             _matrix_out_applies, _matrix_out_reproduce),
    KnownBug("longdouble-overflow-warning",
             "long double positions beyond the float64 range raise a RuntimeWarning "
             "('overflow encountered in cast') from the conversion before the ValueError",
             _longdouble_applies, _longdouble_reproduce),
    KnownBug("max-ndim-message",
             "a position array with NumPy's maximum number of dimensions fails in np.empty "
             "with a ValueError that does not name position", _max_ndim_applies, _max_ndim_reproduce),
    KnownBug("broadcast-positions-copied-first",
             "positions are scanned and copied to float64 before the output size or out= "
             "is checked: a zero-stride view of 4M positions costs a 32 MiB copy before "
             "'out must have shape'; 2**30 positions cost 8 GiB and 16 s before 'too large', "
             "and np.broadcast_to(np.int8(0), (2**31, 2**31)) never returns (arr.max())",
             _broadcast_copy_applies, _broadcast_copy_reproduce),
)


def hit(spec: CallSpec, args: Mapping[str, Any], out: OutCase | None) -> str | None:
    """The id of a known bug this call would run into, if any."""
    for bug in KNOWN_BUGS:
        if bug.applies(spec, args, out):
            return bug.id
    return None
