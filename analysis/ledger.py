"""The learning ledger: which shipped scenarios have been shown to learn, and on which seeds.

Issue 15 asks that every shipped CPU scenario of a self-supervised method beat its own random
round-0 network by the learning margins (``analysis.report.LEARNING_MARGINS``) on every seed it was
run on. The runs that bear on that lie in many folders of experiments, most of them of settings
that were tried and not shipped. This report matches each kept run to the scenario files as they
are shipped now and reads the margins off the runs that match:

- a run **is of** a shipped file when its stored scenario (``scenario.yaml``) equals the file
  resolved at the run's seed, except at :data:`analysis.claims.NEUTRAL` keys (they change neither what is trained
  nor the margins' metrics) and at :data:`analysis.claims.ABSENT_MEANS` keys missing from a record older than the
  key (their default reproduces what ran before the key existed);
- it is a **CPU** run: a run whose workers had a GPU is left out (GPU kernels are not the CPU's);
- its code is **current** for that scenario: no commit after the run's code changed the scenario's
  recorded 3-round baseline (``tests/scenarios_baseline.json``, which a change to what a scenario
  computes re-records on purpose). Where a later commit did, the run is **stale**; where the run's
  code is not recorded (runs before ``summary.json`` named it), carries uncommitted changes, is not
  in this repository's history, or predates the scenario's first baseline record (or no record names
  the scenario), it is **unknown**; a resumed run is stale when one of its sessions is, else unknown
  when one is. Stale and unknown runs are shown apart, with their verdicts, and decide nothing.

A second table says, per file, where its mean gain over its seeds of current code lies against each
margin (a 95% Student-t interval over seeds): wholly above, wholly below (a file whose expected gain
falls short: its setting, not its luck, misses), or across it. It is descriptive and decides nothing;
issue 15's verdict is the first table's, on every seed run.

Limits, said rather than hidden: issue 15's third condition, a larger gain with 1% of the labels
(``results/protocol.md``), is not judged here (``fedssl report`` and ``fedssl claim`` print it per run);
a change to the evaluation code does not show in the baselines
(they run without evaluation), and a run of a longer budget is not read at the shipped budget's
round even where the two agree up to it (a constant learning rate), so such runs are not counted.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from analysis.claims import differences
from analysis.report import check_margins, gain_text, learning_verdict, points_over_round0, read_run, t_interval
from methods.objectives import OBJECTIVES
from simulator.provenance import git
from simulator.runlog import check_existing_directory, read_recorded_scenario
from simulator.scenario import ScenarioError, load_scenario

BASELINE = Path("tests/scenarios_baseline.json")


def on_gpu(scenario: dict, source: str = "scenario") -> bool:
    """Whether a run's workers had a GPU; ``ScenarioError`` naming ``source`` (the run's ``scenario.yaml``)
    where the ``ray`` keys read here are not of the kinds fedssl run writes."""
    def mapping(value: Any, key: str) -> dict:
        if value is not None and not isinstance(value, dict):
            raise ScenarioError(source, key, f"expected a mapping (the resolved scenario fedssl run writes), "
                                             f"got {value!r}")
        return value or {}

    ray = mapping(scenario.get("ray"), "ray")
    pools = ray.get("worker_pools") or []
    if not isinstance(pools, list):
        raise ScenarioError(source, "ray.worker_pools", f"expected a list of pools, got {pools!r}")
    gpus = {"ray.worker.num_gpus": mapping(ray.get("worker"), "ray.worker").get("num_gpus")}
    gpus.update({f"ray.worker_pools[{i}].num_gpus": mapping(pool, f"ray.worker_pools[{i}]").get("num_gpus")
                 for i, pool in enumerate(pools)})
    for key, count in gpus.items():
        if count is not None and (isinstance(count, bool) or not isinstance(count, (int, float))):
            raise ScenarioError(source, key, f"expected a number of GPUs, got {count!r}")
    return any(count is not None and count > 0 for count in gpus.values())


def self_supervised_fashion_mnist(scenarios_dir: Path, repo: Path) -> dict[str, dict]:
    """The shipped Fashion-MNIST scenarios of a self-supervised method under ``scenarios_dir``, resolved,
    by their path within ``repo``."""
    shipped = {}
    for path in sorted(scenarios_dir.resolve().rglob("*.yaml")):
        scenario = load_scenario(path)
        objective = OBJECTIVES.get(scenario["method"].get("objective"))  # None: a method without the key
        if scenario["dataset"]["name"] == "fashion_mnist" and not (objective and objective.uses_labels):
            shipped[path.relative_to(repo).as_posix()] = scenario
    return shipped


class History:
    """What the repository's git history says of a run's code (``root``: the repository)."""

    def __init__(self, root: Path):
        self.root = root
        log = git(root, "log", "--format=%H", "--", str(BASELINE))
        self.baseline_commits = log.split() if log else []  # newest first

    @lru_cache(maxsize=None)
    def baseline_at(self, commit: str) -> dict:
        """The baseline's records at ``commit``, per scenario and CPU capability (the first baselines
        held one capability's, named at the top)."""
        text = git(self.root, "show", f"{commit}:{BASELINE}")
        if not text:
            return {}
        baseline = json.loads(text)
        if "cpu_capability" in baseline:
            return {name: {baseline["cpu_capability"]: record} for name, record in baseline["scenarios"].items()}
        return baseline["scenarios"]

    @lru_cache(maxsize=None)
    def changes(self, scenario_path: str) -> tuple[str, ...]:
        """The commits that changed what ``scenario_path`` trains: its recorded baseline's final global
        state differs on a CPU capability recorded before and after (a metric newly logged, or a count
        such as bytes sent, is no change; nor is another machine's record added beside an unchanged
        one; a record replaced by another machine's counts), and the commit changed the code
        (``simulator/``, ``methods/``) or left the file as it was (a re-record that follows a change
        to the file alone is the file's, which the stored scenario of a run already tells)."""
        found = []
        for commit in self.baseline_commits:
            parent, touched = self.parent_and_touched(commit)
            after = self.baseline_at(commit).get(scenario_path, {})
            before = self.baseline_at(parent).get(scenario_path, {}) if parent else {}
            common = set(after) & set(before)
            differs = any(after[c]["state"] != before[c]["state"] for c in common)
            if not (differs or (before and after and not common)):
                continue
            if scenario_path not in touched or any(t.startswith(("simulator/", "methods/")) for t in touched):
                found.append(commit)
        return tuple(found)

    @lru_cache(maxsize=None)
    def first_record(self, scenario_path: str) -> str | None:
        """The oldest commit whose baseline records ``scenario_path`` (None: none does)."""
        return next((c for c in reversed(self.baseline_commits) if scenario_path in self.baseline_at(c)), None)

    @lru_cache(maxsize=None)
    def parent_and_touched(self, commit: str) -> tuple[str | None, tuple[str, ...]]:
        """``commit``'s parent (None for a root commit) and the paths it changed."""
        parent = git(self.root, "rev-parse", "--verify", "--quiet", f"{commit}^")
        return parent, tuple((git(self.root, "diff", "--name-only", parent, commit) or "").split()) if parent else ()

    @lru_cache(maxsize=None)
    def full(self, commit: str) -> str | None:
        return git(self.root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")

    @lru_cache(maxsize=None)
    def contains(self, commit: str, ancestor: str) -> bool:
        return git(self.root, "merge-base", "--is-ancestor", ancestor, commit) is not None

    def code_state(self, code: list[str] | None, scenario_path: str) -> str:
        """``current``, ``stale`` or ``unknown`` (module docstring) for a run's ``summary.json`` ``code``."""
        if not code or not self.baseline_commits:
            return "unknown"
        # a scenario no baseline records: what changed its training is not known
        first = self.first_record(scenario_path)
        states = set()
        for line in code:
            # "git 0123456789ab+modified" (uncommitted changes) names no commit git knows: unknown
            commit = line.rpartition("git ")[2] if "git " in line else ""
            full = self.full(commit) if commit else None
            # a commit off this history (an unmerged branch) may train otherwise than any commit on it;
            # a run older than the scenario's first record: what changed before that record is not known
            if first is None or full is None or not self.contains("HEAD", full) or not self.contains(full, first):
                states.add("unknown")
            else:
                stale = any(not self.contains(full, c) for c in self.changes(scenario_path))
                states.add("stale" if stale else "current")
        # one session of a resumed run at stale code makes the run stale, whatever the others' state
        return next(state for state in ("stale", "unknown", "current") if state in states)


@dataclass
class LedgerRun:
    scenario: str  # the shipped file's path
    code_state: str
    run: dict  # analysis.report.read_run's (its "seed", "dir")


def run_dirs(roots: list[Path]) -> list[Path]:
    """The finished runs under ``roots`` (folders holding ``summary.json`` and ``scenario.yaml``)."""
    found: dict[Path, Path] = {}  # by resolved path: a folder reached by two spellings counts once
    for root in roots:
        check_existing_directory(root, "directory of runs")
        for p in sorted(root.rglob("summary.json")):
            if (p.parent / "scenario.yaml").exists():
                found.setdefault(p.parent.resolve(), p.parent)
    return sorted(found.values())


def match_runs(shipped: dict[str, dict], dirs: list[Path], history: History) -> list[LedgerRun]:
    """The CPU runs of each shipped file as shipped, with their code's state (``shipped``: resolved
    scenarios by path within ``history.root``, the repository). A file resolved at a run's seed is the
    file resolved with that seed put in: nothing else a scenario resolves to depends on the seed."""
    by_name: dict[str, list[str]] = {}
    for path, scenario in shipped.items():
        by_name.setdefault(scenario["name"], []).append(path)
    matched = []
    for run_dir in dirs:
        stored = read_recorded_scenario(run_dir)
        if on_gpu(stored, str(run_dir / "scenario.yaml")):
            continue
        for path in by_name.get(stored.get("name"), []):
            if not differences(stored, {**shipped[path], "seed": stored["seed"]}):
                run = read_run(run_dir)
                matched.append(LedgerRun(path, history.code_state(run.get("code"), path), run))
    return matched


SHORT_NAMES = {"knn_top1": "kNN", "linear_top1": "probe"}  # the margins' metrics, as the tables name them


def gains(run: dict, margins: dict[str, float]) -> str:
    return ", ".join(f"{SHORT_NAMES.get(m, m)} {gain_text(points_over_round0(run, m), margin)}"
                     for m, margin in margins.items())


def counted(entries: list[str]) -> list[str]:
    """``entries`` in order, each written once, as "ENTRY (N runs)" where N runs gave it (a seed run
    again: a cleared seed once with its count, a missed seed once per distinct gains)."""
    counts = Counter(entries)
    return [entry if counts[entry] == 1 else f"{entry} ({counts[entry]} runs)" for entry in dict.fromkeys(entries)]


def seeds_text(runs: list[LedgerRun], margins: dict[str, float]) -> tuple[str, str]:
    """(the seeds ``runs`` clear the margins on, the seeds they miss on with their gains)."""
    cleared = [r for r in runs if learning_verdict(r.run, margins) == "clears the margins"]
    missed = [r for r in runs if r not in cleared]
    return (", ".join(counted([str(r.run["seed"]) for r in cleared])) or "—",
            "; ".join(counted([f"**{r.run['seed']}** ({gains(r.run, margins)})" for r in missed])) or "—")


def seed_gains(runs: list[LedgerRun], metric: str) -> list[float]:
    """One gain over round 0 per seed of ``runs``, in seed order: the mean of the seed's runs (runs of
    one seed and code agree but for the machine's arithmetic, AVX2 against AVX-512)."""
    by_seed: dict[int, list[float]] = {}
    for r in runs:
        by_seed.setdefault(r.run["seed"], []).append(points_over_round0(r.run, metric))
    return [round(sum(g) / len(g), 9) for _, g in sorted(by_seed.items())]  # as points_over_round0 rounds


def against_margin(gains: list[float], margin: float) -> tuple[str, str]:
    """(the mean gain with its 95% Student-t interval over seeds, where the interval lies against the
    margin: ``above``, ``below`` or ``straddles``; ``one seed`` where there is no interval)."""
    mean = sum(gains) / len(gains)
    interval = t_interval(gains)
    if interval is None:
        return f"{mean:+.2f}", "one seed"
    low, high = interval
    where = "above" if low >= margin else "below" if high < margin else "straddles"
    # the ends with the decimals it takes not to print as the margin where they are not (the place is
    # decided on the unrounded ends: +3.996 is across a margin of 4, not above it)
    return f"{mean:+.2f} [{gain_text(low, margin)}, {gain_text(high, margin)}]", where


def spread_table(shipped: dict[str, dict], matched: list[LedgerRun], margins: dict[str, float]) -> str:
    """Per shipped scenario with runs of current code: its mean gain over seeds on each margin metric,
    the 95% interval of that mean, and where the interval lies against the margin; then the count of
    scenarios whose intervals lie above every margin, below some margin, or neither. Descriptive: it
    tells a file whose expected gain falls short (a setting to change) from one that misses on
    unlucky seeds; the verdict of issue 15 is the seeds table's, on every seed run."""
    rows, places = [], []
    for path in shipped:
        current = [r for r in matched if r.scenario == path and r.code_state == "current"]
        if not current:
            continue
        cells = [against_margin(seed_gains(current, m), p) for m, p in margins.items()]
        rows.append(f"| `{path}` | {len({r.run['seed'] for r in current})} | "
                    + " | ".join(f"{gain} | {where}" for gain, where in cells) + " |")
        wheres = [where for _, where in cells]
        places.append("below" if "below" in wheres else "above" if all(w == "above" for w in wheres)
                      else "one seed" if "one seed" in wheres else "straddles")
    counts = Counter(places)
    header = " | ".join(f"{SHORT_NAMES.get(m, m)} gain, mean [95% CI] | against +{p:g}" for m, p in margins.items())
    return "\n".join([
        f"| shipped scenario | seeds | {header} |", "|---|---|" + "---|---|" * len(margins), *rows, "",
        f"Where each file's mean gain over its seeds of current code lies against the margins (descriptive, "
        f"decides nothing; the 95% interval is Student-t over seeds, a seed's runs averaged): "
        f"{counts['above']} files lie above every margin, {counts['below']} below some margin, "
        f"{counts['straddles']} straddle a margin, {counts['one seed']} have one seed (no interval)."])


def ledger_tables(shipped: dict[str, dict], matched: list[LedgerRun], margins: dict[str, float]) -> str:
    """Per shipped scenario: the seeds its runs of current code clear and miss on, and apart from them
    those of its runs whose code is unknown or stale; then every matched run; then the count of
    scenarios that clear on every seed run of current code; then :func:`spread_table`."""
    rows, run_rows = [], []
    clear_every, miss_some, none_current = [], [], []
    for path in shipped:
        runs = sorted((r for r in matched if r.scenario == path), key=lambda r: (r.run["seed"], r.run["dir"]))
        current = [r for r in runs if r.code_state == "current"]
        other = [r for r in runs if r.code_state != "current"]
        cleared, missed = seeds_text(current, margins)
        other_text = ""
        if other:
            states = " or ".join(sorted({r.code_state for r in other}))
            other_cleared, other_missed = seeds_text(other, margins)
            other_text = f"{states}: cleared {other_cleared}; missed {other_missed}"
        rows.append(f"| `{path}` | {cleared} | {missed} | {other_text} |")
        (none_current if not current else miss_some if missed != "—" else clear_every).append(path)
        for r in runs:
            run_rows.append(f"| `{path}` | {r.run['seed']} | `{r.run['dir']}` | {r.code_state} | {gains(r.run, margins)} | "
                            f"{learning_verdict(r.run, margins)} |")
    margin_text = ", ".join(f"{m} +{p:g}" for m, p in margins.items())
    return "\n".join([
        "| shipped scenario | seeds cleared | seeds missed (gain over round 0, points) | runs of unknown or stale code |",
        "|---|---|---|---|", *rows, "",
        "| shipped scenario | seed | run | code | gain over round 0 (points) | learned? |",
        "|---|---|---|---|---|---|", *run_rows, "",
        f"Margins: {margin_text} over each run's own round-0 network. Counted: the CPU runs of each file as "
        f"shipped whose code is current (analysis/ledger.py); runs of unknown or stale code are shown apart "
        f"and decide nothing. Of {len(shipped)} shipped self-supervised Fashion-MNIST scenarios: "
        f"{len(clear_every)} clear on every seed run, {len(miss_some)} miss on some seed, "
        f"{len(none_current)} have no run of current code.", "", spread_table(shipped, matched, margins)])


def ledger(run_roots: list[Path], scenarios_dir: Path, margins: dict[str, float]) -> str:
    """``fedssl ledger``: the tables of :func:`ledger_tables` for the shipped scenarios under
    ``scenarios_dir`` (their paths as the repository holding it names them; the history is that
    repository's, or none outside one) and the runs under ``run_roots``."""
    check_existing_directory(scenarios_dir, "directory of scenarios")
    top = git(scenarios_dir, "rev-parse", "--show-toplevel")
    repo = Path(top).resolve() if top else scenarios_dir.resolve().parent
    shipped = self_supervised_fashion_mnist(scenarios_dir, repo)
    if not shipped:
        raise ValueError(f"{scenarios_dir}: no Fashion-MNIST scenario of a self-supervised method in it")
    matched = match_runs(shipped, run_dirs(run_roots), History(repo))
    check_margins([r.run for r in matched], margins)
    return ledger_tables(shipped, matched, margins)
