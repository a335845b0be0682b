"""Cold calls: the first call for a width or base, each in a fresh process.

A warm benchmark hides whatever a call builds on first use (frequency vectors,
digit tables, lazily imported modules); a user who encodes one vector, or one
table, pays it. So every sample is its own ``python -c`` process that imports
numpy and cpe (untimed), then times exactly one call. Two modes:

- "first call": the very first encoding the process computes;
- "new base": the process has already encoded the same size with the default
  base, then computes its first encoding with another base (a cache keyed on
  the base must not hide its cost).
"""

from __future__ import annotations

import random
import subprocess
import sys
from dataclasses import dataclass

from cpe.benchmark.cases import CPE, NUMPY, POSITION_RANGE
from cpe.benchmark.timing import Spread

MODES = ("first call", "new base")
KINDS = ("single", "table")
IMPLEMENTATIONS = {CPE: "cpe", NUMPY: "numpy"}

# Runs in the fresh process.
# argv: implementation, kind, mode, n, D, position.
_FIRST_CALL_SCRIPT = """
import sys
import time

import numpy
import cpe
from cpe.benchmark.usual_numpy import numpy_single, numpy_table

implementation, kind, mode = sys.argv[1:4]
n, D, position = (int(arg) for arg in sys.argv[4:7])
if kind == "table":
    encode = cpe.positional_encoding_table if implementation == "cpe" else numpy_table
    args, keywords = (n, D), {"start": position}
else:
    encode = cpe.positional_encoding if implementation == "cpe" else numpy_single
    args, keywords = (position, D), {}
base = 10000.0
if mode == "new base":
    encode(*args, **keywords, base=base)
    base = 20000.0
start = time.perf_counter_ns()
encode(*args, **keywords, base=base)
print(time.perf_counter_ns() - start)
"""


@dataclass(frozen=True)
class ColdCase:
    """What a fresh process encodes: one vector of width D, or an (n, D) table."""

    kind: str  # "single" or "table"
    mode: str
    D: int
    n: int = 1

    @property
    def size(self) -> str:
        return f"D={self.D}" if self.kind == "single" else f"{self.n}x{self.D}"


@dataclass
class ColdResult:
    """First-call times, in ns, of each implementation for one case."""

    case: ColdCase
    samples_ns: dict[str, list[float]]

    def time_ns(self, label: str) -> Spread:
        return Spread.of(self.samples_ns[label])

    def numpy_over_cpe(self) -> float:
        """Ratio of the medians (the processes are independent: there are no rounds)."""
        return self.time_ns(NUMPY).median / self.time_ns(CPE).median


def time_first_call(implementation: str, case: ColdCase, position: int) -> float:
    """Nanoseconds taken by the one timed call in a fresh process."""
    arguments = [implementation, case.kind, case.mode, case.n, case.D, position]
    completed = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL_SCRIPT, *map(str, arguments)],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"cold-start process failed:\n{completed.stderr}")
    return float(completed.stdout.strip().splitlines()[-1])


def cold_cases(widths: list[int], tables: list[tuple[int, int]]) -> list[ColdCase]:
    """Both modes for every single-vector width and every table size."""
    cases = [ColdCase("single", mode, D) for D in widths for mode in MODES]
    return cases + [ColdCase("table", mode, D, n) for n, D in tables for mode in MODES]


def measure_cold(cases: list[ColdCase], processes: int, rng: random.Random) -> list[ColdResult]:
    """``processes`` fresh processes per implementation and case, in shuffled order."""
    results = {case: ColdResult(case, {label: [] for label in IMPLEMENTATIONS}) for case in cases}
    jobs = [(label, case) for label in IMPLEMENTATIONS for case in cases] * processes
    rng.shuffle(jobs)  # interleaved, so that drift of the machine hits all alike
    for label, case in jobs:
        position = rng.randrange(POSITION_RANGE)
        ns = time_first_call(IMPLEMENTATIONS[label], case, position)
        results[case].samples_ns[label].append(ns)
    return list(results.values())
