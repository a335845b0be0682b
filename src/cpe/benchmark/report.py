"""Present the results: readable tables for people, a JSON document for tools."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cpe.benchmark.cases import CPE, NUMPY
from cpe.benchmark.cold import KINDS as COLD_KINDS
from cpe.benchmark.cold import MODES, ColdResult
from cpe.benchmark.timing import MIN_SAMPLE_NS, GroupResult

JSON_SCHEMA = "cpe-benchmark/1"
LABEL_WIDTH = 32
CELL_WIDTH = 17

LEGEND = """\
Times: median over rounds of the time per call. Each round runs every competitor of a
column once, in a shuffled order. "A / B": median over rounds of time(A) / time(B),
taken within each round; "NumPy / cpe" = 40x means cpe is 40 times faster. Floors
only allocate and write memory: "cpe / floor" says how close cpe comes to them."""


def format_time(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def format_ratio(ratio: float) -> str:
    return f"{ratio:.3g}x"


def _table(title: str, columns: list[str], rows: list[tuple[str, list[str]]]) -> str:
    def line(label: str, cells: list[str]) -> str:
        # A space before every cell keeps over-long cells apart.
        return label.ljust(LABEL_WIDTH) + "".join(
            " " + cell.rjust(CELL_WIDTH - 1) for cell in cells
        )

    return "\n".join([title, line("", columns)] + [line(*row) for row in rows])


def _group_section(title: str, results: list[GroupResult]) -> str:
    """One table: a column per group, a row per competitor then per ratio."""
    labels: list[str] = []
    ratios = []
    for result in results:
        labels += [c.label for c in result.group.competitors if c.label not in labels]
        ratios += [r for r in result.group.ratios if r not in ratios]
    rows = [
        (
            label,
            [format_time(r.time_ns(label).median) if r.has(label) else "-" for r in results],
        )
        for label in labels
    ]
    rows += [
        (
            ratio.label,
            [
                format_ratio(r.ratio(ratio).median)
                if r.has(ratio.numerator) and r.has(ratio.denominator)
                else "-"
                for r in results
            ],
        )
        for ratio in ratios
    ]
    rows.append(("rounds", [str(r.rounds) for r in results]))
    return _table(title, [r.group.column for r in results], rows)


def _cold_section(kind: str, cold: list[ColdResult]) -> str:
    """One table: a column per size, three rows (cpe, NumPy, ratio) per mode."""
    sizes = list(dict.fromkeys(c.case.size for c in cold))
    by_key = {(c.case.mode, c.case.size): c for c in cold}
    rows = []
    for mode in MODES:
        cells = [by_key.get((mode, size)) for size in sizes]
        for label in (CPE, NUMPY):
            times = [format_time(c.time_ns(label).median) if c else "-" for c in cells]
            rows.append((f"{label} ({mode})", times))
        ratios = [format_ratio(c.numpy_over_cpe()) if c else "-" for c in cells]
        rows.append((f"{NUMPY} / {CPE} ({mode})", ratios))
    processes = max(len(s) for c in cold for s in c.samples_ns.values())
    what = "single vector" if kind == "single" else "table (n x D)"
    title = f"{what} cold, float64: one call per fresh process, median of {processes}"
    return _table(title, sizes, rows)


@dataclass(frozen=True)
class TargetCheck:
    """One target: a measured ratio compared with ``threshold`` (>= or <=)."""

    description: str
    threshold: float
    at_least: bool  # True: met when measured >= threshold; False: when <=
    measured: float | None  # None: not measured
    spread: str = ""  # how the measured value varied, in words

    @property
    def met(self) -> bool | None:
        if self.measured is None:
            return None
        return self.measured >= self.threshold if self.at_least else self.measured <= self.threshold

    @property
    def goal(self) -> str:
        return f"{'>=' if self.at_least else '<='} {self.threshold:g}"


def _targets_section(targets: list[TargetCheck]) -> str:
    lines = ["Targets of the performance issue (a report: a target not met is not an error)"]
    width = max(len(t.description) for t in targets)
    for target in targets:
        status = {True: "met", False: "NOT MET", None: "n/a"}[target.met]
        measured = "not measured" if target.measured is None else format_ratio(target.measured)
        line = f"  {status:8} {target.description.ljust(width)}  {target.goal:>6}  {measured:>8}"
        lines.append(f"{line}  ({target.spread})" if target.spread else line)
    return "\n".join(lines)


def format_report(
    environment: dict[str, Any],
    groups: list[GroupResult],
    cold: list[ColdResult],
    targets: list[TargetCheck],
    notes: list[str],
) -> str:
    header = "cpe benchmark: " + ", ".join(
        f"{k} {v}" for k, v in environment.items() if v is not None
    )
    parts = [header, LEGEND]
    sections: dict[str, list[GroupResult]] = {}
    for result in groups:
        sections.setdefault(result.group.section, []).append(result)
    parts += [_group_section(title, results) for title, results in sections.items()]
    for kind in COLD_KINDS:
        of_kind = [c for c in cold if c.case.kind == kind]
        if of_kind:
            parts.append(_cold_section(kind, of_kind))
    if targets:
        parts.append(_targets_section(targets))
    parts += [f"Note: {note}" for note in notes]
    return "\n\n".join(parts) + "\n"


def _group_json(result: GroupResult) -> dict[str, Any]:
    group = result.group
    competitors = []
    for c in group.competitors:
        spread = result.time_ns(c.label)
        competitors.append(
            {
                "label": c.label,
                "role": c.role,
                "stmt": c.stmt,
                "inner_reps": result.inner_reps[c.label],
                "median_ns": spread.median,
                "q1_ns": spread.q1,
                "q3_ns": spread.q3,
                "samples_ns": result.samples_ns[c.label],
            }
        )
    ratios = []
    for ratio in group.ratios:
        spread = result.ratio(ratio)
        ratios.append(
            {
                "label": ratio.label,
                "numerator": ratio.numerator,
                "denominator": ratio.denominator,
                "median": spread.median,
                "q1": spread.q1,
                "q3": spread.q3,
            }
        )
    return {
        "kind": group.kind,
        "name": group.name,
        "section": group.section,
        "column": group.column,
        "params": group.params,
        "rounds": result.rounds,
        "seconds": result.seconds,
        "competitors": competitors,
        "ratios": ratios,
    }


def _cold_json(result: ColdResult) -> dict[str, Any]:
    case = result.case
    return {
        "kind": case.kind,
        "mode": case.mode,
        "n": case.n,
        "D": case.D,
        "implementations": {
            label: {"median_ns": result.time_ns(label).median, "samples_ns": samples}
            for label, samples in result.samples_ns.items()
        },
        "numpy_over_cpe": result.numpy_over_cpe(),
    }


def _target_json(target: TargetCheck) -> dict[str, Any]:
    return {
        "description": target.description,
        "goal": target.goal,
        "threshold": target.threshold,
        "at_least": target.at_least,
        "measured": target.measured,
        "met": target.met,
        "spread": target.spread,
    }


def report_json(
    environment: dict[str, Any],
    settings: dict[str, Any],
    groups: list[GroupResult],
    cold: list[ColdResult],
    targets: list[TargetCheck],
    notes: list[str],
) -> dict[str, Any]:
    return {
        "schema": JSON_SCHEMA,
        "environment": environment,
        "settings": {**settings, "min_sample_ns": MIN_SAMPLE_NS},
        "groups": [_group_json(r) for r in groups],
        "cold": [_cold_json(c) for c in cold],
        "targets": [_target_json(t) for t in targets],
        "notes": notes,
    }
