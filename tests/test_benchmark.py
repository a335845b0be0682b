"""The benchmark's timing of a group (its results are a report, never a test)."""

from __future__ import annotations

import random

from cpe.benchmark.timing import MIN_SAMPLE_NS, Competitor, Group, Ratio, time_group


def test_every_sample_of_a_group_is_as_many_calls():
    # What one call leaves behind lands on the first call of the next sample:
    # shared by as many calls in every competitor's samples, it cannot tilt a
    # ratio. The fastest competitor sets the count.
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
