"""The groups the benchmark times: which statements compete, at which sizes.

Labels are constants: the report's rows and the issue's targets refer to them.
Statements are single calls written as a user would write them; ``arg`` is the
argument that changes from call to call (a position, a table's start, an array
of position ids), so that no cache of results can flatter anyone.
"""

from __future__ import annotations

import itertools
import threading
from types import ModuleType
from typing import Any

import numpy as np

import cpe
from cpe.benchmark.timing import Competitor, Group, Ratio
from cpe.benchmark.usual_numpy import (
    mae_2d,
    numpy_apply_rope,
    numpy_positions,
    numpy_rope,
    numpy_rope_positions,
    numpy_single,
    numpy_table,
)

CPE = "cpe"
# A long-context config (Qwen2.5's 1M-token yarn): scaled frequencies, a factor.
YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 32768}
CPE_OUT = "cpe out="
CPE_TABLE_SAME_VALUES = "cpe table, same values"
CPE_SCALED = "cpe yarn-scaled"
NUMPY = "NumPy"
NUMPY_F32 = "NumPy f32 arithmetic"
NUMPY_F64_TO_F32 = "NumPy f64 .astype(f32)"
TORCH = "PyTorch, 1 thread"
MAE = "MAE's NumPy code"
FLOOR_EMPTY = "floor np.empty(D)"
FLOOR_NEW = "floor np.empty().fill"
FLOOR_OUT = "floor out.fill"
FLOOR_NEW_2 = "floor np.empty().fill, 2 threads"

# Positions are drawn from [0, POSITION_RANGE), as in the issue.
POSITION_RANGE = 8192
# Distinct positions cycled through by single-vector calls: far more than any
# cache of single results would keep.
SINGLE_POSITIONS = 4096
TABLE_STARTS = 64
POSITION_ARRAYS = 3


def atol_f64(max_position: int) -> float:
    """Largest acceptable difference from cpe for the usual float64 code.

    It rounds w_j to a double, which costs about |p| * 1e-16 radians; these
    tolerances only need to catch a wrong formula, whose errors are O(1).
    """
    return 1e-9 + 1e-14 * max_position


def atol_f32(max_position: int) -> float:
    """For float64 code rounded to float32 at the end: half a float32 ulp, and more."""
    return 1e-6 + atol_f64(max_position)


def atol_f32_arithmetic(max_position: int) -> float:
    """For float32 arithmetic throughout: about |p| * 1e-7 radians, plus rounding."""
    return 1e-3 + 4e-7 * max_position


def atol_rounded_once(dtype: type, top: int) -> float:
    """For code that computes in float64 and rounds once to ``dtype``.

    cpe's own out= call is held to this too, not to equality: cpe may take
    another path once its caches are warm, and differ by an ulp.
    """
    return atol_f64(top) if dtype is np.float64 else atol_f32(top)


def atol_in_dtype(dtype: type, top: int) -> float:
    """For code that computes in ``dtype`` throughout."""
    return atol_f64(top) if dtype is np.float64 else atol_f32_arithmetic(top)


def float32_rivals(in_float32: str, from_float64: str, top: int) -> list[Competitor]:
    """NumPy's float32 rivals: the code in float32 arithmetic (``in_float32``), and
    the accurate route, in float64 rounded to float32 (``from_float64``)."""
    return [
        Competitor(NUMPY_F32, "rival", in_float32, atol_f32_arithmetic(top)),
        Competitor(NUMPY_F64_TO_F32, "rival", from_float64, atol_f32(top)),
    ]


def dtype_name(dtype: type) -> str:
    return np.dtype(dtype).name


def short_dtype_name(dtype: type) -> str:
    return f"f{np.dtype(dtype).itemsize * 8}"


def mebibytes(shape: tuple[int, ...], dtype: type) -> float:
    return float(np.prod(shape)) * np.dtype(dtype).itemsize / 2**20


def single_vector_group(D: int, dtype: type, rng: np.random.Generator) -> Group:
    """One encoding per call, at a varying position: cpe, NumPy, np.empty(D)."""
    positions = rng.integers(0, POSITION_RANGE, SINGLE_POSITIONS).tolist()
    top = POSITION_RANGE
    names = {
        "cpe_encode": cpe.positional_encoding,
        "numpy_single": numpy_single,
        "np_empty": np.empty,
        "D": D,
        "float32": np.float32,
    }
    if dtype is np.float64:  # the shortest calls: no dtype argument to parse
        competitors = [
            Competitor(CPE, "cpe", "cpe_encode(arg, D)"),
            Competitor(NUMPY, "rival", "numpy_single(arg, D)", atol_f64(top)),
            Competitor(FLOOR_EMPTY, "floor", "np_empty(D)"),
        ]
    else:
        competitors = [
            Competitor(CPE, "cpe", "cpe_encode(arg, D, dtype=float32)"),
            *float32_rivals(
                "numpy_single(arg, D, dtype=float32)", "numpy_single(arg, D).astype(float32)", top
            ),
            Competitor(FLOOR_EMPTY, "floor", "np_empty(D, float32)"),
        ]
    return Group(
        kind="single",
        name=f"single {short_dtype_name(dtype)} D={D}",
        section=f"single vector, {dtype_name(dtype)}: time per call",
        column=f"D={D}",
        params={"D": D, "dtype": dtype_name(dtype)},
        names=names,
        args=positions,
        competitors=competitors,
        ratios=[*_rivals_over_cpe(competitors), Ratio(CPE, FLOOR_EMPTY)],
    )


