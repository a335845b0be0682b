"""Time a group of competitors side by side: warm up, calibrate, shuffled rounds.

A group is a set of statements doing comparable work (same sizes, same dtype).
Every round runs each of them once, in a new random order, so that the machine's
drift and noise fall on all of them alike; ratios are taken within a round.
"""

from __future__ import annotations

import gc
import itertools
import math
import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

# Each sample lasts at least this long, so that the clock's resolution and the
# cost of reading it stay far below the noise.
MIN_SAMPLE_NS = 200_000
MAX_INNER_REPS = 1_000_000
# Fewer rounds give no usable median or quartiles, whatever the time budget says.
MIN_ROUNDS = 3

ROLES = ("cpe", "rival", "floor")

# A compiled timing loop: (arguments, clock) -> nanoseconds for all the calls.
Loop = Callable[[Sequence[Any], Callable[[], int]], int]


@dataclass(frozen=True)
class Competitor:
    """One statement to time: a single call, whose varying argument is ``arg``."""

    label: str
    role: str  # "cpe", "rival" (code users write) or "floor" (allocation/writing only)
    stmt: str
    # Largest absolute difference allowed from the group's reference result;
    # None: not compared (floors, or a different but same-sized computation).
    atol: float | None = None


@dataclass(frozen=True)
class Ratio:
    """time(numerator) / time(denominator), taken within each round."""

    numerator: str
    denominator: str

    @property
    def label(self) -> str:
        return f"{self.numerator} / {self.denominator}"


@dataclass
class Group:
    """Competitors timed together, and how to report them."""

    kind: str  # "single", "table" or "positions"
    name: str  # short and unique, e.g. "table f32 8192x1024"
    section: str  # the report's table this group is a column of
    column: str
    params: dict[str, Any]
    names: dict[str, Any]  # what the statements refer to
    args: list[Any]  # cycled through: each call gets the next one
    competitors: list[Competitor]
    ratios: list[Ratio]
    reference: str = "cpe"  # the label whose result the others must match


@dataclass(frozen=True)
class Spread:
    """Median and quartiles of a list of values."""

    median: float
    q1: float
    q3: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if len(values) < 2:
            return cls(values[0], values[0], values[0])
        q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
        return cls(median, q1, q3)


@dataclass
class GroupResult:
    """Per-call times of every competitor of a group, one sample per round."""

    group: Group
    inner_reps: dict[str, int]
    samples_ns: dict[str, list[float]]
    seconds: float
    rounds: int = field(init=False)

    def __post_init__(self) -> None:
        self.rounds = min(len(s) for s in self.samples_ns.values())

    def has(self, label: str) -> bool:
        return label in self.samples_ns

    def time_ns(self, label: str) -> Spread:
        return Spread.of(self.samples_ns[label])

    def ratio(self, ratio: Ratio) -> Spread:
        # Every round times every competitor: the lists pair up round by round.
        numerators, denominators = (
            self.samples_ns[ratio.numerator],
            self.samples_ns[ratio.denominator],
        )
        pairs = zip(numerators, denominators, strict=True)
        return Spread.of([a / b for a, b in pairs])


class ArgCycle:
    """Hands out the group's arguments in order, continuing where the last take stopped."""

    def __init__(self, args: Sequence[Any]) -> None:
        self._cycle: Iterator[Any] = itertools.cycle(args)

    def take(self, count: int) -> list[Any]:
        return list(itertools.islice(self._cycle, count))


def compile_loop(stmt: str, names: dict[str, Any]) -> Loop:
    """A loop calling ``stmt`` once per argument, timed inside.

    As in timeit, the statement is compiled into the loop and every name it uses
    is bound as a local (a default argument), so no wrapper call and no global
    lookup is timed with it: small calls are measured, not the harness.
    """
    bound = "".join(f", {name}={name}" for name in names)
    source = (
        f"def loop(args, clock{bound}):\n"
        "    start = clock()\n"
        "    for arg in args:\n"
        f"        {stmt}\n"
        "    return clock() - start\n"
    )
    namespace = dict(names)
    # Only this benchmark's own statements are ever compiled here.
    exec(compile(source, f"<bench: {stmt}>", "exec"), namespace)
    loop: Loop = namespace["loop"]
    return loop


def calibrate(loop: Loop, args: ArgCycle) -> tuple[int, float]:
    """The number of calls per sample that makes a sample last MIN_SAMPLE_NS, and
    the time of one call then (ns). A first call, untimed, builds caches, maps
    pages and takes what the call before it left behind (see time_group), which
    would shorten the count."""
    loop(args.take(1), time.perf_counter_ns)
    reps = 1
    while True:
        elapsed = loop(args.take(reps), time.perf_counter_ns)
        if elapsed >= MIN_SAMPLE_NS or reps >= MAX_INNER_REPS:
            return reps, elapsed / reps
        # Aim 30% above the minimum so that a faster sample still reaches it.
        wanted = math.ceil(reps * 1.3 * MIN_SAMPLE_NS / max(elapsed, 1))
        reps = min(MAX_INNER_REPS, max(2 * reps, wanted))


def time_group(group: Group, rounds: int, budget_seconds: float, rng: random.Random) -> GroupResult:
    """Warm up and calibrate every competitor, then run shuffled rounds.

    Stops after ``rounds`` rounds, or earlier once ``budget_seconds`` are spent
    and MIN_ROUNDS are done.
    """
    loops = {c.label: compile_loop(c.stmt, group.names) for c in group.competitors}
    args = {label: ArgCycle(group.args) for label in loops}
    samples: dict[str, list[float]] = {label: [] for label in loops}
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as timeit does: a collection would land on whichever call is running
    try:
        # One count of calls for every sample of the group, enough for its
        # fastest competitor: what a call leaves behind (memory it returned to
        # the system, caches it filled) lands on the first call of the next
        # sample, and is shared by as many calls in each competitor's samples.
        # At most what lets the slowest run MIN_ROUNDS rounds within the budget.
        calibrated = [calibrate(loop, args[label]) for label, loop in loops.items()]
        slowest_ns = max(ns for _, ns in calibrated)
        cap = budget_seconds * 1e9 / (MIN_ROUNDS * len(loops) * max(slowest_ns, 1.0))
        calls = max(1, min(max(count for count, _ in calibrated), int(cap)))
        reps = dict.fromkeys(loops, calls)
        start = time.perf_counter()
        for done in range(1, rounds + 1):
            for label in rng.sample(list(loops), k=len(loops)):
                batch = args[label].take(reps[label])
                elapsed = loops[label](batch, time.perf_counter_ns)
                samples[label].append(elapsed / reps[label])
            if done >= MIN_ROUNDS and time.perf_counter() - start > budget_seconds:
                break
        seconds = time.perf_counter() - start
    finally:
        if gc_was_enabled:
            gc.enable()
    return GroupResult(group, reps, samples, seconds)
