"""The round without Ray: shares and the worker-count invariance of the reduction (cohort sampling:
``test_population.py``)."""
from dataclasses import replace

import numpy as np
import pytest
import torch

from methods import build_method
from methods.base import DataSpec
from simulator.context import RoundContext, freeze
from simulator.data.synthetic import make_synthetic
from simulator.federation import Server, add_phase_metrics, route_cohort, simulate_clients, split_cohort
from simulator.scenario import resolve


def test_shares_cover_the_cohort_and_balance_samples():
    sizes = np.array([100, 10, 10, 10, 10, 10, 50, 40])
    shares = split_cohort(tuple(range(8)), sizes, 2)
    assert sorted(c for s in shares for c in s) == list(range(8))
    loads = [sizes[s].sum() for s in shares]
    assert abs(loads[0] - loads[1]) <= 10
    assert len(split_cohort((3,), sizes, 4)) == 1


def test_same_reduction_with_one_or_several_workers(synthetic_raw):
    """Different shares of the same cohort give bitwise the same next global state."""
    scenario = resolve(synthetic_raw)
    data = make_synthetic(train_per_class=16, test_per_class=2, seed=0)
    clients = [(data.train_x[i::4], data.train_y[i::4]) for i in range(4)]
    spec = DataSpec(1, 28, 10, tuple(len(y) for _, y in clients))
    method = build_method(scenario, spec)
    cohort = (0, 1, 2, 3)
    ctx = RoundContext(1, 2, cohort, scenario["seed"], freeze(scenario))

    def next_state(shares):
        server = Server(method)
        broadcast, extras, _ = server.payload(ctx, shares)
        results = []
        for share, share_extras in zip(shares, extras):
            workspace = method.make_workspace(torch.device("cpu"))
            results.append(simulate_clients(method, workspace, lambda c: clients[c], broadcast,
                                            share_extras, share, ctx))
        metrics = server.aggregate(ctx, results)
        return server.state["weights"], metrics

    one, m1 = next_state([[0, 1, 2, 3]])
    two, m2 = next_state([[3, 0], [2, 1]])
    four, m4 = next_state([[2], [0], [3], [1]])
    for name in one:
        assert torch.equal(one[name], two[name]) and torch.equal(one[name], four[name])
    assert m1 == m2 == m4
    assert m1["clients/completed"] == 4 and m1["bytes_up/weights"] > 0


def test_clients_are_routed_to_their_pool_and_balanced_within_it():
    sizes = np.array([10] * 8)
    pool_of = {0: "big", 1: "big", 2: "big", 5: "nowhere"}.get  # unknown or none -> the first pool
    routes = route_cohort((0, 1, 2, 3, 4, 5), sizes, pool_of, {"small": 1, "big": 2})
    assert ("small", 0, [3, 4, 5]) in routes
    big = [share for pool, _, share in routes if pool == "big"]
    assert sorted(c for share in big for c in share) == [0, 1, 2] and len(big) == 2


def test_a_rounds_passes_add_up_their_traffic_and_keep_the_last_values():
    share = {"bytes_up/correlation": 8.0, "bytes_down/weights": 100.0, "clients/completed": 2.0}
    train = {"bytes_up/weights": 50.0, "bytes_down/correlation": 8.0, "clients/completed": 2.0, "train/loss": 0.5}
    merged = add_phase_metrics(add_phase_metrics({}, share), {**train, "bytes_down/weights": 0.0})
    assert merged == {"bytes_up/correlation": 8.0, "bytes_down/weights": 100.0, "bytes_up/weights": 50.0,
                      "bytes_down/correlation": 8.0, "clients/completed": 2.0, "train/loss": 0.5}


