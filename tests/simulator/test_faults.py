"""Real faults: a worker process killed or hung (stopped) mid-round, a driver killed and resumed."""
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml

from analysis.run_diff import logged_values
from simulator.cli import resumable
from simulator.context import RoundContext, freeze
from simulator.data.store import prepare_partition
from simulator.federation import ServerLost
from simulator.resources import process_cpu_numerics
from simulator.run import data_spec, run_scenario
from simulator.scenario import resolve
from tests.conftest import sample_cohort, tiny_scenario
from tests.simulator.test_inprocess import METHODS, final_state, flat_tensors, with_overrides


def new_federation(scenario):
    """The scenario's Ray federation, or for ``executor: in_process`` the in-process one: bitwise the
    Ray rounds without a fault (tests/simulator/test_inprocess.py), with no actor to start."""
    from simulator import engine
    from simulator.inprocess import InProcessFederation
    return (InProcessFederation if scenario["executor"] == "in_process" else engine.RayFederation)(scenario)


def federation_states(scenario, rounds, signal_worker_in_round=None, sent=signal.SIGKILL):
    """(weights after ``rounds`` rounds, worker restarts) of :func:`new_federation`; in round
    ``signal_worker_in_round`` the first worker's process gets ``sent`` 0.3 s into the round (SIGSTOP:
    it hangs, alive, until the engine kills it, or until a SIGCONT 60 s later, so that a run without
    the timeout ends)."""
    partition_dir = prepare_partition(scenario)
    federation = new_federation(scenario)
    federation.setup(data_spec(partition_dir, scenario), str(partition_dir), None)
    timers = []
    try:
        for r in range(1, rounds + 1):
            _, cohort = sample_cohort(scenario["seed"], r, 8, 4)
            if r == signal_worker_in_round:
                import ray
                pid = ray.get(federation.workers[0].pid.remote())
                timers.append(threading.Timer(0.3, os.kill, (pid, sent)))
                if sent == signal.SIGSTOP:
                    timers.append(threading.Timer(60, signal_if_alive, (pid, signal.SIGCONT)))
                for timer in timers:
                    timer.start()
            federation.run_round(RoundContext(r, rounds, cohort, scenario["seed"], freeze(scenario)))
            if timers:
                timers[0].join()
        return federation.state()["weights"], federation.worker_restarts
    finally:
        for timer in timers:
            timer.cancel()
        federation.shutdown()


def signal_if_alive(pid, sent):
    try:
        os.kill(pid, sent)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def worker_fault_reference(tmp_path_factory):
    """(scenario, weights after 3 rounds without a fault) of the tests that kill or stop a worker 0.3 s
    into round 2 (3 local epochs: its share still runs then), computed once, in-process."""
    raw = tiny_scenario(tmp_path_factory.mktemp("worker-fault"))
    scenario = resolve({**raw, "training": {**raw["training"], "local_epochs": 3}})
    return scenario, federation_states({**scenario, "executor": "in_process"}, 3)[0]


def test_killed_worker_gives_the_fault_free_result(ray_session, worker_fault_reference):
    scenario, clean = worker_fault_reference
    faulty, restarts = federation_states(scenario, 3, signal_worker_in_round=2)
    assert restarts == 1
    for name in clean:
        assert torch.equal(clean[name], faulty[name]), name


def test_hung_worker_is_killed_after_the_share_timeout_and_gives_the_fault_free_result(ray_session,
                                                                                     worker_fault_reference):
    scenario, clean = worker_fault_reference
    # 30 s, as the next test: with 20 s, a replacement started under a load of 4-5 took longer than the
    # timeout to start and was replaced in turn (restarts 2); 30 s is still half the SIGCONT's 60 s
    with_timeout = {**scenario, "ray": {**scenario["ray"], "share_timeout_seconds": 30}}
    hung, restarts = federation_states(with_timeout, 3, signal_worker_in_round=2, sent=signal.SIGSTOP)
    assert restarts == 1  # killed at the timeout (without it, the SIGCONT at 60 s lets it finish: 0)
    for name in clean:
        assert torch.equal(clean[name], hung[name]), name


def test_worker_hung_while_starting_is_replaced_after_the_share_timeout(ray_session, synthetic_raw, tmp_path,
                                                                       monkeypatch):
    """The first worker actor never finishes starting (its setup hangs): with a share timeout it is
    given that long to start and that long again for its share, then killed and replaced, and the
    rounds end as without the fault (without the driver's slot, nobody stands in for it)."""
    import ray

    from simulator import engine

    marker = str(tmp_path / "first_start")

    class HangsOnTheFirstStart(engine.Worker):  # local, so that Ray ships it by value
        def setup(self, spec, partition_dir, store):
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
                time.sleep(300)  # the first actor of the run: hung while starting
            except FileExistsError:
                pass
            super().setup(spec, partition_dir, store)

    raw = {**synthetic_raw, "ray": {**synthetic_raw["ray"], "driver_simulates": False}}
    clean, _ = federation_states(resolve({**raw, "executor": "in_process"}), 2)
    monkeypatch.setattr(engine, "WorkerActor", ray.remote(HangsOnTheFirstStart))
    # 30 s: a replacement started on a loaded machine (another Ray run on the 2 cores) took over 20 s
    # to start and was replaced in turn
    hung_start = resolve({**raw, "ray": {**raw["ray"], "share_timeout_seconds": 30}})
    began = time.monotonic()
    replaced, restarts = federation_states(hung_start, 2)
    assert restarts == 1 and time.monotonic() - began < 250  # killed at about 60 s, not after its 300 s
    for name in clean:
        assert torch.equal(clean[name], replaced[name]), name


# A line of Ray's own log monitor on the driver's stderr, as "\x1b[33m(raylet)\x1b[0m [...] worker.cc: ..."
# when a killed worker's raylet complains; it comes asynchronously, not from fedssl, so the checks of
# fedssl's one error line read stderr without it.
RAY_LOG_LINE = re.compile(r"^(?:\x1b\[[0-9;]*m)?\((?:raylet|[^)]*pid=\d+)[^)]*\)")


