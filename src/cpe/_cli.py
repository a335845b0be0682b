"""The ``cpe`` command: print, save or plot encodings, and run the benchmark.

Usage errors print one line and exit with status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

import cpe
from cpe._argparse import OneLineErrorParser
from cpe._conventions import CONVENTIONS

PLOT_HINT = "cpe plot needs matplotlib: pip install matplotlib"


def _position(part: str) -> int | float:
    """``"3"`` -> 3 (exactly, however long), ``"2.5"`` or ``"1e3"`` -> a float."""
    try:
        return int(part)
    except ValueError:
        return float(part)


def _positions(text: str) -> list[int | float] | int | float:
    """``"3"`` -> 3, ``"2.5"`` -> 2.5, ``"0,1,7"`` -> a list of positions."""
    try:
        values = [_position(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a position or comma-separated positions: {text!r}"
        ) from None
    return values if "," in text else values[0]


def _encoding_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("encoding")
    group.add_argument(
        "--base", type=float, default=10000.0, help="base of the frequencies (default 10000)"
    )
    group.add_argument(
        "--dtype", default="float64", choices=["float64", "float32", "float16"], help="output dtype"
    )
    group.add_argument(
        "--layout", choices=["interleaved", "sin_cos", "cos_sin"], help="column layout"
    )
    group.add_argument("--freq-shift", type=float, help="half-width frequencies with this shift")
    group.add_argument("--scale", type=float, default=1.0, help="multiplies every angle")
    group.add_argument("--convention", choices=sorted(CONVENTIONS), help="a named preset")


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
    _encoding_options(encode)
    _output_options(encode)

    table = commands.add_parser(
        "table",
        help="table of N consecutive positions",
        description="Print positional_encoding_table(N, D).",
    )
    table.add_argument("n", metavar="N", type=int, help="number of positions")
    table.add_argument("D", type=int, help="width of the encoding")
    table.add_argument("--start", type=int, default=0, help="first position (default 0)")
    _encoding_options(table)
    _output_options(table)

    plot = commands.add_parser(
        "plot",
        help="heatmap of a table (needs matplotlib)",
        description="Plot positional_encoding_table(N, D) as a heatmap "
        "(positions x dimensions), optionally with a few dimensions as curves.",
    )
    plot.add_argument("n", metavar="N", type=int, help="number of positions")
    plot.add_argument("D", type=int, help="width of the encoding")
    plot.add_argument(
        "--output",
        "-o",
        type=pathlib.Path,
        required=True,
        help="image file to write (.png, .svg, .pdf)",
    )
    plot.add_argument(
        "--curves",
        type=lambda text: [int(k) for k in text.split(",")],
        help="comma-separated dimensions to draw as curves over position, e.g. 0,1,6,7",
    )
    plot.add_argument(
        "--size", default="1000x600", help="image size in pixels, WIDTHxHEIGHT (default 1000x600)"
    )
    plot.add_argument("--start", type=int, default=0, help="first position (default 0)")
    _encoding_options(plot)

    # Listed here for `cpe --help`; main() hands `cpe bench ...` to the benchmark's
    # own parser, which has every option (`cpe bench --help`).
    commands.add_parser(
        "bench", help="side-by-side benchmark against NumPy (and PyTorch)", add_help=False
    )
    return parser


def _keywords(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "base": args.base,
        "dtype": args.dtype,
        "layout": args.layout,
        "freq_shift": args.freq_shift,
        "scale": args.scale,
        "convention": args.convention,
    }


def _emit(array: npt.NDArray[Any], fmt: str, output: pathlib.Path | None) -> None:
    digits = {"float64": "%.17g", "float32": "%.9g", "float16": "%.5g"}[array.dtype.name]
    rows = array.reshape(1, -1) if array.ndim == 1 else array.reshape(-1, array.shape[-1])
    if output is None:
        if fmt == "csv":
            np.savetxt(sys.stdout, rows, delimiter=",", fmt=digits)
        else:
            print(np.array2string(array, threshold=sys.maxsize, max_line_width=100))
        return
    suffix = output.suffix.lower()
    if suffix == ".npy":
        np.save(output, array)
    elif suffix == ".npz":
        np.savez(output, encoding=array)
    elif suffix == ".csv":
        np.savetxt(output, rows, delimiter=",", fmt=digits)
    elif suffix == ".txt":  # whitespace-separated rows: np.loadtxt reads them back
        np.savetxt(output, rows, fmt=digits)
    else:
        raise ValueError(f"--output must end in .npy, .npz, .csv or .txt, got {output.name!r}")


def _plot(args: argparse.Namespace) -> int:
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        raise ValueError(f"--size must be WIDTHxHEIGHT in pixels, got {args.size!r}") from None
    if width < 100 or height < 100:
        raise ValueError(f"--size must be at least 100x100, got {args.size!r}")
    table = cpe.positional_encoding_table(args.n, args.D, start=args.start, **_keywords(args))
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
    image = axes[0, 0].imshow(
        table.astype(np.float64),
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
        if args.command == "encode":
            _emit(
                cpe.positional_encoding(args.position, args.D, **_keywords(args)),
                args.format,
                args.output,
            )
        elif args.command == "table":
            table = cpe.positional_encoding_table(
                args.n, args.D, start=args.start, **_keywords(args)
            )
            _emit(table, args.format, args.output)
        elif args.command == "plot":
            return _plot(args)
    except BrokenPipeError:
        raise
    except (TypeError, ValueError, OverflowError, MemoryError, OSError) as exc:
        parser.exit(2, f"cpe {args.command}: error: {exc}\n")
    return 0