def three_clients_one_round(raw: dict, training: dict):
    """(the server, the round's context, the worker's result) of one round of clients of 16, 8 and 4
    synthetic images in one share, under ``raw`` with ``training`` settings over its own."""
    scenario = resolve({**raw, "training": {**raw["training"], **training}})
    data = make_synthetic(train_per_class=4, test_per_class=2, seed=0)
    clients = [(data.train_x[:16], data.train_y[:16]), (data.train_x[16:24], data.train_y[16:24]),
               (data.train_x[24:28], data.train_y[24:28])]
    method = build_method(scenario, DataSpec(1, 28, 10, tuple(len(y) for _, y in clients)))
    ctx = RoundContext(1, 2, (0, 1, 2), scenario["seed"], freeze(scenario))
    server = Server(method)
    broadcast, extras, _ = server.payload(ctx, [[0, 1, 2]])
    result = simulate_clients(method, method.make_workspace(torch.device("cpu")), lambda c: clients[c], broadcast,
                              extras[0], [0, 1, 2], ctx)
    return server, ctx, result


def test_round_metrics_mean_the_clients_and_count_every_epoch_s_samples(synthetic_raw):
    """``train/<name>``: the mean over the reporting clients of their metric; ``train/samples``: the
    samples trained on, each local epoch counted (here 2 epochs over clients of 16, 8 and 4 images)."""
    server, ctx, result = three_clients_one_round(synthetic_raw, {"local_epochs": 2})
    losses = [result.metrics[c]["loss"] for c in (0, 1, 2)]
    assert len(set(losses)) == 3  # a mean and a median differ
    metrics = server.aggregate(ctx, [result])
    assert metrics["train/loss"] == pytest.approx(sum(losses) / 3, rel=1e-12)
    assert metrics["train/samples"] == 2 * (16 + 8 + 4)


def test_a_client_that_takes_no_step_is_left_out_of_the_rounds_loss(synthetic_raw):
    """With ``training.drop_last`` a client with fewer images than a batch takes no local step: it
    reports no loss, and the round's ``train/loss`` is the mean over the clients that trained (it was
    NaN, the no-step client's placeholder, in every such round)."""
    server, ctx, result = three_clients_one_round(synthetic_raw, {"batch_size": 8, "drop_last": True})
    assert "loss" not in result.metrics[2]
    metrics = server.aggregate(ctx, [result])
    assert metrics["train/loss"] == pytest.approx((result.metrics[0]["loss"] + result.metrics[1]["loss"]) / 2,
                                                  rel=1e-12)
    assert metrics["clients/completed"] == 3


class UploadsOf:
    """A stand-in method whose client ``cid`` uploads ``uploads[cid]`` (a Stats, or an exception)."""
    name = "stand_in"

    def __init__(self, uploads):
        self.uploads = uploads

    def client_update(self, workspace, broadcast, extra, data, ctx, state):
        from methods.base import ClientUpload
        upload = self.uploads[data.client_id]
        if isinstance(upload, Exception):
            raise upload
        return ClientUpload(stats=upload)


@pytest.mark.parametrize("case", ["diverged", "sum"])
def test_an_upload_past_the_exact_sums_range_names_round_client_and_method(case):
    """Past the per-client range (its training diverged) or the share's int64 sum: the
    ``FloatingPointError`` the engine turns into the run's one line, naming round, client and method."""
    from simulator.stats import Stats
    ctx = RoundContext(3, 5, (4, 9), 0, freeze({}))
    near_the_sum_limit = Stats({"x": torch.zeros(1, dtype=torch.int64)}, 1, 2.0 ** 62.5)
    uploads = ({4: Stats.from_tensors({"x": torch.ones(1)}, 1), 9: OverflowError("upload 'x' is not finite")}
               if case == "diverged" else {4: near_the_sum_limit, 9: near_the_sum_limit})
    load = lambda cid: (torch.zeros(2, 1, 4, 4, dtype=torch.uint8), torch.zeros(2, dtype=torch.int64))  # noqa: E731
    with pytest.raises(FloatingPointError) as err:
        simulate_clients(UploadsOf(uploads), None, load, {}, {}, [4, 9], ctx)
    message = str(err.value)
    assert message.startswith("round 3, client 9, method stand_in: "), message
    if case == "diverged":
        assert message.endswith("upload 'x' is not finite; its local training diverged (try a smaller training.lr)")
    else:
        assert "too large to sum exactly" in message and "diverged" not in message