def without_ray_lines(err: str) -> str:
    """``err`` without Ray's log lines and blank lines: what fedssl wrote."""
    return "\n".join(line for line in err.splitlines() if line.strip() and not RAY_LOG_LINE.match(line))


def fedssl_stderr(capsys) -> str:
    """What fedssl wrote to stderr (:func:`without_ray_lines` of the captured error output)."""
    return without_ray_lines(capsys.readouterr().err)


def failed_run(raw, tmp_path, capsys):
    """(run directory, error output) of ``fedssl run`` on ``raw`` without evaluations, checkpointed
    every round, with only the actors simulating; the run must fail (exit code 1)."""
    from simulator.cli import main
    raw = {**raw, "ray": {**raw["ray"], "driver_simulates": False}, "eval": {**raw["eval"], "enabled": False},
           "output": {**raw["output"], "checkpoint_every": 1}}
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    assert main(["run", str(scenario), "--out", str(out), "--quiet"]) == 1
    return out, fedssl_stderr(capsys)


def test_workers_that_keep_dying_stop_the_run_with_one_error_line_and_a_resume_hint(ray_session, synthetic_raw,
                                                                                   tmp_path, monkeypatch, capsys):
    """Every worker dies in its share of round 2: after the engine's restarts per pass the run stops
    with one error line that names the round-1 checkpoint and how to resume (exit code 1)."""
    import ray

    from simulator import engine

    class DiesInRound2(engine.Worker):  # local, so that Ray ships it by value
        @ray.method(num_returns=2)
        def run(self, broadcast, extras, client_ids, ctx):
            if ctx.round >= 2:
                os._exit(1)
            return super().run(broadcast, extras, client_ids, ctx)

    monkeypatch.setattr(engine, "WorkerActor", ray.remote(DiesInRound2))
    out, err = failed_run({**synthetic_raw, "ray": {**synthetic_raw["ray"], "num_workers": 1}}, tmp_path, capsys)
    assert err == (f"fedssl: error: round 2: workers kept dying or hanging (ray.share_timeout_seconds: None); given up "
                   f"after 3 restarts in one pass; the run stopped, its last good checkpoint is "  # README's 3
                   f"{out / 'checkpoints' / 'round_00001'}; resume it with: fedssl run --resume {out}")


def test_sums_lost_while_every_worker_lives_stop_the_run_with_one_error_line(ray_session, synthetic_raw, tmp_path,
                                                                             monkeypatch, capsys):
    """A share's sums lost from the object store though its worker lives (no node was lost, see
    test_multinode.py for that; here Ray's error is raised for them): nothing to simulate again, so
    the run stops with one error line and the resume hint (exit code 1)."""
    import ray

    from simulator import engine

    aggregate, get, lost = engine.ServerInDriver.aggregate, ray.get, set()

    def losing_the_sums_in_round_2(server, ctx, bytes_down, results):
        if ctx.round == 2:
            lost.update(result for result in results if isinstance(result, ray.ObjectRef))
        return aggregate(server, ctx, bytes_down, results)

    def get_or_lost(refs, *args, **kwargs):
        if isinstance(refs, ray.ObjectRef) and refs in lost:
            raise ray.exceptions.ObjectLostError(refs.hex(), "", "")
        return get(refs, *args, **kwargs)

    monkeypatch.setattr(engine.ServerInDriver, "aggregate", losing_the_sums_in_round_2)
    monkeypatch.setattr(ray, "get", get_or_lost)
    out, err = failed_run(synthetic_raw, tmp_path, capsys)
    assert err == ("fedssl: error: round 2: a share's sums were lost, though every worker lives; the run stopped, "
                   f"its last good checkpoint is {out / 'checkpoints' / 'round_00001'}; resume it with: "
                   f"fedssl run --resume {out}")


def hetero_states_after_3_rounds(scenario, store_dir, monkeypatch, kill_after_store_in_round=None):
    """(the clients' stored states, the server state, worker restarts) of 3 rounds of a stateful-client
    method on one worker of :func:`new_federation`; in ``kill_after_store_in_round`` the store kills the
    worker as soon as the worker's put of its clients' new states has been written."""
    import ray

    from simulator import engine
    from simulator.client_store import ClientStateStore, loads

    class StoreKillingItsCaller(ClientStateStore):  # local, so that Ray ships it by value
        victim = None

        def arm(self, pid):
            self.victim = pid

        def put(self, states):
            super().put(states)
            if self.victim is not None:
                os.kill(self.victim, signal.SIGKILL)
                self.victim = None

    monkeypatch.setattr(engine, "StoreActor", ray.remote(StoreKillingItsCaller))
    partition_dir = prepare_partition(scenario)
    federation = new_federation(scenario)
    federation.setup(data_spec(partition_dir, scenario), str(partition_dir), str(store_dir))
    try:
        for r in (1, 2, 3):
            _, cohort = sample_cohort(scenario["seed"], r, 4, 2)
            if r == kill_after_store_in_round:
                ray.get(federation.store.arm.remote(ray.get(federation.workers[0].pid.remote())))
            federation.run_round(RoundContext(r, 3, cohort, scenario["seed"], freeze(scenario)))
        stored = ClientStateStore(store_dir).get([0, 1, 2, 3])  # what the federation's store committed
        return ({cid: loads(blob)["networks"] for cid, blob in stored.items()}, federation.state(),
                federation.worker_restarts)
    finally:
        federation.shutdown()


@contextlib.contextmanager
def store_killed_after_round_1(synthetic_raw, ray_section: dict, method: dict, **sections):
    """(the Ray federation, its scenario) of 4 clients, 2 a round, of a stateful-client ``method`` on
    one worker, after round 1 of 2, its client-state store's actor killed; shut down at the end."""
    import ray
    scenario = resolve({**synthetic_raw, "population": {"num_clients": 4, "clients_per_round": 2},
                        "ray": {"num_workers": 1, **ray_section}, "method": method, **sections})
    partition_dir = prepare_partition(scenario)
    federation = new_federation(scenario)
    federation.setup(data_spec(partition_dir, scenario), str(partition_dir),
                     str(Path(synthetic_raw["output"]["dir"]) / "store"))
    try:
        federation.run_round(RoundContext(1, 2, sample_cohort(scenario["seed"], 1, 4, 2)[1], scenario["seed"],
                                          freeze(scenario)))
        ray.kill(federation.store, no_restart=True)
        yield federation, scenario
    finally:
        federation.shutdown()


