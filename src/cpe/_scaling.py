"""RoPE's frequency schemes: a model's ``rope_parameters`` as exact frequencies.

Each scheme of transformers' ``ROPE_INIT_FUNCTIONS`` is the paper's frequencies
``w_j = theta ** (-2j / dim)`` divided or blended by a few numbers of the config.
Here ``w_j`` is a double-double (cpe's own frequencies) and every division,
product and sum that involves it is carried out in the engine's double-double
arithmetic (``_core.blend_frequencies``), so the frequencies keep about 106
bits; the numbers of the config (factors, ramps, the smooth blend) are formed in
float64 as the formulas state them.
"""

from __future__ import annotations

import marshal
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from cpe._args import (
    as_choice,
    as_count,
    as_positive,
    as_real,
    as_sequence,
)
from cpe._core import (
    Cache,
    blend_frequencies,
    paper_frequencies,
)

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional")
# The keys of transformers' RopeParameters, the older rope_scaling's "type" and the
# multimodal keys: any of them may stand in any config (transformers' own
# standardization adds some that a scheme does not read).
_KEYS = frozenset({
    "rope_type", "type", "rope_theta", "partial_rotary_factor", "factor",
    "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
    "short_factor", "long_factor", "low_freq_factor", "high_freq_factor", "mscale",
    "mscale_all_dim", "truncate", "mrope_section", "mrope_interleaved",
})  # fmt: skip
# Older configs' names of a scheme: Qwen2-VL's "mrope" is the default frequencies.
_ALIASES = {"mrope": "default"}

# Double-doubles: a (2, n) float64 array of hi and lo rows.
DD = npt.NDArray[np.float64]

# The schemes read, by the bytes of their inputs (see _key), their frequencies,
# by b"w" and the same bytes, and the axes that cpe._rope resolves from them (see
# _kept_axes there: b"th" or b"ti", a table's layout, or b"r", a rotation's;
# axial RoPE's by its widths and base): the same inputs give the same scheme,
# frequencies and axes, so a table does not pay again for reading a config, for
# the frequencies' double-double arithmetic or for resolving its axes. An entry
# costs its key's bytes and its arrays' (cpe._core.Cache).
_SCHEMES = Cache(4 * 1024 * 1024)


Blend = Callable[["DD"], "DD"]
Make = Callable[[], "DD"]


