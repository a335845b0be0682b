"""Property tests: every public function, driven with arbitrary arguments, keeps the contract.

The contract (tests/contract.py): return the right result (oracle tests/reference.py),
or raise TypeError/ValueError/OverflowError/MemoryError naming the argument at
fault, leaving a rejected out= byte for byte unchanged and the inputs untouched.
The calls come from the tables in tests/call_specs.py.

Profiles: "ci" (derandomized, no example database) when CI is set, "dev" (random,
with a database) otherwise; CPE_HYPOTHESIS_PROFILE overrides: "valgrind" runs a
few examples only, "deep" 5000 per test (a bug hunt, about five minutes).
"""

from __future__ import annotations

import inspect
import os
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cpe
from call_specs import SPEC_IDS, SPECS, CallSpec, draw_call
from contract import ALLOWED_ERRORS, check_call, is_range_refusal

_COMMON = {
    "deadline": None,
    "max_examples": 200,
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}
settings.register_profile("dev", **_COMMON)
settings.register_profile("ci", derandomize=True, database=None, **_COMMON)
settings.register_profile(
    "valgrind", **{**_COMMON, "max_examples": 8}, derandomize=True, database=None
)
settings.register_profile("deep", **{**_COMMON, "max_examples": 5000})  # a bug hunt, by hand
settings.load_profile(
    os.environ.get("CPE_HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev")
)


class HypothesisChooser:
    """The call_specs.Chooser interface over Hypothesis draws (so failures shrink)."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(st.integers(lo, hi))

    def uniform(self, lo: float, hi: float) -> float:
        return self.data.draw(st.floats(lo, hi, allow_nan=False, allow_infinity=False))

    def real(self) -> float:
        return self.data.draw(st.floats())


def run(spec: CallSpec, data: st.DataObject, mode: str) -> object:
    args, out, blame = draw_call(HypothesisChooser(data), spec, mode)
    data.draw(st.just((sorted(args), None if out is None else out.kind)), label="call")
    return check_call(spec, args, out, blame)


def test_every_public_function_has_a_call_spec():
    # Every function that fills arrays; rope_frequencies returns a scheme's numbers
    # (test_rope_scaling checks it and its errors).
    # (set_workers and get_workers set and read the default of workers=.)
    # apply_rope and add_positional_encoding change the caller's arrays (no
    # dtype=): their contract is tests/apply_contract.py (test_apply and the
    # fuzzer draw their calls). Rope is the class whose methods rope_cos_sin and
    # apply_rope are; Sinusoidal, that whose method add_positional_encoding is
    # (its others call the two table functions).
    public = {name for name in cpe.__all__ if callable(getattr(cpe, name))}
    exempt = {"rope_frequencies", "set_workers", "get_workers", "Rope", "Sinusoidal"}
    exempt |= {"apply_rope", "add_positional_encoding"}
    assert public - exempt == set(SPEC_IDS), "add the new function to call_specs.SPECS"
    for spec in SPECS:
        names = list(inspect.signature(spec.function).parameters)
        arguments = [name for name in names if name not in ("dtype", "out")]
        assert arguments == [*spec.positional, *spec.keywords], (
            f"{spec.name}{inspect.signature(spec.function)}: update its CallSpec/PARAMETERS"
        )
        assert "dtype" in names, f"{spec.name} has no dtype="
        assert ("out" in names) == spec.has_out, f"{spec.name}: update CallSpec.has_out"


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
@given(data=st.data())
def test_valid_calls_match_the_reference(spec, data):
    result = run(spec, data, "valid")
    # Valid arguments may still ask for angles beyond 2**53 (check_call checks
    # that such a refusal is right).
    if not is_range_refusal(result):
        assert not isinstance(result, BaseException), f"a valid call was rejected: {result!r}"


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
@given(data=st.data())
def test_one_bad_argument_is_rejected_by_name_or_handled(spec, data):
    run(spec, data, "one_bad")


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
@given(data=st.data())
def test_arbitrary_calls_succeed_correctly_or_fail_cleanly(spec, data):
    run(spec, data, "arbitrary")


# Functions that take an array of positions, and the argument that holds them.
RACED = [(spec, spec.overlappable) for spec in SPECS if spec.overlappable]


@pytest.mark.parametrize(("spec", "name"), RACED, ids=[spec.name for spec, _ in RACED])
# Each example makes five calls of 20 000 positions or more: a quarter of the
# profile's examples, at most 25.
@settings(max_examples=min(25, max(1, settings().max_examples // 4)))
@given(data=st.data())
def test_positions_changed_during_the_call_give_a_clean_outcome(spec, name, data):
    # A racing writer: another thread rewrites the positions (with NaN, huge
    # values and negative ones among them) while the call runs. The result is
    # some mix of old and new positions, or a clean error; never a crash, a
    # non-finite value or an unexpected exception.
    args, _, _ = draw_call(HypothesisChooser(data), spec, "valid")
    # Enough positions that the kernel runs without the GIL, a narrow encoding.
    count = data.draw(st.integers(20_000, 100_000), label="positions")
    offset = data.draw(st.sampled_from([0.0, 1e5, -3e4]), label="offset")
    positions = offset + np.arange(count, dtype=np.float64) * data.draw(
        st.sampled_from([1.0, 0.5, 37.0])
    )
    args[spec.width] = data.draw(st.sampled_from([2, 8, 16, 64]), label="width")
    # int64 positions get integers beyond 2**53 written among them, which the
    # call must refuse or never see (checked in a private copy, never re-read).
    integers = data.draw(st.booleans(), label="int64")
    if integers:
        positions = positions.astype(np.int64)
    special = [2**60, -(2**62), 2**53 + 1, -5, 70000] if integers else [
        np.nan, np.inf, -1e300, 1e17, -5.0, 70000.0
    ]  # fmt: skip
    values = data.draw(st.lists(st.sampled_from(special), min_size=1))
    args[name] = positions
    spec.constrain(args, "valid", None)
    args[name] = positions
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            k = i % count
            positions[k] = values[i % len(values)]
            positions[k] = offset + k
            i += 7919

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(5):
            try:
                result = spec.call(args)
            except ALLOWED_ERRORS:
                continue
            for array in spec.arrays(result):
                assert np.isfinite(array).all()
                assert array.shape[: positions.ndim] == positions.shape
    finally:
        stop.set()
        writer.join()