@pytest.mark.parametrize("driver_simulates", [False, True])
def test_a_dead_client_state_store_stops_the_round_naming_it_not_the_workers(ray_session, synthetic_raw,
                                                                            driver_simulates):
    """The store's actor killed between two rounds: the next round's share stops with
    ``StoreLost`` (resumable) without replacing a worker. A worker's call into the dead store reached
    the driver as the worker's own death (Ray's task error is an actor error too): live workers were
    replaced until the engine gave up with "workers kept dying"; the driver's own share raised Ray's."""
    from simulator.engine import StoreLost
    fedema = {"name": "fedema", "objective": "byol", "selective": False}
    with store_killed_after_round_1(synthetic_raw, {"driver_simulates": driver_simulates}, fedema) as (federation,
                                                                                                      scenario):
        with pytest.raises(StoreLost, match="^round 2: the client-state store died$") as err:
            federation.run_round(RoundContext(2, 2, sample_cohort(scenario["seed"], 2, 4, 2)[1], scenario["seed"],
                                              freeze(scenario)))
        assert err.value.resumable and federation.worker_restarts == 0


@pytest.mark.parametrize("server, evaluator", [("driver", "driver"), ("actor", "driver"), ("actor", "actor")])
def test_a_store_dead_when_the_server_gathers_client_networks_to_evaluate_is_store_lost(ray_session, synthetic_raw,
                                                                                      server, evaluator):
    """Hetero-SSFL evaluates each client's own encoder, read from the store by the server: a store
    killed after round 1 stops the evaluation with ``StoreLost`` (resumable), naming the store. In the
    server's actor Ray's error read as the server's own death (a heal that restarted the server for
    nothing); in the driver it was Ray's error."""
    from simulator.engine import StoreLost
    with store_killed_after_round_1(synthetic_raw, {"driver_simulates": True, "server": server, "evaluator": evaluator},
                                    {"name": "hetero_ssfl", "rad_size": 16, "rad_batch_size": 8},
                                    eval={"test_subset": 300}) as (federation, _):
        with pytest.raises(StoreLost, match="^the client-state store died while the server gathered") as err:
            federation.result(federation.submit_eval())
        assert err.value.resumable and federation.server_restarts == 0 and federation.server.alive()


def test_worker_killed_after_storing_client_states_gives_the_fault_free_result(ray_session, synthetic_raw, tmp_path,
                                                                              monkeypatch):
    # one worker, an actor (the driver's slot cannot be killed alone)
    raw = {**synthetic_raw, "population": {"num_clients": 4, "clients_per_round": 2},
           "ray": {"num_workers": 1, "driver_simulates": False},
           "method": {"name": "hetero_ssfl", "rad_size": 16, "rad_batch_size": 8}, "eval": {"test_subset": 300}}
    scenario = resolve(raw)
    clean, clean_server, _ = hetero_states_after_3_rounds({**scenario, "executor": "in_process"}, tmp_path / "clean",
                                                          monkeypatch)
    faulty, faulty_server, restarts = hetero_states_after_3_rounds(scenario, tmp_path / "faulty", monkeypatch, 2)
    assert restarts == 1
    assert sorted(clean) == sorted(faulty) and len(clean) >= 3
    for cid in clean:
        for name in clean[cid]:
            assert torch.equal(clean[cid][name], faulty[cid][name]), (cid, name)
    assert torch.equal(clean_server["kernel_sum"], faulty_server["kernel_sum"])


def metrics_without_timing(run_dir):
    """The logged metrics by (round, name), but time and memory; a metric logged twice for a round
    (e.g. the raw-pixel reference evaluated again after a resume) fails here."""
    rows = pq.read_table(run_dir / "metrics.parquet").to_pylist()
    logged = [(r["round"], r["name"]) for r in rows]
    assert len(logged) == len(set(logged)), "a metric logged twice for one round"
    return logged_values(run_dir)


def test_killed_driver_resumes_to_the_uninterrupted_result(ray_session, synthetic_raw, tmp_path):
    from simulator.cli import main
    raw = {**synthetic_raw, "training": {**synthetic_raw["training"], "rounds": 4, "local_epochs": 2},
           "eval": {**synthetic_raw["eval"], "every": 2}, "output": {**synthetic_raw["output"], "checkpoint_every": 2},
           # on Ray from the first round, the resumed session too (with the default "driver", rounds this
           # short could all be played in the driver while Ray starts, and the resume never reach Ray)
           "ray": {**synthetic_raw["ray"], "while_starting": "wait"}}
    # the uninterrupted reference in-process: bitwise the Ray run (tests/simulator/test_inprocess.py)
    _, reference = run_scenario(resolve({**raw, "executor": "in_process"}), str(tmp_path / "reference"),
                                progress=False)

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

    # the resume in this process, on the tests' Ray instance: no interpreter and no Ray instance to start
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 0
    summary = yaml.safe_load((run_dir / "summary.json").read_text())
    assert summary["rounds_while_ray_started"] == 0
    assert summary["final"] == reference["final"] and summary["initial"] == reference["initial"]
    assert summary["pixels"] == reference["pixels"] and reference["pixels"]["knn_top1"] > 0
    assert metrics_without_timing(run_dir) == metrics_without_timing(tmp_path / "reference")
    final_clean = torch.load(tmp_path / "reference" / "checkpoints" / "round_00004" / "state.pt", weights_only=False)
    final_resumed = torch.load(run_dir / "checkpoints" / "round_00004" / "state.pt", weights_only=False)
    for name, value in final_clean["state"]["weights"].items():
        assert torch.equal(value, final_resumed["state"]["weights"][name])


