"""Cross-device rounds through the Ray engine: dropout, a deadline and over-selection decide who is
simulated and who is aggregated, and the engine follows the population plan exactly.

The plan is drawn in the test from ``simulator.population`` (independently of the run), checked
against the speed tiers (late = the slow tier, over-selection keeps the faster tier), and then
the run is replayed in-process: each round, exactly the plan's reporting clients run the method's
``client_update`` from the replayed global weights, and the next weights are the sample-weighted
average of their outputs. The engine's logged losses and counts and its checkpointed weights must
match that replay.
"""
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from methods import build_method
from methods.base import ClientData, payload_nbytes
from simulator.context import RoundContext, freeze
from simulator.data.store import PartitionReader
from simulator.population import Population
from simulator.data.store import prepare_partition
from simulator.run import data_spec, run_scenario
from simulator.scenario import resolve
from simulator.stats import sum_stats

ROUNDS = 3
FAST, MEDIUM, SLOW = 1000.0, 100.0, 1.0  # samples per second; a client holds 125 samples
DEADLINE = 10.0  # medium clients need ~1.25 s (x jitter), slow ones ~125 s: the slow tier is late


def cross_device(raw):
    """16 clients, 4 wanted a round, 8 sampled (over-selection 1.0), 90% online, 20% dropout, three
    speed tiers 10x apart and a deadline between the medium and the slow tier."""
    return resolve({
        **raw, "seed": 3,
        "partition": {"kind": "iid"},
        "population": {"num_clients": 16, "clients_per_round": 4, "over_selection": 1.0, "availability": 0.9,
                       "dropout": 0.2, "deadline_seconds": DEADLINE,
                       "speed_tiers": [{"fraction": 0.4, "samples_per_second": FAST},
                                       {"fraction": 0.3, "samples_per_second": MEDIUM},
                                       {"fraction": 0.3, "samples_per_second": SLOW}]},
        "training": {**raw["training"], "rounds": ROUNDS},
        "eval": {"enabled": False},
        "output": {**raw["output"], "checkpoint_every": 1},
    })


def check_plan(plan, speed, wanted):
    """The plan against first principles: who reports, who is late, and which reporters are kept."""
    sampled = set(plan.sampled)  # sampled among the online clients: all received the round
    dropped, late, kept = set(plan.dropped), set(plan.late), set(plan.completed)
    assert dropped <= sampled and late <= sampled and not dropped & late
    # the deadline separates the tiers: exactly the slow clients that did not drop out are late
    assert late == {c for c in sampled - dropped if speed[c] == SLOW}
    reporting = sampled - dropped - late
    assert kept <= reporting and len(kept) == min(wanted, len(reporting))
    # over-selection keeps the first to report: no client left out is of a faster tier than one kept
    left_out = reporting - kept
    if left_out:
        assert max(speed[c] for c in left_out) <= min(speed[c] for c in kept)
    return reporting, left_out


def weighted_average(uploads, sizes):
    """sum_j n_j w_j / sum_j n_j of the clients' uploaded weights (float64, then float32)."""
    total = sum(sizes.values())
    names = uploads[next(iter(uploads))].keys()
    return {name: (sum(sizes[c] * uploads[c][name].to(torch.float64) for c in uploads) / total).to(torch.float32)
            for name in names}


