"""Check that a results file written by ``bench.py --json`` is complete and well formed.

Usage: ``python benchmarks/check_results.py PATH [--kinds single,table,...]``.
It checks structure only: what was measured, never how fast. Exit status 1 and
one line per problem when something is missing.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from cpe.benchmark.report import JSON_SCHEMA

TOP_KEYS = ("schema", "environment", "settings", "groups", "cold", "targets", "notes")
GROUP_KEYS = (
    "kind",
    "name",
    "section",
    "column",
    "params",
    "rounds",
    "competitors",
    "ratios",
)
COMPETITOR_KEYS = ("label", "role", "stmt", "inner_reps", "median_ns", "samples_ns")
RATIO_KEYS = ("label", "numerator", "denominator", "median", "q1", "q3")
COLD_KEYS = ("kind", "mode", "n", "D", "implementations", "numpy_over_cpe")
TARGET_KEYS = ("description", "goal", "measured", "met")


def _is_positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _missing(entry: dict[str, Any], keys: tuple[str, ...], where: str) -> list[str]:
    return [f"{where}: missing key {key!r}" for key in keys if key not in entry]


def _group_problems(group: dict[str, Any]) -> list[str]:
    where = f"group {group.get('name', '?')}"
    problems = _missing(group, GROUP_KEYS, where)
    if problems:
        return problems
    if not group["competitors"]:
        problems.append(f"{where}: no competitors")
    for competitor in group["competitors"]:
        problems += _missing(competitor, COMPETITOR_KEYS, where)
        if not _is_positive(competitor.get("median_ns")):
            problems.append(
                f"{where}: {competitor.get('label')}: median_ns is not a positive number"
            )
    for ratio in group["ratios"]:
        problems += _missing(ratio, RATIO_KEYS, where)
        if not _is_positive(ratio.get("median")):
            problems.append(f"{where}: {ratio.get('label')}: median is not a positive number")
    return problems


def problems_in(document: dict[str, Any], kinds: list[str]) -> list[str]:
    """Every structural problem found, as readable lines; empty when the file is fine."""
    problems = _missing(document, TOP_KEYS, "results")
    if problems:
        return problems
    if document["schema"] != JSON_SCHEMA:
        problems.append(f"results: schema is {document['schema']!r}, expected {JSON_SCHEMA!r}")
    for group in document["groups"]:
        problems += _group_problems(group)
    for cold in document["cold"]:
        problems += _missing(cold, COLD_KEYS, f"cold {cold.get('mode')} D={cold.get('D')}")
    for target in document["targets"]:
        problems += _missing(target, TARGET_KEYS, f"target {target.get('description', '?')}")
    measured_kinds = {group.get("kind") for group in document["groups"]}
    if document["cold"]:
        measured_kinds.add("cold")
    problems += [
        f"results: no {kind!r} measurement" for kind in kinds if kind not in measured_kinds
    ]
    if not document["targets"]:
        problems.append("results: no targets evaluated")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument(
        "--kinds",
        help="kinds of measurement that must be present (default: those the file says it ran)",
    )
    args = parser.parse_args(argv)
    try:
        document = json.loads(args.path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        sys.stderr.write(f"{args.path}: cannot read results: {error}\n")
        return 1
    if args.kinds is not None:
        kinds = args.kinds.split(",")
    else:
        settings = document.get("settings")
        kinds = settings.get("kinds") if isinstance(settings, dict) else None
        if not isinstance(kinds, list) or not kinds:
            sys.stderr.write(f"{args.path}: settings.kinds missing: pass --kinds\n")
            return 1
    problems = problems_in(document, kinds)
    for problem in problems:
        sys.stderr.write(f"{args.path}: {problem}\n")
    if problems:
        return 1
    sys.stdout.write(
        f"{args.path}: well formed: {len(document['groups'])} groups, "
        f"{len(document['cold'])} cold cases, {len(document['targets'])} targets\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