RESUMED_METHODS = {  # each with state that outlives a round, in the server or the client-state store
    **METHODS,  # FedAvg + BYOL + UV through the server's Adam, FedSC's shared matrices, Orchestra's centroids
    "fedsc_dp_cosine": {"method": {"name": "fedsc", "share_views": 1, "share_every": 2, "target_epsilon": 8.0},
                        "training": {"lr_schedule": "cosine"}},  # the privacy accountant, a round-indexed lr
    "fedema": {"method": {"name": "fedema", "objective": "byol", "selective": False}},  # stateful clients
    "fedu": {"method": {"name": "fedu", "objective": "byol"}},
    "rotpred": {"method": {"name": "rotpred"}},
    "simsiam_uv_semi10": {"method": {"name": "fedavg", "objective": "simsiam", "uv": True, "labelled_fraction": 0.1}},
    "hetero_ssfl": {"method": {"name": "hetero_ssfl", "rad_size": 16, "rad_batch_size": 8},  # stateful clients
                    "population": {"num_clients": 4, "clients_per_round": 2}},
}


@pytest.mark.parametrize("name", sorted(RESUMED_METHODS))
def test_every_method_resumes_from_a_checkpoint_to_the_uninterrupted_run(synthetic_raw, tmp_path, name):
    """A run killed after round 4 (its client-state store already at round 4, no summary) resumes from
    the round-2 checkpoint and ends bitwise as the uninterrupted run: metrics, the final global state
    (every tensor the server keeps), every client's stored state; the store is reset to the checkpoint's
    snapshot. In-process (bitwise the Ray run: tests/simulator/test_inprocess.py)."""
    raw = with_overrides({**synthetic_raw, "executor": "in_process"}, RESUMED_METHODS[name])
    raw = with_overrides(raw, {"training": {"rounds": 4}, "eval": {"every": 4, "test_subset": 300},
                               "output": {"checkpoint_every": 2}})
    reference, reference_summary = run_scenario(resolve(raw), str(tmp_path / "reference"), progress=False)
    killed = tmp_path / "killed"
    shutil.copytree(reference, killed)
    (killed / "summary.json").unlink()
    shutil.rmtree(killed / "checkpoints" / "round_00004")
    resumable(str(killed), [], None)  # fedssl run --resume's checks: among them, the state fits the method's
    _, summary = run_scenario(resolve(raw), progress=False, resume_dir=str(killed))
    assert summary["final"] == reference_summary["final"] and summary["initial"] == reference_summary["initial"]
    assert metrics_without_timing(killed) == metrics_without_timing(reference)
    clean_state, resumed_state = flat_tensors(final_state(reference)), flat_tensors(final_state(killed))
    assert clean_state and sorted(resumed_state) == sorted(clean_state)
    for key, tensor in clean_state.items():
        assert torch.equal(resumed_state[key], tensor), key
    for path in sorted((reference / "client_state").glob("client_*.pt")):
        clean = flat_tensors(torch.load(path, weights_only=False))
        resumed = flat_tensors(torch.load(killed / "client_state" / path.name, weights_only=False))
        assert clean and sorted(resumed) == sorted(clean), path.name
        assert all(torch.equal(clean[key], resumed[key]) for key in clean), path.name
    if (reference / "client_state").exists():
        assert not list((killed / "client_state" / "staged").iterdir())


def test_a_resumed_run_names_the_numerics_and_code_of_the_session_it_began_in(synthetic_raw, tmp_path):
    """A run begun on another kind of machine, under other code, and finished here: its summary names
    both numerics and both code versions (carried by the checkpoint), so a claim can tell that its
    results are of that mix."""
    from simulator.provenance import code_version
    raw = {**synthetic_raw, "executor": "in_process", "training": {**synthetic_raw["training"], "rounds": 2},
           "eval": {**synthetic_raw["eval"], "enabled": False},
           "output": {**synthetic_raw["output"], "checkpoint_every": 1}}
    run_dir, first = run_scenario(resolve(raw), str(tmp_path / "run"), progress=False)
    here = f"torch {torch.__version__}, CPU {process_cpu_numerics()}"
    assert first["numerics"] == [here]
    assert first["code"] == [code_version()]
    elsewhere = "torch 2.14.1, CPU ELSEWHERE"
    earlier_code = "fedssl 0.0.9, git 0123456789ab"
    (run_dir / "summary.json").unlink()
    shutil.rmtree(run_dir / "checkpoints" / "round_00002")
    state = run_dir / "checkpoints" / "round_00001" / "state.pt"
    payload = torch.load(state, weights_only=False)
    assert payload["numerics"] == [here] and payload["code"] == [code_version()]
    # as if round 1 had run on another machine, under other code
    torch.save({**payload, "numerics": [elsewhere], "code": [earlier_code]}, state)
    _, resumed = run_scenario(resolve(raw), progress=False, resume_dir=str(run_dir))
    assert resumed["numerics"] == sorted([elsewhere, here])
    assert resumed["code"] == sorted([earlier_code, code_version()])
    newest = torch.load(run_dir / "checkpoints" / "round_00002" / "state.pt", weights_only=False)
    assert newest["numerics"] == sorted([elsewhere, here])
    assert newest["code"] == sorted([earlier_code, code_version()])