def test_the_engine_simulates_and_aggregates_exactly_the_reporting_clients(ray_session, synthetic_raw, tmp_path):
    scenario = cross_device(synthetic_raw)
    partition_dir = prepare_partition(scenario)
    spec, reader = data_spec(partition_dir, scenario), PartitionReader(partition_dir)
    sizes = {c: int(n) for c, n in enumerate(spec.client_sizes)}
    population = Population(scenario["population"], scenario["training"]["local_epochs"], spec.client_sizes,
                            scenario["seed"])
    plans = {r: population.plan(r) for r in range(1, ROUNDS + 1)}
    wanted = scenario["population"]["clients_per_round"]
    checked = [check_plan(plans[r], population.speed, wanted) for r in plans]
    # the seed gives rounds with every case: offline, dropped and late clients, a round with fewer
    # reporters than wanted, and a round whose over-selected reporters are cut, faster tier first
    assert any(plan.dropped for plan in plans.values()) and any(plan.late for plan in plans.values())
    assert any(plan.counts()["clients/online"] < 16 for plan in plans.values())  # some clients offline
    for r, plan in plans.items():  # the cohort is sampled among the online clients
        assert set(plan.sampled) <= set(population.online_clients(r).tolist())
    assert any(len(reporting) < wanted for reporting, _ in checked)
    assert any(left_out for _, left_out in checked)
    assert any(any(population.speed[c] == FAST for c in plan.completed)
               and any(population.speed[c] == MEDIUM for c in plan.completed) for plan in plans.values())

    run_dir, summary = run_scenario(scenario, str(tmp_path / "run"), progress=False)
    assert summary["rounds_completed"] == ROUNDS
    initial = build_method(scenario, spec).init_state()["weights"]
    weight_bytes = sum(value.numel() * value.element_size() for value in initial.values())
    logged = {(row["round"], row["name"]): row["value"]
              for row in pq.read_table(run_dir / "metrics.parquet").to_pylist()}
    for r, plan in plans.items():
        for name, value in plan.counts().items():
            assert logged[(r, name)] == value, (r, name)
        # what the workers sent back: one loss, one upload and the samples of each simulated client
        assert logged[(r, "clients/completed")] == len(plan.completed), r
        assert logged[(r, "train/samples")] == sum(sizes[c] for c in plan.completed), r
        # the downlink: every client that was online received the weights (those that then dropped
        # out, were late or were cut by over-selection too); the uplink: the reporting ones
        assert logged[(r, "bytes_down/weights")] == len(plan.sampled) * weight_bytes, r
        assert logged[(r, "bytes_up/weights")] == len(plan.completed) * weight_bytes, r

    # replay the rounds in-process (one thread, as a one-CPU worker runs) with exactly the plan's
    # reporting clients, and compare with the engine's losses and checkpointed global weights
    method = build_method(scenario, spec)
    workspace = method.make_workspace(torch.device("cpu"))
    weights = method.init_state()["weights"]
    replayed = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for r, plan in plans.items():
            ctx = RoundContext(r, ROUNDS, plan.completed, scenario["seed"], freeze(scenario))
            uploads, losses = {}, []
            for cid in plan.completed:
                data = ClientData(cid, *reader.client(cid))
                uploads[cid] = method.client_update(workspace, {"weights": weights}, None, data, ctx)
                assert uploads[cid].stats.weight == sizes[cid]
                losses.append(uploads[cid].metrics["loss"])
            assert logged[(r, "train/loss")] == pytest.approx(float(np.mean(losses)), abs=1e-6), r
            # the next weights: the sample-weighted average of the reporting clients' uploads, taken in
            # the engine's exact fixed-point arithmetic (so that the replay does not drift from the run)
            # and checked against the plain float64 average
            exact = sum_stats(u.stats for u in uploads.values()).average()
            exact = {k.removeprefix("weights/"): v for k, v in exact.items()}
            plain = weighted_average({c: {k.removeprefix("weights/"): v for k, v in u.stats.average().items()}
                                      for c, u in uploads.items()}, {c: sizes[c] for c in uploads})
            for name, value in exact.items():
                assert torch.allclose(value, plain[name], rtol=0, atol=1e-7), name
            weights = replayed[r] = exact
    finally:
        torch.set_num_threads(threads)
    for r in (ROUNDS - 1, ROUNDS):  # the checkpoints kept (every round is checkpointed, the newest two kept)
        engine_weights = torch.load(run_dir / "checkpoints" / f"round_{r:05d}" / "state.pt",
                                    weights_only=False)["state"]["weights"]
        assert engine_weights.keys() == replayed[r].keys()
        for name, value in engine_weights.items():
            assert torch.equal(value, replayed[r][name]), (r, name)


