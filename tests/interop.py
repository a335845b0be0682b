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
