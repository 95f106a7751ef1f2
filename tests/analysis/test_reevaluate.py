"""``fedssl evaluate``: finished runs evaluated again, in-process, under a changed eval protocol."""
import json

import pytest

from analysis.reevaluate import evaluate_run
from analysis.report import read_run
from simulator.cli import main
from simulator.run import run_scenario
from simulator.scenario import resolve
from tests.conftest import tiny_scenario

METRICS = ("knn_top1", "linear_top1", "knn_projector_top1", "align_unif_score")


def finished_run(raw, tmp_path, name):
    run_dir, _ = run_scenario(resolve(raw), str(tmp_path / name), progress=False)
    return run_dir


@pytest.fixture(scope="module")
def tiny_run(ray_session, tmp_path_factory):
    """A finished run of the tiny synthetic scenario (2 rounds, evaluated every round)."""
    tmp_path = tmp_path_factory.mktemp("reevaluate")
    return finished_run(tiny_scenario(tmp_path), tmp_path, "run")


def listing(run_dir):
    return {str(p.relative_to(run_dir)): p.stat().st_mtime_ns for p in run_dir.rglob("*")}


def test_unchanged_settings_give_the_runs_own_numbers_and_write_nothing(tiny_run):
    run_dir = tiny_run
    before = listing(run_dir)
    again, logged = evaluate_run(run_dir), read_run(run_dir)
    for section in ("initial", "final"):
        assert {m: again[section][m] for m in METRICS} == {m: logged[section][m] for m in METRICS}
    assert (again["rounds_completed"], again["name"], again["seed"]) == (2, "tiny", 3)
    assert listing(run_dir) == before


def test_per_client_encoders_come_from_the_checkpointed_client_states(ray_session, synthetic_raw, tmp_path):
    raw = {**synthetic_raw, "population": {"num_clients": 4, "clients_per_round": 2},
           "method": {"name": "hetero_ssfl", "rad_size": 16, "rad_batch_size": 8},
           "eval": {"every": 2, "probe_iterations": 5, "knn_k": 20, "test_subset": 100}}
    run_dir = finished_run(raw, tmp_path, "hetero")
    again, logged = evaluate_run(run_dir), read_run(run_dir)
    assert again["groups"] == logged["groups"] and set(again["groups"]) == {"small_cnn"}
    assert again["final"]["knn_top1"] == logged["final"]["knn_top1"]
    assert again["initial"]["knn_top1"] == logged["initial"]["knn_top1"]


def test_a_changed_protocol_is_applied(tiny_run, capsys):
    run_dir = tiny_run
    again = evaluate_run(run_dir, ["eval.test_subset=7", "eval.knn_k=3"])
    for section in ("initial", "final"):  # accuracies over 7 test images
        for metric in METRICS[:3]:
            assert again[section][metric] * 7 == pytest.approx(round(again[section][metric] * 7))
    assert main(["evaluate", str(run_dir), "--set", "eval.test_subset=7", "--set", "eval.knn_k=3"]) == 0
    cells = lambda section: " | ".join(f"{100 * again[section][m]:.2f}" for m in METRICS[:3])  # noqa: E731
    row = f"| tiny | 3 | {cells('initial')} | {cells('final')} | 2 |"
    assert row in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--set", "training.lr=0.1"], "--set training.lr=0.1: only eval.* keys can change"),
    (["--set", "eval.knn_k=-1"], "eval.knn_k"),
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
    assert "no checkpoint to evaluate" in capsys.readouterr().err
