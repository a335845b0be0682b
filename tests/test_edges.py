"""Promises at the edges: what a hostile caller once got past the checks.

Each test is the reproducer of one finding of an attack on cpe (lying mappings,
keys that lie about themselves, caches grown without bound), asserting the
behaviour that replaced it.
"""

from __future__ import annotations

import numbers
import tracemalloc
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import cpe

if TYPE_CHECKING:
    from typing_extensions import Self

POSITIONS = np.arange(64)


class TwoFaced(Mapping[str, Any]):
    """A mapping whose ``items()`` says one thing and whose lookups another."""

    def __init__(self, listed: dict[str, Any], looked_up: dict[str, Any]) -> None:
        self.listed, self.looked_up = listed, looked_up

    def __getitem__(self, key: str) -> Any:
        return self.looked_up[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.looked_up)

    def __len__(self) -> int:
        return len(self.looked_up)

    def items(self) -> Any:
        return self.listed.items()


def test_a_mapping_that_lies_cannot_poison_the_tables_of_later_callers():
    # The scheme was keyed from items() and made from lookups: a config whose
    # items() said factor 2 and whose lookups said 8 made every later honest
    # call with factor 2 return the factor-8 tables. Now one read makes both.
    factor = 2.0 + 2.0**-20  # this test's own (the cache outlives the test)
    honest = {"rope_type": "linear", "factor": factor}
    liar = TwoFaced(honest, {"rope_type": "linear", "factor": 8.0})
    cpe.rope_cos_sin(POSITIONS, 64, rope_parameters=liar)
    cos, sin = cpe.rope_cos_sin(POSITIONS, 64, rope_parameters=honest)
    # linear scaling divides every frequency by the factor: the unscaled tables
    # of the positions divided by it, which a factor-8 table is not.
    expected_cos, expected_sin = cpe.rope_cos_sin(
        np.array([float(p) / factor for p in POSITIONS]), 64
    )
    np.testing.assert_allclose(cos, expected_cos, rtol=0, atol=1e-15)
    np.testing.assert_allclose(sin, expected_sin, rtol=0, atol=1e-15)


class Posing(str):
    """A key that says it is something else when asked with str()."""

    def __str__(self) -> str:
        return "beta_fast_posing"


def test_a_key_that_lies_about_its_name_cannot_let_an_unknown_key_in():
    # The key image was made of str(key): a str subclass holding "factor" whose
    # __str__ said "beta_fast_posing" was accepted as factor (its value) and
    # kept under the other name, so that a later config with that unknown key and
    # no factor was accepted from the cache. Keys are now read as what they hold.
    scale = 3.0 + 2.0**-21
    posing = {"rope_type": "linear", Posing("factor"): scale}
    expected = cpe.rope_cos_sin(
        POSITIONS, 64, rope_parameters={"rope_type": "linear", "factor": scale}
    )
    got = cpe.rope_cos_sin(POSITIONS, 64, rope_parameters=posing)
    assert [g.tobytes() for g in got] == [e.tobytes() for e in expected]
    with pytest.raises(ValueError, match="unknown keys 'beta_fast_posing'"):
        cpe.rope_cos_sin(
            POSITIONS, 64, rope_parameters={"rope_type": "linear", "beta_fast_posing": scale}
        )


class Shifting(list):
    """A list that yields other items the second time it is read."""

    reads = 0

    def __iter__(self) -> Iterator[Any]:
        Shifting.reads += 1
        return iter(list.__iter__(self) if Shifting.reads == 1 else [0.0] * len(self))


def test_a_value_is_read_once_for_its_key_and_its_scheme():
    # A longrope factor list read once for the key and again for the scheme could
    # key one set of factors and make another.
    half = 16
    short = [1.0 + j / 64 for j in range(half)]
    config = {
        "rope_type": "longrope",
        "short_factor": Shifting(short),
        "long_factor": [2.0] * half,
        "original_max_position_embeddings": 4096,
    }
    Shifting.reads = 0
    got = cpe.rope_frequencies(
        2 * half, rope_parameters=config, max_position_embeddings=4096, seq_len=16
    )
    plain = dict(config, short_factor=list(short))
    assert (
        got[0].tobytes()
        == cpe.rope_frequencies(
            2 * half, rope_parameters=plain, max_position_embeddings=4096, seq_len=16
        )[0].tobytes()
    )
    assert Shifting.reads == 1