@dataclass(frozen=True)
class Scheme:
    """A scheme, its parameters read and checked: tables of ``width`` columns
    with the paper's frequencies of ``base`` (``make`` None: as the 1-D
    encodings have them, ``base`` then as given, not yet checked), or with the
    frequencies ``make()`` returns; values times ``attention_factor``. The
    frequencies are made only when a table needs them, after its sizes have
    been checked."""

    make: Make | None
    base: Any
    attention_factor: float
    width: int
    # The argument base comes from, for its errors: base, or the config's rope_theta.
    base_name: str = "base"
    # Multimodal RoPE: the sections (temporal, height, width) of the frequencies,
    # in runs or interleaved (see axis_sections); None for one axis.
    sections: tuple[int, int, int] | None = None
    interleaved: bool = False
    # The bytes of what the scheme is made from, under which it is kept in
    # _SCHEMES, as are, after a tag, its frequencies and its resolved axes (see
    # _SCHEMES); None: made on every call.
    key: bytes | None = None
    # What scales the paper's frequencies (whose largest is 1) in make(), for the
    # errors of requests whose angles these frequencies take beyond 2**53.
    made_by: str = "rope_parameters"

    def frequencies(self) -> npt.NDArray[np.float64] | None:
        """(2, width // 2) double-doubles, hi and lo rows (read-only); None for the
        paper's."""
        if self.make is None:
            return None
        kept = _SCHEMES.get(b"w" + self.key) if self.key is not None else None
        if kept is not None:
            return kept  # type: ignore[no-any-return]
        with np.errstate(all="ignore"):  # a frequency beyond the range is refused below
            frequencies = np.array(self.make())
        if not np.all(np.isfinite(frequencies)):
            raise ValueError(f"{self.made_by} gives frequencies beyond the range of a double")
        frequencies.flags.writeable = False
        if self.key is not None:
            _SCHEMES.keep(b"w" + self.key, frequencies, frequencies.nbytes)
        return frequencies

    def check_reach(self, positions: Callable[[], float]) -> None:
        """Refuse, naming what made them so, frequencies whose angles at the
        request's largest |position| (``positions()``) would be beyond 2**53,
        when make()'s frequencies are beyond the paper's (a factor below 1, a
        base below 1 under a scaling scheme, inv_freq): else the engine would
        blame the positions. A request within reach (small real positions, say)
        is left to the engine, as are the paper's own frequencies."""
        largest = self._largest_frequency
        if not largest > 1.0:  # (the usual case, at once: checked by the engine alone)
            return
        largest_position = positions()
        if not largest * largest_position > 2.0**53:
            return
        raise ValueError(
            f"{self._scaled_by(largest_position)} gives frequencies up to {largest:.3g}: "
            "position * frequency must be at most 2**53 in magnitude (the range in which "
            f"cpe's accuracy bound holds), so |position| at most {2.0**53 / largest:.3g}, "
            f"got {largest_position:.6g}"
        )

    @cached_property
    def axis_sections(self) -> tuple[Section, ...]:
        """Multimodal RoPE: the frequencies of each axis (temporal, height, width)
        that has any: three consecutive runs (Qwen2-VL), or interleaved (Qwen3-VL):
        height on every third frequency from 1, width on every third from 2, time
        on the rest. Worked out once per scheme."""
        assert self.sections is not None
        half = self.width // 2
        if not self.interleaved:
            ends = np.cumsum(self.sections)
            which = [np.arange(end - count, end)
                     for count, end in zip(self.sections, ends, strict=True)]  # fmt: skip
        else:
            taken = [np.arange(axis, min(3 * self.sections[axis], half), 3) for axis in (1, 2)]
            which = [np.setdiff1d(np.arange(half), np.concatenate(taken)), *taken]
        found = []
        for axis, columns in enumerate(which):
            if columns.size:
                first = int(columns[0])
                offsets = None if columns[-1] - first == columns.size - 1 else columns - first
                if offsets is not None:
                    offsets.flags.writeable = False
                found.append(Section(axis, first, int(columns.size), offsets))
        return tuple(found)

    @cached_property
    def _largest_frequency(self) -> float:
        """The largest |w_j| of make()'s frequencies (0 for the paper's, made by
        the engine, which checks their reach itself)."""
        w = self.frequencies()
        return 0.0 if w is None or not w.size else float(np.max(np.abs(w[0])))

    def _scaled_by(self, reach: float) -> str:
        """What takes the angles at |position| ``reach`` beyond 2**53: the base,
        when the paper's frequencies of it do so already at the same pairs
        (given frequencies use no base); else what make() scales them by."""
        if self.made_by == "inv_freq":
            return self.made_by
        w = self.frequencies()
        assert w is not None
        with np.errstate(all="ignore"):  # (an angle that overflows is beyond too)
            beyond = np.abs(w[0]) * reach > 2.0**53
            try:
                base = float(self.base)
                paper = base ** (-2.0 * np.arange(w.shape[1]) / self.width) if base > 0 else None
            except (TypeError, ValueError, OverflowError):
                paper = None
            if paper is None or np.any(paper[beyond] * reach > 2.0**53):
                return f"{self.base_name}={self.base!r}"
        return self.made_by

    def double_doubles(self) -> npt.NDArray[np.float64]:
        """(2, width // 2) double-doubles, the paper's included."""
        w = self.frequencies()
        if w is None:
            base = as_positive(self.base, self.base_name)
            return paper_frequencies(self.width, base, "head_dim", self.base_name)
        return w

    def inv_freq(self) -> npt.NDArray[np.float64]:
        """The frequencies rounded to float64 (a new array)."""
        return np.array(self.double_doubles()[0], dtype=np.float64)


# ---- reading rope_parameters ----

_REQUIRED = object()


