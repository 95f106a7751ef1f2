"""Real faults: a worker process killed mid-round, a driver killed and resumed."""
import os
import signal
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
import torch
import yaml

from methods.base import DataSpec
from simulator.context import RoundContext, freeze
from simulator.data.store import PartitionReader
from simulator.federation import sample_cohort
from simulator.run import prepare_partition, run_scenario
from simulator.scenario import resolve


def federation_states(scenario, rounds, kill_worker_in_round=None):
    from simulator.engine import RayFederation
    reader = PartitionReader(prepare_partition(scenario))
    spec = DataSpec(reader.channels, reader.image_size, reader.num_classes, tuple(int(s) for s in reader.sizes))
    federation = RayFederation(scenario)
    federation.setup(spec, str(reader.directory), None)
    try:
        for r in range(1, rounds + 1):
            _, cohort = sample_cohort(scenario["seed"], r, 8, 4)
            killer = None
            if r == kill_worker_in_round:
                import ray
                pid = ray.get(federation.workers[0].pid.remote())
                killer = threading.Timer(0.3, os.kill, (pid, signal.SIGKILL))
                killer.start()
            federation.run_round(RoundContext(r, rounds, cohort, scenario["seed"], freeze(scenario)))
            if killer is not None:
                killer.join()
        return federation.state()["weights"], federation.worker_restarts
    finally:
        federation.shutdown()


def test_killed_worker_gives_the_fault_free_result(ray_session, synthetic_raw):
    raw = {**synthetic_raw, "training": {**synthetic_raw["training"], "local_epochs": 3}}
    scenario = resolve(raw)
    clean, no_restarts = federation_states(scenario, 3)
    faulty, restarts = federation_states(scenario, 3, kill_worker_in_round=2)
    assert no_restarts == 0 and restarts == 1
    for name in clean:
        assert torch.equal(clean[name], faulty[name]), name


def metrics_without_timing(run_dir):
    rows = pq.read_table(run_dir / "metrics.parquet").to_pylist()
    return {(r["round"], r["name"]): r["value"] for r in rows if not r["name"].startswith(("time/", "memory/"))}


def test_killed_driver_resumes_to_the_uninterrupted_result(ray_session, synthetic_raw, tmp_path):
    raw = {**synthetic_raw, "training": {**synthetic_raw["training"], "rounds": 6, "local_epochs": 2},
           "eval": {**synthetic_raw["eval"], "every": 2}, "output": {**synthetic_raw["output"], "checkpoint_every": 2}}
    _, reference = run_scenario(resolve(raw), str(tmp_path / "reference"), progress=False)

    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(raw))
    run_dir = tmp_path / "killed"
    fedssl = [sys.executable, "-m", "simulator.cli"]
    driver = subprocess.Popen([*fedssl, "run", str(scenario_file), "--out", str(run_dir), "--quiet"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not (run_dir / "checkpoints" / "round_00002" / "state.pt").exists():
        assert driver.poll() is None and time.time() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.05)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert not (run_dir / "summary.json").exists()

    resumed = subprocess.run([*fedssl, "run", "--resume", str(run_dir), "--quiet"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    summary = yaml.safe_load((run_dir / "summary.json").read_text())
    assert summary["final"] == reference["final"] and summary["initial"] == reference["initial"]
    assert metrics_without_timing(run_dir) == metrics_without_timing(tmp_path / "reference")
    final_clean = torch.load(tmp_path / "reference" / "checkpoints" / "round_00006" / "state.pt", weights_only=False)
    final_resumed = torch.load(run_dir / "checkpoints" / "round_00006" / "state.pt", weights_only=False)
    for name, value in final_clean["state"]["weights"].items():
        assert torch.equal(value, final_resumed["state"]["weights"][name])


def test_resume_refuses_a_finished_run(ray_session, synthetic_raw, tmp_path, capsys):
    from simulator.cli import main
    run_dir, _ = run_scenario(resolve({**synthetic_raw, "training": {**synthetic_raw["training"], "rounds": 1}}),
                              str(tmp_path / "done"), progress=False)
    assert main(["run", "--resume", str(run_dir)]) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_exploding_loss_stops_with_round_client_method_and_keeps_the_checkpoint(ray_session, synthetic_raw,
                                                                              tmp_path, capsys):
    from simulator.cli import main
    raw = {**synthetic_raw, "method": {"name": "fedavg", "objective": "spectral"},
           "training": {**synthetic_raw["training"], "rounds": 2}, "eval": {"enabled": False},
           "output": {**synthetic_raw["output"], "checkpoint_every": 1}}
    run_dir = tmp_path / "run"
    run_scenario(resolve(raw), str(run_dir), progress=False)
    (run_dir / "summary.json").unlink()  # pretend the run was cut off, then make round 3 explode
    exploding = {**resolve(raw), "training": {**resolve(raw)["training"], "rounds": 4, "lr": 10.0}}
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(exploding))

    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("fedssl: error: round 3, client ") and "method fedavg/spectral: loss is" in err
    assert err.endswith(str(run_dir / "checkpoints" / "round_00002"))
    good = torch.load(run_dir / "checkpoints" / "round_00002" / "state.pt", weights_only=False)
    assert good["round"] == 2 and all(torch.isfinite(v).all() for v in good["state"]["weights"].values()
                                      if v.is_floating_point())
    assert not (run_dir / "summary.json").exists()
