"""Benchmark cpe side by side with the NumPy and PyTorch code users write, and with the floors.

Run from anywhere, with cpe installed::

    cpe bench                             # the full run, a few minutes
    cpe bench --quick                     # a smoke run, under a minute
    python -m cpe.benchmark --only table,cold --json results.json
    python benchmarks/bench.py ...        # the same, from a checkout

It prints one table per kind of call (single vector, table, arbitrary position ids,
cold first call); from a checkout, benchmarks/bench.py then prints the performance
issue's targets, met or not. Timing results never change the exit status: it is a
report.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import ModuleType

import numpy as np

from cpe._argparse import OneLineErrorParser
from cpe.benchmark.agreement import check_agreement
from cpe.benchmark.cases import (
    add_group,
    apply_bf16_group,
    apply_group,
    argument_forms_group,
    decode_group,
    grid_group,
    multi_axis_group,
    positions_group,
    rope_group,
    rope_positions_group,
    single_vector_group,
    table_group,
    workers_group,
)
from cpe.benchmark.cold import ColdResult, cold_cases, measure_cold
from cpe.benchmark.environment import describe_environment
from cpe.benchmark.report import TargetCheck, format_report, report_json
from cpe.benchmark.timing import Group, GroupResult, time_group

# rope: tables, ids and multi-axis ids; apply: RoPE applied to q and k (a sequence,
# a decoding step) and the encoding added to x; workers: tables filled by several threads
KINDS = ("single", "table", "positions", "grid", "rope", "apply", "workers", "cold")
ROPE_POSITIONS_HEAD_DIM = 128  # Llama's
DTYPES = (np.float64, np.float32)


@dataclass(frozen=True)
class Plan:
    """The sizes to measure and how long to spend on them."""

    single_widths: tuple[int, ...]
    table_sizes: tuple[tuple[int, int], ...]
    position_shapes: tuple[tuple[int, int], ...]
    position_width: int
    grids: tuple[tuple[int, int], ...]  # (size, D) of a size x size grid
    ropes: tuple[tuple[int, int], ...]  # (n, head_dim)
    apply_lengths: tuple[int, ...]  # seq of RoPE applied to q and k (see cases.apply_group)
    rope_position_shapes: tuple[tuple[int, int], ...]  # (batch, seq) at ROPE_POSITIONS_HEAD_DIM
    workers_tables: tuple[tuple[int, int], ...]  # float64 (n, D) at workers=1, 2, -1
    cold_widths: tuple[int, ...]
    cold_tables: tuple[tuple[int, int], ...]
    cold_processes: int
    # Rounds cost nothing for small calls, and a busy machine preempts some of
    # them for milliseconds: many rounds keep the medians clear of it. Large
    # sizes stop on the time budget instead (after timing.MIN_ROUNDS rounds).
    rounds: int
    group_budget_seconds: float


FULL = Plan(
    single_widths=(4, 64, 512, 4096),
    table_sizes=((512, 512), (2048, 1024), (8192, 1024), (65536, 512)),
    position_shapes=((32, 2048),),
    position_width=512,
    grids=((14, 768), (64, 1024)),
    ropes=((8192, 128), (65536, 128)),
    apply_lengths=(4096,),
    rope_position_shapes=((1, 4096), (8, 4096)),
    workers_tables=((256, 256), (8192, 512), (131072, 512)),
    cold_widths=(4, 64, 512, 4096),
    cold_tables=((512, 512), (2048, 1024)),
    cold_processes=7,
    rounds=101,
    group_budget_seconds=20.0,
)

# Every kind of call, one table of each memory regime and a quarter of the
# position ids, few rounds: a smoke run that fits a CI stage.
QUICK = Plan(
    single_widths=(64, 512),
    table_sizes=((512, 512), (8192, 1024)),
    position_shapes=((8, 2048),),
    position_width=512,
    grids=((14, 768),),
    ropes=((8192, 128),),
    apply_lengths=(256,),
    rope_position_shapes=((1, 4096),),
    workers_tables=((256, 256), (8192, 512)),
    cold_widths=(512,),
    cold_tables=((512, 512),),
    cold_processes=3,
    rounds=15,
    group_budget_seconds=2.0,
)


def _widths(text: str) -> tuple[int, ...]:
    """ "64,512" -> (64, 512); widths are even: the usual code needs it."""
    try:
        widths = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"widths are integers such as 64,512, got {text!r}"
        ) from None
    if any(D < 2 or D % 2 for D in widths):
        raise argparse.ArgumentTypeError(f"widths must be even and >= 2, got {text}")
    return widths


# The largest table timed (float64 values): its buffers and NumPy's competitors
# take several times its size.
_LARGEST_TABLE_VALUES = 2**28


def _table_sizes(text: str) -> tuple[tuple[int, int], ...]:
    """ "512x512,8192x1024" -> ((512, 512), (8192, 1024))."""
    sizes = []
    for part in text.split(","):
        n, x, D = part.partition("x")
        if not x or not n.isdigit():
            raise argparse.ArgumentTypeError(f"table sizes are NxD such as 512x512, got {text!r}")
        size = (int(n), _widths(D)[0])
        if size[0] * size[1] > _LARGEST_TABLE_VALUES:
            raise argparse.ArgumentTypeError(
                f"tables of at most {_LARGEST_TABLE_VALUES} values (2 GiB in float64) are "
                f"timed, got {part}"
            )
        sizes.append(size)
    return tuple(sizes)


def _seed(text: str) -> int:
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if seed < 0:
        raise argparse.ArgumentTypeError(f"a seed is an integer >= 0, got {text!r}")
    return seed


def progress(line: str) -> None:
    """A line on stderr, at once: the report itself goes to stdout at the end."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def parse_args(argv: list[str] | None, prog: str | None = None) -> argparse.Namespace:
    parser = OneLineErrorParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: fewer sizes and rounds (under a minute)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="also write the results as JSON to PATH",
    )
    parser.add_argument(
        "--only",
        type=lambda text: tuple(text.split(",")),
        default=KINDS,
        metavar="KINDS",
        help=f"comma-separated kinds to run, among {','.join(KINDS)} (default: all)",
    )
    parser.add_argument(
        "--widths",
        type=_widths,
        metavar="D,D,...",
        help="single-vector and cold widths (default: 4,64,512,4096)",
    )
    parser.add_argument(
        "--tables",
        type=_table_sizes,
        metavar="NxD,...",
        help="table sizes, warm and cold "
        "(default: 512x512,2048x1024,8192x1024,65536x512; cold: the first two)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="rounds per group (default: 101, quick: 15); "
        "large sizes stop earlier, on a time budget",
    )
    parser.add_argument(
        "--no-torch",
        action="store_true",
        help="leave PyTorch out even when it is installed",
    )
    parser.add_argument(
        "--seed",
        type=_seed,
        default=2024,
        help="seed of positions and shuffles (default: 2024)",
    )
    args = parser.parse_args(argv)
    unknown = set(args.only) - set(KINDS)
    if unknown:
        parser.error(
            f"--only: unknown kind(s) {', '.join(sorted(unknown))}; choose among {', '.join(KINDS)}"
        )
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json: the folder {str(args.json.parent)!r} does not exist")
    return args


