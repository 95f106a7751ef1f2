"""Claim suites: one command runs a paper's claim over seeds and decides it by a fixed protocol.

A suite file (YAML, ``claims/*.yaml``) names

- ``claim`` (what the paper says, one line) and optionally ``paper`` (where it says it);
- ``seeds``: the seeds every arm runs (``[0, 1, 2, 3, 4]``);
- ``primary``: the metric that decides (the paper's headline one, e.g. ``linear_top1``) and
  ``secondary``: metrics printed beside it that decide nothing. A metric is a key of a run's
  ``summary.json`` ``initial``/``final`` (``knn_top1``, ``linear_top1``, ``knn_projector_top1``...) or
  ``GROUP/METRIC`` for per-group means of per-client encoders (e.g. ``small_cnn/linear_top1``);
- ``arms``: ``NAME: {scenario: PATH, set: [KEY=VALUE, ...]}``, paths relative to the directory the
  command runs in; a top-level ``set`` applies to every arm before the arm's own;
- ``comparisons``: ``{arm, baseline, direction, margin}``, each arm minus its baseline paired by seed,
  with the direction the paper claims: ``greater`` (the arm is better), ``equivalent`` (within
  ``margin`` points either way) or ``not_greater`` (the arm does not help by ``margin`` points or more);
  ``secondary_comparisons``: ``{arm, baseline}`` pairs printed for the record, never deciding. Either
  kind may add ``minus: {arm, baseline}``: a difference of differences, (arm − baseline) − (minus.arm −
  minus.baseline) on each seed, for claims about how a setting changes a gap ("Orchestra loses less than
  SimCLR when participation falls", "UV helps under label skew more than under covariate shift");
- ``out``: the directory of the runs, ``OUT/ARM/seed_SEED/`` (``--runs-dir`` replaces it).

A replication on other seeds names its original instead of copying it: ``replicates: FILE`` (a suite
file, its path relative to the replicate's own folder; not itself a replicate) with ``claim``, ``seeds``
(none of the original's) and ``out``, and optionally ``without_arms: [NAME, ...]`` (arms of the original
left out with the secondary comparisons that read them; a deciding comparison cannot lose an arm). Every
other key (``paper``, metrics, ``set``, arms, comparisons) is the original's, so the two cannot drift
apart (:func:`read_suite`).

``--arms A,B,...`` restricts a suite to some of its arms (:func:`restrict_to_arms`): only their runs
start, and the table shows them and the comparisons between them; the named arms must keep at least
one deciding comparison whole, so that a suite's deciding pair can run on every seed before its
secondary arms. A suite whose deciding comparisons are not all kept gives a partial table: the
verdicts of the comparisons it keeps, and no verdict of the claim.

Verdict, per comparison, on the primary metric only, from the 95% Student-t interval [lo, hi] of the
mean paired difference (points, n - 1 degrees of freedom):

- ``greater``: **reproduced** when lo > 0, **contradicted** when hi < 0;
- ``equivalent``: **reproduced** when -margin < lo and hi < margin, **contradicted** when the
  interval lies wholly outside (lo > margin or hi < -margin);
- ``not_greater``: **reproduced** when hi < margin (whether or not it hurts, and by how much),
  **contradicted** when lo > margin;
- otherwise (and always with a single seed) **not reproduced**: the data cannot tell.

The claim is reproduced when every comparison is, contradicted when any is, and not reproduced
otherwise. Runs that finished (``summary.json`` with ``rounds_completed`` equal to the scenario's
rounds) are never repeated; interrupted ones (a ``scenario.yaml`` without ``summary.json``) are
resumed from their newest checkpoint, as ``fedssl run --resume`` does.
"""
from __future__ import annotations

import dataclasses
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from analysis.report import (LEARNING_MARGINS, NUMERICS_NOTE, PairedDifference, check_provenance, code_line,
                             learning_table, mean_std, numerics_line, numerics_notes, paired_difference, pixel_table,
                             side_text)
from simulator.evaluation.monitor import EVALUATED_METRIC
from simulator.records import is_finite
from simulator.runlog import check_directory_path, read_metrics, read_recorded_scenario, read_summary
from simulator.scenario import ScenarioError, fraction_suffix, load_scenario, lookup, read_yaml

DIRECTIONS = ("greater", "equivalent", "not_greater")
NEEDS_MARGIN = ("equivalent", "not_greater")
SUITE_KEYS = ("claim", "paper", "seeds", "primary", "secondary", "set", "arms", "comparisons",
              "secondary_comparisons", "out")
# a replicate's own keys: what tells it from its original; the rest it takes from the original
REPLICATE_KEYS = ("replicates", "claim", "seeds", "out", "without_arms")
# the report's "Suite" line names the arms ``--arms`` left out after this (analysis.claims_index reads it)
ARMS_LEFT_OUT = " Arms of the suite left out (`--arms`): "
ARM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
METRIC_NAME = re.compile(r"(?:[A-Za-z0-9_.-]+/)?[A-Za-z0-9_]+")


