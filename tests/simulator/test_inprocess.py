"""The in-process executor with one worker: bitwise the metrics and the final global state of the same
scenario on Ray with three, for every method (share passes, server state, DP noise, stateful clients;
clients in tier worker pools: test_engine.py's tier-pool test), and no Ray imported; a run's training is the same whether or how often it is
evaluated."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from analysis.run_diff import logged_values
from simulator.context import RoundContext
from simulator.run import run_scenario
from simulator.runlog import read_metrics
from simulator.scenario import resolve

REPO = Path(__file__).resolve().parents[2]

METHODS = {  # (FedAvg + SimCLR, the default, differs from the BYOL + UV case only in its loss)
    "fedavg_byol_uv": {"method": {"name": "fedavg", "objective": "byol", "uv": True, "server_optimizer": "adam",
                                  "server_lr": 0.001}},
    "fedsc": {"method": {"name": "fedsc", "objective": "spectral", "clip_mu": 4.0}},
    "orchestra": {"method": {"name": "orchestra", "num_global_clusters": 8, "num_local_clusters": 4,
                             "memory_size": 64}},
}
# Each with state or randomness of its own: DP noise and the accountant, stateful clients through the
# client-state store, the rotation head, the labelled subset (Hetero-SSFL's tier pools: test_engine.py).
MORE_METHODS = {
    "fedsc_dp": {"method": {"name": "fedsc", "share_views": 1, "share_every": 2, "target_epsilon": 8.0}},
    "fedema": {"method": {"name": "fedema", "objective": "byol", "selective": False}},
    "fedu": {"method": {"name": "fedu", "objective": "byol"}},
    "rotpred": {"method": {"name": "rotpred"}},
    "simsiam_uv_semi10": {"method": {"name": "fedavg", "objective": "simsiam", "uv": True, "labelled_fraction": 0.1}},
}


def with_overrides(raw, overrides):
    """``raw`` with each section updated by ``overrides`` (the method section replaced whole)."""
    out = dict(raw)
    for section, values in overrides.items():
        out[section] = values if section == "method" else {**raw.get(section, {}), **values}
    return out


def final_state(run_dir):
    checkpoints = sorted((run_dir / "checkpoints").iterdir())
    return torch.load(checkpoints[-1] / "state.pt", weights_only=False)["state"]


def flat_tensors(node, prefix=""):
    if isinstance(node, torch.Tensor):
        return {prefix: node}
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in flat_tensors(value, f"{prefix}/{key}").items()}
    if isinstance(node, (list, tuple)):
        return {k: v for i, value in enumerate(node) for k, v in flat_tensors(value, f"{prefix}/{i}").items()}
    return {}


@pytest.mark.parametrize("name", sorted({**METHODS, **MORE_METHODS}))
def test_in_process_gives_bitwise_the_ray_run(ray_session, synthetic_raw, tmp_path, name):
    """Every logged value and every tensor of the final state: one process with one worker's share
    against three Ray workers (the driver's slot and two actors), so neither the executor nor the
    split of the cohort into shares shows."""
    raw = with_overrides(synthetic_raw, {**METHODS, **MORE_METHODS}[name])
    raw["eval"] = {**raw["eval"], "every": 2}
    runs = {}
    for executor, workers in (("ray", 3), ("in_process", 1)):
        run_dir, summary = run_scenario(resolve({**raw, "executor": executor, "ray": {"num_workers": workers}}),
                                        str(tmp_path / executor), progress=False)
        runs[executor] = (run_dir, summary)
    (ray_dir, ray_summary), (local_dir, local_summary) = runs["ray"], runs["in_process"]
    ray_metrics, local_metrics = logged_values(ray_dir), logged_values(local_dir)
    assert any(key[1].startswith("train/") for key in ray_metrics)
    assert local_metrics == ray_metrics
    assert local_summary["initial"] == ray_summary["initial"] and local_summary["final"] == ray_summary["final"]
    ray_state, local_state = flat_tensors(final_state(ray_dir)), flat_tensors(final_state(local_dir))
    assert ray_state and sorted(local_state) == sorted(ray_state)
    for key, tensor in ray_state.items():
        assert torch.equal(local_state[key], tensor), key


def test_an_in_process_run_never_imports_ray(synthetic_raw, tmp_path):
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump({**synthetic_raw, "executor": "in_process"}))
    code = ("import sys; from simulator.cli import main; "
            f"code = main(['run', {str(scenario)!r}, '--out', {str(tmp_path / 'run')!r}, '--quiet']); "
            "print('RAY' if 'ray' in sys.modules else 'NO RAY'); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "NO RAY"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["rounds_completed"] == 2 and summary["final"]["linear_top1"] > 0


def test_evaluations_leave_the_training_as_it_is(synthetic_raw, tmp_path):
    """A run evaluated every round (fine-tuning included, a BatchNorm encoder whose statistics an
    evaluation in train mode would move) trains bitwise as the same run never evaluated: the
    evaluated networks are copies, and evaluation draws from none of the training's random streams
    (so a scenario's numbers do not depend on ``eval.every``)."""
    raw = {**with_overrides(synthetic_raw, {"model": {"norm": "batch"}, "training": {"rounds": 3}}),
           "executor": "in_process"}
    runs, summaries = {}, {}
    for name, evaluation in (("evaluated", {"every": 1, "finetune_steps": 2}), ("never", {"enabled": False})):
        runs[name], summaries[name] = run_scenario(resolve({**raw, "eval": {**raw["eval"], **evaluation}}),
                                                   str(tmp_path / name), progress=False)
    evaluated, never = logged_values(runs["evaluated"]), logged_values(runs["never"])
    assert any(name.startswith("eval/") for _, name in evaluated) and any(name.startswith("train/") for _, name in never)
    assert {k: v for k, v in evaluated.items() if not k[1].startswith(("eval/", "reference/"))} == never
    evaluated_state, never_state = flat_tensors(final_state(runs["evaluated"])), flat_tensors(final_state(runs["never"]))
    assert never_state and sorted(evaluated_state) == sorted(never_state)
    for key, tensor in never_state.items():
        assert torch.equal(evaluated_state[key], tensor), key
    # no worker process ran: the workers' memory is 0 (it summed the driver's memory once per worker slot)
    memory = [row for row in read_metrics(runs["never"] / "metrics.parquet") if row["name"].startswith("memory/")]
    assert {row["value"] for row in memory if row["name"] == "memory/workers_rss_mb"} == {0.0}
    assert all(row["value"] > 0 for row in memory if row["name"] == "memory/driver_rss_mb") and len(memory) == 6
    # and the summary's: the driver's peak is the run's, on one node
    peaks = summaries["never"]["peak_memory_mb"]
    assert peaks["driver"] > 0 and peaks["server"] == peaks["evaluator"] == peaks["workers"] == 0
    assert summaries["never"]["worker_nodes"] == 1


class Recording:
    """A stand-in method of one pass whose broadcast, and client 2's extra, are the server's own
    tensor: each client records (its workspace, torch's thread count, the broadcast's sum, the state
    it was given), then writes into the broadcast and extra it received, and keeps its round as its
    state."""
    name = "recording"

    def __init__(self):
        self.seen = {}

    def phases(self, round_index):
        return ("train",)

    def client_pool(self, cid):
        return "big" if cid >= 10 else None

    def init_state(self):
        return {"w": torch.zeros(5)}

    def broadcast(self, state, ctx):
        return {"weights": state["w"]}

    def client_extra(self, state, cid, ctx):
        return {"rad": state["w"]} if cid == 2 else None

    def client_update(self, workspace, broadcast, extra, data, ctx, state):
        from methods.base import ClientUpload
        from simulator.stats import Stats
        self.seen[ctx.round, data.client_id] = (workspace, torch.get_num_threads(),
                                                float(broadcast["weights"].sum()), state)
        broadcast["weights"] += 1.0
        if extra is not None:
            extra["rad"] += 1.0
        return ClientUpload(stats=Stats.from_tensors({"w/x": torch.ones(2)}, len(data.labels)),
                            client_state={"round": ctx.round})

    def server_update(self, state, total, records, ctx):
        return state, {}

    def eval_networks(self, state, load_client_state):
        return {"global": state["w"], "client_1": load_client_state(1), "client_7": load_client_state(7)}


def stand_in_federation(tmp_path):
    """An in-process federation around :class:`Recording`: pools ``default`` (1 worker, 1 CPU) and
    ``big`` (1 worker, 2 CPUs, clients 10 and up), clients of 3 samples, a client-state store."""
    from types import SimpleNamespace

    import numpy as np

    from simulator.client_store import ClientStateStore
    from simulator.federation import Server
    from simulator.inprocess import InProcessFederation
    pools = [{"name": "default", "count": 1, "num_cpus": 1, "num_gpus": 0.0},
             {"name": "big", "count": 1, "num_cpus": 2, "num_gpus": 0.0}]
    federation = InProcessFederation({"ray": {"worker_pools": pools}})
    federation.method = Recording()
    federation.server = Server(federation.method)
    federation.spec = SimpleNamespace(client_sizes=np.full(12, 3))
    federation.workspaces = {"default": "default's workspace", "big": "big's workspace"}
    federation.reader = SimpleNamespace(client=lambda cid: (torch.zeros(3, 1, 4, 4), torch.zeros(3, dtype=torch.int64)))
    federation.store = ClientStateStore(tmp_path / "states")
    return federation


def test_in_process_a_pool_s_share_runs_in_its_workspace_with_its_threads_on_its_own_broadcast(tmp_path):
    """Clients 1, 2 (pool default) and 10 (pool big): each share in its pool's workspace with the
    pool's ``num_cpus`` threads; each share gets its own copy of the broadcast, as a Ray worker gets
    one from the object store, so a client writing into it moves neither the server's state nor
    another share's copy; so does client 2 with its extra."""
    from simulator.context import freeze
    federation = stand_in_federation(tmp_path)
    hparams = freeze({"training": {"local_epochs": 1}})
    metrics = federation.run_phase(RoundContext(1, 2, (1, 2, 10), 0, hparams))
    seen = federation.method.seen
    assert seen[1, 1][:3] == ("default's workspace", 1, 0.0) and seen[1, 10][:3] == ("big's workspace", 2, 0.0)
    assert seen[1, 2][0] == "default's workspace"
    assert torch.equal(federation.server.state["w"], torch.zeros(5))
    assert metrics["clients/completed"] == 3 and metrics["bytes_down/weights"] == 3 * 20


def test_in_process_a_client_s_state_is_committed_after_its_round(tmp_path):
    """Stateful clients: a client's state from round 1 is the one it is given in round 2."""
    from simulator.context import freeze
    federation = stand_in_federation(tmp_path)
    hparams = freeze({"training": {"local_epochs": 1}})
    federation.run_phase(RoundContext(1, 3, (1, 10), 0, hparams))
    federation.run_phase(RoundContext(2, 3, (1, 10), 0, hparams))
    seen = federation.method.seen
    assert seen[1, 1][3] is None and seen[2, 1][3] == {"round": 1} and seen[2, 10][3] == {"round": 1}


def test_in_process_a_pass_nobody_reports_in_counts_what_the_online_clients_received(tmp_path):
    """Every online client dropped out: nothing is simulated, and the broadcast to the 3 unreported
    clients (3 x 20 bytes) is still counted, as the Ray engine counts it."""
    from simulator.context import freeze
    federation = stand_in_federation(tmp_path)
    ctx = RoundContext(1, 2, (), 0, freeze({"training": {"local_epochs": 1}}), unreported=(3, 5, 11))
    assert federation.run_phase(ctx) == {"clients/completed": 0.0, "bytes_down/weights": 60.0}
    assert federation.method.seen == {}


def test_in_process_the_evaluated_networks_are_copies_read_with_the_stored_client_states(tmp_path):
    """``networks_now``: what the method evaluates, with each client's committed state read from the
    store (None for a client that never ran), as a copy: an evaluation that moves it (BatchNorm
    statistics, fine-tuning) leaves the server's state as it was."""
    from simulator.context import freeze
    federation = stand_in_federation(tmp_path)
    federation.run_phase(RoundContext(1, 2, (1, 10), 0, freeze({"training": {"local_epochs": 1}})))
    networks = federation.networks_now()
    assert networks["client_1"] == {"round": 1} and networks["client_7"] is None
    networks["global"] += 1.0
    assert torch.equal(federation.server.state["w"], torch.zeros(5))
