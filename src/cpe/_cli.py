"""The ``cpe`` command: print, save or plot encodings, grids and RoPE tables, and
run the benchmark.

Usage errors print one line and exit with status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, get_args

import numpy as np
import numpy.typing as npt

import cpe
from cpe._argparse import OneLineErrorParser
from cpe._conventions import CONVENTIONS, LAYOUTS
from cpe._typing import GridLayout, RopeLayout

PLOT_HINT = "cpe plot needs matplotlib: pip install matplotlib"
# The most dimensions a NumPy array may have.
_MAX_DIMS = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32

_T = TypeVar("_T")


def _split(text: str, parse: Callable[[str], _T], what: str) -> list[_T]:
    """The comma-separated parts of ``text``, each read by ``parse``; ``what`` names
    the expected text in the error."""
    try:
        return [parse(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None


def _position(part: str) -> int | float:
    """``"3"`` -> 3 (exactly, however long), ``"2.5"`` or ``"1e3"`` -> a float."""
    try:
        return int(part)
    except ValueError:
        return float(part)


def _positions(text: str) -> list[int | float] | int | float:
    """``"3"`` -> 3, ``"2.5"`` -> 2.5, ``"0,1,7"`` -> a list of positions."""
    values = _split(text, _position, "a position or comma-separated positions")
    return values if "," in text else values[0]


def _rope_positions(text: str) -> Any:
    """``"8"`` -> 8 rows, ``"0,5,9"`` or ``"2.5"`` -> positions, ``"ids.npy"`` -> the
    array in that file (position ids of any shape)."""
    if text.lower().endswith(".npy"):
        try:
            with pathlib.Path(text).open("rb") as file:
                array = np.load(file, allow_pickle=False)
        except (OSError, ValueError, EOFError, MemoryError) as exc:
            raise argparse.ArgumentTypeError(f"cannot read {text!r}: {exc}") from None
        if not isinstance(array, np.ndarray):  # an .npz archive of that name
            raise argparse.ArgumentTypeError(f"cannot read {text!r}: not a .npy array")
        return array
    return _positions(text)


def _mapping(text: str) -> dict[str, Any]:
    """A JSON object, given inline or as ``@file.json``."""
    try:
        if text.startswith("@"):
            text = pathlib.Path(text[1:]).read_text()
        value = json.loads(text)
    except (OSError, ValueError, RecursionError, MemoryError) as exc:
        reason = str(exc) or type(exc).__name__  # (a MemoryError says nothing)
        raise argparse.ArgumentTypeError(f"not a JSON object or @file.json: {reason}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}")
    return value


def _integers(text: str) -> list[int]:
    """``"16,56,56"`` -> [16, 56, 56]."""
    return _split(text, int, "comma-separated integers")


class _Keywords:
    """A command's "encoding" group of options, each of which is, by the name it is
    parsed under, a keyword of the command's library call (see ``_keywords``)."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.group = parser.add_argument_group("encoding")
        self.names: list[str] = []

    def add_argument(self, *flags: str, **options: Any) -> None:
        self.names.append(self.group.add_argument(*flags, **options).dest)


def _dtype_option(group: Any) -> None:
    group.add_argument(
        "--dtype",
        default="float64",
        choices=["float64", "float32", "float16", "bfloat16"],
        help="output dtype (bfloat16 needs the ml_dtypes package)",
    )


def _start_option(container: Any) -> None:
    container.add_argument("--start", type=int, default=0, help="first position (default 0)")


def _table_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("n", metavar="N", type=int, help="number of positions")
    parser.add_argument("D", type=int, help="width of the encoding")


def _encoding_options(parser: argparse.ArgumentParser) -> list[str]:
    """Adds the options of ``positional_encoding``; returns their names."""
    group = _Keywords(parser)
    group.add_argument(
        "--base", type=float, default=10000.0, help="base of the frequencies (default 10000)"
    )
    _dtype_option(group)
    group.add_argument("--layout", choices=list(LAYOUTS), help="column layout")
    group.add_argument("--freq-shift", type=float, help="half-width frequencies with this shift")
    group.add_argument("--scale", type=float, default=1.0, help="multiplies every angle")
    group.add_argument("--convention", choices=sorted(CONVENTIONS), help="a named preset")
    return group.names