@dataclass(frozen=True)
class Comparison:
    arm: str
    baseline: str
    direction: str | None = None  # None: a secondary comparison (printed, never deciding)
    margin: float | None = None
    minus: tuple[str, str] | None = None  # (arm, baseline) of the difference subtracted from this one

    def arms(self) -> set[str]:
        """Every arm the comparison reads."""
        return {self.arm, self.baseline, *(self.minus or ())}

    def label(self) -> str:
        """What is computed on each seed: ``fedsc − fedavg_sc`` or ``(a − b) − (c − d)``."""
        if self.minus is None:
            return f"{self.arm} − {self.baseline}"
        return f"({self.arm} − {self.baseline}) − ({self.minus[0]} − {self.minus[1]})"

    def claimed(self) -> str:
        """The paper's claim in words, e.g. ``fedsc > fedavg_sc`` or ``a − b > c − d``."""
        if self.minus is None:
            better, than = self.arm, self.baseline
        else:
            better, than = f"{self.arm} − {self.baseline}", f"{self.minus[0]} − {self.minus[1]}"
        if self.direction == "greater":
            return f"{better} > {than}"
        points = f"{self.margin:g} point" + ("" if self.margin == 1 else "s")
        if self.direction == "equivalent":
            return f"{better} within ±{points} of {than}"
        return f"{better} not {'better than' if self.minus is None else 'above'} {than} by {points} or more"

    def difference(self, runs: dict[str, list[dict]], value: Callable[[dict], float | None]
                   ) -> PairedDifference | None:
        """:func:`analysis.report.paired_difference` of the arm and its baseline, less that of the
        ``minus`` pair on the same seed where there is one (over the seeds both pairs have); None where
        a paired run lacks the value. Each seed's difference of differences is rounded to 1e-9 points, as
        :func:`decide` reads the interval: accuracies are counts over the test images, so equal gaps are a
        difference of 0, not floating point's 1e-14 (which counted the seed as one the arm is ahead on)."""
        gap = paired_difference(runs[self.arm], runs[self.baseline], value)
        if self.minus is None or gap is None:
            return gap
        other = paired_difference(runs[self.minus[0]], runs[self.minus[1]], value)
        if other is None:
            return None
        subtracted = dict(zip(other.seeds, other.diffs))
        seeds = tuple(seed for seed in gap.seeds if seed in subtracted)
        if not seeds:
            return None
        by_seed = dict(zip(gap.seeds, gap.diffs))
        return PairedDifference.of(seeds, tuple(round(by_seed[seed] - subtracted[seed], 9) for seed in seeds))


@dataclass(frozen=True)
class Arm:
    name: str
    scenario: str
    overrides: tuple[str, ...] = ()


@dataclass
class Suite:
    path: str
    claim: str
    paper: str | None
    seeds: tuple[int, ...]
    primary: str
    secondary: tuple[str, ...]
    arms: dict[str, Arm]
    comparisons: tuple[Comparison, ...]
    secondary_comparisons: tuple[Comparison, ...]
    out: str
    shared_overrides: tuple[str, ...] = field(default_factory=tuple)
    left_out: tuple[str, ...] = ()  # arms of the file left out by ``--arms``
    left_out_comparisons: tuple[Comparison, ...] = ()  # its deciding comparisons those arms take away

    def run_dir(self, runs_dir: Path, arm: str, seed: int) -> Path:
        return runs_dir / arm / f"seed_{seed}"


# ---- the suite file ----------------------------------------------------------------------------

def read_suite(path: str | Path) -> Suite:
    """Read and check a suite file's structure (not its scenarios); raises ``ScenarioError``
    (``FILE: KEY: expected ...``). A replicate (``replicates: FILE``) is read as its original with the
    replicate's claim, seeds and out, less its ``without_arms``."""
    source = str(path)
    raw = read_yaml(path)
    if isinstance(raw, dict) and "replicates" in raw:
        raw = replicated(source, raw)
    return suite_of(source, raw)


def replicated(source: str, raw: dict) -> dict:
    """The mapping of the suite that ``raw`` (a replicate read from ``source``) replicates: the
    original's keys, with the replicate's ``claim``, ``seeds`` and ``out``, and without the arms of
    ``without_arms`` nor the secondary comparisons that read them."""
    for key in raw:
        if key not in REPLICATE_KEYS:
            raise ScenarioError(source, str(key), "unknown key in a replicate (every other key is its original's); "
                                                  "expected one of " + ", ".join(REPLICATE_KEYS))
    for key in ("claim", "seeds", "out"):
        if key not in raw:
            raise ScenarioError(source, key, "expected this key (missing; a replicate names its own)")
    name = raw["replicates"]
    if not isinstance(name, str) or not name.strip():
        raise ScenarioError(source, "replicates", f"expected the path of a suite file, relative to this file's "
                                                  f"folder, got {name!r}")
    original_path = Path(source).parent / name
    try:
        original_raw = read_yaml(original_path)
    except ScenarioError as err:
        raise ScenarioError(source, "replicates", str(err)) from None
    if isinstance(original_raw, dict) and "replicates" in original_raw:
        raise ScenarioError(source, "replicates", f"expected an original suite, got {name!r}, itself a "
                                                  f"replicate of {original_raw['replicates']!r}")
    try:
        original = suite_of(str(original_path), original_raw)  # the original checked whole
    except ScenarioError as err:
        raise ScenarioError(source, "replicates", str(err)) from None
    seeds = raw["seeds"]
    if isinstance(seeds, list) and set(seeds) & set(original.seeds):
        raise ScenarioError(source, "seeds", f"expected seeds none of whose runs the original ({name}) has, got "
                                             f"{sorted(set(seeds) & set(original.seeds))!r} among them")
    without = raw.get("without_arms") or []
    if (not isinstance(without, list) or not all(isinstance(arm, str) and arm in original.arms for arm in without)
            or len(set(without)) != len(without)):
        raise ScenarioError(source, "without_arms", f"expected a list of distinct arms of {name} "
                                                    f"({', '.join(original.arms)}), got {without!r}")
    for comparison in original.comparisons:
        if comparison.arms() & set(without):
            raise ScenarioError(source, "without_arms", f"expected arms no deciding comparison reads; "
                                                        f"{comparison.label()} reads "
                                                        f"{', '.join(sorted(comparison.arms() & set(without)))}")
    merged = {**original_raw, "claim": raw["claim"], "seeds": seeds, "out": raw["out"],
              "arms": {arm: value for arm, value in original_raw["arms"].items() if arm not in without}}
    if "secondary_comparisons" in original_raw:
        kept = [item for item, comparison in zip(original_raw["secondary_comparisons"] or [],
                                                 original.secondary_comparisons)
                if not comparison.arms() & set(without)]
        merged["secondary_comparisons"] = kept
    return merged


