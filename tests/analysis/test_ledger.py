"""``fedssl ledger`` (analysis/ledger.py): kept runs matched to the shipped scenario files, judged
against the learning margins only where their code is current, in a throwaway git repository whose
history the tests write."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from analysis.ledger import (History, LedgerRun, against_margin, differences, gains, ledger, match_runs, on_gpu,
                             run_dirs, seed_gains, self_supervised_fashion_mnist)
from analysis.report import LEARNING_MARGINS, parse_margins, t_interval
from simulator.cli import main
from simulator.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=ENV).stdout.strip()


def commit(repo: Path, message: str, baseline: dict | None = None, files: dict[str, str] | None = None) -> str:
    """Write ``files`` and the baseline's records ({scenario: {capability: record}}), commit, return the hash."""
    for name, text in (files or {}).items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    if baseline is not None:
        (repo / "tests").mkdir(exist_ok=True)
        (repo / "tests/scenarios_baseline.json").write_text(json.dumps({"scenarios": baseline}))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def record(state: str, *metrics: str) -> dict:
    return {"metrics": {m: "0x1.0p+0" for m in ("1/loss", *metrics)}, "state": state}


@pytest.fixture()
def history(tmp_path):
    """A repository with one self-supervised scenario (the quickstart's file), a supervised one, and a
    history: c0 no baseline yet; c1 first baseline; c2 a code change that changes the scenario's final
    state; c3 another machine's record added beside it; c4 the scenario file changed and re-recorded
    without code; c5 a metric newly logged (state unchanged). Only c2 changed what the file trains."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    quickstart = (REPO / "scenarios/quickstart.yaml").read_text()
    name = "scenarios/quickstart.yaml"
    c = {"c0": commit(repo, "code", files={"simulator/x.py": "a = 1\n", name: quickstart,
                                             "scenarios/fedavg/supervised.yaml":
                                                 (REPO / "scenarios/fedavg/supervised.yaml").read_text()})}
    c["c1"] = commit(repo, "baseline", {name: {"AVX2": record("s1")}})
    c["c2"] = commit(repo, "a fix", {name: {"AVX2": record("s2")}}, {"simulator/x.py": "a = 2\n"})
    c["c3"] = commit(repo, "add AVX512", {name: {"AVX2": record("s2"), "AVX512": record("t2")}})
    c["c4"] = commit(repo, "the file changes", {name: {"AVX2": record("s3"), "AVX512": record("t3")}},
                     {name: quickstart.replace("rounds: 100", "rounds: 99")})
    c["c5"] = commit(repo, "a new metric", {name: {"AVX2": record("s3", "0/clients/online"),
                                                   "AVX512": record("t3", "0/clients/online")}})
    return repo, c


def code(commit_hash: str) -> list[str]:
    return [f"fedssl 0.1.0, git {commit_hash[:12]}"]


def test_only_a_code_change_of_the_trained_state_makes_earlier_runs_stale(history):
    repo, c = history
    h = History(repo)
    assert h.changes("scenarios/quickstart.yaml") == (c["c2"],)
    state = {k: h.code_state(code(v), "scenarios/quickstart.yaml") for k, v in c.items()}
    assert state == {"c0": "unknown", "c1": "stale", "c2": "current", "c3": "current", "c4": "current",
                     "c5": "current"}
    assert h.code_state(None, "scenarios/quickstart.yaml") == "unknown"
    assert h.code_state([code(c["c5"])[0] + "+modified"], "scenarios/quickstart.yaml") == "unknown"
    assert h.code_state(["fedssl 0.1.0, git 0123456789ab"], "scenarios/quickstart.yaml") == "unknown"
    # a resumed run: one session's code before the fix makes it stale
    assert h.code_state(code(c["c1"]) + code(c["c3"]), "scenarios/quickstart.yaml") == "stale"


def test_a_run_of_a_commit_off_the_history_is_of_unknown_code(history):
    """A run made on a branch never merged, whose code differs from every commit of the history (no
    baseline re-recorded there to say so), is of unknown code, not current."""
    repo, c = history
    git(repo, "checkout", "-q", "-b", "side")
    side = commit(repo, "an unmerged change", files={"simulator/x.py": "a = 999\n"})
    git(repo, "checkout", "-q", "-")
    h = History(repo)
    assert h.code_state(code(side), "scenarios/quickstart.yaml") == "unknown"
    assert h.code_state(code(c["c5"]), "scenarios/quickstart.yaml") == "current"


def test_a_record_replaced_by_another_machines_makes_earlier_runs_stale(history):
    """A baseline whose records before and after share no CPU capability cannot say the state is
    unchanged: a re-record on another machine alone (no code, no file) counts as a change."""
    repo, c = history
    replaced = commit(repo, "re-recorded on another machine", {"scenarios/quickstart.yaml": {"AVX10": record("s3")}})
    h = History(repo)
    assert h.changes("scenarios/quickstart.yaml") == (replaced, c["c2"])
    assert h.code_state(code(c["c5"]), "scenarios/quickstart.yaml") == "stale"
    assert h.code_state(code(replaced), "scenarios/quickstart.yaml") == "current"


def test_a_change_to_methods_with_the_file_makes_earlier_runs_stale(history):
    """A commit that edits methods/ and the scenario file together and changes the recorded state is
    the code's too (c4, the file alone re-recorded, is not: the stored scenario tells it)."""
    repo, c = history
    name = "scenarios/quickstart.yaml"
    both = commit(repo, "a method fix and the file", {name: {"AVX2": record("s4"), "AVX512": record("t4")}},
                  {"methods/y.py": "b = 1\n", name: (repo / name).read_text().replace("rounds: 99", "rounds: 98")})
    h = History(repo)
    assert h.changes(name) == (both, c["c2"])
    assert h.code_state(code(c["c5"]), name) == "stale" and h.code_state(code(both), name) == "current"


