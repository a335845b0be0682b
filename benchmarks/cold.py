"""Cold single-vector calls: the first call for a width or base, each in a fresh process.

A warm benchmark hides whatever a call builds on first use (frequency tables,
lazily imported modules); a user who encodes one vector pays it. So every sample
is its own ``python -c`` process that imports numpy and cpe (untimed), then times
exactly one call. Two modes:

- "first call": the very first encoding the process computes, at width D;
- "new base": the process has already encoded at width D with the default base,
  then computes its first encoding with another base (a cache keyed on the base
  must not hide its cost).
"""

from __future__ import annotations

import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from cases import CPE, NUMPY, POSITION_RANGE
from timing import Spread

MODES = ("first call", "new base")
IMPLEMENTATIONS = {CPE: "cpe", NUMPY: "numpy"}

# Runs in the fresh process. argv: benchmarks dir, implementation, mode, D, position.
_FIRST_CALL_SCRIPT = """
import sys
import time

sys.path.insert(0, sys.argv[1])
import numpy
import cpe
from usual_numpy import numpy_single

encode = cpe.positional_encoding if sys.argv[2] == "cpe" else numpy_single
mode, D, position = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
base = 10000.0
if mode == "new base":
    encode(position + 1, D, base=base)
    base = 20000.0
start = time.perf_counter_ns()
encode(position, D, base=base)
print(time.perf_counter_ns() - start)
"""


@dataclass
class ColdResult:
    """First-call times, in ns, of each implementation for one mode and width."""

    mode: str
    D: int
    samples_ns: dict[str, list[float]]

    def time_ns(self, label: str) -> Spread:
        return Spread.of(self.samples_ns[label])

    def numpy_over_cpe(self) -> float:
        """Ratio of the medians (the processes are independent: there are no rounds)."""
        return self.time_ns(NUMPY).median / self.time_ns(CPE).median


def time_first_call(implementation: str, mode: str, D: int, position: int) -> float:
    """Nanoseconds taken by the one timed call in a fresh process."""
    bench_dir = str(Path(__file__).resolve().parent)
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            _FIRST_CALL_SCRIPT,
            bench_dir,
            implementation,
            mode,
            str(D),
            str(position),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"cold-start process failed:\n{completed.stderr}")
    return float(completed.stdout.strip().splitlines()[-1])


def measure_cold(
    widths: list[int], processes: int, rng: random.Random
) -> list[ColdResult]:
    """``processes`` fresh processes per implementation, mode and width, in shuffled order."""
    jobs = [
        (label, mode, D)
        for label in IMPLEMENTATIONS
        for mode in MODES
        for D in widths
        for _ in range(processes)
    ]
    rng.shuffle(jobs)  # interleaved, so that drift of the machine hits both alike
    results = {
        (mode, D): ColdResult(mode, D, {label: [] for label in IMPLEMENTATIONS})
        for mode in MODES
        for D in widths
    }
    for label, mode, D in jobs:
        position = rng.randrange(POSITION_RANGE)
        ns = time_first_call(IMPLEMENTATIONS[label], mode, D, position)
        results[mode, D].samples_ns[label].append(ns)
    return list(results.values())
