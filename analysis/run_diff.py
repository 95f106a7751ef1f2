"""``fedssl diff RUN_A RUN_B``: two runs compared value by value, to tell whether one reproduces the other.

Every value of both runs' ``metrics.parquet`` is matched by (round, name). The names under ``time/``
and ``memory/`` are left out: they belong to the machine and the moment, not to the computation. A
run that stopped early is compared as far as both got (up to the smaller of the two last rounds). Names
that only one run logged (a metric added by later code, e.g. the raw-pixel reference) are listed and
not counted as differences; a value of a name both runs log, at a round one of them lacks (an
evaluation one run made and the other did not), is counted as missing, and B then does not reproduce
A; a NaN that both runs logged is a value reproduced. The text gives how many
values were compared and how many differ, the largest difference and the first (round, name) that
differs, and for each run its round-0 and last backbone kNN and linear probe, its code and its numerics
(``summary.json``, where the run finished).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path

from analysis.report import check_provenance
from simulator.runlog import check_existing_directory, read_metrics, read_summary

MACHINE_DEPENDENT = ("time/", "memory/")
HEADLINE = ("eval/knn_top1", "eval/linear_top1")


def logged_values(run_dir: Path) -> dict[tuple[int, str], float]:
    """The run's logged values by (round, name), the machine-dependent names left out; raises
    ValueError for a directory without ``metrics.parquet`` or one whose table holds no row."""
    path = run_dir / "metrics.parquet"
    check_existing_directory(run_dir, "run directory")
    if not path.exists():
        raise ValueError(f"{run_dir}: no metrics.parquet (expected a run directory whose run has logged a round)")
    rows = read_metrics(path)
    if not rows:
        raise ValueError(f"{path}: no value logged (expected a run directory whose run has logged a round)")
    return {(row["round"], row["name"]): row["value"] for row in rows if not row["name"].startswith(MACHINE_DEPENDENT)}


@dataclass(frozen=True)
class RunDiff:
    last_round: int  # values of rounds 0..last_round compared
    compared: int
    differing: tuple[tuple[tuple[int, str], float, float], ...]  # ((round, name), value in A, value in B)
    only_a: tuple[str, ...]  # names logged by A alone (up to last_round)
    only_b: tuple[str, ...]
    missing: tuple[tuple[tuple[int, str], str], ...] = ()  # ((round, name), the run lacking it) of shared names

    @property
    def reproduces(self) -> bool:
        return self.compared > 0 and not self.differing and not self.missing


def same(x: float, y: float) -> bool:
    """The same bits, or both NaN (a NaN logged by both runs is a value reproduced); -0.0 and 0.0,
    equal as numbers, differ (a computation that reproduces gives the same sign)."""
    return struct.pack("<d", x) == struct.pack("<d", y) or (math.isnan(x) and math.isnan(y))


def diff_runs(a: dict[tuple[int, str], float], b: dict[tuple[int, str], float]) -> RunDiff:
    """``a`` against ``b`` (as :func:`logged_values` gives them), up to the last round both logged."""
    last = min(max((r for r, _ in a), default=-1), max((r for r, _ in b), default=-1))
    a = {key: value for key, value in a.items() if key[0] <= last}
    b = {key: value for key, value in b.items() if key[0] <= last}
    common = sorted(set(a) & set(b))
    differing = tuple((key, a[key], b[key]) for key in common if not same(a[key], b[key]))
    names_a, names_b = {name for _, name in a}, {name for _, name in b}
    shared = names_a & names_b
    missing = tuple(sorted([(key, "B") for key in set(a) - set(b) if key[1] in shared]
                           + [(key, "A") for key in set(b) - set(a) if key[1] in shared]))
    return RunDiff(last, len(common), differing, tuple(sorted(names_a - names_b)), tuple(sorted(names_b - names_a)),
                   missing)


def headline(values: dict[tuple[int, str], float]) -> str:
    """Round 0 → last evaluated round of the backbone kNN and the probe, in %."""
    parts = []
    for name in HEADLINE:
        rounds = sorted(r for r, n in values if n == name)
        if rounds:
            parts.append(f"{name.split('/')[-1]} {100 * values[rounds[0], name]:.2f} (round {rounds[0]}) → "
                         f"{100 * values[rounds[-1], name]:.2f} (round {rounds[-1]})")
    return ", ".join(parts) or "no evaluation logged"


def provenance(run_dir: Path) -> str:
    path = run_dir / "summary.json"
    if not path.is_file():
        return "no summary.json (unfinished, or not kept)"
    summary = read_summary(run_dir)
    check_provenance(path, summary)
    code, numerics = summary.get("code"), summary.get("numerics")
    return (f"code {'; '.join(code) if code else 'not recorded'}, "
            f"numerics {'; '.join(numerics) if numerics else 'not recorded'}")


def diff_text(run_a: Path, run_b: Path) -> tuple[str, bool]:
    """The comparison as text, and whether B reproduces A (every common value equal, at least one,
    none missing)."""
    a, b = logged_values(run_a), logged_values(run_b)
    result = diff_runs(a, b)
    lines = [f"A: {run_a}: {headline(a)}; {provenance(run_a)}",
             f"B: {run_b}: {headline(b)}; {provenance(run_b)}",
             (f"rounds 0-{result.last_round}" if result.last_round >= 0 else "no round logged by both runs")
             + f": {result.compared} values compared (time/ and memory/ left out), {len(result.differing)} differ"]
    if result.differing:
        (round_index, name), value_a, value_b = result.differing[0]
        largest = max(result.differing, key=lambda item: abs(item[1] - item[2]))
        lines.append(f"first differing: round {round_index} {name}: {value_a!r} (A) against {value_b!r} (B); "
                     f"largest difference {abs(largest[1] - largest[2]):.3g} ({largest[0][1]}, round {largest[0][0]})")
    for label, names in (("A", result.only_a), ("B", result.only_b)):
        if names:
            lines.append(f"logged by {label} alone (not compared): {', '.join(names)}")
    if result.missing:
        ((round_index, name), lacking), = result.missing[:1]
        lines.append(f"{len(result.missing)} values of names both runs log are missing from one run; first: round "
                     f"{round_index} {name}, missing from {lacking}")
    verdict = ("B reproduces A bitwise" if result.reproduces else
               "nothing to compare: the runs share no logged value" if not result.compared else
               "B does not reproduce A")
    return "\n".join(lines + [verdict]) + "\n", result.reproduces
