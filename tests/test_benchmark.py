"""The benchmark's timing of a group (its results are a report, never a test)."""

from __future__ import annotations

import random
import time

from cpe.benchmark.timing import MIN_ROUNDS, MIN_SAMPLE_NS, Competitor, Group, Ratio, time_group


def test_every_sample_of_a_group_is_as_many_calls():
    # What one call leaves behind lands on the first call of the next sample:
    # it is shared by as many calls in every competitor's samples. The fastest
    # competitor sets the count.
    group = Group(
        kind="table",
        name="two loops",
        section="",
        column="",
        params={},
        names={"loop": lambda n: sum(range(n))},
        args=[10, 20],
        competitors=[
            Competitor("short", "cpe", "loop(arg)"),
            Competitor("long", "rival", "loop(1000 * arg)"),
        ],
        ratios=[Ratio("long", "short")],
    )
    result = time_group(group, rounds=3, budget_seconds=5.0, rng=random.Random(0))
    calls = result.inner_reps["short"]
    assert result.inner_reps["long"] == calls
    assert calls * result.time_ns("short").median >= 0.5 * MIN_SAMPLE_NS
    assert result.rounds == 3


def test_a_slow_competitor_bounds_the_count_by_the_budget():
    # A 2 ms competitor beside a fast one: samples of many calls each would take
    # seconds; the count is capped so that MIN_ROUNDS rounds fit in the budget.
    group = Group(
        kind="table",
        name="fast and slow",
        section="",
        column="",
        params={},
        names={"loop": lambda n: sum(range(n)), "sleep": time.sleep},
        args=[10, 20],
        competitors=[
            Competitor("fast", "cpe", "loop(arg)"),
            Competitor("slow", "rival", "sleep(0.002)"),
        ],
        ratios=[Ratio("slow", "fast")],
    )
    budget = 0.06
    start = time.perf_counter()
    result = time_group(group, rounds=3, budget_seconds=budget, rng=random.Random(0))
    calls = result.inner_reps["slow"]
    assert result.inner_reps["fast"] == calls
    assert 1 <= calls <= budget / (MIN_ROUNDS * 2 * 0.002)
    assert result.rounds == 3
    assert time.perf_counter() - start < 2.0