def test_a_run_older_than_its_scenarios_first_record_is_of_unknown_code(history):
    """A scenario first recorded after a code change (c6 here, the change c5 -> c6's code): a run at
    c5 predates what any record can tell of that scenario, so it is unknown, not current (the rule read
    the oldest baseline of any scenario)."""
    repo, c = history
    name = "scenarios/fedavg/byol.yaml"
    change = commit(repo, "a code change", files={"simulator/x.py": "a = 3\n", name: (REPO / name).read_text()})
    first = commit(repo, "the file first recorded", {**json.loads((repo / "tests/scenarios_baseline.json").read_text())
                                                     ["scenarios"], name: {"AVX2": record("b1")}})
    h = History(repo)
    assert h.first_record(name) == first and h.changes(name) == ()
    assert [h.code_state(code(k), name) for k in (c["c5"], change, first)] == ["unknown", "unknown", "current"]


def test_a_scenario_no_baseline_records_is_of_unknown_code(history):
    """A file never recorded in the baseline: no record can tell what changed its training, so every
    run of it is unknown (the rule fell back to the oldest record of any scenario, and the file's list
    of changes being empty, every later run was current whatever the code did since)."""
    repo, c = history
    name = "scenarios/fedavg/byol.yaml"
    commit(repo, "the file, never recorded", files={name: (REPO / name).read_text()})
    h = History(repo)
    assert h.first_record(name) is None
    assert [h.code_state(code(c[k]), name) for k in ("c2", "c5")] == ["unknown", "unknown"]


def test_a_run_on_a_merged_branch_that_lacks_a_code_change_on_main_is_stale(history):
    """A branch started before the fix c2 and merged after it: a run at the branch's commit is an
    ancestor of HEAD and not older than c2 in the history's order, yet lacks c2's change, so it is
    stale; the merge itself holds c2 and is current."""
    repo, c = history
    git(repo, "checkout", "-q", "-b", "side", c["c1"])
    side = commit(repo, "a change beside the fix", files={"docs/notes.md": "side\n"})
    git(repo, "checkout", "-q", "-")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    merged = git(repo, "rev-parse", "HEAD")
    h = History(repo)
    name = "scenarios/quickstart.yaml"
    assert h.changes(name) == (c["c2"],)
    assert h.code_state(code(side), name) == "stale" and h.code_state(code(merged), name) == "current"


