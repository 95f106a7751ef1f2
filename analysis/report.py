"""Tables of results from run directories: per-seed rows and mean +- std per scenario name."""
from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from simulator.runlog import check_existing_directory, check_run_dir, read_metrics, read_recorded_scenario, read_summary

METRICS = ("knn_top1", "linear_top1")
# Shown when every run has it (runs whose networks have a projector, logged since it was added).
OPTIONAL_METRICS = ("knn_projector_top1",)
# The label-efficient metrics (simulator.evaluation.monitor.label_efficient_metrics), e.g. knn_top1_1pct,
# finetune_top1_0p5pct: shown when every run has them, by fraction, then kNN, probe, fine-tuning.
LABEL_EFFICIENT = re.compile(r"(knn|linear|finetune)_top1_(\d+(?:p\d+)?)pct")
LABEL_EFFICIENT_KINDS = ("knn", "linear", "finetune")


def label_efficient_order(metric: str) -> tuple[float, int]:
    kind, fraction = LABEL_EFFICIENT.fullmatch(metric).groups()
    return float(fraction.replace("p", ".")), LABEL_EFFICIENT_KINDS.index(kind)


def shown_metrics(runs: list[dict]) -> tuple[str, ...]:
    """The metrics of the tables: :data:`METRICS`, then the optional and the label-efficient ones
    that every run has, initial and final."""
    everywhere = lambda m: all(m in run["initial"] and m in run["final"] for run in runs)  # noqa: E731
    label_efficient = {m for run in runs for m in run["initial"] if LABEL_EFFICIENT.fullmatch(m)}
    return (METRICS + tuple(m for m in OPTIONAL_METRICS if everywhere(m))
            + tuple(sorted(filter(everywhere, label_efficient), key=label_efficient_order)))


def columns(runs: list[dict]) -> tuple[tuple[str, str], ...]:
    """(section, metric) of the per-scenario and per-seed tables: initial, then final metrics."""
    metrics = shown_metrics(runs)
    return tuple((section, key) for section in ("initial", "final") for key in metrics)


def read_run(run_dir: Path) -> dict:
    """A run's summary with its scenario name and seed; raises ValueError for an unfinished run."""
    summary_path = run_dir / "summary.json"
    check_existing_directory(run_dir, "run directory")
    check_run_dir(run_dir)
    if not summary_path.exists():
        raise ValueError(f"{run_dir}: no summary.json (the run did not finish)")
    summary, scenario = read_summary(run_dir), read_recorded_scenario(run_dir)
    for section in ("initial", "final"):
        if not isinstance(summary.get(section), dict):
            raise ValueError(f"{summary_path}: {section}: expected the evaluated metrics, got "
                             f"{summary.get(section)!r} (a run with evaluation off has nothing to tabulate)")
        check_metric_values(summary_path, section, summary[section], required=METRICS)
    if summary.get("pixels") is not None:
        if not isinstance(summary["pixels"], dict):
            raise ValueError(f"{summary_path}: pixels: expected the raw-pixel reference's metrics, got "
                             f"{summary['pixels']!r}")
        check_metric_values(summary_path, "pixels", summary["pixels"])
    rounds, wall = summary.get("rounds_completed"), summary.get("wall_seconds", 0.0)
    if type(rounds) is not int or rounds < 0:  # an int, not a bool
        raise ValueError(f"{summary_path}: rounds_completed: expected a non-negative integer, got {rounds!r}")
    if isinstance(wall, bool) or not isinstance(wall, (int, float)) or not math.isfinite(wall):
        raise ValueError(f"{summary_path}: wall_seconds: expected a number of seconds, got {wall!r}")
    check_provenance(summary_path, summary)
    return {"dir": str(run_dir), "name": scenario["name"], "seed": scenario["seed"], **summary,
            "groups": final_group_means(run_dir / "metrics.parquet")}


RECORDED_LISTS = {"code": "the code of each session, e.g. 'fedssl 0.1.0, git 0123456789ab'",
                  "numerics": ("each process's torch version, CPU instruction set and CPU model, "
                               "e.g. 'torch 2.14.1, CPU AVX2, AuthenticAMD 23/49'")}


def check_provenance(path: Path, summary: dict) -> None:
    """Raise ``ScenarioError`` naming ``path`` (a ``summary.json``) where its ``code`` or ``numerics`` is
    there but not a list of strings (what fedssl run records; absent or null in older runs)."""
    from simulator.scenario import ScenarioError
    for key, what in RECORDED_LISTS.items():
        value = summary.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise ScenarioError(str(path), key, f"expected a list of strings ({what}), got {value!r}")


