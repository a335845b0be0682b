"""Arbitrary calls of the functions that change the caller's arrays (apply_rope,
add_positional_encoding), and the contract each must keep, for the property tests
(test_apply) and the fuzzer (fuzz/fuzz_cpe.py).

A call is drawn through a call_specs.Chooser: "valid" (every argument valid: it
must succeed and equal the reference, the float64 result rounded once) or
"one_bad" (one argument hostile: the call succeeds and equals the reference, or
raises TypeError/ValueError naming that argument). Either way x, and an out= that
is not x, are unchanged by a refused call, and no warning escapes.

The reference is written here from the definition, in float64 with cpe's float64
tables (whose accuracy test_rope and test_values check against mpmath).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import cpe
from call_specs import Chooser, pick

DTYPES = (np.float64, np.float32, np.float16)
FUNCTIONS = ("apply_rope", "add_positional_encoding")
HOSTILE = {
    "x": (None, 3.0, "x", np.arange(8), np.zeros((2, 7)), np.zeros(()), [[1.0, 2.0]]),
    "positions": (np.array([np.nan]), np.array([1e300]), np.zeros((9, 9)), "0", [[0.5], [1]], True),
    "start": (0.5, 2**60, "0", None, np.float64(1.0), -(2**54)),
    "seq_axis": (-1, 9, "1", 1.5, -9),
    "layout": ("neox", None, 0, "HALF"),
    "inverse": ("yes", 1, None),
    "out": ("array", "dtype", "shape", "readonly", "overlap", "tuple"),
    "workers": (0, "2", 1.5, -(10**6)),
    "base": (-1.0, math.nan, math.inf, 0.0, "1e4"),
    "x_scale": (math.nan, math.inf, "2", None),
}


@dataclass
class ApplyCall:
    function: str
    x: Any
    kwargs: dict[str, Any]
    blame: str | None = None  # the hostile argument
    arrays: list[Any] = field(default_factory=list)  # must be unchanged if refused

    def run(self) -> Any:
        return getattr(cpe, self.function)(self.x, **self.kwargs)


def _x(c: Chooser) -> np.ndarray:
    ndim = c.integer(1, 4)
    shape = [c.integer(0 if c.integer(0, 9) == 0 else 1, 5) for _ in range(ndim - 1)]
    shape.append(2 * c.integer(1, 6))
    dtype = pick(c, DTYPES)
    values = np.array([c.uniform(-4.0, 4.0) for _ in range(min(8, math.prod(shape) or 1))])
    return np.resize(values, shape).astype(dtype)


def draw_apply(c: Chooser, mode: str) -> ApplyCall:
    """One call (see the module)."""
    function = pick(c, FUNCTIONS)
    x = _x(c)
    kwargs: dict[str, Any] = {}
    if c.integer(0, 1):
        kwargs["start"] = c.integer(-(10**6), 10**6)
    elif x.ndim > 1:  # positions along some of the leading axes (NumPy's rules)
        shape = tuple(e if c.integer(0, 1) else 1 for e in x.shape[:-1])
        kwargs["positions"] = np.resize(np.array([c.uniform(-1e6, 1e6) for _ in range(4)]), shape)
    if x.ndim > 1 and "positions" not in kwargs and c.integer(0, 2) == 0:
        kwargs["seq_axis"] = c.integer(0, x.ndim - 2)
    if function == "apply_rope":
        kwargs["layout"] = pick(c, ("half", "interleaved"))
        kwargs["inverse"] = bool(c.integer(0, 1))
    else:
        kwargs["x_scale"] = c.uniform(-3.0, 3.0)
    kwargs["base"] = pick(c, (10000.0, 500000.0, 3.5))
    if c.integer(0, 2) == 0:
        kwargs["workers"] = c.integer(1, 3)
    if c.integer(0, 1):
        kwargs["out"] = x if c.integer(0, 1) else np.full_like(x, 7.0)
    call = ApplyCall(function, x, kwargs)
    if mode == "one_bad":
        names = [n for n in HOSTILE if n != "x_scale" or function == "add_positional_encoding"]
        names = [n for n in names if n not in ("layout", "inverse") or function == "apply_rope"]
        call.blame = pick(c, names)
        value = pick(c, HOSTILE[call.blame])
        if call.blame == "x":
            call.x = value
        elif call.blame == "out":
            call.kwargs["out"] = _hostile_out(x, value)
        else:
            call.kwargs[call.blame] = value
        if call.blame == "positions":
            call.kwargs.pop("start", None)
            call.kwargs.pop("seq_axis", None)
    call.arrays = [a for a in (call.x, call.kwargs.get("out")) if isinstance(a, np.ndarray)]
    return call


def _hostile_out(x: np.ndarray, kind: str) -> Any:
    if kind == "array":
        return "not an array"
    if kind == "dtype":
        return np.zeros(x.shape, np.float64 if x.dtype != np.float64 else np.float32)
    if kind == "shape":
        return np.zeros((*x.shape[:-1], x.shape[-1] + 2), x.dtype)
    if kind == "readonly":
        out = np.zeros_like(x)
        out.flags.writeable = False
        return out
    if kind == "overlap":
        return x[..., ::-1] if x.size > 1 else np.zeros_like(x)
    return (np.zeros_like(x),)


def reference(call: ApplyCall, x: np.ndarray | None = None) -> np.ndarray:
    """The float64 result, rounded once to x's dtype (``x``: call.x as it was before
    the call, which may have changed it in place)."""
    x = call.x if x is None else x
    k = call.kwargs
    lead = x.shape[:-1]
    if "positions" in k:
        positions = np.broadcast_to(np.asarray(k["positions"], np.float64), lead)
    else:
        axis = k.get("seq_axis", -2 if x.ndim > 1 else None)
        if axis is None:
            positions = np.full(lead, float(k.get("start", 0)))
        else:
            axis %= x.ndim
            shape = [1] * len(lead)
            shape[axis] = lead[axis]
            sequence = np.arange(lead[axis], dtype=np.float64) + k.get("start", 0)
            positions = np.broadcast_to(sequence.reshape(shape), lead)
    wide = x.astype(np.float64)
    if call.function == "add_positional_encoding":
        table = cpe.positional_encoding(positions, x.shape[-1], base=k["base"])
        result = wide * k["x_scale"] + table
    else:
        cos, sin = cpe.rope_cos_sin(positions, x.shape[-1], base=k["base"], layout=k["layout"])
        if k["inverse"]:
            sin = -sin
        turned = np.empty_like(wide)
        half = x.shape[-1] // 2
        if k["layout"] == "half":
            turned[..., :half], turned[..., half:] = -wide[..., half:], wide[..., :half]
        else:
            turned[..., 0::2], turned[..., 1::2] = -wide[..., 1::2], wide[..., 0::2]
        result = wide * cos + turned * sin
    with np.errstate(over="ignore", invalid="ignore"):
        return result.astype(x.dtype)


def check(call: ApplyCall, mode: str) -> BaseException | None:
    """Run the call and check the contract; the refusal it raised, if any."""
    before = [a.copy() for a in call.arrays]
    x_before = call.x.copy() if isinstance(call.x, np.ndarray) else call.x
    want = None
    if mode == "valid" or call.blame is None:
        want = reference(call)
    error: BaseException | None = None
    try:
        got = call.run()
    except (TypeError, ValueError) as refusal:
        error = refusal
    if error is not None:
        assert mode != "valid" or _range_refusal(error), f"valid call refused: {error!r}"
        if call.blame is not None:
            assert _names(error, call.blame), f"{call.blame!r} not named: {error!r}"
        for array, saved in zip(call.arrays, before, strict=True):
            np.testing.assert_array_equal(array, saved, err_msg="a refused call wrote")
        return error
    if "out" in call.kwargs and isinstance(call.kwargs["out"], np.ndarray):
        assert got is call.kwargs["out"]
    if want is None:  # an accepted hostile argument; x may already hold the result
        want = reference(call, x_before)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    return None


def _range_refusal(error: BaseException) -> bool:
    # Positions whose angles are beyond 2**53 are refused by design.
    return "2**53" in str(error)


_WORDS: dict[str, tuple[str, ...]] = {
    "x": ("x",),
    "positions": ("positions",),
    "start": ("start",),
    "seq_axis": ("seq_axis",),
    "layout": ("layout",),
    "inverse": ("inverse",),
    "out": ("out",),
    "workers": ("workers",),
    "base": ("base",),
    "x_scale": ("x_scale",),
}


def _names(error: BaseException, blame: str) -> bool:
    return any(word in str(error) for word in _WORDS[blame])


Run = Callable[[ApplyCall], Any]
