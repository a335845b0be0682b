"""Coverage-guided fuzzing of every public function of cpe with atheris.

Each input is decoded by a FuzzedDataProvider into one call: a function from
tests/call_specs.py's SPECS, a mode (all arguments valid / one hostile / all
hostile) and the arguments themselves, built by the same makers as the property
tests; or a call of a function that changes the caller's arrays, with its own
contract (tests/apply_contract.py). tests/contract.py checks the others: a result
must match tests/reference.py, an error must be TypeError/ValueError/
OverflowError/MemoryError naming the argument, a rejected out= must be unchanged,
a valid call must succeed, and no warning may escape. Any other outcome, or a
crash, is a finding: atheris prints it and saves the input (replay it with
``python fuzz/fuzz_cpe.py CRASH_FILE``).


    pip install atheris
    python fuzz/fuzz_cpe.py -max_total_time=60 [CORPUS_DIR]

Only the Python layers (the harness, the makers, the contract) are instrumented for
coverage; the compiled extension is exercised but not instrumented (that needs a
clang build with -fsanitize=fuzzer-no-link).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import atheris
import numpy as np  # noqa: F401  (imported first so that only our own modules are instrumented)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

with atheris.instrument_imports():
    import apply_contract
    import call_specs
    import contract

import cpe


class FuzzChooser:
    """The call_specs.Chooser interface over a FuzzedDataProvider."""

    def __init__(self, fdp: atheris.FuzzedDataProvider) -> None:
        self.fdp = fdp

    def integer(self, lo: int, hi: int) -> int:
        return self.fdp.ConsumeIntInRange(lo, hi)

    def uniform(self, lo: float, hi: float) -> float:
        return self.fdp.ConsumeFloatInRange(lo, hi)

    def real(self) -> float:
        return self.fdp.ConsumeFloat()  # NaN, infinities and subnormals included


def test_one_input(data: bytes) -> None:
    c = FuzzChooser(atheris.FuzzedDataProvider(data))
    if c.integer(0, len(call_specs.SPECS)) == 0:  # the functions that change x
        mode = call_specs.pick(c, ("valid", "one_bad"))
        apply_contract.check(apply_contract.draw_apply(c, mode), mode)
        return
    spec = call_specs.pick(c, call_specs.SPECS)
    mode = call_specs.pick(c, call_specs.HOSTILE_MODES)
    args, out, blame = call_specs.draw_call(c, spec, mode)
    outcome = contract.check_call(spec, args, out, blame)
    if (
        mode == "valid"
        and isinstance(outcome, BaseException)
        and not contract.is_range_refusal(outcome)
    ):
        raise AssertionError(f"valid call {spec.name}({args!r}) rejected: {outcome!r}")


def main() -> None:
    warnings.simplefilter("error")  # a warning escaping cpe is a finding
    print(f"fuzzing cpe {cpe.__version__} from {Path(cpe.__file__).parent}", flush=True)
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