def choose_plan(args: argparse.Namespace) -> Plan:
    """The full or quick plan, with the sizes and rounds given on the command line."""
    plan = QUICK if args.quick else FULL
    if args.rounds is not None:
        plan = replace(plan, rounds=args.rounds)
    if args.widths is not None:
        plan = replace(plan, single_widths=args.widths, cold_widths=args.widths)
    if args.tables is not None:
        plan = replace(plan, table_sizes=args.tables, cold_tables=args.tables)
    return plan


def import_torch(wanted: bool) -> tuple[ModuleType | None, str | None]:
    """PyTorch pinned to one thread, or None and a note saying why it is left out."""
    if not wanted:
        return None, "PyTorch left out (--no-torch)."
    try:
        import torch
    except (ImportError, OSError) as error:
        return None, f"PyTorch is not importable ({error}): its rows are skipped."
    torch.set_num_threads(1)  # compared single-threaded, like NumPy
    return torch, None


def build_groups(
    plan: Plan, kinds: tuple[str, ...], torch: ModuleType | None, seed: int
) -> list[Group]:
    rng = np.random.default_rng(seed)
    groups = []
    if "single" in kinds:
        groups += [
            single_vector_group(D, dtype, rng) for dtype in DTYPES for D in plan.single_widths
        ]
        groups.append(argument_forms_group(rng))
    if "table" in kinds:
        groups += [
            table_group(n, D, dtype, rng, torch) for dtype in DTYPES for n, D in plan.table_sizes
        ]
    if "positions" in kinds:
        groups += [
            positions_group(shape, plan.position_width, np.float64, rng)
            for shape in plan.position_shapes
        ]
    if "grid" in kinds:
        groups += [grid_group(size, D) for size, D in plan.grids]
    if "rope" in kinds:
        groups += [rope_group(n, head_dim, rng) for n, head_dim in plan.ropes]
        groups += [
            rope_positions_group(shape, ROPE_POSITIONS_HEAD_DIM, rng)
            for shape in plan.rope_position_shapes
        ]
        groups += [multi_axis_group(model, rng) for model in ("flux", "qwen2_vl")]
    if "apply" in kinds:
        groups += [apply_group(seq, rng) for seq in plan.apply_lengths]
        groups += [g for seq in plan.apply_lengths if (g := apply_bf16_group(seq, rng))]
        groups += [decode_group(rng), add_group(rng)]
    if "workers" in kinds:
        groups += [workers_group(n, D, rng) for n, D in plan.workers_tables]
    return groups


