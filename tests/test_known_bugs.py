"""Reproducers of the bugs listed in known_bugs.py, as strict xfails.

They are bug trackers, not coverage: each fails today. When a fix lands its test
XPASSes, which fails the run (strict); delete the entry from KNOWN_BUGS and the
property tests and the fuzzer cover those calls again.
"""

from __future__ import annotations

import pytest

from known_bugs import KNOWN_BUGS


@pytest.mark.parametrize(
    "bug",
    [pytest.param(bug, id=bug.id, marks=pytest.mark.xfail(strict=True, reason=bug.summary))
     for bug in KNOWN_BUGS],
)
def test_known_bug_is_still_present(bug):
    bug.reproduce()
