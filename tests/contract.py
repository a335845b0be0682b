"""The contract every public call must keep, checked for one call at a time.

A call either returns the right result, or raises TypeError, ValueError,
OverflowError or MemoryError with a message that names the argument at fault; a
rejected ``out=`` is left byte for byte as it was, and a result never writes
outside its ``out=``. Inputs are never modified. Anything else (another exception,
a warning escaping, a wrong value, a crash) breaks the contract.

Results are compared with the oracle ``tests/reference.py`` (plain NumPy, float64):
within ``8e-15 * max(1, |angle| * angle_factor)``, i.e. ``1e-15 * max(1, |p|) * 8``
for ``base >= 1``; float32/float16 results must equal the float64 result cast.
"""

from __future__ import annotations

import array
import copy
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from call_specs import ANGLE_LIMIT, NO_OUT, OUT_WORDS, CallSpec, OutCase, output_dtype

ALLOWED_ERRORS = (TypeError, ValueError, OverflowError, MemoryError)


def snapshot(value: Any) -> Any:
    """A copy that later mutation of ``value`` cannot reach."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, memoryview):
        return np.array(value)
    if isinstance(value, (list, dict, set, bytearray, array.array)):
        try:
            return copy.deepcopy(value)
        except TypeError:  # holds what cannot be copied (a memoryview): by identity
            return value
    return value  # immutable, or opaque (object(), Index): compared by identity


def _same(value: Any, before: Any) -> bool:
    if isinstance(value, np.ndarray):
        if value.dtype != before.dtype:
            return False
        if value.dtype == np.longdouble and value.dtype.itemsize > 10:
            # x87 long doubles carry 80 bits in 12 or 16 bytes: the padding bytes
            # are never initialized (valgrind says so), so compare the values.
            return bool(np.array_equal(value, before, equal_nan=True))
        return value.tobytes() == before.tobytes()
    if isinstance(value, memoryview):
        return bool(np.array_equal(np.array(value), before))
    return value is before or bool(value == before)


def names_one_of(message: str, words: tuple[str, ...]) -> bool:
    return any(re.search(rf"(?<![A-Za-z_]){re.escape(w)}(?![A-Za-z_])", message) for w in words)


def blamed_words(spec: CallSpec, blame: str | None) -> tuple[str, ...]:
    if blame == "out":
        return OUT_WORDS
    if blame is not None:
        return spec.parameter(blame).words
    return sum((spec.parameter(name).words for name in spec.parameters), OUT_WORDS)


def check_error(spec: CallSpec, exc: BaseException, blame: str | None) -> None:
    message = str(exc)
    if isinstance(exc, MemoryError):
        # NumPy's and cpe's own both say what they could not allocate.
        assert "allocate" in message, f"MemoryError without a reason: {message!r}"
        return
    words = blamed_words(spec, blame)
    assert names_one_of(message, words), f"{type(exc).__name__}({message!r}) names none of {words}"


def tolerance(spec: CallSpec, oracle_args: Mapping[str, Any]) -> float:
    return 8e-15 * max(1.0, spec.angle_bound(oracle_args))


# The oracle's frequencies differ from cpe's in the last bits: at the limit itself
# either answer is right.
_LIMIT_SLACK = 1e-12


def is_range_refusal(outcome: Any) -> bool:
    """Whether a call was refused for angles beyond ANGLE_LIMIT."""
    return isinstance(outcome, ValueError) and "position * frequency must be at most 2**53" in str(
        outcome
    )


def _largest_angle(spec: CallSpec, args: Mapping[str, Any]) -> float | None:
    """The largest |position * frequency| the oracle sees, or None when the
    (hostile) arguments have no oracle value."""
    try:
        with np.errstate(all="ignore"):
            return float(spec.largest_angle(spec.oracle_arguments(args)))
    except Exception:
        return None


def check_result(spec: CallSpec, args: Mapping[str, Any], out: OutCase | None, result: Any) -> None:
    """``args`` are the arguments as they were before the call (snapshots)."""
    oracle_args = spec.oracle_arguments(args)
    largest = spec.largest_angle(oracle_args)
    assert not largest > ANGLE_LIMIT * (1 + _LIMIT_SLACK), (
        f"accepted an angle of {largest:.6g}, beyond 2**53"
    )
    dtype = output_dtype(args, out)
    shape = tuple(spec.shape(oracle_args))
    arrays = spec.arrays(result)
    if out is not None:
        given = out.arrays()
        assert len(arrays) == len(given), (len(arrays), len(given))
        assert all(a is b for a, b in zip(arrays, given, strict=True)), "out= must be returned"
        assert out.guards_intact(), "the call wrote outside its out= array"
    if out is None:
        for array in arrays:
            assert type(array) is np.ndarray, type(array)
    for array in arrays:
        view = np.asarray(array)  # out= may be a buffer (a memoryview, say)
        assert view.shape == shape, (view.shape, shape)
        assert view.dtype == dtype, (view.dtype, dtype)
    if np.asarray(arrays[0]).size == 0:
        return
    float64 = None
    for i, (array, expected) in enumerate(zip(arrays, spec.expected(oracle_args), strict=True)):
        values = np.asarray(array)
        if dtype == np.float64:
            as_f64 = values
        else:
            if float64 is None:
                float64 = spec.arrays(spec.call({**args, "dtype": np.float64}))
            as_f64 = np.asarray(float64[i])
            rounded = as_f64.astype(dtype)
            assert rounded.tobytes() == np.ascontiguousarray(values).tobytes(), (
                f"{dtype} result is not the float64 result rounded once"
            )
        assert np.all(np.isfinite(as_f64)), "non-finite values from finite arguments"
        finite = np.isfinite(expected)  # the oracle overflows first near the limits
        error = np.abs(as_f64 - expected)[finite]
        bound = tolerance(spec, oracle_args)
        worst = float(error.max()) if error.size else 0.0
        assert worst <= bound, f"error {worst:.3e} exceeds {bound:.3e} vs tests/reference.py"


def check_call(
    spec: CallSpec, args: dict[str, Any], out: OutCase | None, blame: str | None = None
) -> Any:
    """Make the call and check the contract; return the result or the exception.

    ``blame`` is the one argument drawn hostile (the others being valid): an error
    must then name it. With ``blame=None`` it must name some argument of the call.
    """
    before = {name: snapshot(value) for name, value in args.items()}
    passed = NO_OUT if out is None else out.value
    try:
        result = spec.call(args, passed)
    except ALLOWED_ERRORS as exc:
        largest = _largest_angle(spec, before) if is_range_refusal(exc) else None
        if largest is not None:
            # Right when the angles are beyond the limit, whichever argument was
            # drawn hostile: positions, scale and base make them together.
            assert largest > ANGLE_LIMIT * (1 - _LIMIT_SLACK), (
                f"refused angles of at most {largest:.6g}, within 2**53"
            )
        else:
            check_error(spec, exc, blame)
        if out is not None:
            assert out.unchanged(), f"rejected out= ({out.kind}) was modified"
        for name, value in args.items():
            assert _same(value, before[name]), f"{name} was modified by a rejected call"
        return exc
    check_result(spec, before, out, result)
    if out is None or out.kind != "overlap":
        for name, value in args.items():
            assert _same(value, before[name]), f"{name} was modified by the call"
    return result
