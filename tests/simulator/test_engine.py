"""The Ray engine end to end on synthetic data: worker-count invariance and the run directory."""
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
import pytest
import torch
import yaml

from analysis.report import read_run
from analysis.run_diff import logged_values
from simulator.federation import worker_pools
from simulator.resources import cpu_flags, onednn_isa, process_cpu_numerics, this_cpu_model
from simulator.run import run_scenario
from simulator.scenario import resolve
from tests.conftest import LABEL_EFFICIENT_EVAL, tiny_scenario

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(raw, tmp_path, name, **overrides):
    raw = {**raw, "ray": {**raw["ray"], **overrides}}
    run_dir, summary = run_scenario(resolve(raw), str(tmp_path / name), progress=False)
    return run_dir, summary, logged_values(run_dir)


def test_metrics_do_not_depend_on_the_workers_nor_on_where_server_and_shares_run(ray_session, synthetic_raw,
                                                                                  tmp_path):
    # one worker slot, the driver's, the server and the evaluator in the driver: no actor at all
    threads_before = set(threading.enumerate())
    _, s1, m1 = run(synthetic_raw, tmp_path, "w1", num_workers=1)
    evaluator_threads = [thread for thread in set(threading.enumerate()) - threads_before
                         if thread.name == "fedssl-evaluator"]
    for thread in evaluator_threads:  # it ends with its run, not with the process (a command runs several)
        thread.join(timeout=30)
    assert not [thread for thread in evaluator_threads if thread.is_alive()]
    # three worker actors (4 clients a round: shares of 2, 1, 1), a server actor and an evaluator actor
    _, s3, m3 = run(synthetic_raw, tmp_path, "w3", num_workers=3, server="actor", driver_simulates=False,
                    evaluator="actor")
    assert not any(s1["peak_memory_mb"][host] for host in ("server", "workers", "evaluator"))
    assert all(s3["peak_memory_mb"][host] > 0 for host in ("server", "workers", "evaluator"))
    assert m1 == m3
    assert (2, "train/loss") in m1 and (2, "eval/knn_top1") in m1
    assert s1["final"] == s3["final"] and s1["pixels"] == s3["pixels"]
    # every process computed with this machine's kernels: one numerics, recorded in the summary
    assert s1["numerics"] == s3["numerics"] == [f"torch {torch.__version__}, CPU {process_cpu_numerics()}"]


WORKERS_ON_OTHER_KERNELS = """
import json, os, sys
import torch
torch.backends.cpu.get_cpu_capability()  # the driver's kernels are chosen at their first use: now
os.environ["ATEN_CPU_CAPABILITY"] = "default"  # the Ray processes this run starts inherit it
from simulator.run import run_scenario
from simulator.scenario import resolve
_, summary = run_scenario(resolve(json.loads(sys.argv[1])), sys.argv[2], progress=False)
print(json.dumps(summary["numerics"]))
"""