def suite_of(source: str, raw: Any) -> Suite:
    """The suite of a suite file's document ``raw`` read from ``source``, every key checked."""
    if not isinstance(raw, dict):
        raise ScenarioError(source, "-", "expected a mapping with the keys " + ", ".join(SUITE_KEYS))
    for key in raw:
        if key not in SUITE_KEYS:
            raise ScenarioError(source, str(key), "unknown key; expected one of " + ", ".join(SUITE_KEYS))
    for key in ("claim", "seeds", "primary", "arms", "comparisons", "out"):
        if key not in raw:
            raise ScenarioError(source, key, "expected this key (missing)")

    def text_of(key: str, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ScenarioError(source, key, f"expected a non-empty string, got {value!r}")
        return value

    def overrides_of(key: str, value: Any) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) and "=" in v for v in value):
            raise ScenarioError(source, key, f"expected a list of dotted.key=value strings, got {value!r}")
        if any(v.partition("=")[0] == "seed" for v in value):
            raise ScenarioError(source, key, "expected no seed=...: an arm's seeds come from the suite's seeds "
                                             "(every arm runs each of them)")
        return tuple(value)

    def metric_of(key: str, value: Any) -> str:
        if (not isinstance(value, str) or not METRIC_NAME.fullmatch(value)
                or not EVALUATED_METRIC.fullmatch(value.rsplit("/", 1)[-1])):
            raise ScenarioError(source, key, f"expected a metric the evaluation gives (e.g. linear_top1, knn_top1, "
                                             f"linear_top1_1pct, small_cnn/linear_top1), got {value!r}")
        return value

    seeds = raw["seeds"]
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
            or len(set(seeds)) != len(seeds)):
        raise ScenarioError(source, "seeds",
                            f"expected a non-empty list of distinct non-negative integers, got {seeds!r}")
    secondary = raw.get("secondary") or []
    if not isinstance(secondary, list):
        raise ScenarioError(source, "secondary", f"expected a list of metric names, got {secondary!r}")
    primary = metric_of("primary", raw["primary"])
    secondary = tuple(metric_of("secondary", m) for m in secondary)
    if primary in secondary:
        raise ScenarioError(source, "secondary", f"expected metrics other than the primary one ({primary})")
    if len(set(secondary)) != len(secondary):
        raise ScenarioError(source, "secondary", f"expected each metric once, got {list(secondary)!r}")

    arms_raw = raw["arms"]
    if not isinstance(arms_raw, dict) or len(arms_raw) < 2:
        raise ScenarioError(source, "arms", f"expected a mapping of at least two arms NAME: {{scenario, set}}, "
                                            f"got {arms_raw!r}")
    arms = {}
    for name, arm in arms_raw.items():
        key = f"arms.{name}"
        if not isinstance(name, str) or not ARM_NAME.fullmatch(name):
            raise ScenarioError(source, key, "expected an arm name of letters, digits, '_', '.', '-'")
        if not isinstance(arm, dict) or "scenario" not in arm or set(arm) - {"scenario", "set"}:
            raise ScenarioError(source, key, f"expected {{scenario: PATH, set: [KEY=VALUE, ...]}}, got {arm!r}")
        arms[name] = Arm(name, text_of(f"{key}.scenario", arm["scenario"]), overrides_of(f"{key}.set", arm.get("set")))

    def arm_pair(where: str, item: dict) -> tuple[str, str]:
        for side in ("arm", "baseline"):
            if not isinstance(item[side], str) or item[side] not in arms:
                raise ScenarioError(source, f"{where}.{side}", f"expected one of the arms {', '.join(arms)}, "
                                                               f"got {item[side]!r}")
        if item["arm"] == item["baseline"]:
            raise ScenarioError(source, where, "expected two different arms")
        return item["arm"], item["baseline"]

    def comparisons_of(key: str, deciding: bool) -> tuple[Comparison, ...]:
        listed = raw.get(key) or []
        if not isinstance(listed, list) or (deciding and not listed):
            raise ScenarioError(source, key, "expected a non-empty list of {arm, baseline, direction, margin}"
                                if deciding else "expected a list of {arm, baseline}")
        allowed = {"arm", "baseline", "direction", "margin", "minus"} if deciding else {"arm", "baseline", "minus"}
        out = []
        for i, item in enumerate(listed):
            where = f"{key}[{i}]"
            if not isinstance(item, dict) or set(item) - allowed or not {"arm", "baseline"} <= set(item):
                raise ScenarioError(source, where, f"expected a mapping with keys {', '.join(sorted(allowed))}, "
                                                   f"got {item!r}")
            pair = arm_pair(where, item)
            minus = None
            if "minus" in item:
                if not isinstance(item["minus"], dict) or set(item["minus"]) != {"arm", "baseline"}:
                    raise ScenarioError(source, f"{where}.minus", f"expected a mapping {{arm, baseline}} (the "
                                                                  f"difference subtracted), got {item['minus']!r}")
                minus = arm_pair(f"{where}.minus", item["minus"])
                if set(minus) == set(pair):
                    raise ScenarioError(source, f"{where}.minus", "expected another pair of arms than the "
                                                                  "comparison's own")
            direction = margin = None
            if deciding:
                direction = item.get("direction")
                if direction not in DIRECTIONS:
                    raise ScenarioError(source, f"{where}.direction", f"expected one of {', '.join(DIRECTIONS)}, "
                                                                      f"got {direction!r}")
                margin = item.get("margin")
                if direction in NEEDS_MARGIN:
                    if (isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin > 0
                            or not is_finite(margin)):
                        raise ScenarioError(source, f"{where}.margin", f"expected a positive finite number of "
                                                                       f"points with direction {direction}, got "
                                                                       f"{margin!r}")
                    margin = float(margin)
                elif margin is not None:
                    raise ScenarioError(source, f"{where}.margin", f"expected no margin with direction {direction}")
            comparison = Comparison(*pair, direction, margin, minus)
            if comparison in out:
                raise ScenarioError(source, where, f"expected each comparison once; it repeats "
                                                   f"{key}[{out.index(comparison)}]")
            out.append(comparison)
        return tuple(out)

    return Suite(source, text_of("claim", raw["claim"]),
                 text_of("paper", raw["paper"]) if raw.get("paper") is not None else None,
                 tuple(seeds), primary, secondary, arms, comparisons_of("comparisons", True),
                 comparisons_of("secondary_comparisons", False), text_of("out", raw["out"]),
                 overrides_of("set", raw.get("set")))