# The width at which the argument forms are compared.
ARGUMENT_FORMS_WIDTH = 512


def argument_forms_group(rng: np.random.Generator) -> Group:
    """The single-vector call with its arguments in other forms, against the plain one.

    Each ``arg`` holds the position as an int, a np.int64 and a np.float64, made
    before timing, so that every form pays the same indexing and no conversion.
    The forms that give the same values must give the same bits.
    """
    D = ARGUMENT_FORMS_WIDTH
    positions = rng.integers(0, POSITION_RANGE, SINGLE_POSITIONS).tolist()
    names = {
        "cpe_encode": cpe.positional_encoding,
        "np_empty": np.empty,
        "D": D,
        "out": np.empty(D),
    }
    same = 0.0
    competitors = [
        Competitor(CPE, "cpe", "cpe_encode(arg[0], D)"),
        Competitor("cpe, np.int64 position", "cpe", "cpe_encode(arg[1], D)", same),
        Competitor("cpe, np.float64 position", "cpe", "cpe_encode(arg[2], D)", same),
        Competitor("cpe, base=10000 (int)", "cpe", "cpe_encode(arg[0], D, base=10000)", same),
        Competitor(
            "cpe, dtype='float32'",
            "cpe",
            "cpe_encode(arg[0], D, dtype='float32')",
            atol_f32(POSITION_RANGE),
        ),
        Competitor(CPE_OUT, "cpe", "cpe_encode(arg[0], D, out=out)", same),
        # Other columns, the same values: not compared.
        Competitor("cpe, layout='sin_cos'", "cpe", "cpe_encode(arg[0], D, layout='sin_cos')"),
        Competitor(FLOOR_EMPTY, "floor", "np_empty(D)"),
    ]
    return Group(
        kind="argument forms",
        name=f"argument forms f64 D={D}",
        section="single vector, float64: the same call with its arguments in other forms",
        column=f"D={D}",
        params={"D": D, "dtype": "float64"},
        names=names,
        args=[(p, np.int64(p), np.float64(p)) for p in positions],
        competitors=competitors,
        ratios=[
            *(Ratio(c.label, CPE) for c in competitors if c.role == "cpe" and c.label != CPE),
            Ratio(CPE, FLOOR_EMPTY),
        ],
    )


def table_group(
    n: int, D: int, dtype: type, rng: np.random.Generator, torch: ModuleType | None
) -> Group:
    """(n, D) tables of consecutive positions: cpe new and out=, NumPy, PyTorch, floors."""
    top = POSITION_RANGE + n
    names: dict[str, Any] = {
        "cpe_table": cpe.positional_encoding_table,
        "numpy_table": numpy_table,
        "np_empty": np.empty,
        "n": n,
        "D": D,
        "dtype": dtype,
        "float32": np.float32,
        "out": np.empty((n, D), dtype),
    }
    competitors = [
        Competitor(CPE, "cpe", "cpe_table(n, D, start=arg, dtype=dtype)"),
        Competitor(
            CPE_OUT,
            "cpe",
            "cpe_table(n, D, start=arg, dtype=dtype, out=out)",
            atol_rounded_once(dtype, top),
        ),
    ]
    if dtype is np.float64:
        competitors.append(Competitor(NUMPY, "rival", "numpy_table(n, D, arg)", atol_f64(top)))
    else:
        competitors += float32_rivals(
            "numpy_table(n, D, arg, float32)", "numpy_table(n, D, arg).astype(float32)", top
        )
    if torch is not None:
        from cpe.benchmark.usual_torch import torch_table

        names["torch_table"] = torch_table
        names["torch_dtype"] = torch.float64 if dtype is np.float64 else torch.float32
        competitors.append(
            Competitor(
                TORCH,
                "rival",
                "torch_table(n, D, arg, torch_dtype)",
                atol_in_dtype(dtype, top),
            )
        )
    competitors += [
        Competitor(FLOOR_NEW, "floor", "np_empty((n, D), dtype).fill(1.0)"),
        Competitor(FLOOR_OUT, "floor", "out.fill(1.0)"),
    ]
    size = mebibytes((n, D), dtype)
    return Group(
        kind="table",
        name=f"table {short_dtype_name(dtype)} {n}x{D}",
        section=f"table (n x D), {dtype_name(dtype)}: time per table",
        column=f"{n}x{D} {size:.3g}MiB",
        params={"n": n, "D": D, "dtype": dtype_name(dtype), "mebibytes": size},
        names=names,
        args=rng.integers(0, POSITION_RANGE, TABLE_STARTS).tolist(),
        competitors=competitors,
        ratios=[*_rivals_over_cpe(competitors), Ratio(CPE, FLOOR_NEW), Ratio(CPE_OUT, FLOOR_OUT)],
    )


