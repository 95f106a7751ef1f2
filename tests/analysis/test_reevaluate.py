"""``fedssl evaluate``: finished runs evaluated again, in-process, under a changed eval protocol."""
import json

import pytest

from analysis.reevaluate import check_tests_no_trained_image, evaluate_run
from analysis.report import read_run
from simulator.cli import main
from simulator.evaluation.metrics import knn_top1
from simulator.run import run_scenario
from simulator.scenario import ScenarioError, resolve
from tests.conftest import LABEL_EFFICIENT_EVAL, tiny_scenario

METRICS = ("knn_top1", "linear_top1", "knn_projector_top1", "align_unif_score")
LABEL_EFFICIENT = ("knn_top1_1pct", "linear_top1_1pct", "knn_top1_10pct", "linear_top1_10pct")


def finished_run(raw, tmp_path, name):
    run_dir, _ = run_scenario(resolve(raw), str(tmp_path / name), progress=False)
    return run_dir


@pytest.fixture(scope="module")
def tiny_run(ray_session, tmp_path_factory):
    """A finished run of the tiny synthetic scenario (2 rounds, evaluated and checkpointed every round)."""
    tmp_path = tmp_path_factory.mktemp("reevaluate")
    raw = tiny_scenario(tmp_path)
    return finished_run({**raw, "eval": {**raw["eval"], **LABEL_EFFICIENT_EVAL},
                         "output": {**raw["output"], "checkpoint_every": 1}}, tmp_path, "run")


def listing(run_dir):
    return {str(p.relative_to(run_dir)): p.stat().st_mtime_ns for p in run_dir.rglob("*")}


def test_unchanged_settings_give_the_runs_own_numbers_and_write_nothing(tiny_run):
    run_dir = tiny_run
    before = listing(run_dir)
    again, logged = evaluate_run(run_dir), read_run(run_dir)
    for section in ("initial", "final"):
        assert {m: again[section][m] for m in METRICS + LABEL_EFFICIENT} == {
            m: logged[section][m] for m in METRICS + LABEL_EFFICIENT}
    assert (again["rounds_completed"], again["name"], again["seed"]) == (2, "tiny", 3)
    assert again["pixels"] == logged["pixels"] and again["pixels"]["knn_top1_1pct"] > 0
    # the training's provenance, so that evaluate's tables name the runs' code and warn of mixed numerics
    assert again["code"] == logged["code"] and again["numerics"] == logged["numerics"] and logged["code"]
    assert listing(run_dir) == before


def test_an_interrupted_run_is_evaluated_at_its_newest_checkpoint_with_its_round_and_time(tiny_run, tmp_path):
    """The run stopped after round 1 (no round-2 checkpoint, no summary.json): its final numbers are
    those it logged at round 1, its rounds completed and wall time those of its round-1 checkpoint."""
    import shutil

    import pyarrow.parquet as pq

    from simulator.runlog import read_checkpoint
    run_dir = tmp_path / "copy"
    shutil.copytree(tiny_run, run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "round_00002")
    (run_dir / "summary.json").unlink()
    rows = {(r["round"], r["name"]): r["value"] for r in pq.read_table(run_dir / "metrics.parquet").to_pylist()}
    again = evaluate_run(run_dir)
    assert {m: again["final"][m] for m in METRICS + LABEL_EFFICIENT} == {
        m: rows[1, f"eval/{m}"] for m in METRICS + LABEL_EFFICIENT}
    assert any(rows[1, f"eval/{m}"] != rows[2, f"eval/{m}"] for m in METRICS)  # round 2's would tell
    elapsed = read_checkpoint(run_dir / "checkpoints" / "round_00001")["elapsed"]
    assert again["rounds_completed"] == 1 and again["wall_seconds"] == elapsed > 0