def restrict_to_arms(suite: Suite, names: list[str]) -> Suite:
    """The suite with only the arms ``names`` and the comparisons (deciding and secondary) whose arms
    (four for a difference of differences) are all among them; raises ``ScenarioError`` for an unknown
    or repeated arm, or for names that keep no deciding comparison whole (the table would decide nothing)."""
    for name in names:
        if name not in suite.arms:
            raise ScenarioError(suite.path, "--arms", f"expected arms of the suite ({', '.join(suite.arms)}), "
                                                      f"got {name!r}")
    if len(set(names)) != len(names):
        raise ScenarioError(suite.path, "--arms", f"expected each arm once, got {','.join(names)}")
    kept = set(names)
    comparisons = tuple(c for c in suite.comparisons if c.arms() <= kept)
    if not comparisons:
        pairs = "; ".join(",".join((c.arm, c.baseline, *(c.minus or ()))) for c in suite.comparisons)
        raise ScenarioError(suite.path, "--arms", f"expected every arm of a deciding comparison among "
                                                  f"{','.join(names)} ({pairs})")
    return dataclasses.replace(
        suite, arms={name: arm for name, arm in suite.arms.items() if name in kept}, comparisons=comparisons,
        secondary_comparisons=tuple(c for c in suite.secondary_comparisons if c.arms() <= kept),
        left_out=tuple(name for name in suite.arms if name not in kept),
        left_out_comparisons=tuple(c for c in suite.comparisons if c not in comparisons))


def arm_scenarios(suite: Suite) -> dict[tuple[str, int], dict]:
    """Every (arm, seed)'s resolved scenario; raises ``ScenarioError`` naming the suite and the arm."""
    scenarios = {}
    for arm in suite.arms.values():
        for seed in suite.seeds:
            try:
                scenarios[arm.name, seed] = load_scenario(arm.scenario, [*suite.shared_overrides, *arm.overrides,
                                                                         f"seed={seed}"], overrides_source="set")
            except ScenarioError as err:
                raise ScenarioError(suite.path, f"arms.{arm.name}", str(err)) from None
            for metric in (suite.primary, *suite.secondary):
                if (why := unevaluated(scenarios[arm.name, seed], metric)) is not None:
                    raise ScenarioError(suite.path, f"arms.{arm.name}", f"its runs would not evaluate {metric} "
                                                                        f"({why}); expected a metric they evaluate")
    return scenarios


LABEL_EFFICIENT_METRIC = re.compile(r"(knn|linear|finetune)_top1_(\d+(?:p\d+)?pct)")


def unevaluated(scenario: dict, metric: str) -> str | None:
    """Why a run of ``scenario`` would not evaluate the label-efficient ``metric`` (``linear_top1_1pct``,
    ``GROUP/finetune_top1_10pct``, ...), None where it would or ``metric`` is of another kind (those
    are checked in the finished runs: whether a network has a projector, a run labelled samples)."""
    found = LABEL_EFFICIENT_METRIC.fullmatch(metric.rsplit("/", 1)[-1])
    if found is None:
        return None
    fractions = scenario["eval"]["label_fractions"]
    if found[2] not in {fraction_suffix(f) for f in fractions}:
        return f"its eval.label_fractions are {fractions}"
    if found[1] == "finetune" and scenario["eval"]["finetune_steps"] == 0:
        return "its eval.finetune_steps is 0"
    return None


# ---- the runs --------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunState:
    arm: str
    seed: int
    run_dir: Path
    state: str  # "finished", "interrupted" (resume) or "new"


