#!/usr/bin/env bash
# cpe against the real packages whose conventions it reproduces (torch,
# transformers, diffusers), next to JAX, and with the optional bfloat16 dtype
# (ml_dtypes), in a venv of their own. CPE_REQUIRE_INTEROP=1 turns a missing package into a failure
# instead of a skip.
set -euo pipefail
venv="$CPE_CI_WORK/interop-venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
# torch 2.13.0 (CPU) lies on this machine's disk; the others come from PyPI. On
# GitHub, CPE_TORCH_INDEX_URL names torch's CPU index, for this install alone
# (PyPI's torch is the CUDA build, gigabytes).
torch_index=()
if [ -n "${CPE_TORCH_INDEX_URL:-}" ]; then
    torch_index=(--extra-index-url "$CPE_TORCH_INDEX_URL")
fi
"$venv/bin/python" -m pip install -q "${torch_index[@]}" \
    "torch==2.13.0" "transformers==5.24.0" "diffusers==0.42.1"
# timm needs torchvision, which cannot sit beside this torch; the test loads
# only timm's sincos module, which needs torch alone.
"$venv/bin/python" -m pip install -q --no-deps "timm==1.0.31"
# vit-pytorch's package imports torchvision too: the test loads its simple_vit.py alone.
"$venv/bin/python" -m pip install -q --no-deps "vit-pytorch==1.26.14" "einops==0.8.2"
"$venv/bin/python" -m pip install -q "jax==0.10.2" "jaxlib==0.10.2"
"$venv/bin/python" -m pip install -q ".[test,bfloat16]"
CPE_REQUIRE_INTEROP=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_interop.py \
    tests/test_bfloat16.py tests/test_invariance.py