def test_per_client_encoders_come_from_the_checkpointed_client_states(ray_session, synthetic_raw, tmp_path, capsys):
    raw = {**synthetic_raw, "population": {"num_clients": 4, "clients_per_round": 2},
           "method": {"name": "hetero_ssfl", "rad_size": 16, "rad_batch_size": 8},
           "eval": {"every": 2, "probe_iterations": 5, "knn_k": 20, "test_subset": 100}}
    run_dir = finished_run(raw, tmp_path, "hetero")
    again, logged = evaluate_run(run_dir), read_run(run_dir)
    assert again["groups"] == logged["groups"] and set(again["groups"]) == {"small_cnn"}
    assert again["final"]["knn_top1"] == logged["final"]["knn_top1"]
    assert again["initial"]["knn_top1"] == logged["initial"]["knn_top1"]
    # its clients trained on the RAD, the first 16 test images outside its 100: a test subset taking
    # them in is refused (one line, exit 2); a smaller one holds none of them
    assert main(["evaluate", str(run_dir), "--set", "eval.test_subset=null"]) == 2
    assert capsys.readouterr().err == (
        f"fedssl: error: {run_dir}: --set eval.test_subset=null would test on 16 of the 16 held-out images its "
        f"clients trained on (outside its eval.test_subset=100); expected a test subset without them (the run's "
        f"own, or a smaller one)\n")
    assert evaluate_run(run_dir, ["eval.test_subset=50"])["final"]["knn_top1"] > 0
    # a damaged client state of the checkpoint evaluated: one line naming it, exit 2
    newest = sorted((run_dir / "checkpoints").glob("round_*"))[-1]
    damaged = sorted((newest / "client_state").glob("client_*.pt"))[0]
    damaged.unlink()  # a hard link into the run's store: replaced, not written through
    damaged.write_bytes(b"PK\x03\x04 truncated")
    assert main(["evaluate", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedssl: error: {damaged}: -: cannot be read (") and err.count("\n") == 1, err
    assert err.endswith("; expected a client state written by fedssl run\n"), err


@pytest.mark.parametrize("test_subset, leaks", [(300, True), (50, False), (100, False)])
def test_a_test_subset_with_images_a_runs_clients_trained_on_is_refused(synthetic_raw, test_subset, leaks):
    """Hetero-SSFL's RAD: the first 16 test images outside the run's seeded 100 (of 500); a seeded 300
    takes some of them in (counted here from the seeded subsets themselves), 50 lies inside 100."""
    import torch

    from simulator.context import derive_seed
    from simulator.data.datasets import seeded_subset
    from simulator.held_out import EVAL_TEST_STREAM
    recorded = resolve({**synthetic_raw, "method": {"name": "hetero_ssfl", "rad_size": 16, "rad_batch_size": 8},
                        "eval": {**synthetic_raw["eval"], "test_subset": 100}})
    changed = {**recorded, "eval": {**recorded["eval"], "test_subset": test_subset}}
    everything = torch.arange(500)
    subset = lambda size: seeded_subset(everything, everything, size, derive_seed(recorded["seed"], EVAL_TEST_STREAM))[0]
    rad = everything[~torch.isin(everything, subset(100))][:16]
    expected = int(torch.isin(rad, subset(test_subset)).sum())
    assert (0 < expected < 16) == leaks
    if not leaks:
        check_tests_no_trained_image("RUN", recorded, changed)
        return
    with pytest.raises(ValueError, match=f"^RUN: --set eval.test_subset=300 would test on {expected} of the 16 held-out "
                                         f"images its clients trained on \\(outside its eval.test_subset=100\\)"):
        check_tests_no_trained_image("RUN", recorded, changed)
    # a method that trains on no held-out image may test on any subset
    check_tests_no_trained_image("RUN", {**recorded, "method": resolve(synthetic_raw)["method"]}, changed)


def test_a_changed_protocol_is_applied(tiny_run, capsys, monkeypatch):
    run_dir = tiny_run
    from simulator.evaluation import monitor
    ks = []
    monkeypatch.setattr(monitor, "knn_top1", lambda *args, k, **kw: ks.append(k) or knn_top1(*args, k=k, **kw))
    again = evaluate_run(run_dir, ["eval.test_subset=7", "eval.knn_k=3"])
    assert ks and set(ks) == {3}  # every kNN (backbone, projector, label-efficient) with the new k
    for section in ("initial", "final"):  # accuracies over 7 test images
        for metric in METRICS[:3]:
            assert again[section][metric] * 7 == pytest.approx(round(again[section][metric] * 7))
        for metric in LABEL_EFFICIENT:  # and means over 3 label draws of those
            assert again[section][metric] * 21 == pytest.approx(round(again[section][metric] * 21))
    assert main(["evaluate", str(run_dir), "--set", "eval.test_subset=7", "--set", "eval.knn_k=3"]) == 0
    shown = METRICS[:3] + LABEL_EFFICIENT  # the report's order: 1%, then 10%; kNN, then probe
    cells = lambda section: " | ".join(f"{100 * again[section][m]:.2f}" for m in shown)  # noqa: E731
    row = f"| tiny | 3 | {cells('initial')} | {cells('final')} | 2 |"
    assert row in capsys.readouterr().out
    assert evaluate_run(run_dir, ["eval.pixel_reference=false"])["pixels"] is None  # the run's was on


@pytest.mark.parametrize("args, message", [
    (["--set", "training.lr=0.1"], "--set training.lr=0.1: only eval.* keys can change"),
    (["--set", "eval.knn_k=-1"], "eval.knn_k"),
    (["--set", "eval.every=3"], "--set eval.every=3: it says when a run evaluates, which changes nothing here"),
    (["--set", "eval.enabled=false"], "--set eval.enabled=false: it says when a run evaluates"),
])
def test_bad_settings_are_one_line_errors(tiny_run, capsys, args, message):
    assert main(["evaluate", str(tiny_run), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedssl: error: ") and message in err and err.count("\n") == 1


def test_a_directory_without_checkpoint_is_an_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["evaluate", str(tmp_path / "empty")]) == 2
    assert "not a run directory (no scenario.yaml)" in capsys.readouterr().err
    started = tmp_path / "started"
    started.mkdir()
    (started / "scenario.yaml").write_text(json.dumps({"name": "x", "seed": 0}))
    assert main(["evaluate", str(started)]) == 2
    assert capsys.readouterr().err == (f"fedssl: error: {started}: no checkpoint to evaluate (the run stopped before "
                                       f"its first)\n")
    (started / "summary.json").write_text(json.dumps({"rounds_completed": 100}))  # finished, checkpoints not kept
    assert main(["evaluate", str(started)]) == 2
    assert capsys.readouterr().err == (f"fedssl: error: {started}: no checkpoint to evaluate: the run finished "
                                       f"(summary.json) but its checkpoints are not in its directory (a kept run's "
                                       f"are not); its raw-pixel reference needs none (scripts/pixel_reference.py)\n")


def test_the_run_logs_the_label_efficient_metrics_everywhere(tiny_run):
    """summary.json (round 0 and final), metrics.parquet and TensorBoard carry the same values."""
    import pyarrow.parquet as pq
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    summary = json.loads((tiny_run / "summary.json").read_text())
    rows = {(r["round"], r["name"]): r["value"] for r in pq.read_table(tiny_run / "metrics.parquet").to_pylist()}
    events = EventAccumulator(str(tiny_run / "tensorboard"))
    events.Reload()
    for metric in LABEL_EFFICIENT:
        assert 0 < summary["initial"][metric] <= 1 and 0 < summary["final"][metric] <= 1
        assert rows[0, f"eval/{metric}"] == summary["initial"][metric]
        assert rows[2, f"eval/{metric}"] == summary["final"][metric]
        logged = {e.step: e.value for e in events.Scalars(f"eval/{metric}")}
        assert logged == pytest.approx({r: rows[r, f"eval/{metric}"] for r in (0, 1, 2)})
    assert not any("finetune" in name for _, name in rows)  # off by default


def test_evaluate_adds_fine_tuning_to_a_finished_run(tiny_run, capsys):
    again = evaluate_run(tiny_run, ["eval.finetune_steps=2", "eval.label_fractions=[0.05]", "eval.label_draws=1"])
    assert {m for m in again["final"] if "pct" in m} == {"knn_top1_5pct", "linear_top1_5pct", "finetune_top1_5pct"}
    assert main(["evaluate", str(tiny_run), "--set", "eval.finetune_steps=2", "--set", "eval.label_fractions=[0.05]",
                 "--set", "eval.label_draws=1"]) == 0
    out = capsys.readouterr().out
    assert "| initial knn_top1_5pct | initial linear_top1_5pct | initial finetune_top1_5pct |" in out
    cells = " | ".join(f"{100 * again['final'][m]:.2f}" for m in ("knn_top1_5pct", "linear_top1_5pct",
                                                                   "finetune_top1_5pct"))
    assert f"| {cells} | 2 |" in out


def test_a_checkpoint_that_cannot_be_read_is_one_line_in_evaluate_and_resume(tiny_run, tmp_path, capsys):
    import shutil
    run_dir = tmp_path / "copy"
    shutil.copytree(tiny_run, run_dir)
    newest = sorted((run_dir / "checkpoints").glob("round_*"))[-1]
    (newest / "state.pt").write_bytes(b"not a checkpoint")
    expected = (f"fedssl: error: {newest / 'state.pt'}: -: cannot be read (")
    assert main(["evaluate", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.endswith("; expected a checkpoint written by fedssl run\n"), err
    assert err.count("\n") == 1, err
    (run_dir / "summary.json").unlink()  # an interrupted run whose newest checkpoint is damaged
    before = listing(run_dir)
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1, err
    assert listing(run_dir) == before  # nothing lost or rewritten


def test_a_checkpoint_whose_networks_the_edited_scenario_no_longer_describes_is_one_line(tiny_run, tmp_path, capsys):
    """A scenario.yaml edited after the run (here the projector's hidden width, 64 -> 48) was torch's
    size-mismatch traceback in evaluate and in a resume, the latter after the resumed run had begun."""
    import shutil
    import yaml
    run_dir = tmp_path / "copy"
    shutil.copytree(tiny_run, run_dir)
    recorded = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    recorded["model"]["hidden_dim"] = 48
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(recorded, sort_keys=False))
    newest = sorted((run_dir / "checkpoints").glob("round_*"))[-1]
    expected = (f"fedssl: error: {newest / 'state.pt'}: state.weights.online.projector.0.weight: expected a tensor "
                f"of shape [48, 128], got [64, 128]: the run's scenario.yaml describes other networks than this "
                f"checkpoint holds (was it edited?)\n")
    assert main(["evaluate", str(run_dir)]) == 2
    assert capsys.readouterr().err == expected
    (run_dir / "summary.json").unlink()  # an interrupted run
    before = listing(run_dir)
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 2
    assert capsys.readouterr().err == expected
    assert listing(run_dir) == before  # nothing lost or rewritten


def test_a_scenario_yaml_without_its_seed_is_one_line_not_the_default_seeds_evaluation(tiny_run, tmp_path, capsys):
    """The recorded scenario is checked as ``report`` checks it: a damaged one lacking its seed would
    otherwise be evaluated as seed 0's run (its partition, evaluation draws) with this run's networks."""
    import shutil
    import yaml
    run_dir = tmp_path / "copy"
    shutil.copytree(tiny_run, run_dir)
    recorded = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump({k: v for k, v in recorded.items() if k != "seed"}))
    assert main(["evaluate", str(run_dir)]) == 2
    assert capsys.readouterr().err == (f"fedssl: error: {run_dir / 'scenario.yaml'}: -: expected the resolved scenario "
                                       f"fedssl run writes (a mapping with name and seed)\n")
    with pytest.raises(ScenarioError, match="expected the resolved scenario fedssl run writes"):
        evaluate_run(run_dir)  # before anything is evaluated (report's own check would catch it only after)


def test_one_command_evaluates_the_pixels_and_round_0_network_its_runs_share_once(tmp_path, monkeypatch):
    """Runs of one seed share the raw pixels and, with one architecture, the round-0 network: a
    command evaluates each once, and every run's numbers are those it gets evaluated alone."""
    from simulator.evaluation import monitor
    raw = {**tiny_scenario(tmp_path), "executor": "in_process"}
    runs = [finished_run(raw, tmp_path, "a"),
            finished_run({**raw, "training": {**raw["training"], "lr": 0.01}}, tmp_path, "b"),
            finished_run({**raw, "seed": 4}, tmp_path, "c")]
    alone = [evaluate_run(run_dir, ["eval.knn_k=5"]) for run_dir in runs]
    evaluated = []
    real = monitor.evaluate_network
    monkeypatch.setattr(monitor, "evaluate_network", lambda network, *args: evaluated.append(1) or real(network, *args))
    cache = monitor.EvaluationCache()
    shared = [evaluate_run(run_dir, ["eval.knn_k=5"], cache) for run_dir in runs]
    assert shared == alone
    assert alone[0]["initial"] == alone[1]["initial"] and alone[0]["final"] != alone[1]["final"]
    assert alone[0]["initial"] != alone[2]["initial"] and alone[0]["pixels"] != alone[2]["pixels"]
    # a: pixels, round 0, final; b: its final; c (another seed: other subsets, draws, network): all three
    assert len(evaluated) == 3 + 1 + 3
    evaluate_run(runs[0], ["eval.knn_k=6"], cache)  # other settings: evaluated again
    assert len(evaluated) == 3 + 1 + 3 + 3