def run_states(suite: Suite, scenarios: dict[tuple[str, int], dict], runs_dir: Path) -> list[RunState]:
    """What each (arm, seed) needs; raises ``ScenarioError`` for a run directory that cannot be used
    (another seed's run, or another number of rounds, kept in it), ``FileExistsError`` where it, or its
    arm's directory, is a file."""
    states = []
    for (arm, seed), scenario in scenarios.items():
        run_dir = suite.run_dir(runs_dir, arm, seed)
        check_directory_path(run_dir, f"the run of arm {arm}, seed {seed}")
        summary = run_dir / "summary.json"
        if (run_dir / "scenario.yaml").exists() and (recorded := read_recorded_scenario(run_dir).get("seed")) != seed:
            raise ScenarioError(str(run_dir), "scenario.yaml", f"expected a run of seed {seed} (its folder's), found "
                                                             f"one of seed {recorded}; move it away or use another "
                                                             f"--runs-dir")
        if summary.exists():
            recorded_summary = read_summary(run_dir)
            check_provenance(summary, recorded_summary)  # here, not after the runs left to run
            done = recorded_summary.get("rounds_completed")
            if done != scenario["training"]["rounds"]:
                raise ScenarioError(str(run_dir), "summary.json",
                                    f"expected a run of {scenario['training']['rounds']} rounds (the suite's), "
                                    f"found one of {done!r}; move it away or use another --runs-dir")
            states.append(RunState(arm, seed, run_dir, "finished"))
        elif (run_dir / "scenario.yaml").exists():
            stored = read_recorded_scenario(run_dir)
            training = stored.get("training")
            rounds = training.get("rounds") if isinstance(training, dict) else None
            if rounds != scenario["training"]["rounds"]:
                raise ScenarioError(str(run_dir), "scenario.yaml", f"expected an interrupted run of "
                                    f"{scenario['training']['rounds']} rounds (the suite's), found one of {rounds}; "
                                    f"move it away or use another --runs-dir")
            states.append(RunState(arm, seed, run_dir, "interrupted"))
        elif run_dir.exists() and any(run_dir.iterdir()):
            raise ScenarioError(str(run_dir), "-", "expected a run directory (scenario.yaml) or an empty directory")
        else:
            states.append(RunState(arm, seed, run_dir, "new"))
    return states


def differing_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted keys where two resolved scenarios differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [k for key in sorted(set(a) | set(b), key=str)
                for k in differing_keys(a.get(key), b.get(key), f"{prefix}{key}.")]
    return [] if a == b else [prefix.rstrip(".")]


# Keys added after runs were recorded, whose default reproduces the code before them (their commit
# left every scenario's baseline bitwise unchanged): absent from an older record means this value.
ABSENT_MEANS = {"training.drop_last": False, "method.within_class": True, "method.label_loss": True,
                "partition.fill": "in_order", "augment.hue": 0.0, "augment.jitter_order": "fixed",
                "augment.crop_sampler": "uniform_area", "augment.interpolation": "bilinear", "augment.blur_prob": 0.0,
                "augment.blur_sigma": [0.1, 2.0], "augment.blur_kernel": 3, "augment.solarize_prob": 0.0,
                "augment_prime": {}}


def record_differences(stored: dict, resolved: dict) -> list[str]:
    """:func:`differing_keys` of a run's stored scenario and a resolved one, except the keys of
    :data:`ABSENT_MEANS` that the (older) record lacks where the resolved one holds their default."""
    return [key for key in differing_keys(stored, resolved)
            if not (key in ABSENT_MEANS and value_at(stored, key) is None and value_at(resolved, key) == ABSENT_MEANS[key])]


# Keys that change neither what a run trains nor its margins' metrics: how often it is evaluated
# (evaluations draw from no training random stream, and the last round is always evaluated), the
# raw-pixel reference (a separate table), where its files go, and how its clients are spread over
# workers, tier pools and nodes (results do not depend on them: tests/simulator/test_engine.py,
# test_multinode.py).
NEUTRAL = ("eval.every", "eval.pixel_reference", "output.", "ray.address", "ray.num_workers", "ray.worker_pools",
           "ray.cuda_deterministic")


def differences(stored: dict, other: dict) -> list[str]:
    """Dotted keys where a run's stored scenario differs from another (a shipped file resolved, another
    run's record) in what it trains or measures: :func:`record_differences` but the :data:`NEUTRAL` keys."""
    return [key for key in record_differences(stored, other)
            if not any(key == n or (n.endswith(".") and key.startswith(n)) for n in NEUTRAL)]


def value_at(scenario: dict, dotted: str) -> Any:
    """``scenario``'s value at ``dotted``; None where a record lacks the key."""
    try:
        return lookup(scenario, dotted)
    except (KeyError, TypeError):
        return None


def run_missing(suite: Suite, scenarios: dict[tuple[str, int], dict], states: list[RunState],
                progress: bool = False) -> list[RunState]:
    """Run the new runs and resume the interrupted ones, one after another, seed by seed (every arm of
    a seed before the next seed, so that a suite stopped part-way leaves complete pairs); returns
    those it ran."""
    from simulator.run import run_scenario, stop_signals
    seed_order = {seed: i for i, seed in enumerate(suite.seeds)}
    todo = sorted((s for s in states if s.state != "finished"), key=lambda s: seed_order[s.seed])
    for i, state in enumerate(todo, 1):
        stop_signals.raise_if_requested()  # a stop noted in the last run's last round: announce nothing more
        verb = "resuming" if state.state == "interrupted" else "running"
        print(f"claim: {verb} {state.arm} seed {state.seed} ({i}/{len(todo)}) in {state.run_dir}", file=sys.stderr,
              flush=True)
        if state.state == "interrupted":
            scenario = load_scenario(state.run_dir / "scenario.yaml")
            run_scenario(scenario, progress=progress, resume_dir=str(state.run_dir))
        else:
            run_scenario(scenarios[state.arm, state.seed], str(state.run_dir), progress=progress)
    return todo