def test_resume_refuses_a_finished_run_and_a_damaged_or_shortened_scenario(ray_session, synthetic_raw, tmp_path, capsys):
    from simulator.cli import main
    run_dir, _ = run_scenario(resolve({**synthetic_raw, "training": {**synthetic_raw["training"], "rounds": 2},
                                       "eval": {**synthetic_raw["eval"], "enabled": False}}),
                              str(tmp_path / "done"), progress=False)
    assert main(["run", "--resume", str(run_dir)]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    (run_dir / "summary.json").unlink()  # resumable now, but not with another scenario or directory
    for extra, message in ((["--set", "training.lr=0.1"], "--set: a resumed run keeps its scenario; drop --set"),
                           (["--out", str(tmp_path / "elsewhere")],
                            "--out: a resumed run goes on in its own directory; drop --out")):
        assert main(["run", "--resume", str(run_dir), *extra]) == 2
        assert capsys.readouterr().err == f"fedssl: error: {run_dir}: {message}\n"
    assert not (tmp_path / "elsewhere").exists()
    assert main(["run", "--resume", str(tmp_path)]) == 2  # a folder that holds no run
    assert capsys.readouterr().err == (f"fedssl: error: {tmp_path}: -: not a run directory (no scenario.yaml); "
                                       f"expected a directory written by fedssl run\n")
    recorded = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    # a damaged scenario.yaml is no scenario of defaults (its seed 3 would go on as seed 0's run) ...
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump({k: v for k, v in recorded.items() if k != "seed"}))
    assert main(["run", "--resume", str(run_dir)]) == 2
    assert capsys.readouterr().err == (f"fedssl: error: {run_dir / 'scenario.yaml'}: -: expected the resolved scenario "
                                       f"fedssl run writes (a mapping with name and seed)\n")
    # ... and its rounds cannot end before the checkpoint it resumes from (the summary would say 1 of round 1's
    # state, holding round 2's)
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump({**recorded, "training": {**recorded["training"], "rounds": 1}}))
    assert main(["run", "--resume", str(run_dir)]) == 2
    assert capsys.readouterr().err == (f"fedssl: error: {run_dir / 'scenario.yaml'}: training.rounds: expected at least 2 "
                                       f"(the round of its newest checkpoint, {run_dir / 'checkpoints' / 'round_00002'}), "
                                       f"got 1\n")
    assert not (run_dir / "summary.json").exists()
    # killed after its last round's checkpoint, before its summary: the resume only finishes it
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(recorded))
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["rounds_completed"] == 2


def test_resume_refuses_a_damaged_client_state_in_one_line_before_anything_runs(synthetic_raw, tmp_path, capsys):
    """Stateful clients (FedEMA): a client-state file of the newest checkpoint cut short is one line
    naming it and exit 2 (it was a torch traceback from the worker that read it, exit 1)."""
    from simulator.cli import main
    raw = {**synthetic_raw, "executor": "in_process", "method": {"name": "fedema", "objective": "byol"},
           "training": {**synthetic_raw["training"], "rounds": 2}, "eval": {"enabled": False},
           "output": {**synthetic_raw["output"], "checkpoint_every": 1}}
    run_dir, _ = run_scenario(resolve(raw), str(tmp_path / "run"), progress=False)
    (run_dir / "summary.json").unlink()
    shutil.rmtree(run_dir / "checkpoints" / "round_00002")  # as if killed before round 2's end
    client = sorted((run_dir / "checkpoints" / "round_00001" / "client_state").glob("client_*.pt"))[0]
    whole = client.read_bytes()
    client.unlink()  # a hard link to the store's file: replace it, not write through it
    client.write_bytes(whole[:100])
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 2
    assert capsys.readouterr().err == (f"fedssl: error: {client}: -: cannot be read (File is not a zip file); "
                                       f"expected a client state written by fedssl run\n")
    assert not (run_dir / "checkpoints" / "round_00002").exists()


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
    err = fedssl_stderr(capsys).splitlines()[-1]
    assert err.startswith("fedssl: error: round 3, client ") and "method fedavg/spectral: loss is" in err
    assert err.endswith(str(run_dir / "checkpoints" / "round_00002"))
    good = torch.load(run_dir / "checkpoints" / "round_00002" / "state.pt", weights_only=False)
    assert good["round"] == 2 and all(torch.isfinite(v).all() for v in good["state"]["weights"].values()
                                      if v.is_floating_point())
    assert not (run_dir / "summary.json").exists()


@pytest.mark.parametrize("executor", ["in_process", "ray"])
def test_weights_too_large_for_exact_sums_stop_the_run_with_one_line_naming_the_client(ray_session, synthetic_raw,
                                                                                       tmp_path, capsys, executor):
    """Training that diverges while its loss stays finite (lr 1e4, gradients clipped) is stopped by the exact sums'
    range: one line naming round, client and method, as a non-finite loss is, not a traceback."""
    from simulator.cli import main
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({**synthetic_raw, "executor": executor, "eval": {"enabled": False},
                                        "training": {**synthetic_raw["training"], "rounds": 2, "lr": 1e4,
                                                                     "grad_clip_norm": 1.0}}))
    assert main(["run", str(scenario), "--out", str(tmp_path / "run"), "--quiet"]) == 1
    err = capsys.readouterr().err
    last = without_ray_lines(err).splitlines()[-1]
    assert "Traceback" not in err and last.startswith("fedssl: error: round 1, client "), err
    assert "method fedavg: upload 'weights/" in last and "too large for exact aggregation" in last, last
    assert last.endswith("its local training diverged (try a smaller training.lr); the run stopped, its last good "
                         "checkpoint is none (it failed before the first)"), last


# ---- the parameter server and the evaluator heal ---------------------------------------------

def healing_raw(synthetic_raw):
    """4 rounds, evaluated and checkpointed every 2, the parameter server and the evaluator in actors
    of their own (the hosts that can die alone and be replaced)."""
    return {**synthetic_raw, "training": {**synthetic_raw["training"], "rounds": 4},
            "eval": {**synthetic_raw["eval"], "every": 2}, "output": {**synthetic_raw["output"], "checkpoint_every": 2},
            "ray": {**synthetic_raw["ray"], "server": "actor", "evaluator": "actor"}}


@pytest.fixture(scope="module")
def fault_free(ray_session, tmp_path_factory):
    """(resolved scenario, run directory, summary) of the fault-free run the healing tests compare with,
    in-process: bitwise the Ray run (tests/simulator/test_inprocess.py), with no actor to start."""
    base = tmp_path_factory.mktemp("fault-free")
    scenario = resolve(healing_raw(tiny_scenario(base)))
    run_dir, summary = run_scenario({**scenario, "executor": "in_process"}, str(base / "reference"), progress=False)
    return scenario, run_dir, summary


