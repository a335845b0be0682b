"""Property tests: every public function, driven with arbitrary arguments, keeps the contract.

The contract (tests/contract.py): return the right result (oracle cpe._reference),
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

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cpe
from call_specs import SPEC_IDS, SPECS, CallSpec, draw_call
from contract import check_call, is_range_refusal

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
    public = {name for name in cpe.__all__ if callable(getattr(cpe, name))}
    assert public == set(SPEC_IDS), "add the new function to call_specs.SPECS"
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
