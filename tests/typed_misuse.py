"""Calls that the runtime refuses and the stubs must too: ``mypy --strict`` checks
this file (.ci/stages/10-lint.sh), where an ignore that is not needed is an error,
so each line below fails the lint stage once its call type-checks."""

from __future__ import annotations

import numpy as np

import cpe

cpe.positional_encoding(3, 8, out=[0.0] * 8)  # type: ignore[call-overload]
cpe.positional_encoding_table(2, 4, out="out")  # type: ignore[call-overload]
cpe.positional_encoding(3, 8, dtype=5)  # type: ignore[call-overload]
cpe.rope_cos_sin(4, 8, out=([0.0] * 32, [0.0] * 32))  # type: ignore[type-var]
cpe.sincos_2d(2, 2, 8, out=np.empty((4, 8)).tolist())  # type: ignore[call-overload]
cpe.positional_encoding(3, 8, layout="blocked")  # type: ignore[call-overload]