def position_ids(shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """(batch, seq) position ids: rows of arange at random offsets, then shuffled.

    Shuffling all the ids leaves no run of consecutive positions to exploit:
    the general path of positional_encoding is what is timed.
    """
    batch, seq = shape
    offsets = rng.integers(0, POSITION_RANGE, (batch, 1))
    ids = offsets + np.arange(seq)
    return rng.permutation(ids.reshape(-1)).reshape(shape)


def positions_group(shape: tuple[int, int], D: int, dtype: type, rng: np.random.Generator) -> Group:
    """Arbitrary position ids: cpe new and out=, cpe's table of as many values, NumPy, floors."""
    full_shape = (*shape, D)
    rows = shape[0] * shape[1]
    names = {
        "cpe_encode": cpe.positional_encoding,
        "cpe_table": cpe.positional_encoding_table,
        "numpy_positions": numpy_positions,
        "np_empty": np.empty,
        "D": D,
        "rows": rows,
        "shape": full_shape,
        "dtype": dtype,
        "out": np.empty(full_shape, dtype),
    }
    top = POSITION_RANGE + shape[1]
    atol = atol_in_dtype(dtype, top)
    competitors = [
        Competitor(CPE, "cpe", "cpe_encode(arg, D, dtype=dtype)"),
        Competitor(
            CPE_OUT,
            "cpe",
            "cpe_encode(arg, D, dtype=dtype, out=out)",
            atol_rounded_once(dtype, top),
        ),
        # The same number of output values, as a table: the throughput to match.
        Competitor(
            CPE_TABLE_SAME_VALUES,
            "cpe",
            "cpe_table(rows, D, start=arg[0, 0], dtype=dtype)",
        ),
        Competitor(NUMPY, "rival", "numpy_positions(arg, D, dtype)", atol),
        Competitor(FLOOR_NEW, "floor", "np_empty(shape, dtype).fill(1.0)"),
        Competitor(FLOOR_OUT, "floor", "out.fill(1.0)"),
    ]
    return Group(
        kind="positions",
        name=f"positions {short_dtype_name(dtype)} {shape[0]}x{shape[1]} D={D}",
        section=f"arbitrary position ids, {dtype_name(dtype)}: time per array",
        column=f"{shape[0]}x{shape[1]} D={D}",
        params={
            "shape": list(shape),
            "D": D,
            "dtype": dtype_name(dtype),
            "mebibytes": mebibytes(full_shape, dtype),
        },
        names=names,
        args=[position_ids(shape, rng) for _ in range(POSITION_ARRAYS)],
        competitors=competitors,
        ratios=[
            Ratio(NUMPY, CPE),
            Ratio(CPE, CPE_TABLE_SAME_VALUES),
            Ratio(CPE, FLOOR_NEW),
            Ratio(CPE_OUT, FLOOR_OUT),
        ],
    )


def grid_group(size: int, D: int) -> Group:
    """A size x size grid of ViT patches (float64): cpe.sincos_2d, MAE's code, the floor.

    The argument is the number of class tokens (0 or 1), which MAE supports too.
    """
    names: dict[str, Any] = {"cpe_grid": cpe.sincos_2d, "mae_2d": mae_2d, "np_empty": np.empty}
    names.update({"size": size, "D": D})
    competitors = [
        Competitor(CPE, "cpe", "cpe_grid(size, size, D, extra_tokens=arg)"),
        Competitor(MAE, "rival", "mae_2d(D, size, cls_token=arg == 1)", atol_f64(size)),
        Competitor(FLOOR_NEW, "floor", "np_empty((size * size + arg, D)).fill(1.0)"),
    ]
    return Group(
        kind="grid",
        name=f"grid f64 {size}x{size} D={D}",
        section="2-D grid (sincos_2d), float64: time per grid",
        column=f"{size}x{size} D={D} {mebibytes((size * size, D), np.float64):.0f}MiB",
        params={
            "size": size,
            "D": D,
            "dtype": "float64",
            "mebibytes": mebibytes((size * size, D), np.float64),
        },
        names=names,
        args=[0, 1],
        competitors=competitors,
        ratios=[Ratio(MAE, CPE), Ratio(CPE, FLOOR_NEW)],
    )


ROPE_BASE = 500000.0  # Llama 3's theta


def rope_group(n: int, head_dim: int, rng: np.random.Generator) -> Group:
    """Rotary (cos, sin) caches in float32: cpe.rope_cos_sin, HF Llama's formula, the floor."""
    names = {
        "cpe_rope": cpe.rope_cos_sin,
        "numpy_rope": numpy_rope,
        "np_empty": np.empty,
        "n": n,
        "head_dim": head_dim,
        "base": ROPE_BASE,
        "float32": np.float32,
        "float64": np.float64,
        "yarn": YARN,
        **_rope_out((n, head_dim)),
    }
    top = POSITION_RANGE + n
    competitors = [
        Competitor(CPE, "cpe", "cpe_rope(n, head_dim, base=base, start=arg, dtype=float32)"),
        Competitor(
            CPE_OUT,
            "cpe",
            "cpe_rope(n, head_dim, base=base, start=arg, dtype=float32, out=out)",
            atol_rounded_once(np.float32, top),
        ),
        # Scaled frequencies and an attention factor: the same work (other values).
        Competitor(
            CPE_SCALED,
            "cpe",
            "cpe_rope(n, head_dim, base=base, start=arg, dtype=float32, rope_parameters=yarn)",
        ),
        *float32_rivals(
            "numpy_rope(n, head_dim, base, arg, float32)",
            "[a.astype(float32) for a in numpy_rope(n, head_dim, base, arg, float64)]",
            top,
        ),
        Competitor(FLOOR_NEW, "floor", "np_empty((2, n, head_dim), float32).fill(1.0)"),
        Competitor(FLOOR_OUT, "floor", "both.fill(1.0)"),
    ]
    return Group(
        kind="rope",
        name=f"rope f32 {n}x{head_dim}",
        section=f"rotary cos/sin tables (rope_cos_sin), float32, base {ROPE_BASE:g}: time per pair",
        column=f"{n}x{head_dim} {2 * mebibytes((n, head_dim), np.float32):.0f}MiB",
        params={
            "n": n,
            "head_dim": head_dim,
            "dtype": "float32",
            "mebibytes": 2 * mebibytes((n, head_dim), np.float32),
        },
        names=names,
        args=rng.integers(0, POSITION_RANGE, TABLE_STARTS).tolist(),
        competitors=competitors,
        ratios=[
            *_rivals_over_cpe(competitors),
            Ratio(CPE, FLOOR_NEW),
            Ratio(CPE_OUT, FLOOR_OUT),
            Ratio(CPE_SCALED, CPE),
        ],
    )


def _rope_out(shape: tuple[int, ...]) -> dict[str, object]:
    """``out``, a (cos, sin) pair for rope_cos_sin's out=, and ``both``, its memory."""
    both = np.empty((2, *shape), np.float32)
    return {"both": both, "out": (both[0], both[1])}


def rope_positions_group(shape: tuple[int, int], head_dim: int, rng: np.random.Generator) -> Group:
    """Rotary (cos, sin) of (batch, seq) position ids in float32: cpe, the table of as
    many rows, HF Llama's formula with position ids in NumPy, the floor."""
    full_shape = (*shape, head_dim)
    rows = shape[0] * shape[1]
    names = {
        "cpe_rope": cpe.rope_cos_sin,
        "numpy_rope_positions": numpy_rope_positions,
        "np_empty": np.empty,
        "rows": rows,
        "head_dim": head_dim,
        "both_shape": (2, *full_shape),
        "base": ROPE_BASE,
        "float32": np.float32,
        "float64": np.float64,
        **_rope_out(full_shape),
    }
    top = POSITION_RANGE + shape[1]
    competitors = [
        Competitor(CPE, "cpe", "cpe_rope(arg, head_dim, base=base, dtype=float32)"),
        Competitor(
            CPE_OUT,
            "cpe",
            "cpe_rope(arg, head_dim, base=base, dtype=float32, out=out)",
            atol_rounded_once(np.float32, top),
        ),
        # The same number of rows, as a table: the throughput to match.
        Competitor(
            CPE_TABLE_SAME_VALUES,
            "cpe",
            "cpe_rope(rows, head_dim, base=base, start=arg[0, 0], dtype=float32)",
        ),
        *float32_rivals(
            "numpy_rope_positions(arg, head_dim, base, float32)",
            "[a.astype(float32) for a in numpy_rope_positions(arg, head_dim, base, float64)]",
            top,
        ),
        Competitor(FLOOR_NEW, "floor", "np_empty(both_shape, float32).fill(1.0)"),
        Competitor(FLOOR_OUT, "floor", "both.fill(1.0)"),
    ]
    return Group(
        kind="rope positions",
        name=f"rope positions f32 {shape[0]}x{shape[1]} head_dim={head_dim}",
        section=(
            f"rotary cos/sin of position ids (rope_cos_sin), float32, base {ROPE_BASE:g}: "
            "time per pair"
        ),
        column=f"{shape[0]}x{shape[1]} head_dim={head_dim}",
        params={
            "shape": list(shape),
            "head_dim": head_dim,
            "dtype": "float32",
            "mebibytes": 2 * mebibytes(full_shape, np.float32),
        },
        names=names,
        args=[position_ids(shape, rng) for _ in range(POSITION_ARRAYS)],
        competitors=competitors,
        ratios=[
            *_rivals_over_cpe(competitors),
            Ratio(CPE, CPE_TABLE_SAME_VALUES),
            Ratio(CPE, FLOOR_NEW),
            Ratio(CPE_OUT, FLOOR_OUT),
        ],
    )


# Multi-axis RoPE as the models use it: Flux's axial ids of a 1024x1024 image
# (512 text tokens at 0, then the 64x64 latent grid), and Qwen2-VL's
# (temporal, height, width) ids of 100 text tokens and a 54x56 image.
FLUX_AXES = (16, 56, 56)
FLUX_THETA = 10000
QWEN2_VL = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]}
MULTI_AXIS_HEAD_DIM = 128
MODULE = "the model's own module"