def healed_run(fault_free, tmp_path, monkeypatch, actor: str, actor_class, scenario=None, same_logs=True):
    """(run directory, summary) of the fault-free run's scenario (or ``scenario``: placed or evaluated
    otherwise) with the engine's ``actor`` made of ``actor_class``, which dies somewhere: its
    accuracies, and with ``same_logs`` every logged value, must be the fault-free run's."""
    import ray

    from simulator import engine
    reference_scenario, reference_dir, reference = fault_free
    monkeypatch.setattr(engine, actor, ray.remote(actor_class))
    healed_dir, healed = run_scenario(scenario or reference_scenario, str(tmp_path / "healed"), progress=False)
    assert healed["final"] == reference["final"] and healed["initial"] == reference["initial"]
    assert healed["pixels"] == reference["pixels"]
    if same_logs:
        assert metrics_without_timing(healed_dir) == metrics_without_timing(reference_dir)
    return healed_dir, healed


def dying_server(marker, die_in_round, spoil_checkpoints=None):
    """A parameter server that kills its own process in the server step of ``die_in_round``, once
    (``marker`` remembers it), after making the run's checkpoints unreadable if asked to."""
    from simulator.engine import ParameterServer

    class DyingServer(ParameterServer):  # local, so that Ray ships it by value
        def aggregate(self, ctx, bytes_down, *results):
            if ctx.round == die_in_round and not os.path.exists(marker):
                open(marker, "w").close()
                if spoil_checkpoints is not None:
                    for state in spoil_checkpoints.glob("checkpoints/round_*/state.pt"):
                        state.write_bytes(b"not a checkpoint")
                os._exit(1)
            return super().aggregate(ctx, bytes_down, *results)
    return DyingServer


@pytest.mark.parametrize("die_in_round", [1, 3])  # before the first checkpoint (from the start), after it
def test_a_dead_parameter_server_is_restarted_and_the_run_ends_fault_free(fault_free, tmp_path, monkeypatch,
                                                                         die_in_round):
    scenario, reference_dir, reference = fault_free
    healed_dir, healed = healed_run(fault_free, tmp_path, monkeypatch, "ServerActor",
                                    dying_server(str(tmp_path / "died"), die_in_round))
    assert (tmp_path / "died").exists() and healed["server_restarts"] == 1
    clean = torch.load(reference_dir / "checkpoints" / "round_00004" / "state.pt", weights_only=False)["state"]
    after = torch.load(healed_dir / "checkpoints" / "round_00004" / "state.pt", weights_only=False)["state"]
    for name, value in clean["weights"].items():
        assert torch.equal(value, after["weights"][name]), name


@pytest.mark.parametrize("dies_in", ["payload", "eval_networks"])
def test_a_server_dead_outside_its_server_step_is_restarted_with_the_driver_simulating_and_evaluating(
        fault_free, tmp_path, monkeypatch, dies_in):
    """The server dies while building round 3's broadcast (read by the driver's own share) or while
    handing out round 2's networks to evaluate (read by the driver's evaluator thread): the run
    still heals to the fault-free result."""
    from simulator.engine import ParameterServer
    marker = str(tmp_path / "died")

    class DiesOutsideTheServerStep(ParameterServer):  # local, so that Ray ships it by value
        eval_calls = 0

        def die_once(self):
            if not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(1)

        def payload(self, ctx, shares):
            if dies_in == "payload" and ctx.round == 3:
                self.die_once()
            return super().payload(ctx, shares)

        def eval_networks(self):
            DiesOutsideTheServerStep.eval_calls += 1  # 1: the round-0 networks, 2: round 2's
            if dies_in == "eval_networks" and DiesOutsideTheServerStep.eval_calls == 2:
                self.die_once()
            return super().eval_networks()

    scenario = fault_free[0]
    in_driver = {**scenario, "ray": {**scenario["ray"], "evaluator": "driver", "driver_simulates": True}}
    _, healed = healed_run(fault_free, tmp_path, monkeypatch, "ServerActor", DiesOutsideTheServerStep, in_driver)
    assert os.path.exists(marker) and healed["server_restarts"] == 1


def test_a_server_that_dies_again_while_the_heal_restores_it_is_replaced_again(fault_free, tmp_path, monkeypatch):
    """The server dies in round 3's server step; its replacement dies as the heal hands it round 2's
    checkpoint: a third server is restored and the run ends as the fault-free one (the second death
    escaped the run loop's handler as a traceback)."""
    from simulator.engine import ParameterServer
    died, died_again = str(tmp_path / "died"), str(tmp_path / "died again")

    class DiesTwice(ParameterServer):  # local, so that Ray ships it by value
        def aggregate(self, ctx, bytes_down, *results):
            if ctx.round == 3 and not os.path.exists(died):
                open(died, "w").close()
                os._exit(1)
            return super().aggregate(ctx, bytes_down, *results)

        def restore(self, state):
            if os.path.exists(died) and not os.path.exists(died_again):
                open(died_again, "w").close()
                os._exit(1)
            return super().restore(state)

    _, healed = healed_run(fault_free, tmp_path, monkeypatch, "ServerActor", DiesTwice)
    assert os.path.exists(died_again) and healed["server_restarts"] == 2


def test_a_server_actor_dead_as_it_is_handed_a_state_is_a_lost_server(fault_free, tmp_path, monkeypatch):
    """``ServerInActor.restore`` (the switch of ``ray.while_starting: driver`` to Ray, a heal): an actor
    that dies there is a ``ServerLost``, which the callers replace (it was a raw ActorDiedError)."""
    import ray

    from simulator import engine
    from simulator.engine import ParameterServer

    class DiesWhenHandedTheState(ParameterServer):  # local, so that Ray ships it by value
        def restore(self, state):
            os._exit(1)

    scenario, _, _ = fault_free
    monkeypatch.setattr(engine, "ServerActor", ray.remote(DiesWhenHandedTheState))
    server = engine.ServerInActor(scenario, "DEFAULT")
    with pytest.raises(ServerLost, match="^the parameter server died$"):
        server.restore({})