def check_metric_values(path: Path, section: str, metrics: dict, required: tuple[str, ...] = ()) -> None:
    """Raise ``ValueError`` naming ``path`` (a ``summary.json``) where its ``section`` lacks a ``required``
    metric or holds a value that is not a number; an accuracy (``..._top1...``: a share of the test
    images) must be a finite one (align and uniformity may be NaN, from a network whose features are)."""
    missing = [m for m in required if m not in metrics]
    if missing:
        raise ValueError(f"{path}: {section}: expected the evaluated metrics (with {', '.join(required)}), "
                         f"found no {', '.join(missing)}")
    for name, value in metrics.items():
        accuracy = "_top1" in str(name)
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or (accuracy and not math.isfinite(value))):
            raise ValueError(f"{path}: {section}.{name}: expected {'a finite' if accuracy else 'a'} number, "
                             f"got {value!r}")


def final_group_means(metrics_path: Path) -> dict[str, dict[str, float]]:
    """The last evaluation's per-group means in ``metrics.parquet`` (see :func:`group_means`)."""
    if not metrics_path.exists():
        return {}
    rows = [row for row in read_metrics(metrics_path) if row["name"].startswith("eval/")]
    last = max((row["round"] for row in rows), default=None)
    return group_means({row["name"]: row["value"] for row in rows if row["round"] == last})


