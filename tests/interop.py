"""Import an optional third-party package, or skip; CPE_REQUIRE_INTEROP=1 makes it required.

The interop CI stage installs torch, transformers, diffusers and JAX and sets the
variable, so there a missing package fails instead of silently skipping.
"""

from __future__ import annotations

import importlib
import os
import types

import pytest


def require(name: str) -> types.ModuleType:
    if os.environ.get("CPE_REQUIRE_INTEROP") == "1":
        return importlib.import_module(name)
    return pytest.importorskip(name)


# The start of a script for a process where ml_dtypes cannot be imported,
# installed or not (the bfloat16 dtype is then missing).
WITHOUT_ML_DTYPES = """
import sys

class NoMlDtypes:
    def find_spec(self, name, path=None, target=None):
        if name == "ml_dtypes":
            raise ModuleNotFoundError("No module named 'ml_dtypes'")

sys.meta_path.insert(0, NoMlDtypes())
"""
