"""The claims at a glance (``fedssl claims``): one table over a folder of kept claim reports.

A claim report (``results/claims/*.md``) is, from its ``# Claim`` line on, what ``fedssl claim SUITE
--runs-dir RUNS --no-run`` prints; its line ``Suite `SUITE`; runs in `RUNS`;`` names both. For each
report this recomputes, from that suite and those runs (not from the report's text), what decides
the claim: each deciding comparison's paired difference on the primary metric, its 95% interval and
verdict (:func:`analysis.claims.decisions`), and beside it each arm of the comparison's round 0 and
final on that metric (means over the seeds) with the gain's interval, an arm not shown to learn
said so. A report of some of its suite's arms (``fedssl claim --arms``; its ``Suite`` line names the
arms left out) is recomputed over those arms, its claim ``partial`` where they take a deciding
comparison away, as that command decides. A report whose runs folder is absent is listed under the
table with its own verdict line, unrecomputed; a suite whose runs have not all finished gets its
interim numbers and no verdict. Reports whose runs differ from their suite's scenario files as they are
now (a file changed after the runs, as :func:`analysis.claims.stale_notes` tells ``fedssl claim``) are
listed under the table with the keys they differ at: the rows use the runs as they are.
The folder's ``README.md`` (where this table is kept) is not a report.
"""
from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from pathlib import Path

from analysis.claims import (ARMS_LEFT_OUT, arm_scenarios, boundaries, decisions, differences, finished_seeds,
                             gain_cell, gain_over_round0, interval_text, keys_text, metric_value, overall, read_runs,
                             read_suite, restrict_to_arms, run_states, RunState)
from analysis.report import percent
from simulator.runlog import check_existing_directory, read_recorded_scenario

INDEX = "README.md"
SOURCE_LINE = "Suite `"


def report_text(report: Path) -> str:
    """The report's text; ``ValueError`` naming it where it is not UTF-8."""
    try:
        return report.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{report}: not UTF-8 text; expected a claim report (the markdown fedssl claim "
                         f"prints)") from None


def source_line(report: Path) -> str:
    """The report's ``Suite `S`; runs in `R`; ...`` line; ``ValueError`` for a file without one."""
    for line in report_text(report).splitlines():
        parts = line.split("`")
        if line.startswith(SOURCE_LINE) and len(parts) >= 4 and parts[2] == "; runs in ":
            return line
    raise ValueError(f"{report}: expected a claim report (a line \"Suite `SUITE`; runs in `RUNS`; ...\", as fedssl "
                     f"claim prints), found none")


def report_sources(report: Path) -> tuple[str, str]:
    """The suite file and runs folder a report's ``Suite `S`; runs in `R`;`` line names; ``ValueError``
    for a file without that line."""
    parts = source_line(report).split("`")
    return parts[1], parts[3]


def left_out_arms(report: Path) -> tuple[str, ...]:
    """The suite's arms the report left out (``fedssl claim --arms``), as its ``Suite`` line names them."""
    line = source_line(report)
    return tuple(line.split(ARMS_LEFT_OUT, 1)[1].removesuffix(".").split(", ")) if ARMS_LEFT_OUT in line else ()


def stated_verdict(report: Path) -> str:
    """The report's own last verdict line (``**Claim reproduced**.``...), for a report whose runs are absent."""
    lines = [line for line in report_text(report).splitlines()
             if line.startswith(("**Claim ", "**No verdict yet**", "**Partial"))]
    return lines[-1] if lines else "no verdict line"