def test_the_summary_names_the_numerics_of_the_driver_and_of_every_worker(tmp_path):
    """A run whose worker actor computes with other kernels than the driver's slot (as workers on
    another kind of node would) records both: its results are those of that mix."""
    tiny = tiny_scenario(tmp_path)  # the round on Ray (not the driver's while Ray starts): a share on the actor
    raw = {**tiny, "training": {**tiny["training"], "rounds": 1}, "eval": {**tiny["eval"], "enabled": False},
           "ray": {**tiny["ray"], "while_starting": "wait"}}
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA")}
    done = subprocess.run([sys.executable, "-c", WORKERS_ON_OTHER_KERNELS, json.dumps(raw), str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    version = torch.__version__
    onednn_not_capped = onednn_isa(cpu_flags(), {})  # the worker capped torch's own kernels only
    driver, actor = (f"torch {version}, CPU {torch.backends.cpu.get_cpu_capability()}, {this_cpu_model()}",
                     f"torch {version}, CPU DEFAULT, oneDNN {onednn_not_capped}, {this_cpu_model()}")
    assert json.loads(done.stdout.strip().splitlines()[-1]) == sorted([driver, actor])
    # the driver's slot and the actor simulate clients of one pool: the run says that this split decided it
    (pool,) = worker_pools(resolve(raw))
    assert [line for line in done.stderr.splitlines() if line.startswith("fedssl: note: ")] == [
        f"fedssl: note: {tmp_path / 'run'}: the clients of a worker pool were simulated with different numerics "
        f"({pool}: {'; '.join(sorted([driver, actor]))}), so the results depend on which process simulated which "
        f"client (the number of workers, where Ray placed them), and another run need not repeat them bitwise "
        f"(README, \"On a Ray cluster\")"]


def federation_weights(scenario, rounds, between_rounds=lambda r, federation: None):
    """The global weights after ``rounds`` rounds of a RayFederation (4 of 8 clients a round);
    ``between_rounds(r, federation)`` before round ``r``."""
    from simulator.context import RoundContext, freeze
    from simulator.data.store import prepare_partition
    from simulator.engine import RayFederation
    from tests.conftest import sample_cohort
    from simulator.run import data_spec
    partition_dir = prepare_partition(scenario)
    federation = RayFederation(scenario)
    federation.setup(data_spec(partition_dir, scenario), str(partition_dir), None)
    try:
        for r in range(1, rounds + 1):
            between_rounds(r, federation)
            _, cohort = sample_cohort(scenario["seed"], r, 8, 4)
            federation.run_round(RoundContext(r, rounds, cohort, scenario["seed"], freeze(scenario)))
        return federation.state()["weights"]
    finally:
        federation.shutdown()


HOLD_RAY_BACK_TWO_ROUNDS = """
import sys, threading
import simulator.engine as engine
two_rounds_played = threading.Event()
start_ray, run_round = engine.start_ray, engine.RoundsWhileRayStarts.run_round
def start_ray_after_two_rounds(address):
    two_rounds_played.wait()
    start_ray(address)
def run_round_then_wait_for_ray(self, ctx):
    if ctx.round == 3:
        two_rounds_played.set()
        self.started.result()
    return run_round(self, ctx)
engine.start_ray = start_ray_after_two_rounds
engine.RoundsWhileRayStarts.run_round = run_round_then_wait_for_ray
from simulator.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_rounds_the_driver_plays_while_ray_starts_give_bitwise_the_run_that_waits(ray_session, synthetic_raw,
                                                                                    tmp_path):
    """``ray.while_starting: driver`` in a process of its own (Ray not yet started there), Ray held back
    until rounds 1-2 are played in the driver, rounds 3-4 on Ray: FedU (stateful clients: their
    states cross the switch in the store), evaluations of networks from both sides (rounds 0 and 2
    in the driver's rounds, 4 on Ray); against the same run waiting for Ray. Half the synthetic train
    set: the switch, not the training, is what is compared."""
    raw = {**synthetic_raw, "method": {"name": "fedu", "objective": "byol"},
           "dataset": {**synthetic_raw["dataset"], "train_subset": 1000},
           "training": {**synthetic_raw["training"], "rounds": 4},
           "eval": {**synthetic_raw["eval"], "every": 2}, "output": {"checkpoint_every": 2}}
    _, waited, waited_metrics = run(raw, tmp_path, "wait", while_starting="wait")
    scenario = tmp_path / "fedu.yaml"
    scenario.write_text(json.dumps({**raw, "ray": {**raw["ray"], "while_starting": "driver"}}))
    done = subprocess.run([sys.executable, "-c", HOLD_RAY_BACK_TWO_ROUNDS, "run", str(scenario),
                           "--out", str(tmp_path / "driver"), "--quiet"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    started = json.loads((tmp_path / "driver" / "summary.json").read_text())
    assert started["rounds_while_ray_started"] == 2 and waited["rounds_while_ray_started"] == 0
    assert logged_values(tmp_path / "driver") == waited_metrics
    assert started["initial"] == waited["initial"] and started["final"] == waited["final"]
    ours, theirs = (torch.load(sorted((tmp_path / run / "checkpoints").iterdir())[-1] / "state.pt",
                               weights_only=False)["state"] for run in ("driver", "wait"))
    assert state_bytes(ours) == state_bytes(theirs) and len(state_bytes(ours)) > 10_000


def state_bytes(node) -> bytes:
    """Every tensor of a nested state, in name order, as bytes."""
    if isinstance(node, torch.Tensor):
        return node.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    if isinstance(node, dict):
        return b"".join(key.encode() + state_bytes(node[key]) for key in sorted(node, key=str))
    if isinstance(node, (list, tuple)):
        return b"".join(state_bytes(item) for item in node)
    return repr(node).encode()


def test_the_driver_stands_in_for_a_worker_still_starting_up(ray_session, synthetic_raw, tmp_path, monkeypatch):
    import ray

    from simulator import engine
    started, calls = tmp_path / "may-start", tmp_path / "calls"

    class SlowStartingWorker(engine.WorkerActor.__ray_actor_class__):  # local, so that Ray ships it by value
        def setup(self, *args):
            while not started.exists():  # still importing, as far as the driver can tell
                time.sleep(0.05)
            super().setup(*args)

        @ray.method(num_returns=2)
        def run(self, broadcast, extras, client_ids, ctx):
            with open(calls, "a") as log:
                log.write(f"{ctx.round}\n")
            return super().run(broadcast, extras, client_ids, ctx)

    scenario = resolve(synthetic_raw)  # 2 worker slots: the driver's and one actor
    reference = federation_weights({**scenario, "ray": {**scenario["ray"], "driver_simulates": False}}, 3)
    monkeypatch.setattr(engine, "WorkerActor", ray.remote(SlowStartingWorker))

    def release_after_round_2(r, federation):
        if r == 3:
            started.touch()
            booting = list(federation.booting.values())  # until its setup's return reaches the driver,
            assert ray.wait(booting, num_returns=len(booting), timeout=120)[1] == []  # however loaded the machine
    import threading
    timer = threading.Timer(240, started.touch)  # without a stand-in, round 1 waits for this: the test fails, not hangs
    timer.start()
    try:
        weights = federation_weights(scenario, 3, release_after_round_2)
    finally:
        timer.cancel()
    assert calls.read_text().split() == ["3"]  # rounds 1 and 2: the driver simulated the actor's share
    for name, value in reference.items():
        assert torch.equal(value, weights[name]), name


@pytest.mark.parametrize("other_files", [False, True])
def test_a_node_that_builds_another_partition_than_the_drivers_stops_the_run_with_one_line(
        ray_session, synthetic_raw, tmp_path, other_files):
    """Worker actors that lack the driver's partition build their own from their node's data files: the
    same files give the driver's entry and the round runs; other files (another entry) would train
    other splits, and the first round stops with :class:`PartitionMismatch` naming both entries."""
    import numpy as np

    from simulator.context import RoundContext, freeze
    from simulator.data.store import prepare_partition
    from simulator.engine import RayFederation
    from simulator.federation import PartitionMismatch
    from simulator.run import data_spec
    from tests.conftest import sample_cohort
    from tests.simulator.data.conftest import write_fashion_28
    root = tmp_path / "files"
    scenario = resolve({**synthetic_raw, "dataset": {**synthetic_raw["dataset"], "name": "fashion_mnist",
                                                      "root": str(root)},
                        "population": {"num_clients": 4, "clients_per_round": 2},
                        "ray": {"num_workers": 2, "driver_simulates": False}})
    write_fashion_28(root, np.repeat(np.arange(2, dtype=np.uint8), 20))
    drivers = prepare_partition(scenario)
    spec = data_spec(drivers, scenario)
    drivers.rename(drivers.with_name("elsewhere"))  # the workers' node does not hold the driver's entry
    if other_files:
        write_fashion_28(root, np.repeat(np.arange(8, 10, dtype=np.uint8), 20))
    federation = RayFederation(scenario)
    try:
        federation.setup(spec, str(drivers), None)
        _, cohort = sample_cohort(scenario["seed"], 1, 4, 2)
        ctx = RoundContext(1, 1, cohort, scenario["seed"], freeze(scenario))
        if not other_files:
            assert federation.run_round(ctx)["clients/completed"] == 2
            assert (drivers / "meta.json").exists()  # built again under the driver's name
            return
        with pytest.raises(PartitionMismatch) as raised:
            federation.run_round(ctx)
    finally:
        federation.shutdown()
    built = prepare_partition(scenario)
    assert built.name != drivers.name and not drivers.exists()
    assert str(raised.value) == (
        f"a worker on host {socket.gethostname()} built partition {built.name} from its own data files under "
        f"dataset.root, where the driver's is {drivers.name}: the nodes' data files differ (every node needs the "
        f"driver's files, or a dataset.cache_dir all nodes share)")
    assert not raised.value.resumable


@pytest.fixture(scope="module")
def tiny_ray_run(ray_session, tmp_path_factory):
    """One finished Ray run of the tiny scenario (label-efficient metrics on), read by the tests of
    the run directory, its TensorBoard events and its HParams table."""
    from simulator.run import RunLoop
    tmp_path = tmp_path_factory.mktemp("engine-run")
    raw = tiny_scenario(tmp_path)
    earlier, RunLoop.runs_in_this_process = RunLoop.runs_in_this_process, 0  # as a command's first run
    try:
        return run({**raw, "eval": {**raw["eval"], **LABEL_EFFICIENT_EVAL}}, tmp_path, "run")
    finally:
        RunLoop.runs_in_this_process += earlier


def test_run_directory_holds_scenario_metrics_summary_checkpoint(tiny_ray_run):
    run_dir, summary, metrics = tiny_ray_run
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    for key in ("knn_top1", "linear_top1"):
        assert 0.0 <= on_disk["initial"][key] <= 1.0 and 0.0 <= on_disk["final"][key] <= 1.0
    assert on_disk["rounds_completed"] == 2 and on_disk["wall_seconds"] > 0
    assert on_disk["bytes_up"] == sum(v for (r, n), v in metrics.items() if n.startswith("bytes_up/"))
    assert on_disk["bytes_down"] == on_disk["bytes_up"] > 0
    # 4 clients a round, each downloading and uploading the whole model
    assert metrics[(1, "bytes_down/weights")] == metrics[(1, "bytes_up/weights")]
    assert metrics[(1, "clients/sampled")] == 4 and metrics[(1, "clients/completed")] == 4
    assert (run_dir / "scenario.yaml").exists()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["round_00002"]
    assert (run_dir / "checkpoints" / "round_00002" / "state.pt").exists()
    assert on_disk["steady_samples_per_second"] > 0 and on_disk["peak_memory_mb"]["workers"] > 0
    assert on_disk["seconds_from_launch_to_end_of_round_1"] > on_disk["seconds_to_end_of_round_1"] > 0
    assert metrics[(1, "train/samples")] > 0
    memory = {(r["round"], r["name"]): r["value"] for r in pq.read_table(run_dir / "metrics.parquet").to_pylist()
              if r["name"].startswith("memory/")}
    # the actors' memory; 0 where the driver stood in for every share (actors still starting in a run
    # this short), never the driver's own, which is driver_rss_mb (tests/simulator/test_inprocess.py)
    assert memory[(2, "memory/workers_rss_mb")] >= 0 and memory[(2, "memory/driver_rss_mb")] > 0
    assert not list(run_dir.rglob(".*.tmp-*"))


def test_the_run_records_its_raw_pixel_reference(tiny_ray_run, tmp_path):
    """The evaluation protocol on the raw pixels (simulator.evaluation.monitor.raw_pixels), once a run:
    in summary.json and at step 0 of the logs, equal to the kNN and the probe computed here on the
    run's own evaluation images; ``eval.pixel_reference: false`` leaves it out."""
    from simulator.evaluation.metrics import knn_top1, linear_probe_top1
    from simulator.evaluation.monitor import load_eval_data
    run_dir, summary, metrics = tiny_ray_run
    scenario = resolve(yaml.safe_load((run_dir / "scenario.yaml").read_text()))
    data = load_eval_data(scenario)
    train, test = data.train_x.flatten(1).float() / 255, data.test_x.flatten(1).float() / 255
    eval_cfg = scenario["eval"]
    pixels = summary["pixels"]
    assert pixels["knn_top1"] == knn_top1(train, data.train_y, test, data.test_y, data.num_classes,
                                          k=eval_cfg["knn_k"], temperature=eval_cfg["knn_temperature"])
    assert pixels["linear_top1"] == linear_probe_top1(train, data.train_y, test, data.test_y, data.num_classes,
                                                      max_iter=eval_cfg["probe_iterations"])
    assert {"knn_top1_1pct", "linear_top1_10pct"} <= set(pixels) and "knn_projector_top1" not in pixels
    assert {m: metrics[(0, f"reference/pixels/{m}")] for m in pixels} == pixels
    assert not [name for (r, name) in metrics if name.startswith("reference/") and r != 0]
    raw = tiny_scenario(tmp_path)
    _, without, logged = run({**raw, "eval": {**raw["eval"], "pixel_reference": False}}, tmp_path, "without")
    assert without["pixels"] is None and not [name for (_, name) in logged if name.startswith("reference/")]


def test_tensorboard_events_read_back(tiny_ray_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    run_dir, _, metrics = tiny_ray_run
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    for tag in ("train/loss", "eval/knn_top1", "eval/linear_top1", "eval/knn_projector_top1", "bytes_up/weights",
                "clients/completed", "time/round_seconds"):
        assert tag in tags
    for tag in ("train/loss", "eval/knn_projector_top1"):
        logged = {e.step: e.value for e in events.Scalars(tag)}
        assert logged == pytest.approx({r: v for (r, n), v in metrics.items() if n == tag})
    assert sorted(e.step for e in events.Scalars("eval/knn_top1")) == [0, 1, 2]


def test_tensorboard_hparams_and_custom_scalars_read_back(tiny_ray_run):
    """The resolved scenario in TensorBoard's HParams table, with the headline metrics, and the
    custom-scalars layout (accuracy, loss, population, communication) whose charts match logged tags."""
    import re

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.custom_scalar import layout_pb2
    from tensorboard.plugins.hparams import plugin_data_pb2
    run_dir, _, _ = tiny_ray_run
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    hparams = {tag: plugin_data_pb2.HParamsPluginData.FromString(content)
               for tag, content in events.PluginTagToContent("hparams").items()}
    session = hparams["_hparams_/session_start_info"].session_start_info.hparams
    values = {key: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind")) for key, value in session.items()}
    assert values["method.name"] == "fedavg" and values["method.objective"] == "simclr"
    assert values["training.lr"] == 0.05 and values["seed"] == 3 and values["population.num_clients"] == 8
    assert values["ray.worker_pools"] == "[]" and values["dataset.root"] == "null"
    experiment = hparams["_hparams_/experiment"].experiment
    metric_tags = [m.name.tag for m in experiment.metric_infos]
    assert metric_tags[:2] == ["eval/linear_top1", "eval/knn_top1"] and "eval/linear_top1_1pct" in metric_tags
    scalar_tags = events.Tags()["scalars"]
    assert set(metric_tags) <= set(scalar_tags)  # the table's columns are logged scalars
    assert "custom_scalars__config__" in events.PluginTagToContent("custom_scalars")
    layout = layout_pb2.Layout.FromString(events.Tensors("custom_scalars__config__")[0].tensor_proto.string_val[0])
    charts = {category.title: {chart.title: list(chart.multiline.tag) for chart in category.chart}
              for category in layout.category}
    assert sorted(charts) == ["accuracy", "communication", "loss", "population"]
    matched = lambda patterns: [t for t in scalar_tags if any(re.fullmatch(p, t) for p in patterns)]
    assert "eval/knn_top1" in matched(charts["accuracy"]["kNN (backbone)"])
    assert "eval/knn_projector_top1" not in matched(charts["accuracy"]["kNN (backbone)"])
    assert "train/loss" in matched(charts["loss"]["training loss"])
    assert "clients/completed" in matched(charts["population"]["clients"])
    assert "bytes_up/weights" in matched(charts["communication"]["bytes up"])


def test_tier_pools_with_their_own_resources_give_the_single_pool_result(ray_session, synthetic_raw, tmp_path):
    """Hetero-SSFL's large_cnn clients run in their own pool of workers: results do not change, on
    Ray or in-process. Half the synthetic train set and a smaller evaluation (the large_cnn's training
    and its tier's evaluations took most of the three runs' time): the routing is what is compared."""
    raw = {**synthetic_raw,
           "method": {"name": "hetero_ssfl", "rad_size": 16, "rad_batch_size": 8, "eval_clients_per_tier": 1,
                      "tiers": [{"fraction": 0.5, "encoder": "small_cnn"}, {"fraction": 0.5, "encoder": "large_cnn"}]},
           "dataset": {**synthetic_raw["dataset"], "train_subset": 1000},
           "training": {**synthetic_raw["training"], "batch_size": 16},
           "eval": {**synthetic_raw["eval"], "every": 2, "train_subset": 250, "test_subset": 150}}
    one_pool_dir, one_pool, m1 = run(raw, tmp_path, "one-pool")
    pools = [{"name": "small_cnn", "count": 1, "num_cpus": 1, "num_gpus": 0},
             {"name": "large_cnn", "count": 2, "num_cpus": 1, "num_gpus": 0}]
    tiered_dir, tiered, m2 = run(raw, tmp_path, "tier-pools", worker_pools=pools)
    assert m1 == m2 and one_pool["final"] == tiered["final"]
    # the in-process executor runs the pools' shares in turn: bitwise the Ray run, client store included
    local_dir, local, m3 = run({**raw, "executor": "in_process"}, tmp_path, "in-process", worker_pools=pools)
    assert m3 == m2 and local["final"] == tiered["final"]
    stored = sorted(p.relative_to(tiered_dir) for p in (tiered_dir / "client_state").rglob("*.pt"))
    assert stored and stored == sorted(p.relative_to(local_dir) for p in (local_dir / "client_state").rglob("*.pt"))
    for path in stored:
        ray_networks = torch.load(tiered_dir / path, weights_only=False)["networks"]
        local_networks = torch.load(local_dir / path, weights_only=False)["networks"]
        assert all(torch.equal(ray_networks[k], local_networks[k]) for k in ray_networks), path
    assert (2, "eval/large_cnn/linear_top1_mean") in m1
    groups = read_run(one_pool_dir)["groups"]  # what `fedssl report` tabulates per tier
    assert groups["large_cnn"]["linear_top1"] == m1[(2, "eval/large_cnn/linear_top1_mean")]
    assert sorted(groups) == ["large_cnn", "small_cnn"]


def test_rounds_with_a_share_pass_through_ray(ray_session, synthetic_raw, tmp_path):
    """FedSC's rounds 2 (share, then train) and 1, 3 (train): worker-count invariant, the matrices go
    up in the share pass, the weights go down once per round."""
    raw = {**synthetic_raw, "method": {"name": "fedsc", "share_views": 1, "share_every": 2},
           "training": {**synthetic_raw["training"], "rounds": 3}, "eval": {**synthetic_raw["eval"], "every": 3}}
    _, s1, m1 = run(raw, tmp_path, "fedsc-w1", num_workers=1)
    _, s2, m2 = run(raw, tmp_path, "fedsc-w2", num_workers=2)
    assert m1 == m2 and s1["final"] == s2["final"]
    assert (0, "bytes_up/correlation") in m1 and (2, "bytes_up/correlation") in m1
    assert (1, "bytes_up/correlation") not in m1 and (3, "bytes_up/correlation") not in m1
    assert m1[(2, "bytes_down/weights")] == m1[(1, "bytes_down/weights")] == m1[(3, "bytes_down/weights")] > 0
    assert m1[(2, "bytes_up/weights")] == m1[(1, "bytes_up/weights")]


def test_sharing_from_a_later_round_through_ray(ray_session, synthetic_raw, tmp_path):
    """FedSC sharing from round 1 every 2nd round under DP: the run has no round 0 (nothing logged for
    it), rounds 1 and 3 upload matrices, round 2 only trains, and the spent epsilon stays within the
    target."""
    method = {"name": "fedsc", "share_views": 1, "share_from_round": 1, "share_every": 2, "target_epsilon": 8.0}
    raw = {**synthetic_raw, "method": method,
           "training": {**synthetic_raw["training"], "rounds": 3}, "eval": {**synthetic_raw["eval"], "every": 3}}
    _, summary, metrics = run(raw, tmp_path, "fedsc-late", num_workers=1)
    # round 0: the random network's evaluation and the raw-pixel reference only
    assert not [name for r, name in metrics if r == 0 and not name.startswith(("eval/", "reference/pixels/"))]
    assert (1, "bytes_up/correlation") in metrics and (3, "bytes_up/correlation") in metrics
    assert (2, "bytes_up/correlation") not in metrics and metrics[(2, "bytes_up/weights")] > 0
    assert metrics[(1, "privacy/shares_max")] == 1 and metrics[(3, "privacy/shares_max")] == 2
    assert 0 < summary["privacy_epsilon_max"] <= 8.0


JOINS_OTHER_INSTANCE = """
import ray
from ray.cluster_utils import Cluster
from simulator.engine import start_ray
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})  # as `ray start` does
start_ray(None)
print(ray.get_runtime_context().gcs_address == cluster.address)
ray.shutdown()
cluster.shutdown()
"""


def test_a_local_run_starts_its_own_ray_while_another_instance_runs():
    """``ray.address: null`` must not join a Ray instance already running on the machine."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", JOINS_OTHER_INSTANCE], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "False"


OWN_INSTANCE_WORKERS = """
import os, time
import ray
from simulator.engine import start_ray
def descendants_titled(prefix):
    parent = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            title = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")[0].decode()
        except OSError:
            continue
        parent[int(pid)] = (int(stat.rsplit(")", 1)[1].split()[1]), title)
    def below_me(pid):
        while pid in parent and pid != os.getpid():
            pid = parent[pid][0]
        return pid == os.getpid()
    return [pid for pid, (_, title) in parent.items() if title.startswith(prefix) and below_me(pid)]
start_ray(None)
@ray.remote(num_cpus=1)
class Actor:
    def niceness(self):
        return os.getpriority(os.PRIO_PROCESS, 0)
actor = Actor.remote()
actor_niceness = ray.get(actor.niceness.remote())
idle = 0
for _ in range(30):
    time.sleep(0.1)
    idle = max(idle, len(descendants_titled("ray::IDLE")))
print(idle, len(descendants_titled("ray::Actor")), actor_niceness - os.getpriority(os.PRIO_PROCESS, 0))
ray.shutdown()
"""


def test_a_runs_own_ray_starts_only_its_actors_at_the_drivers_priority():
    """Ray prestarts a worker process per CPU and lowers its workers' priority (niceness +15); a run's
    own instance starts only its actors' processes, at the driver's priority."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", OWN_INSTANCE_WORKERS], capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "0 1 0"


SIGTERM_AFTER_RAY_STARTED_IN_A_THREAD = """
import os, signal, threading, time
import ray
from simulator.engine import start_ray
handled = threading.Event()
signal.signal(signal.SIGTERM, lambda number, frame: handled.set())
started = threading.Event()
def start_and_stay():  # Ray's processes die with the thread that started them
    start_ray(None)
    started.set()
    threading.Event().wait()
threading.Thread(target=start_and_stay, daemon=True).start()
started.wait()
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.5)
print("handled" if handled.is_set() else "not handled", flush=True)
ray.shutdown()
"""


def test_sigterm_reaches_the_drivers_handler_after_ray_started_in_another_thread():
    """Ray's core worker installs a failure handler for SIGTERM (a stack, then the driver aborts);
    ``start_ray`` from a thread other than the main one (``ray.while_starting: driver``) puts the
    process's own action back."""
    done = subprocess.run([sys.executable, "-c", SIGTERM_AFTER_RAY_STARTED_IN_A_THREAD], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "handled"
    assert "SIGTERM received" not in done.stderr, done.stderr[-3000:]
    assert "SIGTERM handler is not set" not in done.stderr, done.stderr[-3000:]  # Ray's warning: the driver's stays


def evaluation_data_held_until_go(monkeypatch):
    """(started, go): the engine's evaluation data, once asked for, sets ``started`` and waits for ``go``."""
    import simulator.engine as engine
    started, go = threading.Event(), threading.Event()

    def load_eval_data(scenario):
        started.set()
        go.wait(10)
        return "data"

    monkeypatch.setattr(engine, "load_eval_data", load_eval_data)
    return started, go


def test_the_evaluator_thread_computes_on_one_thread_whatever_the_driver_set_after_it_started(monkeypatch):
    # torch gives a thread its count lazily, at its first parallel operation, from the count last set
    # by any thread: here the driver sets 2 between the evaluator's start and its first evaluation
    import simulator.engine as engine
    started, go = evaluation_data_held_until_go(monkeypatch)

    def evaluate_networks(networks, data, scenario):
        x = torch.rand(256, 256)
        (x @ x).sum().item()  # a parallel operation first, then the count it ran with
        return {"threads": torch.get_num_threads()}

    monkeypatch.setattr(engine, "evaluate_networks", evaluate_networks)
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        evaluator = engine.EvaluatorInDriver({})
        evaluation = evaluator.submit({})
        assert started.wait(10)
        torch.set_num_threads(2)  # the driver leaves a worker slot's share
        go.set()
        assert evaluator.result(evaluation) == {"threads": 1}
        evaluator.kill()
    finally:
        torch.set_num_threads(saved)


def test_actor_cpus_count_every_slot_but_the_driver_s_own():
    from simulator.engine import actor_cpus
    pools = [{"name": "cpu", "count": 2, "num_cpus": 1.5, "num_gpus": 0.0},
             {"name": "gpu", "count": 1, "num_cpus": 2, "num_gpus": 1.0}]
    ray_section = {"worker_pools": pools, "driver_simulates": True}
    assert actor_cpus({"ray": ray_section}) == 1.5 + 2  # the driver plays the cpu pool's last slot
    assert actor_cpus({"ray": {**ray_section, "driver_simulates": False}}) == 2 * 1.5 + 2
    assert actor_cpus({"ray": {**ray_section, "worker_pools": pools[1:]}}) == 2  # no slot the driver can play
    one_pool = {"num_workers": 3, "worker": {"num_cpus": 1, "num_gpus": 0.0}, "worker_pools": [],
                "driver_simulates": True}
    assert actor_cpus({"ray": one_pool}) == 2


# ---- the engine's bookkeeping, without Ray's processes ---------------------------------------

def test_a_shares_timeout_is_the_time_left_to_its_deadline_never_below_zero_and_none_without_one():
    """A share whose deadline passed while the driver waited for the others is asked with 0 (and, not
    done, counted as hung): ``ray.get`` hands a negative timeout on in milliseconds, where -1 means
    waiting for ever."""
    import math

    from simulator.engine import seconds_until
    assert seconds_until(math.inf) is None
    assert seconds_until(time.monotonic() - 5.0) == 0.0
    assert 9.0 < seconds_until(time.monotonic() + 10.0) <= 10.0


def test_the_driver_plays_the_last_slot_of_the_first_pool_without_gpus():
    from types import SimpleNamespace

    from simulator.engine import RayFederation
    federation = SimpleNamespace(scenario={"ray": {"driver_simulates": True}},
                                 pools={"big": {"num_gpus": 0.5}, "cpu": {"num_gpus": 0.0}, "cpu2": {"num_gpus": 0.0}},
                                 worker_pool=["big", "cpu", "cpu", "cpu", "cpu2"])
    assert RayFederation.driver_slot(federation) == 3
    federation.scenario = {"ray": {"driver_simulates": False}}
    assert RayFederation.driver_slot(federation) is None


def test_a_slot_still_starting_is_stood_in_for_only_by_the_drivers_slot_of_its_own_pool(monkeypatch):
    from types import SimpleNamespace

    from simulator import engine
    driver = engine.WorkerInDriver({}, {"num_cpus": 1, "num_gpus": 0.0})
    federation = SimpleNamespace(slots=["actor 0", driver, "actor 2"], worker_pool=["cpu", "cpu", "gpu"],
                                 booting={0: "setup 0", 2: "setup 2"})
    monkeypatch.setattr(engine.ray, "wait", lambda refs, timeout: ([], refs))  # every setup still running
    assert engine.RayFederation.stand_in(federation, 0) is driver
    assert engine.RayFederation.stand_in(federation, 2) is None  # the GPU pool's share waits for its actor
    monkeypatch.setattr(engine.ray, "wait", lambda refs, timeout: (refs, []))  # started since
    assert engine.RayFederation.stand_in(federation, 0) is None and 0 not in federation.booting


def test_the_summary_sums_the_worker_actors_peaks_and_counts_their_distinct_nodes():
    from types import SimpleNamespace

    from simulator.engine import RayFederation
    answers = {"memory": {0: {"peak_mb": 300.0}, 2: {"peak_mb": 200.0}},
               "node_id": {0: "node a", 2: "node b", 3: "node a"}}
    federation = SimpleNamespace(ask_live_workers=answers.get, evaluator=None,
                                 server=SimpleNamespace(peak_mb=lambda: 0.0))
    peaks = RayFederation.peak_memory_mb(federation)
    assert peaks["workers"] == 500.0 and peaks["evaluator"] == peaks["server"] == 0.0 and peaks["driver"] > 0
    assert RayFederation.worker_nodes(federation) == 2


def test_the_numerics_of_each_pool_are_those_of_its_actors_and_of_the_drivers_slot_in_it():
    from types import SimpleNamespace

    from simulator import engine
    driver = engine.WorkerInDriver({}, {"num_cpus": 1, "num_gpus": 0.0})
    federation = SimpleNamespace(
        slots=["actor 0", driver, "actor 2", "actor 3"], worker_pool=["cpu", "cpu", "gpu", "gpu"],
        pools={"cpu": {}, "gpu": {}, "idle": {}},
        ask_live_workers={"numerics": {0: "CPU AVX2", 2: "GPU H200", 3: "GPU H200"}}.get)  # slot 1: the driver's
    assert engine.RayFederation.pool_numerics(federation) == {
        "cpu": {"CPU AVX2", driver.worker.numerics()}, "gpu": {"GPU H200"}, "idle": set()}


def test_the_driver_plays_the_first_rounds_only_for_a_local_instance_of_its_own_that_nothing_needs_at_once(
        tmp_path, monkeypatch):
    """``ray.while_starting: driver`` applies where this run starts Ray itself (no address, none in
    ``$RAY_ADDRESS``, not connected) and its first rounds need no actor: no GPU pool, no evaluator actor."""
    from simulator import engine
    monkeypatch.setattr(engine.ray, "is_initialized", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(engine, "start_ray", lambda address: None)
    monkeypatch.setattr(engine, "RayFederation", lambda scenario: "on Ray")
    monkeypatch.setattr(engine, "RoundsWhileRayStarts", lambda scenario: "in the driver first")
    ray_section = resolve(tiny_scenario(tmp_path))["ray"]

    def started(**changes):
        return engine.start_federation({"ray": {**ray_section, **changes}})
    assert started() == "in the driver first"
    assert started(while_starting="wait") == started(evaluator="actor") == started(address="auto") == "on Ray"
    assert started(worker={"num_cpus": 1, "num_gpus": 0.5}) == "on Ray"
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert started() == "on Ray"


def test_killing_the_evaluator_thread_cancels_the_evaluations_not_yet_started(monkeypatch):
    import simulator.engine as engine
    started, go = evaluation_data_held_until_go(monkeypatch)
    monkeypatch.setattr(engine, "evaluate_networks", lambda networks, data, scenario: {"global": {"knn_top1": 0.5}})
    evaluator = engine.EvaluatorInDriver({})
    first = evaluator.submit({})
    assert started.wait(10)
    queued = [evaluator.submit({}) for _ in range(2)]
    evaluator.kill()
    go.set()
    assert first.result(timeout=10) == {"global": {"knn_top1": 0.5}}
    assert all(evaluation.cancelled() for evaluation in queued)


def test_the_drivers_own_share_reports_no_worker_memory(monkeypatch):
    """memory/workers_rss_mb is the actors' memory; the driver's is memory/driver_rss_mb."""
    from simulator import engine
    from simulator.federation import WorkerResult
    slot = engine.WorkerInDriver({}, {"num_cpus": 1, "num_gpus": 0.0})
    monkeypatch.setattr(engine.ray, "get", lambda refs: refs)  # the broadcast and the extras, at hand
    monkeypatch.setattr(slot.worker, "run", lambda *args: (2, WorkerResult(samples=64, rss_mb=812.0)))
    result = slot.run({}, {}, [3, 5], None)
    assert (result.samples, result.rss_mb) == (64, 0.0)


def test_starting_ray_puts_a_callers_sigterm_handler_back_and_leaves_a_default_one_to_ray(monkeypatch):
    import signal

    from simulator import engine

    def rays_handler(number, frame):
        pass

    def callers_handler(number, frame):
        pass

    monkeypatch.setattr(engine.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(engine.ray, "init", lambda **kwargs: signal.signal(signal.SIGTERM, rays_handler))
    saved = signal.getsignal(signal.SIGTERM)
    try:
        for before, after in ((signal.SIG_DFL, rays_handler), (callers_handler, callers_handler)):
            signal.signal(signal.SIGTERM, before)
            engine.start_ray("auto")
            assert signal.getsignal(signal.SIGTERM) is after
    finally:
        signal.signal(signal.SIGTERM, saved)


def test_a_run_that_played_rounds_while_ray_started_ends_its_evaluator_thread_and_its_actors(tmp_path, monkeypatch):
    """(A command's later runs would otherwise pile evaluator threads up, each holding its data.)"""
    from types import SimpleNamespace

    from simulator import engine
    stopped = []
    monkeypatch.setattr(engine, "start_ray", lambda address: None)
    monkeypatch.setattr(engine, "RayFederation", lambda scenario: SimpleNamespace(shutdown=lambda: stopped.append(1)))
    monkeypatch.setattr(engine, "load_eval_data", lambda scenario: "data")
    monkeypatch.setattr(engine, "evaluate_networks", lambda networks, data, scenario: {"global": {"knn_top1": 0.5}})
    federation = engine.RoundsWhileRayStarts(resolve(tiny_scenario(tmp_path)))
    threads_before = set(threading.enumerate())
    assert federation.result(federation.submit_eval({})) == {"global": {"knn_top1": 0.5}}
    evaluators = [thread for thread in set(threading.enumerate()) - threads_before if thread.name == "fedssl-evaluator"]
    federation.shutdown()
    for thread in evaluators:
        thread.join(timeout=10)
    assert evaluators and not any(thread.is_alive() for thread in evaluators) and stopped == [1]