def test_shares_whose_sums_pass_the_range_together_fail_as_one_share_does(synthetic_raw):
    """Two shares each within the exact sums' range whose sum is not: the server's reduction raises
    the same ``WorkerFailure`` line as a worker whose running sum passes it (the run's one line, the
    same class whether the cohort ran in one worker or two; it was a bare ``OverflowError``)."""
    from simulator.federation import WorkerFailure, WorkerResult
    from simulator.stats import Stats
    ctx = RoundContext(3, 5, (4, 9), 0, freeze({}))
    near_the_sum_limit = Stats({"x": torch.zeros(1, dtype=torch.int64)}, 1, 2.0 ** 62.5)
    server = Server(build_method(resolve(synthetic_raw), DataSpec(1, 28, 10, (2, 2))))
    with pytest.raises(WorkerFailure) as err:
        server.aggregate(ctx, [WorkerResult(stats=near_the_sum_limit), WorkerResult(stats=near_the_sum_limit)])
    assert str(err.value).startswith("round 3, method fedavg: uploads of 2 weight too large to sum exactly"), err


def test_the_default_pool_is_ray_num_workers_workers_of_ray_worker_and_pools_go_by_name():
    from simulator.federation import worker_pools
    worker = {"num_cpus": 2, "num_gpus": 0.5}
    assert worker_pools({"ray": {"worker_pools": [], "num_workers": 3, "worker": worker}}) == {
        "default": {"name": "default", "count": 3, "num_cpus": 2, "num_gpus": 0.5}}
    pools = [{"name": "small", "count": 2, "num_cpus": 1, "num_gpus": 0.0},
             {"name": "big", "count": 1, "num_cpus": 4, "num_gpus": 1.0}]
    named = worker_pools({"ray": {"worker_pools": pools, "num_workers": 3, "worker": worker}})
    assert list(named) == ["small", "big"] and named["big"] is pools[1] and named["small"] is pools[0]


class TwoPasses:
    """A stand-in method of two passes: a 5-float broadcast (20 bytes) and, for an odd client ``cid``,
    its own ``rad`` of ``cid`` floats and ``kernels`` of 2 floats; the server step keeps the records."""
    name = "two_passes"

    def phases(self, round_index):
        return ("share", "train")

    def init_state(self):
        return {"records": None}

    def broadcast(self, state, ctx):
        return {"weights": torch.zeros(5)}

    def client_extra(self, state, cid, ctx):
        return {"rad": torch.zeros(cid), "kernels": torch.zeros(2)} if cid % 2 else None

    def server_update(self, state, total, records, ctx):
        return {"records": list(records.items()), "weight": total.weight}, {"server/step": 1.0}


def test_bytes_down_count_the_broadcast_once_a_round_to_every_online_client_and_each_ones_extras():
    """Cohort (1, 2, 4) in two shares, unreported (3, 6): the broadcast reaches 5 clients in the first
    pass (5 x 20 bytes) and nobody in the second; the extras go to 1 (4 + 8 bytes) and to the
    unreported 3 (12 + 8), in each pass, and only the cohort's are handed to the shares."""
    from collections import Counter
    server = Server(TwoPasses())
    share = RoundContext(2, 5, (1, 2, 4), 0, freeze({}), phase="share", unreported=(3, 6))
    broadcast, extras, bytes_down = server.payload(share, [[1, 2], [4]])
    assert list(broadcast) == ["weights"]
    assert [sorted(e) for e in extras] == [[1], []] and sorted(extras[0][1]) == ["kernels", "rad"]
    assert bytes_down == Counter({"weights": 100, "rad": 16, "kernels": 16})
    _, _, bytes_down = server.payload(RoundContext(2, 5, (1, 2, 4), 0, freeze({}), phase="train", unreported=(3, 6)),
                                      [[1, 2], [4]])
    assert bytes_down == Counter({"rad": 16, "kernels": 16})


def test_a_pass_nobody_reports_in_still_counts_what_the_online_clients_received():
    """Cohort empty, unreported (3, 5, 6): the broadcast to 3 clients (3 x 20 bytes), 3's and 5's
    extras (12 + 20 bytes of rad, 2 x 8 of kernels); in the second pass the extras only."""
    from collections import Counter
    from simulator.federation import bytes_down_metrics
    server = Server(TwoPasses())
    first = RoundContext(2, 5, (), 0, freeze({}), phase="share", unreported=(3, 5, 6))
    assert server.bytes_down_without_reports(first) == Counter({"weights": 60, "rad": 32, "kernels": 16})
    assert server.bytes_down_without_reports(replace(first, phase="train")) == Counter({"rad": 32, "kernels": 16})
    assert bytes_down_metrics(Counter({"weights": 0, "rad": 32})) == {"bytes_down/weights": 0.0,
                                                                      "bytes_down/rad": 32.0}