def test_a_resumed_run_with_a_stale_session_is_stale_whatever_its_other_sessions(history):
    """A session at stale code decides, whichever order the sessions are listed in; an unknown one
    with the others current makes the run unknown."""
    repo, c = history
    h = History(repo)
    name = "scenarios/quickstart.yaml"
    unknown = "fedssl 0.1.0, git 0123456789ab"
    assert h.code_state([unknown] + code(c["c1"]), name) == "stale"
    assert h.code_state(code(c["c1"]) + [unknown], name) == "stale"
    assert h.code_state(code(c["c5"]) + [unknown], name) == "unknown"


def test_a_run_folder_reached_by_two_spellings_is_listed_once(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    for seed in (0, 1):
        (runs / f"seed_{seed}").mkdir(parents=True)
        (runs / f"seed_{seed}" / "summary.json").write_text("{}")
        (runs / f"seed_{seed}" / "scenario.yaml").write_text("{}")
    (runs / "no_scenario").mkdir()  # a summary.json without its run's scenario.yaml: not a run fedssl kept
    (runs / "no_scenario" / "summary.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert run_dirs([Path("runs"), runs, Path("runs/../runs/seed_0")]) == [Path("runs/seed_0"), Path("runs/seed_1")]


def test_the_first_baselines_one_capability_format_is_read(history):
    repo, c = history

    def old_format(state: str, *metrics: str) -> None:
        (repo / "tests/scenarios_baseline.json").write_text(json.dumps(
            {"cpu_capability": "AVX2", "scenarios": {"scenarios/quickstart.yaml": record(state, *metrics)}}))
    old_format("s9")
    changed = commit(repo, "old format, a new state, code", files={"simulator/x.py": "a = 3\n"})
    old_format("s9", "0/clients/online")
    commit(repo, "old format, the same state, code", files={"simulator/x.py": "a = 4\n"})
    assert History(repo).changes("scenarios/quickstart.yaml") == (changed, c["c2"])


def test_neutral_keys_and_keys_older_records_lack_do_not_separate_a_run_from_its_file():
    shipped = load_scenario(REPO / "scenarios/quickstart.yaml", ["seed=3"])
    stored = json.loads(json.dumps(shipped))
    stored["eval"]["every"] = 50
    stored["output"]["dir"] = "elsewhere"
    stored["ray"]["num_workers"] = 1
    del stored["eval"]["pixel_reference"], stored["training"]["drop_last"]
    del stored["method"]["within_class"], stored["method"]["label_loss"], stored["partition"]["fill"]
    assert differences(stored, shipped) == []
    stored["training"]["drop_last"] = True
    stored["method"]["within_class"] = False
    stored["augment"]["brightness"] = 0.4
    stored["partition"]["fill"] = "random_order"
    assert differences(stored, shipped) == ["augment.brightness", "method.within_class", "partition.fill",
                                            "training.drop_last"]
    assert not on_gpu(stored)
    stored["ray"]["worker"]["num_gpus"] = 0.5
    assert on_gpu(stored)
    assert on_gpu({"ray": {"worker": {"num_gpus": 0}, "worker_pools": [{"name": "a", "num_gpus": 1}]}})


def write_run(runs: Path, label: str, scenario: dict, probe: float, knn: float, code_lines: list[str] | None):
    run = runs / label
    run.mkdir(parents=True)
    (run / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    (run / "summary.json").write_text(json.dumps({
        "initial": {"knn_top1": 0.60, "linear_top1": 0.70},
        "final": {"knn_top1": 0.60 + knn / 100, "linear_top1": 0.70 + probe / 100},
        "rounds_completed": scenario["training"]["rounds"], "code": code_lines}))


def test_the_ledger_judges_the_runs_of_each_shipped_file_with_current_code(history, tmp_path, capsys):
    repo, c = history
    runs = tmp_path / "runs"
    path = repo / "scenarios/quickstart.yaml"

    def at(seed: int, *overrides: str) -> dict:
        return load_scenario(path, [f"seed={seed}", *overrides])
    head = code(c["c5"])
    write_run(runs, "clears", at(1), probe=5.0, knn=3.0, code_lines=head)
    write_run(runs, "misses", at(2), probe=3.0, knn=3.0, code_lines=head)
    write_run(runs, "misses_again", at(2), probe=3.0, knn=3.0, code_lines=head)  # a seed run twice: one entry
    write_run(runs, "misses_differently", at(2), probe=3.5, knn=3.0, code_lines=head)  # other gains: apart
    write_run(runs, "clears_again", at(1), probe=6.0, knn=3.0, code_lines=head)
    neutral = at(3, "eval.every=50", "ray.num_workers=1")
    del neutral["training"]["drop_last"]
    write_run(runs, "a/neutral", neutral, probe=4.0, knn=2.0, code_lines=head)
    write_run(runs, "other_setting", at(4, "augment.brightness=0.4"), probe=9.0, knn=9.0, code_lines=head)
    gpu = at(5)  # worker pools are neutral (where clients run), but a pool with a GPU is not a CPU run
    gpu["ray"]["worker_pools"] = [{"name": "small_cnn", "count": 1, "num_cpus": 1, "num_gpus": 1}]
    write_run(runs, "gpu", gpu, probe=1.0, knn=1.0, code_lines=head)
    write_run(runs, "no_code", at(6), probe=2.0, knn=5.0, code_lines=None)
    write_run(runs, "before_fix", at(7), probe=5.0, knn=5.0, code_lines=code(c["c1"]))
    write_run(runs, "supervised", load_scenario(repo / "scenarios/fedavg/supervised.yaml", ["seed=1"]),
              probe=0.0, knn=0.0, code_lines=head)

    shipped = self_supervised_fashion_mnist(repo / "scenarios", repo)
    assert list(shipped) == ["scenarios/quickstart.yaml"]
    matched = match_runs(shipped, sorted(p for p in runs.rglob("*") if (p / "summary.json").exists()), History(repo))
    assert sorted((r.run["seed"], r.code_state) for r in matched) == [(1, "current"), (1, "current"), (2, "current"),
                                                              (2, "current"), (2, "current"), (3, "current"),
                                                              (6, "unknown"), (7, "stale")]
    text = ledger([runs], repo / "scenarios", parse_margins(None))
    assert ("| `scenarios/quickstart.yaml` | 1 (2 runs), 3 | **2** (probe +3.00, kNN +3.00) (2 runs); "
            "**2** (probe +3.50, kNN +3.00) | stale or unknown: "
            "cleared 7; missed **6** (probe +2.00, kNN +5.00) |") in text
    assert ("Of 1 shipped self-supervised Fashion-MNIST scenarios: 0 clear on every seed run, "
            "1 miss on some seed, 0 have no run of current code.") in text
    # the mean gain over seeds of current code, a seed's runs averaged: probe 5.5, 3.1667, 4.0 (seeds 1-3);
    # kNN 3.0, 3.0, 2.0. By hand: probe mean 4.2222, sd 1.18244, t(0.975, 2) = 4.302653, half 2.93734
    assert ("| `scenarios/quickstart.yaml` | 3 | +4.22 [+1.28, +7.16] | straddles | +2.67 [+1.23, +4.10] | straddles |"
            in text)
    assert text.endswith("0 files lie above every margin, 0 below some margin, 1 straddle a margin, "
                         "0 have one seed (no interval).")
    # a margin given on the command line changes the verdicts: probe +3 clears a margin of 3
    assert main(["ledger", str(runs), "--scenarios", str(repo / "scenarios"), "--margin", "linear_top1=3",
                 "--margin", "knn_top1=2"]) == 0
    assert "1 clear on every seed run, 0 miss on some seed" in capsys.readouterr().out
    # a file lies above when every interval lies above its margin, below when any lies below
    for probe, knn, counts in (("1", "1", "1 files lie above every margin, 0 below"),
                               ("8", "1", "0 files lie above every margin, 1 below"),
                               ("1", "5", "0 files lie above every margin, 1 below"),
                               ("1", "3", "0 files lie above every margin, 0 below some margin, 1 straddle")):
        assert main(["ledger", str(runs), "--scenarios", str(repo / "scenarios"), "--margin", f"linear_top1={probe}",
                     "--margin", f"knn_top1={knn}"]) == 0
        assert counts in capsys.readouterr().out


def test_a_file_whose_every_run_is_stale_has_no_run_of_current_code_and_clears_on_nothing(history, tmp_path):
    """A file whose only runs are of stale code misses on no seed of current code, yet it has shown
    nothing: it is counted among the files with no run of current code, not among those that clear."""
    repo, c = history
    runs = tmp_path / "runs"
    for seed in (1, 2):
        write_run(runs, f"old_{seed}", load_scenario(repo / "scenarios/quickstart.yaml", [f"seed={seed}"]),
                  probe=5.0, knn=3.0, code_lines=code(c["c1"]))
    text = ledger([runs], repo / "scenarios", parse_margins(None))
    assert "| `scenarios/quickstart.yaml` | — | — | stale: cleared 1, 2; missed — |" in text
    assert ("Of 1 shipped self-supervised Fashion-MNIST scenarios: 0 clear on every seed run, 0 miss on some seed, "
            "1 have no run of current code.") in text
    assert text.endswith("0 files lie above every margin, 0 below some margin, 0 straddle a margin, "
                         "0 have one seed (no interval).")


def test_a_files_mean_gain_lies_above_below_or_across_its_margin():
    """The 95% Student-t interval of the mean over seeds, by hand: gains 5, 6, 7 have mean 6, sd 1 and
    half-width t(0.975, 2) / sqrt(3) = 4.302653 / 1.732051 = 2.48414."""
    assert against_margin([5.0, 6.0, 7.0], 3.0) == ("+6.00 [+3.52, +8.48]", "above")
    assert against_margin([5.0, 6.0, 7.0], 4.0) == ("+6.00 [+3.52, +8.48]", "straddles")
    assert against_margin([1.0, 1.2, 1.4], 2.0) == ("+1.20 [+0.70, +1.70]", "below")  # sd 0.2, half 0.49683
    assert against_margin([5.0], 4.0) == ("+5.00", "one seed")


def test_an_interval_touching_the_margin_lies_above_at_its_low_end_and_across_at_its_high_end():
    """A gain of exactly the margin clears it (learning_verdict), so an interval whose low end is the
    margin lies above it, and one whose high end is the margin does not lie below it: it straddles."""
    assert against_margin([4.0, 4.0, 4.0], 4.0) == ("+4.00 [+4.00, +4.00]", "above")  # sd 0: no width
    # gains 5, 6, 7: [6 - 2.48414, 6 + 2.48414] (above); the margin set to each end exactly
    low, high = t_interval([5.0, 6.0, 7.0])
    assert (low, high) == pytest.approx((3.51586, 8.48414), abs=1e-5)
    assert against_margin([5.0, 6.0, 7.0], low) == ("+6.00 [+3.52, +8.48]", "above")
    assert against_margin([5.0, 6.0, 7.0], high) == ("+6.00 [+3.52, +8.48]", "straddles")
    assert against_margin([5.0, 6.0, 7.0], high + 1e-9) == ("+6.00 [+3.52, +8.48]", "below")


def test_an_interval_end_just_below_the_margin_is_not_printed_as_reaching_it():
    # gains 5.48, 6.48, 7.48: [6.48 - 2.48414, ...] = [+3.99586, +8.96414], across the margin of 4
    assert against_margin([5.48, 6.48, 7.48], 4.0) == ("+6.48 [+3.996, +8.96]", "straddles")
    # gains 1.2, 1.5, 1.8 (sd 0.3, half 0.74524): [+0.75476, +2.24524], below a margin of 2.246 (not +2.25)
    assert against_margin([1.2, 1.5, 1.8], 2.246) == ("+1.50 [+0.75, +2.245]", "below")
    # and above it: low +3.51206 above a margin of 3.512 (given with --margins) is not printed as +3.51
    assert against_margin([4.9962, 5.9962, 6.9962], 3.512) == ("+6.00 [+3.5121, +8.48]", "above")


def test_a_seeds_gain_is_the_mean_of_its_runs_rounded_as_one_runs_gain_is():
    """Three runs of one seed gaining 3.59, 4.47 and 3.94 points gain 4 on average; floating point's mean
    is 3.9999999999999996, which would put three such seeds below a margin of 4 while printing +4.00."""
    assert (3.59 + 4.47 + 3.94) / 3 < 4

    def run(seed, final):
        return LedgerRun("s.yaml", "current", {"seed": seed, "initial": {"linear_top1": 0.5},
                                                "final": {"linear_top1": final}})
    runs = [run(seed, 0.5 + gain / 100) for seed in (1, 2, 3) for gain in (3.59, 4.47, 3.94)]
    assert seed_gains(runs, "linear_top1") == [4.0, 4.0, 4.0]
    assert against_margin(seed_gains(runs, "linear_top1"), 4.0) == ("+4.00 [+4.00, +4.00]", "above")


def test_a_gain_just_below_a_margin_is_printed_below_it():
    missed = {"seed": 7, "initial": {"knn_top1": 0.5, "linear_top1": 0.6},
              "final": {"knn_top1": 0.53, "linear_top1": 0.63999}}
    assert gains(missed, LEARNING_MARGINS) == "probe +3.999, kNN +3.00"


def test_bad_input_is_one_line_and_exit_2(history, tmp_path, capsys):
    repo, _ = history
    assert main(["ledger", str(tmp_path / "nowhere"), "--scenarios", str(repo / "scenarios")]) == 2
    assert capsys.readouterr().err == f"fedssl: error: {tmp_path / 'nowhere'}: no such directory of runs\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["ledger", str(empty), "--scenarios", str(empty)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    damaged = tmp_path / "runs" / "damaged"  # a kept run whose recorded scenario is not a scenario
    write_run(tmp_path / "runs", "damaged", load_scenario(repo / "scenarios/quickstart.yaml"), probe=5.0, knn=3.0,
              code_lines=None)
    (damaged / "scenario.yaml").write_text("- a list\n")
    assert main(["ledger", str(tmp_path / "runs"), "--scenarios", str(repo / "scenarios")]) == 2
    assert capsys.readouterr().err == (f"fedssl: error: {damaged / 'scenario.yaml'}: -: expected the resolved "
                                       f"scenario fedssl run writes (a mapping with name and seed)\n")


def test_a_path_that_is_a_file_is_said_to_be_one(history, tmp_path, capsys):
    repo, _ = history
    afile = tmp_path / "notes.txt"
    afile.write_text("data")
    assert main(["ledger", str(afile), "--scenarios", str(repo / "scenarios")]) == 2
    assert capsys.readouterr().err == f"fedssl: error: {afile}: is a file; expected a directory of runs\n"
    assert main(["ledger", str(tmp_path), "--scenarios", str(afile)]) == 2
    assert capsys.readouterr().err == f"fedssl: error: {afile}: is a file; expected a directory of scenarios\n"
    assert afile.read_text() == "data"


@pytest.mark.parametrize("change, key, expected", [
    (lambda s: s.update(ray=5), "ray", "expected a mapping (the resolved scenario fedssl run writes), got 5"),
    (lambda s: s["ray"].update(worker=[1]), "ray.worker", "expected a mapping (the resolved scenario fedssl run "
                                                          "writes), got [1]"),
    (lambda s: s["ray"]["worker"].update(num_gpus="x"), "ray.worker.num_gpus", "expected a number of GPUs, got 'x'"),
    (lambda s: s["ray"].update(worker_pools=5), "ray.worker_pools", "expected a list of pools, got 5"),
    (lambda s: s["ray"].update(worker_pools=["a"]), "ray.worker_pools[0]", "expected a mapping (the resolved "
                                                                          "scenario fedssl run writes), got 'a'"),
    (lambda s: s["ray"].update(worker_pools=[{"num_gpus": True}]), "ray.worker_pools[0].num_gpus",
     "expected a number of GPUs, got True"),
])
def test_a_kept_runs_ray_section_of_the_wrong_kind_is_one_line_naming_the_key(history, tmp_path, capsys, change,
                                                                             key, expected):
    repo, c = history
    scenario = load_scenario(repo / "scenarios/quickstart.yaml", ["seed=1"])
    change(scenario)
    write_run(tmp_path / "runs", "r", scenario, 5.0, 3.0, code(c["c5"]))
    assert main(["ledger", str(tmp_path / "runs"), "--scenarios", str(repo / "scenarios")]) == 2
    assert capsys.readouterr().err == f"fedssl: error: {tmp_path / 'runs' / 'r' / 'scenario.yaml'}: {key}: {expected}\n"


@pytest.mark.parametrize("key, value", [("code", 5), ("code", [1, 2]), ("numerics", 5)])
def test_a_kept_runs_code_or_numerics_of_the_wrong_type_is_one_line(history, tmp_path, capsys, key, value):
    repo, c = history
    write_run(tmp_path / "runs", "r", load_scenario(repo / "scenarios/quickstart.yaml", ["seed=1"]), 5.0, 3.0,
              code(c["c5"]))
    path = tmp_path / "runs" / "r" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    assert main(["ledger", str(tmp_path / "runs"), "--scenarios", str(repo / "scenarios")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedssl: error: {path}: {key}: expected a list of strings (") and err.count("\n") == 1, err
    assert err.endswith(f"got {value!r}\n"), err


def test_outside_a_repository_every_run_is_of_unknown_code(history, tmp_path):
    repo, c = history
    plain = tmp_path / "plain"
    shutil.copytree(repo / "scenarios", plain / "scenarios")
    runs = tmp_path / "runs"
    write_run(runs, "r", load_scenario(plain / "scenarios/quickstart.yaml", ["seed=1"]), 5.0, 3.0, code(c["c5"]))
    text = ledger([runs], plain / "scenarios", parse_margins(None))
    assert "stale or unknown: cleared 1" not in text and "unknown: cleared 1; missed —" in text


def test_the_kept_ledger_is_what_fedssl_ledger_prints_at_this_commit(monkeypatch, capsys):
    """``results/ledger.md`` (after its header) is ``fedssl ledger``'s output for the kept runs and the
    shipped files: a kept run added, a scenario changed, or a scenario key added whose default older
    records lack (not listed in ``analysis.claims.ABSENT_MEANS``, so every earlier run stops matching
    its file) shows here until the ledger is regenerated (README, "Adding a method")."""
    monkeypatch.chdir(REPO)
    assert main(["ledger"]) == 0
    kept = (REPO / "results" / "ledger.md").read_text().splitlines()
    assert kept[0] == "# The learning ledger" and kept[3] == ""
    assert capsys.readouterr().out.splitlines() == kept[4:]


def test_a_margin_on_a_metric_the_runs_lack_is_one_line_exit_2(history, tmp_path, capsys):
    repo, c = history
    runs = tmp_path / "runs"
    write_run(runs, "r", load_scenario(repo / "scenarios/quickstart.yaml", ["seed=1"]), 5.0, 3.0, code(c["c5"]))
    assert main(["ledger", str(runs), "--scenarios", str(repo / "scenarios"), "--margin", "nosuch=2"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("fedssl: error: --margin: expected metrics every run has (knn_top1, linear_top1), "
                            "got nosuch\n") and captured.out == ""