def kept_bytes(calls: Any) -> int:
    """The bytes of memory still held after ``calls()`` returned."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        calls()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def linear_tables() -> None:
    for k in range(60):
        factor = 1.0 + (k + 1) / 256
        cpe.rope_frequencies(2**17, rope_parameters={"rope_type": "linear", "factor": factor})


def longrope_tables() -> None:
    for k in range(60):
        config = {
            "rope_type": "longrope",
            "short_factor": [1.0 + k / 64] * 4096,
            "long_factor": [2.0] * 4096,
            "original_max_position_embeddings": 4096,
        }
        cpe.rope_cos_sin(8, 8192, rope_parameters=config, max_position_embeddings=4096, seq_len=8)


@pytest.mark.parametrize("calls", [linear_tables, longrope_tables])
def test_the_scheme_cache_is_bounded_in_bytes(calls):
    # 60 scaled configs of 2**16 frequencies kept 60 MiB, and longrope configs
    # with 4096-entry factor lists 73 MiB for 64: the schemes' cache was bounded
    # by its count of entries, not their bytes.
    assert kept_bytes(calls) < 8 * 2**20  # the schemes' budget and the encodings'


class Fickle:
    """An integer that is another one each time it is read."""

    def __init__(self, *values: int) -> None:
        self.values = list(values)
        self.reads = 0

    def __index__(self) -> int:
        self.reads += 1
        return self.values[min(self.reads, len(self.values)) - 1]


class FickleInt(int):
    """An int (a count) whose __index__ is another one each time it is read."""

    def __new__(cls, *values: int) -> Self:
        self = super().__new__(cls, values[0])
        self.values = list(values)
        self.reads = 0
        return self

    def __index__(self) -> int:
        self.reads += 1
        return self.values[min(self.reads, len(self.values)) - 1]


def test_a_count_and_a_start_are_read_once():
    # n and start were read three times (to tell a count from positions, for the
    # dynamic scheme's request length, for the table): an n that said 16, then
    # 100000, gave a 100,000-row table scaled for a length of 16. (A count is a
    # Python int now: an int subclass whose __index__ lies.)
    dynamic = {"rope_type": "dynamic", "factor": 4.0}
    n, start = FickleInt(16, 100000), Fickle(3, 5000)
    got = cpe.rope_cos_sin(n, 8, start=start, rope_parameters=dynamic,
                           max_position_embeddings=8)  # fmt: skip
    expected = cpe.rope_cos_sin(16, 8, start=3, rope_parameters=dynamic,
                                max_position_embeddings=8)  # fmt: skip
    assert start.reads == 1  # (n, an int, is read as the int it is)
    assert [g.tobytes() for g in got] == [e.tobytes() for e in expected]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(
    "scaling",
    [{"attention_factor": 1e300}, {"mscale": 1e300, "mscale_all_dim": 1.0}],
    ids=["attention_factor", "mscale"],
)
def test_an_attention_factor_beyond_the_dtype_is_refused_by_name(dtype, scaling):
    # All-inf float32/bfloat16 tables came back without a word; float16 also
    # leaked NumPy's "overflow encountered in cast" RuntimeWarning.
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    config = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, **scaling}
    out = (np.full((4, 8), 7, dtype), np.full((4, 8), 7, dtype)) if dtype != "bfloat16" else None
    with pytest.raises(ValueError, match=r"^rope_parameters give the attention factor .* beyond"):
        cpe.rope_cos_sin(4, 8, dtype=dtype, rope_parameters=config, out=out)
    if out is not None:
        assert (out[0] == 7).all()
        assert (out[1] == 7).all()
    # The same factor in float64 is finite, and so are its values.
    cos, sin = cpe.rope_cos_sin(4, 8, rope_parameters=config)
    assert np.isfinite(cos).all()
    assert np.isfinite(sin).all()


class DuckTurncoat:
    """A sequence of one item, True when first read and 0 after, with only a
    __len__ and a __getitem__: all NumPy asks of a sequence."""

    def __init__(self) -> None:
        self.reads = 0

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: Any) -> Any:
        if index != 0:
            raise IndexError(index)
        self.reads += 1
        return True if self.reads == 1 else 0


class Turncoat(DuckTurncoat, Sequence[Any]):
    """DuckTurncoat as a collections.abc.Sequence."""


def test_a_nested_sequence_is_read_once():
    # NumPy read True (converted to 1 beside the other row's integers) and the
    # bool check then read 0: a bool was encoded as position 1 without a word.
    with pytest.raises(TypeError, match="got a bool in the sequence"):
        cpe.positional_encoding([Turncoat(), [3]], 8)


class Items:
    """A duck-typed sequence of the given items."""

    def __init__(self, *items: Any) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: Any) -> Any:
        return self.items[index]


@pytest.mark.parametrize(
    ("positions", "error", "match"),
    [
        ([DuckTurncoat(), [3]], TypeError, "got a bool in the sequence"),
        (Items(True, 2.5), TypeError, "got a bool in the sequence"),
        ([Items(True, 2.5)], TypeError, "got a bool in the sequence"),
        (Items(2**60, 1.5), ValueError, "integers of magnitude <= 2\\*\\*53"),
        ([(Items(2**60, 1.5), (1.0, 2.0))], ValueError, "integers of magnitude <= 2\\*\\*53"),
    ],
    ids=["read once", "bool", "nested bool", "beyond 2**53", "nested beyond 2**53"],
)
def test_a_duck_typed_sequence_is_read_once_and_checked(positions, error, match):
    # NumPy reads any object with __len__ and __getitem__ as a sequence: those that
    # are not collections.abc.Sequences were converted unchecked (True as 1,
    # 2**60 rounded), and read twice.
    with pytest.raises(error, match=match):
        cpe.positional_encoding(positions, 8)


def test_rope_reads_a_list_of_positions_once():
    # rope_cos_sin asked NumPy for the list's dimensions (to tell a count from
    # positions), which read its sequences, then read them again as positions.
    with pytest.raises(TypeError, match="got a bool in the sequence"):
        cpe.rope_cos_sin([DuckTurncoat(), [3]], 8)
    with pytest.raises(TypeError, match="got a bool in the sequence"):
        cpe.rope_cos_sin([Turncoat(), [3]], 8)


def test_a_duck_typed_sequence_is_read_by_its_len():
    # Read by index up to its len(): one whose __getitem__ never ends is not
    # read forever; one whose len() fails is refused by name.
    class Endless:
        def __len__(self) -> int:
            return 2

        def __getitem__(self, index: Any) -> float:
            return 1.5

    class Broken:
        def __len__(self) -> int:
            raise RuntimeError("no length")

        def __getitem__(self, index: Any) -> float:
            return 1.5

    want = cpe.positional_encoding([[1.5, 1.5]], 8)
    np.testing.assert_array_equal(cpe.positional_encoding([Endless()], 8), want)
    np.testing.assert_array_equal(cpe.positional_encoding(Items(1.5, 1.5), 8), want[0])
    with pytest.raises(TypeError, match=r"^position: a sequence of positions \(Broken\)"):
        cpe.positional_encoding(Broken(), 8)


class Knob:
    """A real number whose value can be turned."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __float__(self) -> float:
        return self.value


