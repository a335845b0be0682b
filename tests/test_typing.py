"""The typed signatures: the choices the type checkers know are the ones the
runtime reads, and the typed user script runs (mypy --strict checks it in the lint
stage)."""

from __future__ import annotations

import pathlib
import typing

import numpy as np
import pytest

import cpe
from cpe import _conventions, _typing
from typed_usage import every_call


def test_the_literal_choices_are_the_runtime_choices():
    assert typing.get_args(_typing.Layout) == tuple(_conventions.LAYOUTS)
    assert typing.get_args(_typing.Convention) == tuple(_conventions.CONVENTIONS)


def test_the_typed_user_script_runs():
    results = every_call()
    assert len(results) == 24
    assert all(result.size for result in results)


MISUSES = [
    line.partition("  # type: ignore")[0]
    for line in (pathlib.Path(__file__).parent / "typed_misuse.py").read_text().splitlines()
    if line.startswith("cpe.")
]


@pytest.mark.parametrize("call", MISUSES)
def test_what_the_stubs_refuse_the_runtime_refuses(call):
    with pytest.raises((TypeError, ValueError)):
        eval(call, {"cpe": cpe, "np": np})