def stale_notes(scenarios: dict[tuple[str, int], dict], states: list[RunState]) -> list[str]:
    """Finished or resumed runs whose scenario differs from the suite's in what they train or measure
    (:func:`differences`: kept, never repeated)."""
    notes = []
    for state in states:
        if state.state == "new" or not (state.run_dir / "scenario.yaml").exists():
            continue
        stored = read_recorded_scenario(state.run_dir)
        keys = differences(stored, scenarios[state.arm, state.seed])
        if keys:
            notes.append(f"note: {state.run_dir}: its scenario differs from the suite's at {keys_text(keys)} "
                         f"(the run is used as it is)")
    return notes


def keys_text(keys: list[str]) -> str:
    """The first five dotted keys, and how many more."""
    return ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


def same_name_notes(runs: list[dict]) -> list[str]:
    """Runs that a report counts as one scenario (one name) though their recorded scenarios differ in
    what they train or measure (:func:`differences`, the seed aside): per name, the runs outside its
    largest set of alike runs (the first on a tie), each with the keys it differs at from that set.
    ``runs``: as :func:`analysis.report.read_run` gives them."""
    notes = []
    by_name: dict[str, list[tuple[dict, dict]]] = {}
    for run in runs:
        by_name.setdefault(run["name"], []).append((run, read_recorded_scenario(Path(run["dir"]))))
    for name, members in by_name.items():
        alike: list[list[tuple[dict, dict]]] = []  # runs whose records differ at no key but the seed
        for member in members:
            group = next((g for g in alike if not unlike(g[0][1], member[1])), None)
            if group is None:
                alike.append([member])
            else:
                group.append(member)
        largest = max(alike, key=len)
        for group in alike:
            if group is largest:
                continue
            keys = unlike(largest[0][1], group[0][1])
            for run, _ in group:
                others = ", ".join(r["dir"] for r, _ in largest)
                notes.append(f"note: {run['dir']}: its scenario differs from that of the other runs named {name!r} "
                             f"({others}) at {keys_text(keys)}; the report counts them as one scenario "
                             f"(give it another name to keep it apart)")
    return notes


def unlike(stored: dict, other: dict) -> list[str]:
    """:func:`differences` of two runs' records both ways (a key an older record lacks at its default is
    no difference, whichever the older one), the seed aside."""
    back = set(differences(other, stored))
    return [key for key in differences(stored, other) if key in back and key != "seed"]


# ---- the table and the verdict -----------------------------------------------------------------

def metric_value(run: dict, section: str, metric: str) -> float | None:
    """``section`` (``initial``/``final``) value of ``metric`` in a run read by
    :func:`analysis.report.read_run`; ``GROUP/METRIC`` reads the per-group means of ``metrics.parquet``
    (round 0 for ``initial``, the last evaluation for ``final``). None when the run lacks it or it is not
    a finite number (the alignment and uniformity of a network whose features are NaN), shown as ``n/a``."""
    value = logged_value(run, section, metric)
    return value if value is not None and math.isfinite(value) else None


def logged_value(run: dict, section: str, metric: str) -> float | None:
    """:func:`metric_value` as the run logged it (NaN included)."""
    if "/" not in metric:
        return (run.get(section) or {}).get(metric)
    group, name = metric.split("/", 1)
    if section == "final":
        return run["groups"].get(group, {}).get(name)
    path = Path(run["dir"]) / "metrics.parquet"
    if not path.exists():
        return None
    wanted = f"eval/{group}/{name}_mean"
    for row in read_metrics(path):
        if row["round"] == 0 and row["name"] == wanted:
            return row["value"]
    return None


def decide(interval: tuple[float, float] | None, direction: str, margin: float | None) -> tuple[str, str]:
    """(verdict, reason) of one comparison from the 95% interval of the mean difference (points),
    its ends rounded to 1e-9 points: accuracies are counts over the test images, so differences of
    exactly a margin on every seed are an interval of exactly it, not floating point's just below
    or just above (``100 * (0.8123 - 0.8023)`` is 1.0000000000000009)."""
    if interval is None:
        return "not reproduced", "one seed: no interval"
    lo, hi = (round(end, 9) for end in interval)
    if direction == "greater":
        if lo > 0:
            return "reproduced", "the interval lies above zero"
        if hi < 0:
            return "contradicted", "the interval lies below zero"
        return "not reproduced", "the interval includes zero: the data cannot tell"
    if direction == "equivalent":
        if -margin < lo and hi < margin:
            return "reproduced", f"the interval lies inside ±{margin:g}"
        if lo > margin or hi < -margin:
            return "contradicted", f"the interval lies outside ±{margin:g}"
        return "not reproduced", f"the interval reaches beyond ±{margin:g}: the data cannot tell"
    if direction == "not_greater":
        if hi < margin:
            return "reproduced", f"the interval lies below +{margin:g}"
        if lo > margin:
            return "contradicted", f"the interval lies above +{margin:g}"
        return "not reproduced", f"the interval reaches beyond +{margin:g}: the data cannot tell"
    raise ValueError(f"direction: expected one of {', '.join(DIRECTIONS)}, got {direction!r}")


def boundaries(comparison: Comparison) -> tuple[float, ...]:
    """The points an interval's ends are decided against (:func:`decide`)."""
    if comparison.direction == "equivalent":
        return -comparison.margin, comparison.margin
    return (comparison.margin,) if comparison.direction == "not_greater" else (0.0,)