def test_a_server_step_that_fails_in_the_server_actor_stops_the_run_with_its_own_line(fault_free, tmp_path,
                                                                                     monkeypatch):
    """A :class:`RunFailure` of the server step in the parameter-server actor (the shares' sums too
    large together, ``Server.aggregate``) reaches the driver as itself: its one line, not wrapped in
    Ray's task error with the actor's traceback in its message, as it came before."""
    import ray

    from simulator import engine
    from simulator.engine import ParameterServer
    from simulator.federation import WorkerFailure

    class SumsTooLarge(ParameterServer):  # local, so that Ray ships it by value
        def aggregate(self, ctx, bytes_down, *results):
            raise WorkerFailure(f"round {ctx.round}, method fedavg: uploads too large to sum exactly")

    scenario, _, _ = fault_free
    monkeypatch.setattr(engine, "ServerActor", ray.remote(SumsTooLarge))
    with pytest.raises(WorkerFailure) as err:
        run_scenario(scenario, str(tmp_path / "run"), progress=False)
    assert type(err.value) is WorkerFailure, type(err.value)
    assert re.fullmatch(r"round \d+, method fedavg: uploads too large to sum exactly", str(err.value)), str(err.value)


@pytest.mark.parametrize("deaths", [1, 3])
def test_the_switch_to_ray_replaces_a_server_that_dies_as_it_is_handed_the_drivers_state(deaths):
    """Once: a new server gets the in-process server's state (no round played again); every time:
    a ``ServerFailure`` after the third replacement, as a run's heal gives up."""
    from concurrent.futures import Future

    from simulator.engine import RoundsWhileRayStarts
    from simulator.federation import ServerFailure
    calls = []

    class Federation:
        server_restarts = 0

        def setup(self, *args):
            calls.append("setup")

        def restore(self, state):
            calls.append(("restore", state))
            if deaths == 3 or self.server_restarts < deaths:
                raise ServerLost("the parameter server died")

        def replace_server(self):
            calls.append("replace")
            self.server_restarts += 1

    class InProcess:
        def state(self):
            return {"weights": 1}

    rounds = RoundsWhileRayStarts.__new__(RoundsWhileRayStarts)  # without its thread starting Ray
    rounds.started, federation, in_process = Future(), Federation(), InProcess()
    rounds.started.set_result(federation)
    rounds.current, rounds.setup_args = in_process, ("spec", "partition", None)
    handed = ("restore", {"weights": 1})
    if deaths == 1:
        rounds.switch()
        assert rounds.current is federation and calls == ["setup", handed, "replace", handed]
    else:
        with pytest.raises(ServerFailure, match="as the rounds moved to Ray; it kept dying \\(3 restarts\\)"):
            rounds.switch()
        assert rounds.current is in_process and calls == ["setup", *[handed, "replace"] * 3, handed]


def run_with_server_and_worker_dying_together(scenario, out, marks, monkeypatch):
    """The run of ``scenario`` in which, in round 3, the worker given the round's lowest client kills
    the parameter server and itself while the other worker is still simulating its share (8 s more):
    the driver sees the deaths while that share runs on."""
    import ray

    from simulator import engine

    class ServerTellingItsPid(engine.ParameterServer):  # local, so that Ray ships it by value
        def setup(self, spec, store):
            super().setup(spec, store)
            (marks / "server_pid").write_text(str(os.getpid()))

    class WorkerKillingTheServer(engine.WorkerActor.__ray_actor_class__):  # local, so that Ray ships it by value
        @ray.method(num_returns=2)
        def run(self, broadcast, extras, client_ids, ctx):
            died = marks / "died"
            if ctx.round == 3 and not died.exists():
                if min(ctx.cohort) in client_ids:
                    died.touch()
                    os.kill(int((marks / "server_pid").read_text()), signal.SIGKILL)
                    os._exit(1)
                time.sleep(8)
            return super().run(broadcast, extras, client_ids, ctx)

    monkeypatch.setattr(engine, "ServerActor", ray.remote(ServerTellingItsPid))
    monkeypatch.setattr(engine, "WorkerActor", ray.remote(WorkerKillingTheServer))
    run_dir, summary = run_scenario(scenario, str(out), progress=False)
    assert (marks / "died").exists()
    return run_dir, summary


def test_shares_still_running_when_the_server_dies_stage_nothing_into_the_healed_rounds(
        ray_session, synthetic_raw, tmp_path, monkeypatch):
    """Stateful clients (FedEMA), the server and a worker lost together in round 3 (no checkpoint yet:
    the run starts over): the other worker's share of round 3 ends after the driver has rewound the
    client states, and the states it stores must not outlive the rewind (a client not simulated
    again before round 3 would start round 3 from its own future)."""
    raw = with_overrides(tiny_scenario(tmp_path), {
        "method": {"name": "fedema", "objective": "byol", "selective": False}, "training": {"rounds": 3},
        "eval": {"enabled": False}, "output": {"checkpoint_every": 3},
        "ray": {"num_workers": 2, "driver_simulates": False, "while_starting": "wait", "server": "actor"}})
    scenario = resolve(raw)
    # the fault-free run in-process: bitwise the Ray run (tests/simulator/test_inprocess.py)
    clean_dir, _ = run_scenario({**scenario, "executor": "in_process"}, str(tmp_path / "clean"), progress=False)
    marks = tmp_path / "marks"
    marks.mkdir()
    healed_dir, healed = run_with_server_and_worker_dying_together(scenario, tmp_path / "healed", marks, monkeypatch)
    assert healed["server_restarts"] == 1
    states = {run: {p.name: flat_tensors(torch.load(p, weights_only=False))
                    for p in sorted((run / "client_state").glob("client_*.pt"))} for run in (clean_dir, healed_dir)}
    assert sorted(states[clean_dir]) == sorted(states[healed_dir]) and states[clean_dir]
    for client, tensors in states[clean_dir].items():
        for name, value in tensors.items():
            assert torch.equal(value, states[healed_dir][client][name]), (client, name)
    for name, value in flat_tensors(final_state(clean_dir)).items():
        assert torch.equal(value, flat_tensors(final_state(healed_dir))[name]), name