def test_a_round_runs_each_pass_in_order_with_its_phase_and_merges_their_metrics():
    from simulator.federation import run_passes
    seen = []

    def run_phase(ctx):
        seen.append((ctx.round, ctx.phase, ctx.cohort))
        if ctx.phase == "share":
            return {"bytes_up/correlation": 8.0, "bytes_down/weights": 100.0, "clients/completed": 3.0}
        return {"bytes_up/weights": 60.0, "bytes_down/rad": 16.0, "clients/completed": 2.0, "train/loss": 0.25}

    ctx = RoundContext(4, 5, (1, 2, 4), 0, freeze({}))
    metrics = run_passes(TwoPasses(), run_phase, ctx)
    assert seen == [(4, "share", (1, 2, 4)), (4, "train", (1, 2, 4))]
    assert metrics == {"bytes_up/correlation": 8.0, "bytes_down/weights": 100.0, "bytes_up/weights": 60.0,
                       "bytes_down/rad": 16.0, "clients/completed": 2.0, "train/loss": 0.25}


class Stateful:
    """A stand-in client step: client ``cid`` uploads ``w`` (3 floats), client 4 a 2-float record, and
    keeps as its state the state it was given and its number of samples."""
    name = "stateful"

    def client_update(self, workspace, broadcast, extra, data, ctx, state):
        from methods.base import ClientUpload
        from simulator.stats import Stats
        return ClientUpload(stats=Stats.from_tensors({"w/x": torch.ones(3)}, len(data.labels)),
                            record={"corr": torch.zeros(2)} if data.client_id == 4 else None,
                            metrics={"loss": float(data.client_id)},
                            client_state={"before": state, "samples": len(data.labels)})


