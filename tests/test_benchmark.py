"""The benchmark's timing of a group (its results are a report, never a test)."""

from __future__ import annotations

import random
import time
from typing import Any

from cpe.benchmark.timing import MIN_ROUNDS, MIN_SAMPLE_NS, Competitor, Group, Ratio, time_group


def _group(names: dict[str, Any], fast: str, slow: str) -> Group:
    """A group of two competitors, "fast" and "slow", over the arguments 10 and 20."""
    return Group(
        kind="table",
        name="fast and slow",
        section="",
        column="",
        params={},
        names=names,
        args=[10, 20],
        competitors=[Competitor("fast", "cpe", fast), Competitor("slow", "rival", slow)],
        ratios=[Ratio("slow", "fast")],
    )


def test_every_sample_of_a_group_is_as_many_calls():
    # What one call leaves behind lands on the first call of the next sample:
    # it is shared by as many calls in every competitor's samples. The fastest
    # competitor sets the count.
    group = _group({"loop": lambda n: sum(range(n))}, "loop(arg)", "loop(1000 * arg)")
    result = time_group(group, rounds=3, budget_seconds=5.0, rng=random.Random(0))
    calls = result.inner_reps["fast"]
    assert result.inner_reps["slow"] == calls
    assert calls * result.time_ns("fast").median >= 0.5 * MIN_SAMPLE_NS
    assert result.rounds == 3


def test_a_slow_competitor_bounds_the_count_by_the_budget():
    # A 2 ms competitor beside a fast one: samples of many calls each would take
    # seconds; the count is capped so that MIN_ROUNDS rounds fit in the budget.
    group = _group(
        {"loop": lambda n: sum(range(n)), "sleep": time.sleep}, "loop(arg)", "sleep(0.002)"
    )
    budget = 0.06
    start = time.perf_counter()
    result = time_group(group, rounds=3, budget_seconds=budget, rng=random.Random(0))
    calls = result.inner_reps["slow"]
    assert result.inner_reps["fast"] == calls
    assert 1 <= calls <= budget / (MIN_ROUNDS * 2 * 0.002)
    assert result.rounds == 3
    assert time.perf_counter() - start < 2.0