def test_a_worker_lost_between_rounds_is_replaced_and_the_checkpoints_and_summary_are_written(
        ray_session, synthetic_raw, tmp_path, monkeypatch):
    """A worker killed after round 1's server step, before the round's checkpoint asks every worker
    how it computes: the checkpoint and the summary are written from the live workers, the next
    round replaces the lost one, and the run ends as the fault-free one."""
    import ray

    from simulator import engine
    raw = with_overrides(tiny_scenario(tmp_path), {
        "training": {"rounds": 3}, "eval": {"enabled": False}, "output": {"checkpoint_every": 1},
        "ray": {"num_workers": 2, "driver_simulates": False, "while_starting": "wait"}})
    scenario = resolve(raw)
    clean_dir, clean = run_scenario(scenario, str(tmp_path / "clean"), progress=False)
    run_round = engine.RayFederation.run_round

    def run_round_then_lose_a_worker(self, ctx):
        metrics = run_round(self, ctx)
        if ctx.round == 1:
            os.kill(ray.get(self.workers[0].pid.remote()), signal.SIGKILL)
            while self.worker_alive(0):
                time.sleep(0.1)
        return metrics

    monkeypatch.setattr(engine.RayFederation, "run_round", run_round_then_lose_a_worker)
    lost_dir, lost = run_scenario(scenario, str(tmp_path / "lost"), progress=False)
    assert clean["worker_restarts"] == 0 and lost["worker_restarts"] == 1
    assert sorted(p.name for p in (lost_dir / "checkpoints").iterdir()) == \
        sorted(p.name for p in (clean_dir / "checkpoints").iterdir())
    assert lost["numerics"] == clean["numerics"]
    for name, value in flat_tensors(final_state(clean_dir)).items():
        assert torch.equal(value, flat_tensors(final_state(lost_dir))[name]), name


def test_a_dead_server_whose_checkpoint_is_unreadable_ends_with_one_line(ray_session, synthetic_raw, tmp_path,
                                                                        monkeypatch, capsys):
    import ray

    from simulator import engine
    from simulator.cli import main
    run_dir = tmp_path / "spoiled"
    monkeypatch.setattr(engine, "ServerActor",
                        ray.remote(dying_server(str(tmp_path / "died"), 3, spoil_checkpoints=run_dir)))
    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(healing_raw(synthetic_raw)))
    assert main(["run", str(scenario_file), "--out", str(run_dir), "--quiet"]) == 1
    err = fedssl_stderr(capsys)
    assert len(err.splitlines()) == 1, err
    assert err.startswith("fedssl: error: round 3: the parameter server died and its checkpoint "
                          f"{run_dir / 'checkpoints' / 'round_00002'} cannot be read"), err
    assert err.endswith(f"; resume it with: fedssl run --resume {run_dir}"), err


def test_evaluations_queued_on_a_dead_evaluator_are_resubmitted_to_one_replacement(fault_free, tmp_path,
                                                                                  monkeypatch):
    """The evaluator dies in its second evaluation while the third waits behind it: both go to one
    replacement (one restart, not one per queued evaluation), and the evaluations are fault-free."""
    from simulator import engine
    marker = str(tmp_path / "died")

    class DiesSlowly(engine.Evaluator):
        calls = 0

        def evaluate(self, networks):
            DiesSlowly.calls += 1
            if DiesSlowly.calls == 2 and not os.path.exists(marker):
                time.sleep(5)  # round 2 queues its evaluation behind this one meanwhile
                open(marker, "w").close()
                os._exit(1)
            return super().evaluate(networks)

    scenario = fault_free[0]
    every_round = {**scenario, "eval": {**scenario["eval"], "every": 1}}
    _, healed = healed_run(fault_free, tmp_path, monkeypatch, "EvaluatorActor", DiesSlowly, every_round,
                           same_logs=False)
    assert os.path.exists(marker) and healed["evaluator_restarts"] == 1


def test_a_dead_evaluator_is_replaced_and_the_evaluations_are_the_fault_free_ones(fault_free, tmp_path,
                                                                                 monkeypatch):
    from simulator import engine
    marker = str(tmp_path / "died")

    class DyingEvaluator(engine.Evaluator):  # dies in its second evaluation, once
        calls = 0

        def evaluate(self, networks):
            DyingEvaluator.calls += 1
            if DyingEvaluator.calls == 2 and not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(1)
            return super().evaluate(networks)

    _, healed = healed_run(fault_free, tmp_path, monkeypatch, "EvaluatorActor", DyingEvaluator)
    assert os.path.exists(marker) and healed["evaluator_restarts"] == 1


def test_a_server_lost_before_the_first_checkpoint_replays_from_the_setup_round(synthetic_raw, tmp_path,
                                                                                monkeypatch):
    """Orchestra starts with round 0 (every client's memory initialises the global centroids): a
    server lost in round 1, before any checkpoint, is healed from round 0, not from round 1 (which
    would skip the setup round and end elsewhere than the fault-free run). In-process, the loss
    raised once before round 1's client steps (the server's state untouched, as a lost actor's)."""
    from simulator.inprocess import InProcessFederation
    raw = with_overrides({**synthetic_raw, "executor": "in_process"}, METHODS["orchestra"])
    raw = with_overrides(raw, {"training": {"rounds": 2}, "eval": {"enabled": False},
                               "output": {"checkpoint_every": 2}})
    reference, _ = run_scenario(resolve(raw), str(tmp_path / "reference"), progress=False)
    played, run_round = [], InProcessFederation.run_round

    def losing_round_1_once(self, ctx):
        played.append(ctx.round)
        if played == [0, 1]:
            raise ServerLost("round 1: the parameter server died")
        return run_round(self, ctx)
    monkeypatch.setattr(InProcessFederation, "run_round", losing_round_1_once)
    healed, summary = run_scenario(resolve(raw), str(tmp_path / "healed"), progress=False)
    assert played == [0, 1, 0, 1, 2] and summary["server_restarts"] == 1
    assert metrics_without_timing(healed) == metrics_without_timing(reference)
    clean, after = flat_tensors(final_state(reference)), flat_tensors(final_state(healed))
    assert clean and sorted(after) == sorted(clean)
    for key, tensor in clean.items():
        assert torch.equal(after[key], tensor), key