def interval_text(interval: tuple[float, float], against: tuple[float, ...]) -> str:
    """``[-0.52, +5.48]``, each end on its side of each of ``against`` (:func:`analysis.report.side_text`):
    the verdict compares the unrounded ends, and two decimals could show one interval beside opposite
    verdicts (``-1.00`` for -1.004 and for -0.996 beside a margin of 1)."""
    return f"[{side_text(interval[0], against)}, {side_text(interval[1], against)}]"


def overall(verdicts: list[str]) -> str:
    if all(v == "reproduced" for v in verdicts):
        return "reproduced"
    return "contradicted" if "contradicted" in verdicts else "not reproduced"


def read_runs(suite: Suite, runs_dir: Path) -> dict[str, list[dict]]:
    """The finished runs of each arm (``read_run``), every seed; raises ValueError for a missing
    primary metric."""
    from analysis.report import read_run
    runs: dict[str, list[dict]] = {}
    for arm in suite.arms:
        runs[arm] = [read_run(suite.run_dir(runs_dir, arm, seed)) for seed in suite.seeds]
        for run in runs[arm]:
            for section in ("initial", "final"):
                if metric_value(run, section, suite.primary) is None:
                    value = logged_value(run, section, suite.primary)
                    raise ValueError(f"{run['dir']}: summary.json: expected {section}.{suite.primary} "
                                     f"(the suite's primary metric), "
                                     + ("found none" if value is None else f"a finite number, got {value!r}"))
    return runs


def gain_over_round0(runs: list[dict], metric: str) -> PairedDifference | None:
    """Final minus round 0 of the same runs (points), with its interval: has the arm learned?"""
    pairs = [(metric_value(r, "final", metric), metric_value(r, "initial", metric)) for r in runs]
    if any(a is None or b is None for a, b in pairs):
        return None
    return PairedDifference.of(tuple(r["seed"] for r in runs), tuple(100 * (a - b) for a, b in pairs))


@dataclass(frozen=True)
class Decision:
    """A deciding comparison on the suite's primary metric: its paired difference and verdict."""
    comparison: Comparison
    difference: PairedDifference
    verdict: str
    reason: str


def decisions(suite: Suite, runs: dict[str, list[dict]]) -> list[Decision]:
    """:func:`decide` of each of ``suite.comparisons`` on the final primary metric of ``runs``
    (:func:`read_runs`: every run has it)."""
    decided = []
    for comparison in suite.comparisons:
        d = comparison.difference(runs, lambda run: metric_value(run, "final", suite.primary))
        decided.append(Decision(comparison, d, *decide(d.interval, comparison.direction, comparison.margin)))
    return decided


def shown_to_learn(gain: PairedDifference) -> bool:
    """Whether an arm's gain over its round 0 (:func:`gain_over_round0`) has its interval above zero."""
    return gain.interval is not None and gain.interval[0] > 0


def gain_cell(gain: PairedDifference) -> str:
    """The gain's cell, marked where the arm is not shown to learn."""
    return gain.cell() + ("" if shown_to_learn(gain) else " **not shown to learn**")


def finished_seeds(suite: Suite, states: list[RunState]) -> tuple[int, ...]:
    """The suite's seeds whose runs have finished in every arm."""
    unfinished = {state.seed for state in states if state.state != "finished"}
    return tuple(seed for seed in suite.seeds if seed not in unfinished)