class _Parameters:
    """``rope_parameters`` of one ``rope_type``, read with errors that name the key."""

    def __init__(self, parameters: Mapping[str, Any], rope_type: str) -> None:
        self.parameters = parameters
        self.rope_type = rope_type

    def name(self, key: str) -> str:
        return f"rope_parameters[{key!r}]"

    def has(self, key: str) -> bool:
        return self.parameters.get(key) is not None

    def real(
        self,
        key: str,
        default: Any = _REQUIRED,
        *,
        positive: bool = False,
        at_least_zero: bool = False,
    ) -> float:
        value = self.parameters.get(key)
        if value is None:
            if default is _REQUIRED:
                raise ValueError(
                    f"rope_parameters of rope_type {self.rope_type!r} needs the key {key!r}"
                )
            return float(default)
        x = (as_positive if positive else as_real)(value, self.name(key))
        if at_least_zero and not x >= 0:
            raise ValueError(f"{self.name(key)} must be >= 0, got {x!r}")
        return x

    def factors(self, key: str, count: int) -> npt.NDArray[np.float64]:
        value = self.parameters.get(key)
        if value is None:
            raise ValueError(
                f"rope_parameters of rope_type {self.rope_type!r} needs the key {key!r}"
            )
        items = as_sequence(value, self.name(key), "numbers")
        factors = np.array([as_real(v, f"{self.name(key)}[{i}]") for i, v in enumerate(items)])
        if len(factors) != count:
            raise ValueError(
                f"{self.name(key)} must have rotary_dim // 2 = {count} entries, got {len(factors)}"
            )
        if not np.all(factors > 0):
            raise ValueError(f"{self.name(key)} must hold numbers > 0")
        return factors


def _rope_type(parameters: Mapping[str, Any]) -> str:
    rope_type = parameters.get("rope_type", parameters.get("type", "default"))
    if not isinstance(rope_type, str):
        raise TypeError(
            f"rope_parameters['rope_type'] must be a str, got {type(rope_type).__name__}"
        )
    return as_choice(_ALIASES.get(rope_type, rope_type), "rope_parameters['rope_type']", ROPE_TYPES)