def _output_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("output")
    group.add_argument(
        "--format", choices=["text", "csv"], default="text", help="how to print (default text)"
    )
    group.add_argument(
        "--output", "-o", type=pathlib.Path, help="write to a .npy, .npz, .csv or .txt file instead"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="cpe", description="Fast, exact sinusoidal positional encodings."
    )
    parser.add_argument("--version", action="version", version=f"cpe {cpe.__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, parser_class=OneLineErrorParser, metavar="COMMAND"
    )

    encode = commands.add_parser(
        "encode",
        help="encoding of one position (or comma-separated positions)",
        description="Print positional_encoding(POSITION, D).",
    )
    encode.add_argument(
        "position",
        type=_positions,
        help='a position such as 3 or 998.39, or 0,1,2 (a list that starts with "-" goes'
        ' after "--": -- -1.5,2)',
    )
    encode.add_argument("D", type=int, help="width of the encoding")
    encode.set_defaults(call=_encode, keywords=_encoding_options(encode))
    _output_options(encode)

    table = commands.add_parser(
        "table",
        help="table of N consecutive positions",
        description="Print positional_encoding_table(N, D).",
    )
    _table_arguments(table)
    _start_option(table)
    table.set_defaults(call=_table, keywords=_encoding_options(table))
    _output_options(table)

    plot = commands.add_parser(
        "plot",
        help="heatmap of a table (needs matplotlib)",
        description="Plot positional_encoding_table(N, D) as a heatmap "
        "(positions x dimensions), optionally with a few dimensions as curves.",
    )
    _table_arguments(plot)
    plot.add_argument(
        "--output",
        "-o",
        type=pathlib.Path,
        required=True,
        help="image file to write (.png, .svg, .pdf)",
    )
    plot.add_argument(
        "--curves",
        type=_integers,
        help="comma-separated dimensions to draw as curves over position, e.g. 0,1,6,7",
    )
    plot.add_argument(
        "--size", default="1000x600", help="image size in pixels, WIDTHxHEIGHT (default 1000x600)"
    )
    _start_option(plot)
    plot.set_defaults(call=_plot, keywords=_encoding_options(plot))

    grid = commands.add_parser(
        "grid",
        help="2-D sincos encoding of an image grid (ViT patches)",
        description="Print sincos_2d(H, W, D): one row per token, row-major.",
    )
    grid.add_argument("grid_h", metavar="H", type=int, help="number of rows of tokens")
    grid.add_argument("grid_w", metavar="W", type=int, help="number of columns of tokens")
    grid.add_argument("D", type=int, help="width of the encoding, a multiple of 4")
    options = _Keywords(grid)
    options.add_argument("--base", type=float, default=10000.0, help="base of the frequencies")
    options.add_argument("--layout", default="mae", choices=get_args(GridLayout), help="channels")
    options.add_argument("--extra-tokens", type=int, default=0, help="leading rows of zeros")
    options.add_argument("--base-size", type=float, help="diffusers' base_size")
    options.add_argument(
        "--interpolation-scale", type=float, default=1.0, help="divides the coordinates"
    )
    options.add_argument(
        "--freq-shift", type=float, default=0.0, help="1 for vit-pytorch's frequencies"
    )
    _dtype_option(options)
    grid.set_defaults(call=_grid, keywords=options.names)
    _output_options(grid)

    rope = commands.add_parser(
        "rope",
        help="RoPE cos and sin tables, scaled as a model's config says",
        description="Print rope_cos_sin(N, HEAD_DIM): the cos table, then the sin table "
        "(.npz: arrays cos and sin; .npy: both stacked; csv and .txt: the rows of cos, "
        "then those of sin).",
    )
    rope.add_argument(
        "n",
        metavar="N",
        type=_rope_positions,
        help="number of positions, comma-separated positions, or a .npy file of position ids",
    )
    rope.add_argument("head_dim", metavar="HEAD_DIM", type=int, help="width of each table")
    options = _Keywords(rope)
    _start_option(options)
    options.add_argument("--base", type=float, default=10000.0, help="theta (default 10000)")
    options.add_argument("--layout", default="half", choices=get_args(RopeLayout))
    _dtype_option(options)
    options.add_argument(
        "--rope-parameters",
        type=_mapping,
        help='a config\'s rope_parameters as JSON, or @file.json: \'{"rope_type": "yarn", '
        '"factor": 4.0, "original_max_position_embeddings": 4096}\'',
    )
    options.add_argument("--max-position-embeddings", type=int, help="the config's value")
    options.add_argument("--seq-len", type=int, help="sequence length for dynamic/longrope")
    options.add_argument(
        "--inv-freq",
        type=_rope_positions,
        help="head_dim // 2 frequencies: comma-separated, or a .npy file",
    )
    options.add_argument(
        "--axes-dim", type=_integers, help="axial RoPE: the width of each axis, e.g. 16,56,56"
    )
    rope.set_defaults(call=_rope, keywords=options.names)
    _output_options(rope)

    # Listed here for `cpe --help`; main() hands `cpe bench ...` to the benchmark's
    # own parser, which has every option (`cpe bench --help`).
    commands.add_parser(
        "bench", help="side-by-side benchmark against NumPy (and PyTorch)", add_help=False
    )
    return parser


def _keywords(args: argparse.Namespace) -> dict[str, Any]:
    """The command's encoding options, as keywords of its library function."""
    return {name: getattr(args, name) for name in args.keywords}