def claim_table(suite: Suite, runs: dict[str, list[dict]], runs_dir: Path, pending: tuple[int, ...] = (),
                differing: list[str] | tuple[str, ...] = ()) -> tuple[str, str]:
    """(the markdown report of the claim, its overall verdict). ``pending``: the suite's seeds left out
    of ``suite.seeds`` because their runs have not finished; the report is then an interim one and
    its verdict is ``no verdict yet`` (the protocol decides on every seed of the suite). ``differing``:
    :func:`stale_notes` of the runs, a section of the report where there are any."""
    metrics = (suite.primary, *suite.secondary)
    deciding_arms = set().union(*(c.arms() for c in suite.comparisons))
    lines = [f"# Claim: {suite.claim}", ""]
    if suite.paper:
        lines += [f"Paper: {suite.paper}", ""]
    if pending:
        unfinished = f"seeds {','.join(map(str, pending))} of the suite have" if len(pending) > 1 else \
            f"seed {pending[0]} of the suite has"
        lines += [f"**Interim: {unfinished} not finished in every arm; "
                  f"the table is over the finished seeds and gives no verdict** (the protocol decides on all "
                  f"{len(suite.seeds) + len(pending)} seeds).", ""]
    suite_runs = [run for name in suite.arms for run in runs[name]]
    lines += [f"Suite `{suite.path}`; runs in `{runs_dir}`; seeds {','.join(map(str, suite.seeds))}. "
              f"Accuracies top-1 in %, round 0 (the arm's random network, same evaluation data) and final."
              + (f"{ARMS_LEFT_OUT}{', '.join(suite.left_out)}." if suite.left_out else ""),
              code_line(suite_runs), numerics_line(suite_runs),
              f"Primary metric (decides the verdict): **{suite.primary}**. "
              + (f"Secondary (printed, decide nothing): {', '.join(suite.secondary)}." if suite.secondary
                 else "No secondary metrics."), "",
              "## Arms: mean ± std over seeds", "",
              "| arm | role | scenario | " + " | ".join(f"{m} round 0 | {m} final" for m in metrics)
              + f" | {suite.primary} final − round 0 |",
              "|" + "---|" * (3 + 2 * len(metrics) + 1)]
    not_learned = []  # deciding arms whose gain over round 0 is not shown
    for name, arm in suite.arms.items():
        members = runs[name]
        cells = [mean_std([metric_value(r, s, m) for r in members]) for m in metrics for s in ("initial", "final")]
        gain = gain_over_round0(members, suite.primary)
        learned = gain_cell(gain)
        scenario = arm.scenario + "".join(f" --set {o}" for o in (*suite.shared_overrides, *arm.overrides))
        role = "decides" if name in deciding_arms else "secondary"
        if role == "decides" and not shown_to_learn(gain):
            not_learned.append(name)
        lines.append(f"| {name} | {role} | `{scenario}` | " + " | ".join(cells) + f" | {learned} |")
    lines += ["", f"Last column: each run's final minus its own round 0 on {suite.primary}, in points, mean [95% "
              f"t-interval] (seeds on which the final beats round 0); an arm whose interval does not lie above zero "
              f"is marked as not shown to learn.",
              "", "## Paired differences: arm − baseline on the same seed, in points", "",
              "Mean [95% Student-t interval, n − 1 degrees of freedom; n/a with one seed] (seeds on which the arm "
              "is ahead)." + (" A row (a − b) − (c − d) is a difference of differences, each seed's a − b less its "
                               "c − d; it is ahead on the seeds where the first gap is the larger."
                               if any(c.minus for c in (*suite.comparisons, *suite.secondary_comparisons)) else ""),
              "",
              "| comparison | kind | " + " | ".join(f"{m}" + (" (primary)" if m == suite.primary else " (secondary)")
                                                   for m in metrics) + " |",
              "|" + "---|" * (2 + len(metrics))]
    for comparison in (*suite.comparisons, *suite.secondary_comparisons):
        cells = []
        for m in metrics:
            d = comparison.difference(runs, lambda run, m=m: metric_value(run, "final", m))
            cells.append("n/a" if d is None else d.cell())
        kind = "decides" if comparison.direction is not None else "secondary, decides nothing"
        if comparison.direction is not None and sum(c.label() == comparison.label() for c in suite.comparisons) > 1:
            kind += f" ({comparison.claimed()})"  # one pair claimed two ways: rows told apart
        lines.append(f"| {comparison.label()} | {kind} | " + " | ".join(cells) + " |")
    notes = numerics_notes({seed: {arm: runs[arm][i] for arm in suite.arms} for i, seed in enumerate(suite.seeds)})
    if notes:
        lines += ["", "## Numerics: runs of a seed computed differently", "", NUMERICS_NOTE, "", *notes]
    by_arm = [{**run, "name": name} for name in suite.arms for run in runs[name]]
    lines += ["", "## Per run: gain over its own round 0 (decides nothing)", "",
              learning_table(by_arm, LEARNING_MARGINS, label="arm").rstrip("\n")]
    if (against_pixels := pixel_table(by_arm, label="arm")) is not None:
        lines += ["", "## Per run: round 0 and final against the raw pixels (decides nothing)", "",
                  against_pixels.rstrip("\n")]
    if differing:
        lines += ["", "## Runs used though their scenario differs from the suite's", "", *(f"- {n}" for n in differing)]
    lines += ["", f"## Verdict (decided only by the primary metric, {suite.primary}; secondary metrics and "
                  f"secondary comparisons decide nothing)", ""]
    verdicts = []
    for decision in decisions(suite, runs):
        comparison, d, verdict, reason = decision.comparison, decision.difference, decision.verdict, decision.reason
        verdicts.append(verdict)
        interval = "n/a" if d.interval is None else interval_text(d.interval, boundaries(comparison))
        outcome = "no verdict yet" if pending else f"**{verdict}** ({reason})"
        if d.interval is not None and round(d.interval[0], 9) == round(d.interval[1], 9):
            outcome += "; the differences are equal on every seed, so the interval has no width" + (
                ": the outcome rests on their sign alone; more seeds, or a finer metric, would show their spread"
                if comparison.direction == "greater" else "")
        seeds = f"{len(d.diffs)} seed" + ("s" if len(d.diffs) != 1 else "")
        lines.append(f"- claimed {comparison.claimed()}: {comparison.label()} = "
                     f"{d.mean:+.2f} {interval} points over {seeds} → {outcome}")
    if not_learned:
        lines += ["", f"Deciding arm{'s' if len(not_learned) > 1 else ''} not shown to learn on {suite.primary} "
                      f"(final over round 0, interval not above zero): {', '.join(not_learned)}; the verdict is about "
                      f"networks that did not learn."]
    if pending:
        lines += ["", f"**No verdict yet**: {len(suite.seeds)} of {len(suite.seeds) + len(pending)} seeds finished."]
        return "\n".join(lines) + "\n", "no verdict yet"
    if suite.left_out_comparisons:
        dropped = ", ".join(c.label() for c in suite.left_out_comparisons)
        lines += ["", f"**Partial: no verdict of the claim**: `--arms` left out its deciding comparison"
                      f"{'s' if len(suite.left_out_comparisons) > 1 else ''} {dropped}, and the claim is reproduced "
                      f"only when every one is."]
        return "\n".join(lines) + "\n", "partial"
    verdict = overall(verdicts)
    lines += ["", f"**Claim {verdict}**" + (" (every comparison must be reproduced)" if len(verdicts) > 1 else "")
              + "."]
    return "\n".join(lines) + "\n", verdict