def flux_ids(offset: int) -> np.ndarray:
    """(4608, 3) float ids: 512 text tokens, then the 64x64 grid from ``offset``."""
    grid = np.stack(np.meshgrid(np.arange(64), np.arange(64), indexing="ij"), -1).reshape(-1, 2)
    image = np.concatenate([np.zeros((4096, 1)), grid + offset], axis=1)
    return np.concatenate([np.zeros((512, 3)), image]).astype(np.float64)


def qwen2_vl_ids(offset: int) -> np.ndarray:
    """(3, 1, 3124) int ids: 100 text tokens from ``offset``, then a 54x56 image."""
    text = np.broadcast_to(np.arange(offset, offset + 100), (3, 100))
    rows, columns = np.meshgrid(np.arange(54), np.arange(56), indexing="ij")
    image = np.stack([np.zeros(54 * 56, np.int64), rows.ravel(), columns.ravel()]) + offset + 100
    return np.concatenate([text, image], axis=1)[:, None, :]


def _model_module(model: str) -> tuple[Any, Any] | None:
    """The model's rotary module (see usual_torch.model_module), or None."""
    try:
        from cpe.benchmark.usual_torch import model_module

        return model_module(model, MULTI_AXIS_HEAD_DIM, FLUX_THETA, FLUX_AXES, QWEN2_VL)
    except ImportError:
        return None