def _emit(
    args: argparse.Namespace, array: npt.NDArray[Any], names: tuple[str, ...] = ("encoding",)
) -> int:
    """Print or save ``array`` as ``--format`` and ``--output`` say, and return the exit
    status, 0; with several ``names``, ``array`` stacks the arrays of those names (RoPE's
    cos and sin)."""
    parts = dict(zip(names, array, strict=True)) if len(names) > 1 else {names[0]: array}
    if args.output is None and args.format == "text":
        for name, part in parts.items():
            if len(parts) > 1:
                print(f"{name} =")
            print(np.array2string(part, threshold=sys.maxsize, max_line_width=100))
        return 0
    # Printed csv is written as a .csv file is.
    suffix = ".csv" if args.output is None else args.output.suffix.lower()
    if suffix in (".npy", ".npz") and array.dtype.name == "bfloat16":
        raise ValueError(
            f"--output: a {suffix} file cannot hold bfloat16 (NumPy saves it as bare 2-byte "
            "voids): write .csv or .txt, or use --dtype float32, which holds every bfloat16 "
            "value exactly"
        )
    if suffix == ".npy":
        np.save(args.output, array)
    elif suffix == ".npz":
        np.savez(args.output, **parts)
    elif suffix in (".csv", ".txt"):  # .txt: whitespace-separated rows, np.loadtxt reads them
        # As many digits as read each value back exactly.
        digits = {"float64": "%.17g", "float32": "%.9g", "float16": "%.5g", "bfloat16": "%.4g"}
        np.savetxt(
            sys.stdout if args.output is None else args.output,
            array.reshape(1, -1) if array.ndim == 1 else array.reshape(-1, array.shape[-1]),
            delimiter="," if suffix == ".csv" else " ",
            fmt=digits[array.dtype.name],
        )
    else:
        raise ValueError(f"--output must end in .npy, .npz, .csv or .txt, got {args.output.name!r}")
    return 0


def _encoding_table(args: argparse.Namespace) -> npt.NDArray[Any]:
    return cpe.positional_encoding_table(args.n, args.D, start=args.start, **_keywords(args))


def _encode(args: argparse.Namespace) -> int:
    return _emit(args, cpe.positional_encoding(args.position, args.D, **_keywords(args)))


def _table(args: argparse.Namespace) -> int:
    return _emit(args, _encoding_table(args))


def _grid(args: argparse.Namespace) -> int:
    return _emit(args, cpe.sincos_2d(args.grid_h, args.grid_w, args.D, **_keywords(args)))


def _rope(args: argparse.Namespace) -> int:
    cos, sin = cpe.rope_cos_sin(args.n, args.head_dim, **_keywords(args))
    if cos.ndim >= _MAX_DIMS:  # (cos and sin are written as one array, one axis more)
        raise ValueError(
            f"n: positions of {cos.ndim - 1} dimensions give tables of {cos.ndim}, and cos "
            f"and sin together {cos.ndim + 1}, more than NumPy's {_MAX_DIMS}"
        )
    return _emit(args, np.stack((cos, sin)), ("cos", "sin"))


def _plot(args: argparse.Namespace) -> int:
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        raise ValueError(f"--size must be WIDTHxHEIGHT in pixels, got {args.size!r}") from None
    if width < 100 or height < 100:
        raise ValueError(f"--size must be at least 100x100, got {args.size!r}")
    table = _encoding_table(args)
    for k in args.curves or []:
        if not 0 <= k < args.D:
            raise ValueError(f"--curves: dimension {k} is outside 0..{args.D - 1}")
    try:
        import matplotlib as mpl

        mpl.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(PLOT_HINT, file=sys.stderr)
        return 1
    dpi = 100
    panels = 2 if args.curves else 1
    figure, axes = plt.subplots(
        panels, 1, figsize=(width / dpi, height / dpi), dpi=dpi, squeeze=False
    )
    positions = np.arange(args.start, args.start + args.n)
    table = table.astype(np.float64)  # what matplotlib draws (bfloat16 too)
    image = axes[0, 0].imshow(
        table,
        aspect="auto",
        cmap="RdBu",
        vmin=-1,
        vmax=1,
        interpolation="nearest",
        extent=(-0.5, args.D - 0.5, positions[-1] + 0.5 if args.n else 0.5, args.start - 0.5),
    )
    axes[0, 0].set_xlabel("dimension")
    axes[0, 0].set_ylabel("position")
    axes[0, 0].set_title(f"positional encoding, {args.n} positions x {args.D} dimensions")
    figure.colorbar(image, ax=axes[0, 0])
    if args.curves:
        for k in args.curves:
            axes[1, 0].plot(positions, table[:, k], label=f"dim {k}")
        axes[1, 0].set_xlabel("position")
        axes[1, 0].legend(loc="upper right", fontsize="small")
    figure.tight_layout()
    figure.savefig(args.output, dpi=dpi)
    plt.close(figure)
    print(f"wrote {args.output}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (`cpe table 1000 8 | head -1`): stop quietly, and keep
        # Python from complaining again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(argv: Sequence[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        from cpe.benchmark import run

        return run.main(argv[1:], prog="cpe bench")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.call(args)
    except BrokenPipeError:
        raise
    except (TypeError, ValueError, OverflowError, MemoryError, OSError, ImportError) as exc:
        parser.exit(2, f"cpe {args.command}: error: {exc}\n")
    return status