def run_groups(groups: list[Group], plan: Plan, rng: random.Random) -> list[GroupResult]:
    results = []
    for number, group in enumerate(groups, 1):
        check_agreement(group)
        result = time_group(group, plan.rounds, plan.group_budget_seconds, rng)
        # The report needs only the description: free the buffers (up to 256 MiB).
        group.names.clear()
        group.args.clear()
        done = f"{result.rounds} rounds in {result.seconds:.2f} s"
        progress(f"[{number}/{len(groups)}] {group.name}: {done}")
        results.append(result)
    return results


def main(
    argv: list[str] | None = None,
    prog: str | None = None,
    evaluate: Callable[[list[GroupResult], list[ColdResult]], list[TargetCheck]] | None = None,
) -> int:
    """Run the benchmark and print its report; ``evaluate`` adds the targets met
    or not (``benchmarks/targets.py`` in a checkout)."""
    args = parse_args(argv, prog)
    plan = choose_plan(args)
    # PyTorch competes on tables only.
    torch, torch_note = import_torch(not args.no_torch) if "table" in args.only else (None, None)
    notes = [torch_note] if torch_note else []
    environment = describe_environment(torch)
    rng = random.Random(args.seed)

    groups = run_groups(build_groups(plan, args.only, torch, args.seed), plan, rng)
    cold = []
    if "cold" in args.only:
        progress(f"cold: {plan.cold_processes} fresh processes per case ...")
        cases = cold_cases(list(plan.cold_widths), list(plan.cold_tables))
        cold = measure_cold(cases, plan.cold_processes, rng)
    targets = evaluate(groups, cold) if evaluate is not None else []

    sys.stdout.write(format_report(environment, groups, cold, targets, notes))
    if args.json is not None:
        settings = {
            "quick": args.quick,
            "kinds": list(args.only),
            "seed": args.seed,
            "plan": asdict(plan),
        }
        document = report_json(environment, settings, groups, cold, targets, notes)
        args.json.write_text(json.dumps(document, indent=1) + "\n")
        progress(f"JSON written to {args.json}")
    return 0