def multi_axis_group(model: str, rng: np.random.Generator) -> Group:
    """float32 (cos, sin) of one request's multi-axis ids: cpe, the one-axis table of
    as many rows (the throughput to match), and the model's own rotary module
    (diffusers' FluxPosEmbed, transformers' Qwen2-VL rotary embedding) when it
    is installed, called as the model calls it (its tensors from NumPy's ids)."""
    offsets = rng.integers(0, 1024, TABLE_STARTS).tolist()
    names: dict[str, Any] = {
        "cpe_rope": cpe.rope_cos_sin,
        "head_dim": MULTI_AXIS_HEAD_DIM,
        "float32": np.float32,
        "axes_dim": FLUX_AXES,
        "qwen2_vl": QWEN2_VL,
    }
    if model == "flux":
        args = [flux_ids(offset) for offset in offsets[:POSITION_ARRAYS]]
        cpe_stmt = (
            "cpe_rope(arg, head_dim, axes_dim=axes_dim, base=10000.0, layout='interleaved',"
            " dtype=float32)"
        )
        rows, layout = 4608, "interleaved"
    else:
        args = [qwen2_vl_ids(offset) for offset in offsets[:POSITION_ARRAYS]]
        cpe_stmt = "cpe_rope(arg, head_dim, rope_parameters=qwen2_vl, dtype=float32)"
        rows, layout = 3124, "half"
    names["rows"], names["layout"] = rows, layout
    competitors = [
        Competitor(CPE, "cpe", cpe_stmt),
        Competitor(
            CPE_TABLE_SAME_VALUES,
            "cpe",
            "cpe_rope(rows, head_dim, base=10000.0, layout=layout, dtype=float32)",
        ),
    ]
    module = _model_module(model)
    if module is not None:  # (its package is installed)
        names["module"], names["torch_ids"] = module
        # transformers computes its angles in float32: off by up to a few ulp of
        # the largest angle (here ~1e3 rad).
        atol = 1e-6 if model == "flux" else 2e-4
        competitors.append(Competitor(MODULE, "rival", "module(torch_ids(arg))", atol))
    return Group(
        kind="multi-axis rope",
        name=f"multi-axis rope {model}",
        section=(
            "multi-axis RoPE (rope_cos_sin with axes_dim or mrope_section), float32: "
            "time per request"
        ),
        column=f"{model} {rows} tokens",
        params={"model": model, "rows": rows, "head_dim": MULTI_AXIS_HEAD_DIM},
        names=names,
        args=args,
        competitors=competitors,
        ratios=[
            *_rivals_over_cpe(competitors),
            Ratio(CPE, CPE_TABLE_SAME_VALUES),
        ],
    )


# RoPE applied: Llama 3 8B's attention, q of 32 heads and k of 8, head_dim 128.
APPLY_HEADS = (32, 8)
APPLY_HEAD_DIM = 128
APPLY_ROPE = {"rope_type": "default", "rope_theta": 500000.0}
APPLY_LLAMA3 = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
DECODE_POSITION = 100000
CPE_NEW = "cpe, new arrays"
CPE_FUNCTION = "cpe.apply_rope (the config read at each call)"
CPE_TORCH = "cpe, the same torch tensors"
CPE_BSHD = "cpe (batch, seq, heads) layout"
CPE_LLAMA3 = "cpe llama3-scaled"
CPE_PARTIAL = "cpe partial_rotary_factor=0.5"
CPE_WORKERS2 = "cpe workers=2"
TRANSFORMERS_MODEL = "transformers' rotary module + apply_rotary_pos_emb"
TRANSFORMERS_APPLY = "transformers' apply_rotary_pos_emb, cpe's table"
TRANSFORMERS_APPLY_ALONE = "transformers' apply_rotary_pos_emb alone"
NUMPY_APPLY = "NumPy x*cos + rotate_half(x)*sin, cpe's table"
FLOOR_IN_PLACE = "floor: one in-place pass (x *= 1)"
FLOOR_IN_PLACE_2 = "floor: one in-place pass, 2 threads"


