"""Shared fixtures: a recorder that reports the measured worst errors at the end."""

from __future__ import annotations

from collections.abc import Callable

import pytest

_WORST: dict[str, tuple[float, float]] = {}


@pytest.fixture
def report_error() -> Callable[[str, float, float], None]:
    """Record the worst error of a named check and assert it is within its bound."""

    def record(name: str, error: float, bound: float) -> None:
        previous = _WORST.get(name, (0.0, bound))[0]
        _WORST[name] = (max(previous, error), bound)
        assert error <= bound, f"{name}: error {error:.3e} exceeds bound {bound:.1e}"

    return record


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _WORST:
        terminalreporter.section("measured worst absolute errors (vs mpmath)")
        for name, (worst, bound) in sorted(_WORST.items()):
            terminalreporter.write_line(f"{name:<48} {worst:.3e}  (bound {bound:.1e})")