numbers.Real.register(Knob)


def test_an_object_array_is_never_keyed_by_its_addresses():
    # An array of objects was keyed by its bytes, the addresses of its items: a
    # factor list whose items changed value (or were freed, their memory reused
    # by others) gave the frequencies of the first values again.
    half = 4
    knob = Knob(1.25)
    short = np.array([knob] * half, dtype=object)
    config = {"rope_type": "longrope", "short_factor": short, "long_factor": [2.0] * half,
              "original_max_position_embeddings": 4096}  # fmt: skip
    lengths = {"seq_len": 16, "max_position_embeddings": 4096}
    first = cpe.rope_frequencies(2 * half, rope_parameters=config, **lengths)[0]
    knob.value = 7.5
    second = cpe.rope_frequencies(2 * half, rope_parameters=config, **lengths)[0]
    plain = dict(config, short_factor=[7.5] * half)
    expected = cpe.rope_frequencies(2 * half, rope_parameters=plain, **lengths)[0]
    assert second.tobytes() == expected.tobytes()
    assert first.tobytes() != second.tobytes()


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"rope_parameters": {"rope_theta": 5e-324}}, r"rope_parameters\['rope_theta'\]=5e-324"),
        (
            {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e-324}},
            r"rope_parameters\['rope_theta'\]=5e-324",
        ),
        ({"base": 5e-324}, r"base=5e-324"),
    ],
    ids=["rope_theta", "rope_theta, scaled", "base"],
)
def test_frequencies_beyond_a_double_name_what_the_caller_passed(kwargs, named):
    # They named base, scale and D, none of which a RoPE caller passes.
    for n in (4, np.arange(4)):
        with pytest.raises(ValueError, match=rf"^{named} and head_dim=64 give frequencies"):
            cpe.rope_cos_sin(n, 64, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        (
            {
                "rope_parameters": {"rope_type": "dynamic", "factor": 1e300},
                "max_position_embeddings": 64,
            },
            r"^rope_parameters\['factor'\]=1e\+300 is too large for rope_type 'dynamic'",
        ),
        (
            {"rope_parameters": {"rope_type": "linear", "factor": 1e-300}},
            r"^rope_parameters\['factor'\] gives frequencies up to 1e\+300: position \* frequency",
        ),
        (
            {
                "rope_parameters": {
                    "rope_type": "llama3",
                    "factor": 1e-300,
                    "low_freq_factor": 1,
                    "high_freq_factor": 4,
                    "original_max_position_embeddings": 64,
                }
            },
            r"^rope_parameters\['factor'\] gives frequencies up to ",
        ),
        ({"inv_freq": np.full(32, 1e300)}, r"^inv_freq gives frequencies up to 1e\+300: "),
    ],
    ids=["dynamic, huge factor", "linear, tiny factor", "llama3, tiny factor", "inv_freq"],
)
def test_a_scheme_that_cannot_encode_names_its_key(kwargs, named):
    # A dynamic factor of 1e300 named a "dynamic base" (of 0.0 or inf), a tiny
    # factor "start and n" or "positions": the config is to blame, whatever the
    # positions, the call form or the length of the request.
    x = np.ones((4, 64))
    calls = [
        lambda: cpe.rope_cos_sin(4, 64, **kwargs),
        lambda: cpe.rope_cos_sin(np.arange(200.0), 64, **kwargs),
        lambda: cpe.apply_rope(x, **kwargs),
        lambda: cpe.apply_rope(x, np.arange(4), **kwargs),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=named):
            call()
    np.testing.assert_array_equal(x, 1.0)