def _llama_rotation() -> tuple[Any, Any] | None:
    """transformers' Llama rotation (see usual_torch.llama_rotation), or None."""
    try:
        from cpe.benchmark.usual_torch import llama_rotation

        return llama_rotation(APPLY_HEAD_DIM, APPLY_ROPE)
    except ImportError:
        return None


def _qk(seq: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """q and k of one sequence, (batch, heads, seq, head_dim) float32."""
    return tuple(  # type: ignore[return-value]
        rng.standard_normal((1, heads, seq, APPLY_HEAD_DIM), dtype=np.float32)
        for heads in APPLY_HEADS
    )


def apply_group(seq: int, rng: np.random.Generator) -> Group:
    """RoPE applied in place to q and k of ``seq`` tokens (float32): cpe end to end
    (angles and rotation), the same through transformers (its rotary module and
    apply_rotary_pos_emb, or apply_rotary_pos_emb fed cpe's table) and NumPy, and
    one in-place pass over the same memory (the floor)."""
    qk = _qk(seq, rng)
    size = mebibytes((sum(APPLY_HEADS), seq, APPLY_HEAD_DIM), np.float32)  # q and k
    names: dict[str, Any] = {
        "cpe_apply": cpe.apply_rope,
        "cpe_rope": cpe.rope_cos_sin,
        "numpy_apply": numpy_apply_rope,
        "multiply": np.multiply,
        "qk": qk,
        "bshd": tuple(np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in qk),
        "seq": seq,
        "head_dim": APPLY_HEAD_DIM,
        "float32": np.float32,
        "rope": APPLY_ROPE,
        "llama3": APPLY_LLAMA3,
        "partial": {**APPLY_ROPE, "partial_rotary_factor": 0.5},
    }
    table = "cpe_rope(seq, head_dim, start=arg, dtype=float32, rope_parameters=rope)"
    competitors = [
        Competitor(CPE, "cpe", "cpe_apply(qk, start=arg, out=qk, rope_parameters=rope)"),
        Competitor(CPE_NEW, "cpe", "cpe_apply(qk, start=arg, rope_parameters=rope)[0]"),
        Competitor(
            CPE_BSHD,
            "cpe",
            "cpe_apply(bshd, start=arg, seq_axis=1, out=bshd, rope_parameters=rope)",
        ),
        Competitor(CPE_LLAMA3, "cpe", "cpe_apply(qk, start=arg, out=qk, rope_parameters=llama3)"),
        Competitor(CPE_PARTIAL, "cpe", "cpe_apply(qk, start=arg, out=qk, rope_parameters=partial)"),
        Competitor(
            CPE_WORKERS2, "cpe", "cpe_apply(qk, start=arg, out=qk, rope_parameters=rope, workers=2)"
        ),
        # float32 arithmetic with float32 tables: a few ulp of |x| (~5) off
        Competitor(
            NUMPY_APPLY, "rival", f"[numpy_apply(x, *t) for t in [{table}] for x in qk][0]", 1e-5
        ),
        Competitor(FLOOR_IN_PLACE, "floor", "[multiply(x, 1.0, out=x) for x in qk]"),
        # What workers=2 can gain: the same pass by two threads.
        Competitor(FLOOR_IN_PLACE_2, "floor", "multiplied_by_threads(qk, 2)"),
    ]
    names["multiplied_by_threads"] = multiplied_by_threads
    rotation = _llama_rotation()
    if rotation is not None:  # (transformers is installed)
        import torch

        names["model"], names["hf_apply"] = rotation
        names["torch_qk"] = tuple(torch.from_numpy(x) for x in qk)
        names["torch_ids"] = lambda start: torch.arange(start, start + seq)[None]
        names["torch_table"] = lambda t: tuple(torch.from_numpy(a)[None] for a in t)
        # transformers' own float32 angles: up to ~1e-3 rad off at these positions
        competitors += [
            Competitor(TRANSFORMERS_MODEL, "rival", "model(*torch_qk, torch_ids(arg))[0]", 2e-2),
            Competitor(
                TRANSFORMERS_APPLY, "rival", f"hf_apply(*torch_qk, *torch_table({table}))[0]", 1e-5
            ),
        ]
    return Group(
        kind="apply",
        name=f"apply rope f32 {seq}",
        section=(
            "RoPE applied to q (1, 32, seq, 128) and k (1, 8, seq, 128), float32, in place: "
            "time per call, angles included"
        ),
        column=f"seq {seq} {2 * size:.0f}MiB",
        params={
            "seq": seq,
            "mebibytes": mebibytes((sum(APPLY_HEADS), seq, APPLY_HEAD_DIM), np.float32),
        },
        names=names,
        args=rng.integers(0, POSITION_RANGE, TABLE_STARTS).tolist(),
        competitors=competitors,
        ratios=[
            *_rivals_over_cpe(competitors),
            Ratio(CPE, FLOOR_IN_PLACE),
            Ratio(CPE_BSHD, CPE),
            Ratio(CPE_LLAMA3, CPE),
            Ratio(CPE_PARTIAL, CPE),
            Ratio(CPE, CPE_WORKERS2),
            Ratio(FLOOR_IN_PLACE, FLOOR_IN_PLACE_2),
            Ratio(CPE_WORKERS2, FLOOR_IN_PLACE_2),
        ],
        reference=CPE_NEW,
    )


FLOOR_TORCH_IN_PLACE = "floor: one in-place pass (x.mul_(1))"


def apply_bf16_group(seq: int, rng: np.random.Generator) -> Group | None:
    """RoPE applied in place to bfloat16 torch tensors q and k (as apply_group), and
    one in-place pass of torch over them; None without torch."""
    try:
        import torch
    except ImportError:
        return None
    qk = tuple(torch.from_numpy(x).to(torch.bfloat16) for x in _qk(seq, rng))
    names: dict[str, Any] = {"cpe_apply": cpe.apply_rope, "qk": qk, "rope": APPLY_ROPE}
    competitors = [
        Competitor(CPE, "cpe", "cpe_apply(qk, start=arg, out=qk, rope_parameters=rope)"),
        Competitor(FLOOR_TORCH_IN_PLACE, "floor", "[x.mul_(1.0) for x in qk]"),
    ]
    return Group(
        kind="apply bf16",
        name=f"apply rope bf16 {seq}",
        section=(
            "RoPE applied to q (1, 32, seq, 128) and k (1, 8, seq, 128), torch bfloat16, in "
            "place: time per call, angles included"
        ),
        column=f"seq {seq}",
        params={"seq": seq},
        names=names,
        args=rng.integers(0, POSITION_RANGE, TABLE_STARTS).tolist(),
        competitors=competitors,
        ratios=[Ratio(CPE, FLOOR_TORCH_IN_PLACE)],
    )


ADD_SHAPE = (8, 2048, 512)  # (batch, seq, D)
NUMPY_ADD = "NumPy x * s + positional_encoding_table(...)"


def add_group(rng: np.random.Generator) -> Group:
    """The sinusoidal encoding added in place to x (batch, seq, D) float32, times a
    scale (fairseq's embed_scale), against the NumPy code with cpe's table and
    one in-place pass over the same memory."""
    batch, seq, D = ADD_SHAPE
    names: dict[str, Any] = {
        "cpe_add": cpe.add_positional_encoding,
        "cpe_table": cpe.positional_encoding_table,
        "multiply": np.multiply,
        "x": rng.standard_normal(ADD_SHAPE, dtype=np.float32),
        "seq": seq,
        "D": D,
        # (fairseq's embed_scale is sqrt(D); its inverse costs the same and keeps x
        # finite over the rounds of the in-place call, which scale x again each time)
        "s": float(1.0 / np.sqrt(D)),
        "float32": np.float32,
    }
    competitors = [
        Competitor(CPE, "cpe", "cpe_add(x, start=arg, x_scale=s, out=x)"),
        Competitor(CPE_NEW, "cpe", "cpe_add(x, start=arg, x_scale=s)"),
        # float32 arithmetic: an ulp of |x * s| (~1) off
        Competitor(NUMPY_ADD, "rival", "x * s + cpe_table(seq, D, start=arg, dtype=float32)", 1e-6),
        Competitor(FLOOR_IN_PLACE, "floor", "multiply(x, 1.0, out=x)"),
    ]
    size = mebibytes(ADD_SHAPE, np.float32)
    return Group(
        kind="add",
        name="add encoding f32",
        section=(
            "the sinusoidal encoding added to x (batch, seq, D) times a scale (1 / sqrt(D)), "
            "float32, in place: time per call, encoding included"
        ),
        column=f"{batch}x{seq}x{D} {size:.0f}MiB",
        params={"mebibytes": size},
        names=names,
        args=rng.integers(0, POSITION_RANGE, TABLE_STARTS).tolist(),
        competitors=competitors,
        ratios=[*_rivals_over_cpe(competitors), Ratio(CPE, FLOOR_IN_PLACE)],
        reference=CPE_NEW,
    )


def decode_group(rng: np.random.Generator) -> Group:
    """One decoding step: q and k of one token near position 100,000, rotated in
    place with Llama 3's scaled RoPE, by cpe (angles included; through a Rope
    parsed once, and through apply_rope) and by transformers (apply_rotary_pos_emb
    alone, its tables made beforehand; and end to end)."""
    qk = _qk(1, rng)
    names: dict[str, Any] = {
        "cpe_apply": cpe.apply_rope,
        "rope": cpe.Rope(APPLY_HEAD_DIM, rope_parameters=APPLY_LLAMA3),  # parsed once
        "qk": qk,
        "llama3": APPLY_LLAMA3,
    }
    competitors = [
        Competitor(CPE, "cpe", "rope.apply(qk, start=arg, out=qk)"),
        Competitor(CPE_FUNCTION, "cpe", "cpe_apply(qk, start=arg, out=qk, rope_parameters=llama3)"),
    ]
    rotation = _llama_rotation()
    if rotation is not None:
        import torch

        names["model"], names["hf_apply"] = rotation
        names["torch_qk"] = tuple(torch.from_numpy(x) for x in qk)
        names["torch_ids"] = lambda start: torch.tensor([[start]])
        cos, sin = cpe.rope_cos_sin(1, APPLY_HEAD_DIM, start=DECODE_POSITION, dtype=np.float32)
        names["tables"] = (torch.from_numpy(cos)[None], torch.from_numpy(sin)[None])
        competitors += [
            # what a torch user runs: the rivals' own tensors, rotated in place
            Competitor(CPE_TORCH, "cpe", "rope.apply(torch_qk, start=arg, out=torch_qk)"),
            Competitor(TRANSFORMERS_APPLY_ALONE, "rival", "hf_apply(*torch_qk, *tables)"),
            Competitor(TRANSFORMERS_MODEL, "rival", "model(*torch_qk, torch_ids(arg))"),
        ]
    return Group(
        kind="decode",
        name="apply rope decode",
        section=(
            "RoPE applied to one token: q (1, 32, 1, 128) and k (1, 8, 1, 128), float32, in "
            "place, Llama 3 scaling: time per call"
        ),
        column=f"position ~{DECODE_POSITION}",
        params={},
        names=names,
        args=rng.integers(DECODE_POSITION - 1000, DECODE_POSITION + 1000, TABLE_STARTS).tolist(),
        competitors=competitors,
        ratios=[
            *_rivals_over_cpe(competitors),
            *([Ratio(TRANSFORMERS_APPLY_ALONE, CPE_TORCH)] if rotation is not None else []),
            Ratio(CPE_FUNCTION, CPE),
        ],
    )


def workers_name(workers: int, out: bool) -> str:
    """The label of cpe's new (or out=) table at ``workers``."""
    return f"cpe{' out=' if out else ''} workers={workers}"


def workers_group(n: int, D: int, rng: np.random.Generator) -> Group:
    """An (n, D) float64 table, new and out=, at workers=1, 2 and -1 (every CPU):
    the speed-ups of a parallel fill as ratios within each round."""
    names: dict[str, Any] = {
        "cpe_table": cpe.positional_encoding_table,
        "n": n,
        "D": D,
        "out": np.empty((n, D)),
    }
    competitors = [
        Competitor(
            workers_name(workers, out),
            "cpe",
            f"cpe_table(n, D, start=arg, workers={workers}{', out=out' if out else ''})",
            None if (workers, out) == (1, False) else 0.0,  # the same bits
        )
        for out in (False, True)
        for workers in (1, 2, -1)
    ]
    # What memory allows: a new table of ones, filled by one and by two threads.
    names["filled"] = filled_by_threads
    competitors += [
        Competitor(FLOOR_NEW, "floor", "filled((n, D), 1)"),
        Competitor(FLOOR_NEW_2, "floor", "filled((n, D), 2)"),
    ]
    size = mebibytes((n, D), np.float64)
    return Group(
        kind="workers",
        name=f"workers f64 {n}x{D}",
        section="table (n x D), float64, filled by several threads (workers=): time per table",
        column=f"{n}x{D} {size:.3g}MiB",
        params={"n": n, "D": D, "dtype": "float64", "mebibytes": size},
        names=names,
        args=rng.integers(0, POSITION_RANGE, TABLE_STARTS).tolist(),
        competitors=competitors,
        reference=workers_name(1, False),
        ratios=[
            Ratio(workers_name(1, out), workers_name(workers, out))
            for out in (False, True)
            for workers in (2, -1)
        ]
        + [Ratio(FLOOR_NEW, FLOOR_NEW_2), Ratio(workers_name(2, False), FLOOR_NEW_2)],
    )


def filled_by_threads(shape: tuple[int, int], threads: int) -> np.ndarray:
    """A new float64 array of ones, its rows split in equal shares between
    ``threads`` threads (``ndarray.fill`` releases the GIL): the floor of a
    parallel fill, page faults included."""
    array = np.empty(shape)
    bounds = [shape[0] * k // threads for k in range(threads + 1)]
    others = [
        threading.Thread(target=array[first:last].fill, args=(1.0,))
        for first, last in itertools.pairwise(bounds[1:])
    ]
    for thread in others:
        thread.start()
    array[: bounds[1]].fill(1.0)
    for thread in others:
        thread.join()
    return array


def multiplied_by_threads(arrays: tuple[np.ndarray, ...], threads: int) -> np.ndarray:
    """Each array multiplied by 1 in place, its leading rows (the flattened
    leading axes) split in equal shares between ``threads`` threads (np.multiply
    releases the GIL): the floor of a parallel pass over memory in place."""
    parts = []
    for array in arrays:
        rows = array.reshape(-1, array.shape[-1])  # (a view: C-contiguous arrays)
        bounds = [len(rows) * k // threads for k in range(threads + 1)]
        parts += [rows[first:last] for first, last in itertools.pairwise(bounds)]
    shares = [parts[k::threads] for k in range(threads)]

    def run(share: list[np.ndarray]) -> None:
        for part in share:
            np.multiply(part, 1.0, out=part)

    others = [threading.Thread(target=run, args=(share,)) for share in shares[1:]]
    for thread in others:
        thread.start()
    run(shares[0])
    for thread in others:
        thread.join()
    return arrays[0]


def _rivals_over_cpe(competitors: list[Competitor]) -> list[Ratio]:
    """rival / cpe for every rival: how many times faster cpe is."""
    return [Ratio(c.label, CPE) for c in competitors if c.role == "rival"]
