"""Check that the competitors of a group compute the same encoding before timing them.

A benchmark of the wrong computation (a shape mix-up, the np.roll variant, a
missing ``start``) would report meaningless ratios, so it stops the run instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cpe.benchmark.timing import Group


class DisagreementError(AssertionError):
    """A competitor's result differs from the reference beyond its tolerance."""


def _evaluate(stmt: str, group: Group, arg: Any) -> np.ndarray:
    result = eval(stmt, dict(group.names), {"arg": arg})
    if hasattr(result, "numpy"):  # a torch tensor
        result = result.numpy()
    return np.asarray(result, dtype=np.float64)


def check_agreement(group: Group) -> None:
    """Raise DisagreementError unless every checked competitor matches the reference."""
    arg = group.args[0]
    stmts = {c.label: c.stmt for c in group.competitors}
    checked = [c for c in group.competitors if c.atol is not None and c.label != group.reference]
    if not checked:
        return
    expected = _evaluate(stmts[group.reference], group, arg)
    for competitor in checked:
        assert competitor.atol is not None
        got = _evaluate(competitor.stmt, group, arg)
        if got.shape != expected.shape:
            raise DisagreementError(
                f"{group.section} {group.column}: {competitor.label} has shape "
                f"{got.shape}, {group.reference} has {expected.shape}"
            )
        error = float(np.max(np.abs(got - expected), initial=0.0))
        if not error <= competitor.atol:
            raise DisagreementError(
                f"{group.section} {group.column}: {competitor.label} differs from "
                f"{group.reference} by {error:.3g} (allowed {competitor.atol:g})"
            )