def group_means(logged: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per-group means ``eval/<group>/<metric>_mean`` of one evaluation's logged metrics (logged when
    per-client encoders are evaluated, e.g. Hetero-SSFL's tiers) as {group: {metric: value}}."""
    groups: dict[str, dict[str, float]] = defaultdict(dict)
    for name, value in logged.items():
        if name.startswith("eval/") and name.endswith("_mean") and name.count("/") == 2:
            group, metric = name.removeprefix("eval/").removesuffix("_mean").split("/")
            groups[group][metric] = value
    return dict(groups)


def percent(value: float) -> str:
    return f"{100 * value:.2f}"


def by_scenario(runs: list[dict]) -> dict[str, list[dict]]:
    """The runs by scenario name; raises ``ValueError`` for two runs of one scenario and seed (they
    would count twice in its mean and in its pairs with a baseline)."""
    groups: dict[str, list[dict]] = defaultdict(list)
    seen: dict[tuple[str, int], str] = {}
    for run in runs:
        key = (run["name"], run["seed"])
        if key in seen:
            raise ValueError(f"{seen[key]} and {run['dir']} are both scenario {run['name']!r} seed {run['seed']}; "
                             f"expected one run per scenario and seed (leave one out, or give one another name)")
        seen[key] = run["dir"]
        groups[run["name"]].append(run)
    return groups


def sample_std(values: list[float]) -> float:
    """Sample standard deviation; 0 for a single value, NaN when a value is (``statistics.stdev`` raises
    on a NaN)."""
    if any(math.isnan(v) for v in values):
        return math.nan
    return statistics.stdev(values) if len(values) > 1 else 0.0


def mean_std(values: list[float | None]) -> str:
    """``mean ± sample std`` in percent; ``n/a`` when a value is missing (None) or not a finite number (the
    alignment of NaN features); one value alone has no spread to show (``± 0.00`` read as seeds that agree)."""
    if any(v is None or not math.isfinite(v) for v in values):
        return "n/a"
    if len(values) == 1:
        return f"{percent(values[0])} (1 seed)"
    return f"{percent(statistics.mean(values))} ± {percent(sample_std(values))}"


def markdown_table(runs: list[dict]) -> str:
    """Mean +- sample std over seeds per scenario name, then every run's own numbers, then (for runs
    that evaluated per-client encoders) each group's final means over seeds."""
    groups, shown = by_scenario(runs), columns(runs)
    header = "| scenario | seeds | " + " | ".join(f"{a} {b}" for a, b in shown) + " |"
    lines = [header, "|" + "---|" * (len(shown) + 2)]
    for name, members in groups.items():
        cells = [mean_std([m[section][key] for m in members]) for section, key in shown]
        seeds = ",".join(str(m["seed"]) for m in sorted(members, key=lambda m: m["seed"]))
        lines.append(f"| {name} | {seeds} | " + " | ".join(cells) + " |")
    lines += ["", "| scenario | seed | " + " | ".join(f"{a} {b}" for a, b in shown) + " | rounds | wall s |",
              "|" + "---|" * (len(shown) + 4)]
    for run in sorted(runs, key=lambda r: (r["name"], r["seed"])):
        cells = " | ".join(percent(run[s][k]) for s, k in shown)
        lines.append(f"| {run['name']} | {run['seed']} | {cells} | {run['rounds_completed']} | "
                     f"{format(run['wall_seconds'], '.0f') if 'wall_seconds' in run else '—'} |")
    grouped = by_scenario([run for run in runs if run["groups"]])
    if grouped:
        lines += ["", "| scenario | group | seeds | " + " | ".join(f"final {k} (group mean)" for k in METRICS) + " |",
                  "|" + "---|" * (len(METRICS) + 3)]
    for name, members in grouped.items():
        for group in sorted({g for m in members for g in m["groups"]}):
            having = sorted((m for m in members if group in m["groups"]), key=lambda m: m["seed"])
            cells = " | ".join(mean_std([m["groups"][group][key] for m in having]) for key in METRICS)
            lines.append(f"| {name} | {group} | {','.join(str(m['seed']) for m in having)} | {cells} |")
    return "\n".join(lines) + "\n"


# The CPU regime's learning margins (issue 15, item 4; results/protocol.md): a run has learned when it
# beats its own random round-0 network by at least this many points.
LEARNING_MARGINS = {"linear_top1": 4.0, "knn_top1": 2.0}


def parse_margins(items: list[str] | None) -> dict[str, float]:
    """:data:`LEARNING_MARGINS` with each ``--margin METRIC=POINTS`` item's metric set to its points (a
    metric not given keeps its margin: one ``--margin`` replacing both let runs that never beat their
    random network on the probe "clear the margins")."""
    margins, given = dict(LEARNING_MARGINS), set()
    for item in items or ():
        metric, _, points = item.partition("=")
        if metric in given:
            raise ValueError(f"--margin: expected each metric once, got {metric} twice ({item!r})")
        given.add(metric)
        try:
            margins[metric] = float(points)
        except ValueError:
            raise ValueError(f"--margin: expected METRIC=POINTS, e.g. knn_top1=2, got {item!r}") from None
        if not metric or not 0 < margins[metric] < math.inf:  # a run level with its round 0 never clears
            raise ValueError(f"--margin: expected METRIC=POINTS with a metric name and finite POINTS > 0, "
                             f"got {item!r}")
    return margins


def check_margins(runs: list[dict], margins: dict[str, float]) -> None:
    """Raise ``ValueError`` (``--margin: ...``) for a margin metric that some run lacks, initial or final."""
    missing = sorted({m for m in margins for run in runs if m not in run["initial"] or m not in run["final"]})
    if missing:
        raise ValueError(f"--margin: expected metrics every run has ({', '.join(shown_metrics(runs))}), "
                         f"got {', '.join(missing)}")


def points_over_round0(run: dict, metric: str) -> float:
    """``run``'s final minus its round-0 ``metric``, in points, rounded to 1e-9 points so that a gain
    of exactly a margin (accuracies are counts over the test images) is not read as just below it
    (``100 * (0.0203 - 0.0003)`` is 1.9999999999999998 in floating point)."""
    return round(100 * (run["final"][metric] - run["initial"][metric]), 9)


def gain_text(gain: float, margin: float | None = None) -> str:
    """``gain`` in points as ``+3.25``, on its side of ``margin`` (:func:`side_text`): ``+3.999``, not ``+4.00``."""
    return side_text(gain, () if margin is None else (margin,))


def side_text(value: float, boundaries: tuple[float, ...]) -> str:
    """``value`` in points as ``+3.25``, with as many more decimals as it takes to print it on its side of
    each boundary, below, at or above, as the verdicts read it (the value rounded to 1e-9): ``+3.999`` and
    not ``+4.00`` below a margin of 4, ``-1.004`` and not ``-1.00`` beyond -1, ``+3.513`` and not ``+3.51``
    above 3.512."""
    exact = round(value, 9)

    def misplaced(printed: float, b: float) -> bool:  # on the other side, or at it and the value not
        return (printed - b) * (exact - b) < 0 or (printed == b and exact != b)
    for decimals in range(2, 10):
        text = f"{value:+.{decimals}f}"
        if not any(misplaced(float(text), round(b, 9)) for b in boundaries):
            break
    return text


def learning_verdict(run: dict, margins: dict[str, float]) -> str:
    """Whether ``run`` beats its own round-0 network: on every margin metric by its margin (points),
    else the metrics it is not above round 0 on, else those below their margins."""
    gains = {m: points_over_round0(run, m) for m in margins}
    flat = [m for m, g in gains.items() if g <= 0]
    if flat:
        return "**not above its round-0 network** on " + ", ".join(f"{m} ({gains[m]:+.2f})" for m in flat)
    short = [m for m, g in gains.items() if g < margins[m]]
    if short:
        return "**below the margin** on " + ", ".join(f"{m} ({gain_text(gains[m], margins[m])} < +{margins[m]:g})"
                                                      for m in short)
    return "clears the margins"


def scarce_label_pairs(runs: list[dict], margins: dict[str, float]) -> tuple[tuple[str, str], ...]:
    """(metric, its 1%-label form) for each margin metric whose 1%-label form every run has, initial
    and final (``knn_top1`` and ``knn_top1_1pct``)."""
    shown = shown_metrics(runs)
    return tuple((m, f"{m}_1pct") for m in margins if f"{m}_1pct" in shown)


def scarce_label_verdict(run: dict, pairs: tuple[tuple[str, str], ...]) -> str:
    """Whether ``run`` gains more over its round 0 with 1% of the labels than with all of them, on
    every pair of :func:`scarce_label_pairs` (item 4's "and more with 1% labels"), else where not."""
    short = [(full, scarce) for full, scarce in pairs
             if points_over_round0(run, scarce) <= points_over_round0(run, full)]
    if not short:
        return "yes"
    return "no: " + ", ".join(f"{scarce} {points_over_round0(run, scarce):+.2f} ≤ {full} "
                              f"{points_over_round0(run, full):+.2f}" for full, scarce in short)


def learning_table(runs: list[dict], margins: dict[str, float], label: str = "scenario") -> str:
    """Each run's final minus its own round 0 (points) on every shown metric, whether it clears
    the learning ``margins`` ({metric: points}), with the count of runs that do, and, where the runs
    have the margin metrics' 1%-label forms, whether each gains more with 1% of the labels (shown and
    counted apart: the margins decide "learned?"); ``label`` heads the column of the runs' names."""
    check_margins(runs, margins)
    shown, pairs = shown_metrics(runs), scarce_label_pairs(runs, margins)
    scarce_column = " more with 1% labels? |" if pairs else ""
    lines = [f"| {label} | seed | " + " | ".join(f"{m} final − round 0" for m in shown) + " | learned? |"
             + scarce_column, "|" + "---|" * (len(shown) + 3 + bool(pairs))]
    cleared = more = 0
    for run in sorted(runs, key=lambda r: (r["name"], r["seed"])):
        verdict = learning_verdict(run, margins)
        cleared += verdict == "clears the margins"
        gains = " | ".join(gain_text(points_over_round0(run, m), margins.get(m)) for m in shown)
        scarce = scarce_label_verdict(run, pairs) if pairs else ""
        more += scarce == "yes"
        lines.append(f"| {run['name']} | {run['seed']} | {gains} | {verdict} |" + (f" {scarce} |" if pairs else ""))
    rule = ", ".join(f"{m} ≥ +{p:g}" for m, p in margins.items())
    scarce_line = (f" {more} of {len(runs)} gain more with 1% of the labels than with all of them on "
                   + ", ".join(full for full, _ in pairs) + " (results/protocol.md asks for that too; "
                   "counted apart from the margins)." if pairs else "")
    return ("\n".join(lines) + f"\n\nGain over the run's own random round-0 network, in points. {cleared} of "
            f"{len(runs)} runs clear the learning margins ({rule} points over round 0); the other columns are "
            f"shown, not judged.{scarce_line}\n")


def pixel_table(runs: list[dict], label: str = "scenario") -> str | None:
    """Each run's round-0 and final networks against the raw-pixel reference (``summary.json``
    ``pixels``, :func:`simulator.evaluation.monitor.raw_pixels`: the same protocol on the images
    themselves), in points, on every shown metric the reference has, with the count of final
    networks above it on the kNN and the probe of :data:`METRICS`; None where a run has no reference (runs older than it, or
    ``eval.pixel_reference: false``). Shown, not judged: the margins are read over round 0."""
    if not runs or not all(run.get("pixels") for run in runs):
        return None
    shown = [m for m in shown_metrics(runs) if all(m in run["pixels"] for run in runs)]
    against = lambda run, section, m: round(100 * (run[section][m] - run["pixels"][m]), 9)  # noqa: E731
    lines = [f"| {label} | seed | " + " | ".join(f"{m} pixels | round 0 − pixels | final − pixels" for m in shown)
             + " |", "|" + "---|" * (3 * len(shown) + 2)]
    counted = [m for m in METRICS if m in shown]
    above = 0
    for run in sorted(runs, key=lambda r: (r["name"], r["seed"])):
        above += all(against(run, "final", m) > 0 for m in counted)
        cells = " | ".join(f"{100 * run['pixels'][m]:.2f} | {against(run, 'initial', m):+.2f} | "
                           f"{against(run, 'final', m):+.2f}" for m in shown)
        lines.append(f"| {run['name']} | {run['seed']} | {cells} |")
    return ("\n".join(lines) + f"\n\nAgainst the raw pixels (the same kNN and probe on the images themselves, "
            f"a reference fixed by the evaluation data: `summary.json` `pixels`), in points. {above} of {len(runs)} "
            f"final networks are above it on {', '.join(counted)}. Shown, not judged: the learning margins are "
            f"read over each run's own round 0.\n")


def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """The Student-t confidence interval of the mean of ``values`` (n - 1 degrees of freedom), or
    None for fewer than two values."""
    if len(values) < 2:
        return None
    from scipy import stats
    half = stats.t.ppf(0.5 + level / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    mean = statistics.mean(values)
    return mean - half, mean + half


@dataclass(frozen=True)
class PairedDifference:
    """One metric of an arm minus the baseline, paired by seed, in points: the per-seed differences,
    their mean, its 95% t-interval (None with one seed) and on how many seeds the arm is ahead."""

    seeds: tuple[int, ...]
    diffs: tuple[float, ...]
    mean: float
    interval: tuple[float, float] | None
    ahead: int

    @classmethod
    def of(cls, seeds: tuple[int, ...], diffs: tuple[float, ...]) -> PairedDifference:
        """The mean, interval and seeds ahead of the per-seed differences ``diffs`` (points)."""
        return cls(seeds, diffs, statistics.mean(diffs), t_interval(list(diffs)), sum(d > 0 for d in diffs))

    def cell(self) -> str:
        """``+1.50 [-42.97, +45.97] (ahead on 1/2)`` (differences +5 and -2); the interval is ``n/a`` with one seed."""
        interval = "[n/a: 1 seed]" if self.interval is None else f"[{self.interval[0]:+.2f}, {self.interval[1]:+.2f}]"
        return f"{self.mean:+.2f} {interval} (ahead on {self.ahead}/{len(self.diffs)})"


def paired_difference(arm: list[dict], baseline: list[dict], value: Callable[[dict], float | None]
                      ) -> PairedDifference | None:
    """``value(run)`` of the ``arm`` runs minus that of the ``baseline`` runs of the same seeds
    (points); None when no seed has both or a paired run lacks the value (None, or not finite)."""
    arm_values, base_values = ({run["seed"]: value(run) for run in runs} for runs in (arm, baseline))
    seeds = tuple(sorted(seed for seed in arm_values if seed in base_values))
    paired = [v for s in seeds for v in (arm_values[s], base_values[s])]
    if not seeds or not all(v is not None and math.isfinite(v) for v in paired):
        return None
    return PairedDifference.of(seeds, tuple(100 * (arm_values[s] - base_values[s]) for s in seeds))


PAIRED_NOTE = ("Differences in points, scenario minus baseline on the same seed: mean [95% Student-t interval "
               "of the mean, n - 1 degrees of freedom; n/a with one seed] (seeds on which the scenario is ahead).")


NUMERICS_NOTE = ("Floating-point results differ between torch versions, CPU instruction sets, CPU models and GPUs, "
                 "and the difference grows over the rounds; a pair below is still paired in partition, initial "
                 "networks and cohorts, but its difference carries that of the machines as well. Rerun such a seed's "
                 "runs on one kind of machine to remove it (an AMD EPYC with AVX-512 computed as the AVX2 ones with "
                 "`ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2`; an Intel one did not, README).")


def recorded_line(runs: list[dict], key: str, heading: str) -> str:
    """``heading`` then each value the runs recorded under ``key`` in ``summary.json`` (a list per
    run: a resumed run names each session's) with its number of runs; runs that recorded none
    (older ones) are counted apart."""
    counts: dict[str, int] = {}
    for run in runs:
        for value in run.get(key) or ("not recorded",):
            counts[value] = counts.get(value, 0) + 1
    described = [f"`{value}` ({n} run{'s' if n != 1 else ''})" for value, n in counts.items()
                 if value != "not recorded"]
    if "not recorded" in counts:
        n = counts["not recorded"]
        described.append(f"not recorded in {n} run{'s' if n != 1 else ''} (older than the record)")
    return f"{heading}: " + "; ".join(described) + "."


def code_line(runs: list[dict]) -> str:
    """Which code computed the runs (``summary.json``'s ``code``, :mod:`simulator.provenance`)."""
    return recorded_line(runs, "code", "Code of the runs (`summary.json` `code`; a resumed run names each session's)")


def numerics_line(runs: list[dict]) -> str:
    """How the runs computed (``summary.json``'s ``numerics``: torch version, CPU instruction set and model,
    GPU): runs of one seed agree bitwise only where these agree, and a change of instruction set can
    move a final accuracy by about half a point (``results/fedsc.md``)."""
    return recorded_line(runs, "numerics", "Numerics of the runs (`summary.json` `numerics`; runs agree bitwise "
                         "only where these agree)")


def numerics_notes(by_seed: dict[int, dict[str, dict]]) -> list[str]:
    """One line per seed whose runs (``{seed: {label: run}}``) recorded different numerics
    (``summary.json``'s ``numerics``: torch version, CPU instruction set and model, GPU), and per run that
    computed with more than one; runs that recorded none (older ones) are left out."""
    notes = []
    for seed, runs in by_seed.items():
        by_numerics: dict[tuple[str, ...], list[str]] = {}
        for label, run in runs.items():
            recorded = run.get("numerics")
            if recorded:
                by_numerics.setdefault(tuple(recorded), []).append(label)
                if len(recorded) > 1:
                    notes.append(f"- seed {seed}, {label}: one run computed with {' and '.join(recorded)}")
        if len(by_numerics) > 1:
            notes.append(f"- seed {seed}: " + "; ".join(f"{', '.join(labels)} on {' and '.join(numerics)}"
                                                       for numerics, labels in by_numerics.items()))
    return notes


def paired_table(runs: list[dict], baseline: str) -> str:
    """Each scenario's final accuracies minus the baseline scenario's, paired by seed: the mean of
    the per-seed differences (in points) with its 95% t-interval, and on how many seeds the
    scenario is ahead."""
    groups = by_scenario(runs)
    if baseline not in groups:
        raise ValueError(f"--baseline: expected one of the scenario names {sorted(groups)}, got {baseline!r}")
    if len(groups) == 1:  # nothing to pair with: an option that would change nothing
        raise ValueError(f"--baseline: every run given is scenario {baseline!r}; expected runs of another scenario "
                         f"too, to compare with it")
    finals = shown_metrics(runs)
    lines = [f"| scenario − {baseline} | paired seeds | " + " | ".join(f"final {k}" for k in finals) + " |",
             "|" + "---|" * (len(finals) + 2)]
    for name, members in groups.items():
        if name == baseline:
            continue
        differences = [paired_difference(members, groups[baseline], lambda run, key=key: run["final"][key])
                       for key in finals]
        own, base = {run["seed"] for run in members}, {run["seed"] for run in groups[baseline]}
        seeds = ",".join(map(str, sorted(own & base))) or "none (no seed in common with the baseline)"
        if own & base and own ^ base:  # seeds of one side only: left out of the pairs, and said
            seeds += f" (unpaired, left out: {','.join(map(str, sorted(own ^ base)))})"
        cells = " | ".join("n/a" if d is None else d.cell() for d in differences)
        lines.append(f"| {name} | {seeds} | {cells} |")
    by_seed: dict[int, dict[str, dict]] = defaultdict(dict)
    for name, members in groups.items():
        for run in members:
            by_seed[run["seed"]][name] = run
    paired = {seed: seed_runs for seed, seed_runs in sorted(by_seed.items()) if baseline in seed_runs and len(seed_runs) > 1}
    notes = numerics_notes(paired)
    numerics = "\n" + NUMERICS_NOTE + "\n\n" + "\n".join(notes) + "\n" if notes else ""
    return "\n".join(lines) + "\n\n" + PAIRED_NOTE + "\n" + numerics
