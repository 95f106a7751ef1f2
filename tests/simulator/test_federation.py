"""The round without Ray: shares and the worker-count invariance of the reduction (cohort sampling:
``test_population.py``)."""
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


def test_round_metrics_mean_the_clients_and_count_every_epoch_s_samples(synthetic_raw):
    """``train/<name>``: the mean over the reporting clients of their metric; ``train/samples``: the
    samples trained on, each local epoch counted (here 2 epochs over clients of 16, 8 and 4 images)."""
    scenario = resolve({**synthetic_raw, "training": {**synthetic_raw["training"], "local_epochs": 2}})
    data = make_synthetic(train_per_class=4, test_per_class=2, seed=0)
    clients = [(data.train_x[:16], data.train_y[:16]), (data.train_x[16:24], data.train_y[16:24]),
               (data.train_x[24:28], data.train_y[24:28])]
    spec = DataSpec(1, 28, 10, tuple(len(y) for _, y in clients))
    method = build_method(scenario, spec)
    ctx = RoundContext(1, 2, (0, 1, 2), scenario["seed"], freeze(scenario))
    server = Server(method)
    broadcast, extras, _ = server.payload(ctx, [[0, 1, 2]])
    result = simulate_clients(method, method.make_workspace(torch.device("cpu")), lambda c: clients[c], broadcast,
                              extras[0], [0, 1, 2], ctx)
    losses = [result.metrics[c]["loss"] for c in (0, 1, 2)]
    assert len(set(losses)) == 3  # a mean and a median differ
    metrics = server.aggregate(ctx, [result])
    assert metrics["train/loss"] == pytest.approx(sum(losses) / 3, rel=1e-12)
    assert metrics["train/samples"] == 2 * (16 + 8 + 4)


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