@pytest.mark.parametrize("executor, server", [("ray", "driver"), ("ray", "actor"), ("in_process", "driver")])
def test_a_round_in_which_every_online_client_drops_out_counts_its_broadcast(ray_session, synthetic_raw, tmp_path,
                                                                             executor, server):
    """Nobody reports (dropout 1): nothing is simulated or aggregated, the weights stay the initial
    ones, and the online clients' downlink is counted all the same."""
    scenario = resolve({**synthetic_raw, "executor": executor,
                        "population": {**synthetic_raw["population"], "dropout": 1.0, "availability": 0.75},
                        "ray": {**synthetic_raw["ray"], "server": server},
                        "eval": {"enabled": False}, "output": {**synthetic_raw["output"], "checkpoint_every": 1}})
    partition_dir = prepare_partition(scenario)
    spec = data_spec(partition_dir, scenario)
    population = Population(scenario["population"], 1, spec.client_sizes, scenario["seed"])
    initial = build_method(scenario, spec).init_state()["weights"]
    weight_bytes = sum(value.numel() * value.element_size() for value in initial.values())
    run_dir, _ = run_scenario(scenario, str(tmp_path / "run"), progress=False)
    logged = {(row["round"], row["name"]): row["value"]
              for row in pq.read_table(run_dir / "metrics.parquet").to_pylist()}
    for r in (1, 2):
        plan = population.plan(r)
        assert plan.sampled and not plan.completed, r
        assert logged[(r, "clients/completed")] == 0 and (r, "bytes_up/weights") not in logged, r
        assert logged[(r, "bytes_down/weights")] == len(plan.sampled) * weight_bytes, r
    final = torch.load(run_dir / "checkpoints" / "round_00002" / "state.pt", weights_only=False)["state"]["weights"]
    assert all(torch.equal(final[name], value) for name, value in initial.items())


@pytest.mark.parametrize("executor", ["ray", "in_process"])
def test_clients_that_do_not_report_are_counted_with_their_own_downlink(ray_session, synthetic_raw, tmp_path,
                                                                       executor):
    """Hetero-SSFL sends the RAD with a client's first round: a client that drops out received it
    too (and, having kept nothing, gets it again when it next trains)."""
    scenario = resolve({**synthetic_raw, "executor": executor, "seed": 4,  # a seed whose plans have the case
                        "method": {"name": "hetero_ssfl", "rad_size": 16, "rad_batch_size": 8,
                                   "eval_clients_per_tier": 1},
                        "population": {**synthetic_raw["population"], "dropout": 0.5},
                        "training": {**synthetic_raw["training"], "rounds": 3, "batch_size": 16},
                        "eval": {"enabled": False, "test_subset": 300}})  # the RAD: test images outside it
    partition_dir = prepare_partition(scenario)
    spec = data_spec(partition_dir, scenario)
    population = Population(scenario["population"], 1, spec.client_sizes, scenario["seed"])
    rad_bytes = payload_nbytes(build_method(scenario, spec).init_state()["rad"])
    run_dir, _ = run_scenario(scenario, str(tmp_path / "run"), progress=False)
    logged = {(row["round"], row["name"]): row["value"]
              for row in pq.read_table(run_dir / "metrics.parquet").to_pylist()}
    has_rad, unreported_first_timers = set(), 0
    for r in range(1, 4):
        plan = population.plan(r)
        receivers = [c for c in plan.sampled if c not in has_rad]
        unreported_first_timers += sum(c not in plan.completed for c in receivers)
        assert logged.get((r, "bytes_down/rad"), 0) == len(receivers) * rad_bytes, r
        has_rad |= set(plan.completed)
    assert unreported_first_timers > 0  # the case in question occurs