def test_long_double_frequencies_beyond_float64_are_refused_without_a_warning(recwarn):
    # NumPy's "overflow encountered in cast" escaped before the error.
    huge = np.array([np.longdouble(10) ** 400, 1.0], dtype=np.longdouble)
    with np.errstate(over="ignore"):
        beyond = not np.isfinite(huge.astype(np.float64)).all()
    if not beyond:  # pragma: no cover (long double is double)
        pytest.skip("long double is float64 here: nothing beyond its range")
    with pytest.raises(ValueError, match="inv_freq must be finite numbers within the range"):
        cpe.rope_cos_sin(4, 4, inv_freq=huge)
    assert not recwarn.list


def test_large_frequencies_are_refused_only_where_the_angles_are_beyond_reach():
    # Frequencies beyond the paper's are refused by what made them so, and only
    # where the request's angles go beyond 2**53: small real positions are
    # within reach. Given frequencies never blame the (unused) base; a tiny base
    # is blamed only where its own frequencies are beyond reach.
    inv_freq = [1e17, 1.0, 1.0, 1.0]
    cos, _ = cpe.rope_cos_sin(np.array([1e-10]), 8, inv_freq=inv_freq)
    assert np.isfinite(cos).all()
    with pytest.raises(ValueError, match=r"^inv_freq gives frequencies up to 1e\+17: "):
        cpe.rope_cos_sin(2, 8, inv_freq=inv_freq, base=1e-30)
    proportional = {"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 1e-20}
    with pytest.raises(ValueError, match=r"^rope_parameters\['factor'\] gives frequencies"):
        cpe.rope_cos_sin(4, 8, base=1e-30, rope_parameters=proportional)
    with pytest.raises(ValueError, match=r"^base=1e-300 gives frequencies up to "):
        cpe.rope_cos_sin(4, 64, base=1e-300, rope_parameters={"rope_type": "linear", "factor": 2.0})


def test_a_dynamic_factor_that_float64_cannot_hold_is_refused_by_name():
    # float64 rounded the ratio of the dynamic base to -8: raised to 4/3 it was
    # complex (a TypeError), raised to 2 a wrong base without a word.
    dynamic = {"rope_type": "dynamic", "factor": 5.26393912753251e16}
    for head_dim in (8, 4):
        with pytest.raises(ValueError, match=r"^rope_parameters\['factor'\]=5\.26.* too large"):
            cpe.rope_frequencies(head_dim, rope_parameters=dynamic, max_position_embeddings=3)
    with pytest.raises(ValueError, match=r"factor'\]=2\.0 and base=1e\+308 give"):
        cpe.rope_frequencies(
            8, base=1e308, rope_parameters={"rope_type": "dynamic", "factor": 2.0},
            max_position_embeddings=4, seq_len=8,
        )  # fmt: skip


def test_an_output_dtype_taken_from_out_is_named_as_such():
    with pytest.raises(TypeError, match=r"^out\[1\] \(sin\) must have dtype float32 \(dtype=, or"):
        cpe.rope_cos_sin(4, 8, out=(np.empty((4, 8), np.float32), np.empty((4, 8))))
    with pytest.raises(TypeError, match=r"^out\[0\] \(cos\) must have dtype float64, float32"):
        cpe.rope_cos_sin(4, 8, out=(np.empty((4, 8), np.int64), np.empty((4, 8))))
    with pytest.raises(TypeError, match=r"^out must be a numpy\.ndarray"):  # (a tuple: no dtype)
        cpe.positional_encoding_table(4, 8, out=(np.empty((4, 8), np.int64), np.empty((4, 8))))