def test_a_worker_passes_each_client_its_state_and_keeps_records_states_samples_and_bytes():
    ctx = RoundContext(1, 2, (4, 9), 0, freeze({}))
    load = lambda cid: (torch.zeros(cid // 2, 1, 4, 4, dtype=torch.uint8),  # noqa: E731
                        torch.zeros(cid // 2, dtype=torch.int64))  # 2 samples for client 4, 4 for client 9
    result = simulate_clients(Stateful(), None, load, {}, {}, [4, 9], ctx, {4: "state of 4", 7: "state of 7"})
    assert result.client_states == {4: {"before": "state of 4", "samples": 2}, 9: {"before": None, "samples": 4}}
    assert list(result.records) == [4] and torch.equal(result.records[4]["corr"], torch.zeros(2))
    assert result.metrics == {4: {"loss": 4.0}, 9: {"loss": 9.0}}
    assert result.samples == 6 and result.stats.weight == 6
    assert dict(result.bytes_up) == {"w": 24, "corr": 8}


def test_the_server_step_adds_up_the_workers_and_takes_the_records_in_client_order():
    """Two workers' results: records reach the server step sorted by client, bytes and memory add up,
    every client with metrics counts as completed (with a record or not: 7 has none), ``train/loss`` is
    the mean of the clients that have one (2 has none), samples count each of 3 local epochs."""
    from collections import Counter
    from simulator.federation import WorkerResult
    from simulator.stats import Stats
    one = lambda n: Stats.from_tensors({"w/x": torch.ones(1)}, n)  # noqa: E731
    results = [WorkerResult(stats=one(5), records={9: {"r": 9}, 2: {"r": 2}}, metrics={9: {"loss": 1.0}, 2: {}},
                            bytes_up=Counter({"w": 8, "corr": 4}), samples=5, rss_mb=100.0),
               WorkerResult(stats=one(3), records={5: {"r": 5}}, metrics={5: {"loss": 3.0}, 7: {"loss": 8.0}},
                            bytes_up=Counter({"w": 4}), samples=3, rss_mb=50.0)]
    server = Server(TwoPasses())
    metrics = server.aggregate(RoundContext(1, 2, (2, 5, 7, 9), 0, freeze({"training": {"local_epochs": 3}})),
                               results)
    assert server.state == {"records": [(2, {"r": 2}), (5, {"r": 5}), (9, {"r": 9})], "weight": 8}
    assert metrics == {"server/step": 1.0, "train/loss": 4.0, "bytes_up/w": 12.0, "bytes_up/corr": 4.0,
                       "clients/completed": 4.0, "memory/workers_rss_mb": 150.0, "train/samples": 24.0}


def test_a_rounds_client_metric_is_meaned_in_client_order_whatever_the_shares():
    """``train/loss`` of clients 0..3 with losses 2**53, -2**53, 1, 1: summed in id order they make 2
    (mean 0.5, exact); in the order of shares [0, 2] and [1, 3] 2**53 + 1 rounds back to 2**53 and
    they make 1 (mean 0.25). A mean taken in the order the workers' results come would depend on the
    number of workers and on the split."""
    from simulator.federation import WorkerResult
    from simulator.stats import Stats
    loss = {0: 2.0 ** 53, 1: -2.0 ** 53, 2: 1.0, 3: 1.0}
    ctx = RoundContext(1, 2, (0, 1, 2, 3), 0, freeze({"training": {"local_epochs": 1}}))

    def result(share):
        return WorkerResult(stats=Stats.from_tensors({"w": torch.zeros(1)}, len(share)),
                            metrics={c: {"loss": loss[c]} for c in share})
    for shares in ([[0, 1, 2, 3]], [[0, 2], [1, 3]], [[3], [2], [1], [0]]):
        metrics = Server(TwoPasses()).aggregate(ctx, [result(share) for share in shares])
        assert metrics["train/loss"] == 0.5, shares
        assert metrics["clients/completed"] == 4


def test_only_a_worker_with_a_gpu_share_runs_on_cuda(monkeypatch):
    """On a machine with a GPU, a pool of ``num_gpus: 0`` (e.g. CPU workers beside GPU ones) stays on
    the CPU and leaves torch's CUDA switches alone; any fraction of a GPU runs on it; without a GPU
    every worker is on the CPU."""
    import simulator.federation as federation
    switched = []
    monkeypatch.setattr(federation, "cuda_determinism", switched.append)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    scenario = {"ray": {"cuda_deterministic": True}}
    assert federation.prepare_worker_device(0, scenario) == torch.device("cpu") and switched == []
    assert federation.prepare_worker_device(0.25, scenario) == torch.device("cuda") and switched == [True]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert federation.worker_device(1.0) == torch.device("cpu")


def test_only_a_failed_client_step_is_not_resumable():
    """A resume replays a failed client step and would fail the same way; lost workers or a lost
    server may have been passing causes."""
    from simulator.federation import RunFailure, ServerFailure, WorkerFailure, WorkersLost
    assert WorkerFailure.resumable is False
    assert RunFailure.resumable and ServerFailure.resumable and WorkersLost.resumable


def test_a_client_without_extras_is_handed_none():
    """Only the clients the server sent something of their own get it; the others get ``None`` (the
    methods test ``extra is None``, e.g. FedSC for the correlation it shares)."""
    handed = {}

    class Extras(UploadsOf):
        def client_update(self, workspace, broadcast, extra, data, ctx, state):
            handed[data.client_id] = extra
            return super().client_update(workspace, broadcast, extra, data, ctx, state)

    from simulator.stats import Stats
    ctx = RoundContext(1, 2, (4, 9), 0, freeze({}))
    load = lambda cid: (torch.zeros(2, 1, 4, 4, dtype=torch.uint8), torch.zeros(2, dtype=torch.int64))  # noqa: E731
    uploads = {cid: Stats.from_tensors({"x": torch.ones(1)}, 2) for cid in (4, 9)}
    simulate_clients(Extras(uploads), None, load, {}, {9: {"rad": torch.ones(3)}}, [4, 9], ctx)
    assert handed[4] is None and torch.equal(handed[9]["rad"], torch.ones(3))