def scheme(
    head_dim: int,
    base: Any,
    rope_parameters: dict[Any, Any] | None,
    max_position_embeddings: Any,
    seq_len: Any,
    default_seq_len: Callable[[], float | None] = lambda: None,
) -> Scheme:
    """The frequencies and attention factor of ``rope_parameters`` (checked here),
    for ``head_dim`` (even, >= 2, checked by the caller) and ``base``, and the
    sections of multimodal RoPE. Without ``seq_len``, the schemes that read it
    call ``default_seq_len``: the length of the request (None: none). The same
    inputs give the same scheme: it is kept for the next call (unless it reads
    the request's length). ``rope_parameters`` is the caller's read once by
    layer_parameters (a private copy, or None), from which the scheme is both
    keyed and made."""
    parameters = {} if rope_parameters is None else rope_parameters
    key = _key((head_dim, base, parameters, max_position_embeddings, seq_len))
    kept = _SCHEMES.get(key) if key is not None else None
    if kept is not None:
        return kept  # type: ignore[no-any-return]
    asked: list[float | None] = []  # the request's length, if the scheme reads it

    def request_length() -> float | None:
        asked.append(default_seq_len())
        return asked[-1]

    used = _frequencies(
        head_dim, base, parameters, max_position_embeddings, seq_len, request_length
    )
    if parameters.get("mrope_section") is not None:
        read = _Parameters(parameters, _rope_type(parameters))
        used = replace(used, **_sections(read, used.width // 2))
    elif parameters.get("mrope_interleaved"):
        raise ValueError(
            "rope_parameters['mrope_interleaved'] needs rope_parameters['mrope_section']"
        )
    # A scheme that reads the request's length (dynamic, longrope) is made again
    # for every request: keeping one per length would evict the others.
    if key is not None and not asked:
        used = replace(used, key=key)
        _SCHEMES.keep(key, used, 0)
    return used


def _private_copy(rope_parameters: Any) -> dict[Any, Any]:
    """``rope_parameters`` read once (None: empty): each key (a ``str``
    subclass as the plain ``str`` it holds) with its value, a list or tuple as a
    tuple of its items and an array as a read-only copy. Nothing reads the
    caller's mapping again, so what is keyed is what is made, whatever the
    mapping's methods say or another thread does to it meanwhile."""
    if rope_parameters is None:
        return {}
    if type(rope_parameters) is not dict and not isinstance(rope_parameters, Mapping):
        raise TypeError(
            "rope_parameters must be a mapping such as a config's rope_parameters "
            f"(or rope_scaling), got {type(rope_parameters).__name__}"
        )
    copy: dict[Any, Any] = {}
    for key, value in list(rope_parameters.items()):
        # (a config's usual values, numbers and strings, at once)
        if type(value) not in _PLAIN_SCALARS:
            if isinstance(value, (list, tuple)):
                value = tuple(value)
            elif isinstance(value, np.ndarray):
                value = np.array(value)
                value.flags.writeable = False
        copy[str.__str__(key) if isinstance(key, str) else key] = value
    return copy


def layer_parameters(rope_parameters: Any, layer_type: Any) -> dict[Any, Any] | None:
    """``rope_parameters`` read once (see _private_copy), and, in transformers'
    per-layer form (a mapping of layer types to mappings, as Gemma 3 configs
    carry it), the parameters of ``layer_type`` (read once too); ``layer_type``
    must be None otherwise."""
    if layer_type is not None and not isinstance(layer_type, str):
        raise TypeError(
            "layer_type must be a str (a layer type of a config's rope_parameters, such as "
            f"'full_attention'), got {type(layer_type).__name__}"
        )
    parameters = None if rope_parameters is None else _private_copy(rope_parameters)
    by_layer = (
        parameters is not None
        and bool(parameters)
        and all(type(value) is dict or isinstance(value, Mapping) for value in parameters.values())
    )
    if parameters is None or not by_layer:
        if layer_type is not None:
            raise ValueError(
                f"layer_type={layer_type!r} chooses among rope_parameters keyed by layer type, "
                "but rope_parameters are "
                + ("not given" if parameters is None else "one layer's (not keyed by layer type)")
            )
        return parameters
    types = ", ".join(repr(key) for key in parameters)
    if layer_type is None:
        raise ValueError(
            f"rope_parameters hold the parameters of each layer type ({types}): pass "
            "layer_type= to choose one"
        )
    if layer_type not in parameters:
        raise ValueError(
            f"layer_type={layer_type!r} is not a layer type of rope_parameters ({types})"
        )
    return _private_copy(parameters[layer_type])


def _key(inputs: Any) -> bytes | None:
    """The bytes of a hashable image of ``inputs`` made of immutable values only,
    each with its type and exact bits (so that inputs read apart, such as 1 and
    True, or 0.0 and -0.0, stay apart); None when an input cannot be keyed (an
    object hashed by identity, such as a tensor, may change in place): such
    inputs are read, and checked, on every call. (marshal's version 2 writes
    each value's type and bits, and no references to earlier objects, so equal
    bytes are equal images; an equal mapping in another order is another key,
    made again.)"""
    try:
        # Values of exact built-in types are their own image, tagged "plain";
        # others, such as NumPy scalars and arrays, which marshal would write as
        # bare bytes, are put in words by _frozen.
        return marshal.dumps(("plain", inputs) if _plain(inputs) else _frozen(inputs), 2)
    except (TypeError, RecursionError):
        return None


_PLAIN_SCALARS = frozenset({int, float, str, bool, type(None)})


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only scalars of _PLAIN_SCALARS, in tuples and in
    dicts keyed by str (what _private_copy makes of a usual config)."""
    kind = type(value)
    if kind in _PLAIN_SCALARS:
        return True
    if kind is tuple:
        return all(map(_plain, value))
    if kind is dict:
        values = value.values()
        # (a flat config's values, all scalars, at once)
        return all(type(key) is str for key in value) and (
            _PLAIN_SCALARS.issuperset(map(type, values)) or all(map(_plain, values))
        )
    return False


def _frozen(value: Any) -> Any:
    """The image of ``value`` for _key (the usual scalars as they are), or a
    TypeError."""
    kind = type(value)
    if kind is int or kind is str or kind is bool or kind is float or value is None:
        return value
    if kind is list or kind is tuple:
        return ("sequence", tuple(map(_frozen, value)))
    if kind is dict and all(type(key) is str for key in value):
        return ("mapping", tuple(sorted((key, _frozen(v)) for key, v in value.items())))
    if kind is np.ndarray and value.ndim == 1 and value.dtype.kind in "biuf":
        return ("array", value.dtype.str, value.tobytes())  # (the values' own bytes)
    if isinstance(value, np.generic):
        return (f"{kind.__module__}.{kind.__qualname__}", value.tobytes())
    raise TypeError(f"not kept: a {kind.__name__}")


def _sections(read: _Parameters, half: int) -> dict[str, Any]:
    """transformers' ``mrope_section`` (and ``mrope_interleaved``), checked against
    the ``half`` frequencies of the tables."""
    value = read.parameters["mrope_section"]
    name = read.name("mrope_section")
    items = as_sequence(value, name, "three integers (temporal, height, width)", 3)
    sections = tuple(as_count(v, f"{name}[{i}]", 0) for i, v in enumerate(items))
    if sum(sections) != half:
        raise ValueError(
            f"{name} must sum to the tables' {half} frequencies (rotary_dim / 2; head_dim / 2 "
            f"for 'proportional'), got {list(sections)} (sum {sum(sections)})"
        )
    interleaved = read.parameters.get("mrope_interleaved")
    if interleaved is not None and not isinstance(interleaved, (bool, np.bool_)):
        raise TypeError(
            f"{read.name('mrope_interleaved')} must be a bool, got {type(interleaved).__name__}"
        )
    interleaved = bool(interleaved)
    if interleaved and any(
        len(range(axis, min(3 * sections[axis], half), 3)) != sections[axis] for axis in (1, 2)
    ):
        raise ValueError(
            f"{name} = {list(sections)} cannot be interleaved over {half} frequencies "
            "(height takes every third from 1, width every third from 2)"
        )
    return {"sections": sections, "interleaved": interleaved}


class Section(NamedTuple):
    """The frequencies of an axis of multimodal RoPE: ``size`` of them from
    ``first``, at ``first + offsets`` (None: consecutive)."""

    axis: int
    first: int
    size: int
    offsets: npt.NDArray[np.intp] | None

    def of(self, frequencies: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """The section's columns of (2, half) double-doubles."""
        if self.offsets is None:
            return frequencies[:, self.first : self.first + self.size]
        return frequencies[:, self.first + self.offsets]


def _frequencies(
    head_dim: int,
    base: Any,
    rope_parameters: dict[Any, Any],
    max_position_embeddings: Any,
    seq_len: Any,
    default_seq_len: Callable[[], float | None],
) -> Scheme:
    unknown = sorted(map(str, set(rope_parameters) - _KEYS))
    if unknown:
        raise ValueError(
            f"rope_parameters has unknown keys {', '.join(map(repr, unknown))}; the known "
            f"ones are {', '.join(map(repr, sorted(_KEYS)))}"
        )
    rope_type = _rope_type(rope_parameters)
    read = _Parameters(rope_parameters, rope_type)
    mpe = None
    if max_position_embeddings is not None:
        mpe = as_count(max_position_embeddings, "max_position_embeddings", 1)
    length: float | None = None
    if seq_len is not None:
        length = float(as_count(seq_len, "seq_len", 0))
    elif rope_type in ("dynamic", "longrope"):  # the only schemes that read it
        length = default_seq_len()
    # rope_theta overrides base, as a config's does. base itself is checked by
    # the scheme that needs it (the unscaled tables check it after their start).
    theta, base_name = base, "base"
    if read.has("rope_theta"):
        base_name = read.name("rope_theta")
        theta = as_positive(rope_parameters["rope_theta"], base_name)
    elif rope_type != "default":
        theta = as_positive(base, "base")
    fraction = read.real("partial_rotary_factor", 1.0)
    # proportional may rotate nothing (all frequencies zero), as transformers lets it.
    if not (0.0 < fraction <= 1.0 or (rope_type == "proportional" and fraction == 0.0)):
        raise ValueError(
            f"rope_parameters['partial_rotary_factor'] must be in (0, 1], got {fraction!r}"
        )
    if rope_type == "proportional":
        blend = _proportional(read, head_dim, fraction)
        return Scheme(
            lambda: blend(_paper(head_dim, theta, base_name)), theta, 1.0, head_dim, base_name,
            made_by=read.name("factor") if read.has("factor") else "rope_parameters",
        )  # fmt: skip
    dim = head_dim if fraction == 1.0 else int(head_dim * fraction)  # exact for any width
    if dim < 2 or dim % 2:
        raise ValueError(
            f"rope_parameters['partial_rotary_factor'] = {fraction!r} gives rotary_dim = "
            f"int(head_dim * partial_rotary_factor) = {dim}, which must be even and >= 2"
        )
    if rope_type == "default":
        return Scheme(None, theta, 1.0, dim, base_name)
    attention_factor = 1.0
    if rope_type == "linear":
        factor = read.real("factor", positive=True)

        def blend(w: DD) -> DD:
            return blend_frequencies(w, factor, 1.0, 0.0)
    elif rope_type == "dynamic":
        return Scheme(
            _dynamic(read, dim, theta, mpe, length, base_name), theta, 1.0, dim, base_name
        )
    elif rope_type == "yarn":
        blend, attention_factor = _yarn(read, dim, theta, mpe)
    elif rope_type == "longrope":
        blend, attention_factor = _longrope(read, dim, mpe, length)
    else:
        blend = _llama3(read, mpe)
    made_by = "rope_parameters' long_factor or short_factor" if rope_type == "longrope" else (
        read.name("factor") if read.has("factor") else
        "max_position_embeddings / rope_parameters['original_max_position_embeddings']"
    )  # fmt: skip
    return Scheme(
        lambda: blend(_paper(dim, theta, base_name)), theta, attention_factor, dim, base_name,
        made_by=made_by,
    )  # fmt: skip


def _paper(dim: int, theta: float, base_name: str = "base") -> DD:
    return paper_frequencies(dim, theta, "head_dim", base_name)


def _original(read: _Parameters, mpe: int | None) -> float:
    """``original_max_position_embeddings``: the config's, or (as transformers'
    standardization fills it in) ``max_position_embeddings``."""
    if read.has("original_max_position_embeddings") or mpe is None:
        return read.real("original_max_position_embeddings", positive=True)
    return float(mpe)


def _factor_or_ratio(read: _Parameters, mpe: int | None, original: float) -> float:
    """``factor``, or when absent ``max_position_embeddings / original_max_position_embeddings``."""
    if read.has("factor"):
        return read.real("factor", positive=True)
    if mpe is None:
        raise ValueError(
            f"rope_parameters of rope_type {read.rope_type!r} needs the key 'factor', or "
            "max_position_embeddings to derive it from original_max_position_embeddings"
        )
    return mpe / original


def _dynamic(
    read: _Parameters,
    dim: int,
    theta: float,
    mpe: int | None,
    length: float | None,
    base_name: str = "base",
) -> Make:
    factor = read.real("factor", positive=True)
    if mpe is None:
        raise ValueError("rope_parameters of rope_type 'dynamic' needs max_position_embeddings")
    if dim == 2:
        raise ValueError(
            "rope_parameters of rope_type 'dynamic' need rotary_dim >= 4 "
            "(its exponent is dim / (dim - 2))"
        )
    length = mpe if length is None else max(length, mpe)
    # The ratio is >= 1 (length >= mpe), but float64 may round it to 0 or below for
    # a huge factor (and a negative one raised to dim / (dim - 2) is complex, or
    # positive and wrong): refused by name, as is a base beyond a double's range.
    ratio = (factor * length / mpe) - (factor - 1)
    if not ratio > 0:
        raise ValueError(
            f"{read.name('factor')}={factor!r} is too large for rope_type 'dynamic': its "
            f"base's ratio factor * seq_len / max_position_embeddings - (factor - 1) is "
            f"{ratio!r} in float64 at seq_len {length!r}, where it must be > 0"
        )
    try:
        new_base = theta * ratio ** (dim / (dim - 2))
    except OverflowError:
        new_base = math.inf
    if not math.isfinite(new_base):
        raise ValueError(
            f"{read.name('factor')}={factor!r} and {base_name}={theta!r} give rope_type "
            f"'dynamic' the base {new_base!r} at seq_len {length!r}, beyond a double's range"
        )
    return lambda: _paper(dim, new_base, "rope_parameters' dynamic base")


def _yarn(read: _Parameters, dim: int, theta: float, mpe: int | None) -> tuple[Blend, float]:
    original = _original(read, mpe)
    factor = _factor_or_ratio(read, mpe, original)

    def get_mscale(scale: float, mscale: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    if read.has("attention_factor"):
        attention_factor = read.real("attention_factor", at_least_zero=True)
    else:
        mscale = read.real("mscale", 0.0)
        mscale_all_dim = read.real("mscale_all_dim", 0.0)
        if mscale and mscale_all_dim:
            denominator = get_mscale(factor, mscale_all_dim)
            attention_factor = get_mscale(factor, mscale) / denominator if denominator else 0.0
        else:
            attention_factor = get_mscale(factor)
        if not (math.isfinite(attention_factor) and attention_factor > 0):
            raise ValueError(
                f"rope_parameters['mscale'] = {mscale!r} and ['mscale_all_dim'] = "
                f"{mscale_all_dim!r} give the attention factor {attention_factor!r}, not > 0"
            )
    # As transformers reads them: a missing (or zero) beta is the paper's.
    beta_fast = read.real("beta_fast", 0.0) or 32.0
    beta_slow = read.real("beta_slow", 0.0) or 1.0
    if not (beta_fast > 0 and beta_slow > 0):
        raise ValueError(
            "rope_parameters['beta_fast'] and ['beta_slow'] must be > 0, got "
            f"{beta_fast!r} and {beta_slow!r}"
        )
    if theta == 1.0:  # every frequency is 1: the ramp's bounds are undefined
        raise ValueError(
            "rope_parameters of rope_type 'yarn' need a base (rope_theta) other than 1, got 1.0"
        )

    def correction_dim(rotations: float) -> float:
        logs = math.log(original) - math.log(rotations) - math.log(2 * math.pi)
        return (dim * logs) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(
            "rope_parameters of rope_type 'yarn': beta_fast, beta_slow, "
            "original_max_position_embeddings and the base give no finite ramp"
        )
    truncate = _truncate(read)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp

    def blend(w: DD) -> DD:
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
        # ramp 1: interpolated (w / factor), 0: kept
        return blend_frequencies(w, factor, ramp, 1.0 - ramp)

    return blend, attention_factor


def _truncate(read: _Parameters) -> bool:
    value = read.parameters.get("truncate", True)
    if value is None:  # transformers tests its truth
        return False
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"rope_parameters['truncate'] must be a bool, got {type(value).__name__}")
    return bool(value)


def _longrope(
    read: _Parameters, dim: int, mpe: int | None, length: float | None
) -> tuple[Blend, float]:
    original = _original(read, mpe)
    key = "long_factor" if length is not None and length > original else "short_factor"
    factors = read.factors(key, dim // 2)
    # The other list is checked too: a config's error does not wait for a longer input.
    read.factors("long_factor" if key == "short_factor" else "short_factor", dim // 2)
    if read.has("attention_factor"):
        attention_factor = read.real("attention_factor", at_least_zero=True)
    else:
        factor = _factor_or_ratio(read, mpe, original)
        if factor <= 1.0:
            attention_factor = 1.0
        elif original <= 1.0:
            raise ValueError(
                "rope_parameters of rope_type 'longrope' need "
                "original_max_position_embeddings > 1 for its attention factor "
                "(or rope_parameters['attention_factor'])"
            )
        else:
            attention_factor = math.sqrt(1 + math.log(factor) / math.log(original))
    return (lambda w: blend_frequencies(w, factors, 1.0, 0.0)), attention_factor


def _llama3(read: _Parameters, mpe: int | None) -> Blend:
    factor = read.real("factor", positive=True)
    low_freq_factor = read.real("low_freq_factor", positive=True)
    high_freq_factor = read.real("high_freq_factor")
    if not high_freq_factor > low_freq_factor:
        raise ValueError(
            "rope_parameters['high_freq_factor'] must be greater than "
            f"rope_parameters['low_freq_factor'], got {high_freq_factor!r} <= {low_freq_factor!r}"
        )
    original = _original(read, mpe)

    def blend(w: DD) -> DD:
        with np.errstate(divide="ignore"):
            wavelen = 2 * math.pi / w[0]
        smooth = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        # Long waves are divided by factor, short ones kept, those between blended.
        smooth = np.where(
            wavelen > original / low_freq_factor,
            0.0,
            np.where(wavelen < original / high_freq_factor, 1.0, smooth),
        )
        return blend_frequencies(w, factor, 1.0 - smooth, smooth)

    return blend


def _proportional(read: _Parameters, head_dim: int, fraction: float) -> Blend:
    """Frequencies ``theta ** (-2j / head_dim)`` for the rotated part, zero after it:
    the tables keep the full ``head_dim``."""
    rotated = int(fraction * head_dim // 2)
    factor = read.real("factor", 1.0, positive=True)

    def blend(w: DD) -> DD:
        kept = np.arange(w.shape[1]) < rotated  # (the others: zero)
        return blend_frequencies(w, factor, kept, 0.0)

    return blend