def cell(text: str) -> str:
    """``text`` safe inside a markdown table cell: on one line, ``|`` escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def arm_text(name: str, runs: list[dict], metric: str) -> str:
    """``fedsc 64.90 → 70.12, +5.22 [+4.10, +6.34] (ahead on 5/5)``: the arm's round 0 and final means and
    its gain (:func:`analysis.claims.gain_cell`, as the claim's table shows it)."""
    means = (percent(statistics.fmean(metric_value(r, section, metric) for r in runs))
             for section in ("initial", "final"))
    return f"{name} {' → '.join(means)}, {gain_cell(gain_over_round0(runs, metric))}"


def drift_text(report: Path, scenarios: dict[tuple[str, int], dict], states: list[RunState], seeds: list[int]) -> str | None:
    """``- [r.md](r.md): 15 of 15 runs differ at augment.brightness, augment.contrast``: the report's runs
    (of ``seeds``, finished in every arm) whose recorded scenario differs from the suite's file as it is
    now in what it trains or measures (:func:`analysis.claims.differences`), by the keys they differ at;
    None where none does."""
    used = [state for state in states if state.seed in seeds]
    by_keys = Counter(tuple(keys) for state in used
                      if (keys := differences(read_recorded_scenario(state.run_dir), scenarios[state.arm, state.seed])))
    if not by_keys:
        return None
    return f"- [{report.name}]({report.name}): " + "; ".join(
        f"{count} of {len(used)} runs differ at {keys_text(list(keys))}" for keys, count in sorted(by_keys.items()))


def report_rows(report: Path, suite_path: str, runs_dir: str, left_out: tuple[str, ...] = ()
                ) -> tuple[list[str], str, str | None]:
    """The table rows of one report (one per deciding comparison) from the suite and the runs folder it
    names (:func:`report_sources`), without the arms it left out (:func:`left_out_arms`); the claim's
    verdict (``no verdict yet`` while some seed has not finished in every arm; ``partial`` where the arms
    left out take a deciding comparison away); and :func:`drift_text` of the runs the rows use."""
    suite = read_suite(suite_path)
    if left_out:
        suite = restrict_to_arms(suite, [name for name in suite.arms if name not in left_out])
    scenarios = arm_scenarios(suite)
    states = run_states(suite, scenarios, Path(runs_dir))
    done = finished_seeds(suite, states)
    if not done:
        return [f"| [{report.name}]({report.name}) | {cell(suite.claim)} | none of {len(suite.seeds)} finished | "
                f"— | — | no verdict yet | — | no verdict yet |"], "no verdict yet", None
    interim = len(done) < len(suite.seeds)
    finished = dataclasses.replace(suite, seeds=done)
    runs = read_runs(finished, Path(runs_dir))
    decided = decisions(finished, runs)
    claim = ("no verdict yet" if interim else "partial" if suite.left_out_comparisons
             else overall([d.verdict for d in decided]))
    seeds = ",".join(map(str, done)) + (f" of {len(suite.seeds)}" if interim else "")
    rows = []
    for decision in decided:
        comparison, d = decision.comparison, decision.difference
        interval = "[n/a: 1 seed]" if d.interval is None else interval_text(d.interval, boundaries(comparison))
        arms = "<br>".join(arm_text(name, runs[name], suite.primary)
                           for name in dict.fromkeys((comparison.arm, comparison.baseline, *(comparison.minus or ()))))
        rows.append(f"| [{report.name}]({report.name}) | {cell(suite.claim)} | {seeds} | "
                    f"{cell(comparison.claimed())} ({suite.primary}) | {d.mean:+.2f} {interval} "
                    f"(ahead on {d.ahead}/{len(d.diffs)}) | {'no verdict yet' if interim else decision.verdict} | "
                    f"{arms} | {claim} |")
    return rows, claim, drift_text(report, scenarios, states, done)


def claims_index(folder: Path) -> str:
    """The markdown table over every claim report in ``folder`` (sorted by name), then the reports whose
    runs are not there, then the count of claims by verdict."""
    check_existing_directory(folder, "folder of claim reports")
    reports = sorted(p for p in folder.glob("*.md") if p.name != INDEX)
    if not reports:
        raise ValueError(f"{folder}: no claim report (*.md); expected the reports fedssl claim prints, "
                         f"such as results/claims/")
    rows, absent, drifted, verdicts = [], [], [], Counter()
    for report in reports:
        suite_path, runs_dir = report_sources(report)
        if not Path(runs_dir).is_dir():
            absent.append(f"- [{report.name}]({report.name}) (suite `{suite_path}`, runs `{runs_dir}` not here): "
                          f"{stated_verdict(report)}")
            continue
        report_part, verdict, drift = report_rows(report, suite_path, runs_dir, left_out_arms(report))
        rows += report_part
        drifted += [drift] if drift else []
        verdicts[verdict] += 1
    lines = ["| report | claim | seeds | deciding comparison (primary metric) | difference, points: mean [95% "
             "interval] | verdict | its arms: round 0 → final (%), gain [95% interval] | claim |",
             "|---|---|---|---|---|---|---|---|", *rows, "",
             "Recomputed from each report's suite and runs (`fedssl claim SUITE --runs-dir RUNS --no-run` decides "
             "the same way): paired by seed, Student-t interval over seeds; a verdict is decided by the primary "
             "metric alone, the claim reproduced only where every deciding comparison is."]
    if drifted:
        lines += ["", "Reports whose runs differ from their suite's scenario files as these are now, in what they train "
                      "or measure (the rows use the runs as they are; `fedssl claim SUITE --no-run` names each run):",
                  "", *drifted]
    if absent:
        lines += ["", "Reports whose runs are not in this repository (their own verdict line, not recomputed):",
                  "", *absent]
    count = sum(verdicts.values())
    lines += ["", f"{count} claim{'' if count == 1 else 's'} recomputed: "
                  + ", ".join(f"{count} {verdict}" for verdict, count in sorted(verdicts.items())) + "."]
    return "\n".join(lines) + "\n"
