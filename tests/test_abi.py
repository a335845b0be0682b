"""The C-level API of ``cpe.kernels`` is a stable ABI: a snapshot guards it.

Other Cython packages ``cimport cpe.kernels`` and call its functions through the
capsules in ``cpe.kernels.__pyx_capi__``; each capsule is named by the C signature
of its function. Cython checks that name when the downstream module is imported, so
a changed signature turns every compiled downstream package into an ImportError.
This test fails on any change (a function added, removed or retyped) until the
snapshot ``capi_signatures.json`` is updated on purpose:

    CPE_UPDATE_ABI_SNAPSHOT=1 python -m pytest tests/test_abi.py

then review the diff of ``tests/capi_signatures.json`` and say in the commit why
the ABI changed. The enum constants of ``kernels.pxd`` are compiled into the
downstream code and have no capsule (in signatures they appear as ``int``): their
values are checked by ``test_cimport.py``.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import pathlib
import re

import pytest

SNAPSHOT = pathlib.Path(__file__).with_name("capi_signatures.json")
UPDATE = os.environ.get("CPE_UPDATE_ABI_SNAPSHOT") == "1"

_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]


def exported_signatures() -> dict[str, str]:
    """Name -> C signature of every function in ``cpe.kernels.__pyx_capi__``."""
    kernels = importlib.import_module("cpe.kernels")
    capi = kernels.__pyx_capi__
    signatures = {}
    for name, capsule in sorted(capi.items()):
        signature = _capsule_name(capsule)
        assert signature is not None, f"the capsule of {name} has no name"
        signatures[name] = signature.decode("ascii")
    return signatures


def test_capi_matches_the_committed_snapshot() -> None:
    current = exported_signatures()
    if UPDATE:
        SNAPSHOT.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
        pytest.skip(f"CPE_UPDATE_ABI_SNAPSHOT=1: rewrote {SNAPSHOT.name}; nothing was checked")
    expected = json.loads(SNAPSHOT.read_text())
    removed = sorted(expected.keys() - current.keys())
    added = sorted(current.keys() - expected.keys())
    changed = {
        name: (expected[name], current[name])
        for name in expected.keys() & current.keys()
        if expected[name] != current[name]
    }
    if removed or added or changed:
        pytest.fail(
            "the C-level API of cpe.kernels changed "
            f"(removed: {removed}, added: {added}, changed [old, new]: {changed}); "
            "if this is deliberate, rerun with CPE_UPDATE_ABI_SNAPSHOT=1 and commit "
            "tests/capi_signatures.json"
        )


def test_every_exported_function_is_declared_in_the_installed_pxd() -> None:
    # Downstream code compiles against the .pxd shipped in the package: it must be
    # installed and declare what the capsules export, as noexcept nogil functions.
    kernels = importlib.import_module("cpe.kernels")
    pxd = pathlib.Path(kernels.__file__).with_name("kernels.pxd")
    assert pxd.is_file(), f"{pxd} is not installed: `cimport cpe.kernels` would fail"
    declarations = " ".join(pxd.read_text().split())
    for name in exported_signatures():
        match = re.search(rf"cdef int {name}\(([^)]*)\) noexcept nogil", declarations)
        assert match, f"kernels.pxd does not declare {name} as `cdef int ...) noexcept nogil`"


def test_the_snapshot_is_sorted_and_complete() -> None:
    # A hand edit that drops a function or leaves the file unsorted shows up here.
    text = SNAPSHOT.read_text()
    snapshot = json.loads(text)
    assert text == json.dumps(snapshot, indent=2, sort_keys=True) + "\n"
    assert {"frequencies", "fill_table_f64", "fill_table_f32"} <= snapshot.keys()
    assert all(signature.startswith("int (") for signature in snapshot.values())
