"""Hetero-SSFL in-process (no Ray): kernels, tiers, per-client models across rounds and restarts."""
import numpy as np
import pytest
import torch

from analysis.monitor import load_eval_data
from methods import build_method
from methods.base import DataSpec
from methods.hetero_ssfl import Alignment, assign_tiers, normalized_kernel
from methods.rad import load_rad
from simulator.augment import to_float
from simulator.client_store import ClientStateStore, dumps, loads
from simulator.context import RoundContext, freeze
from simulator.data.synthetic import make_synthetic
from simulator.federation import Server, simulate_clients
from simulator.scenario import resolve

DATA = make_synthetic(train_per_class=4, test_per_class=1, seed=1)  # 40 images: 4 clients of 10
NUM_CLIENTS = 4
TIERS = [{"fraction": 0.5, "encoder": "small_cnn"}, {"fraction": 0.5, "encoder": "large_cnn"}]


def load_client(cid):
    return DATA.train_x[10 * cid:10 * cid + 10], DATA.train_y[10 * cid:10 * cid + 10]


def make(synthetic_raw, **method):
    """Small_cnn clients unless ``tiers`` says otherwise (large_cnn is ~10x slower)."""
    raw = {**synthetic_raw,
           "method": {"name": "hetero_ssfl", "rad_size": 16, "rad_batch_size": 8, **method},
           "population": {"num_clients": NUM_CLIENTS, "clients_per_round": 2},
           "training": {"rounds": 4, "batch_size": 5, "lr": 0.05},
           "eval": {"test_subset": 300}}
    scenario = resolve(raw)
    return scenario, build_method(scenario, DataSpec(1, 28, 10, (10,) * NUM_CLIENTS))


class Federation:
    """Server, one workspace and the client states (the store), driven round by round."""

    def __init__(self, scenario, method):
        self.scenario, self.method = scenario, method
        self.server = Server(method)
        self.workspace = method.make_workspace(torch.device("cpu"))
        self.states = {}

    def round(self, r, cohort):
        ctx = RoundContext(r, 4, tuple(cohort), self.scenario["seed"], freeze(self.scenario))
        broadcast, extras, bytes_down = self.server.payload(ctx, [list(cohort)])
        result = simulate_clients(self.method, self.workspace, load_client, broadcast, extras[0], list(cohort),
                                  ctx, self.states)
        metrics = self.server.aggregate(ctx, [result])
        self.states.update(result.client_states)
        return result, metrics, bytes_down

    def aggregate_kernel(self):
        return self.server.state["kernel_sum"] / self.server.state["kernel_weight"]


@pytest.mark.parametrize("kernel_weights", ["uniform", "samples"])
def test_server_kernel_is_the_weighted_mean_of_every_clients_current_kernel(synthetic_raw, kernel_weights):
    scenario, method = make(synthetic_raw, kernel_weights=kernel_weights)
    fed = Federation(scenario, method)
    _, metrics, bytes_down = fed.round(1, (0, 1, 2))
    assert "kernels" not in bytes_down and "train/rad_cka" not in metrics  # no aggregate yet
    assert bytes_down["rad"] == 3 * fed.server.state["rad"].numel()  # the RAD is downloaded once per client...
    assert torch.allclose(fed.aggregate_kernel(), sum(normalized_kernel(fed.states[c]["rad_representations"])
                                                      for c in range(3)) / 3, atol=1e-8)
    for r, cohort in ((2, (0, 3)), (3, (1, 3))):
        result, metrics, bytes_down = fed.round(r, cohort)
        assert bytes_down["rad"] == (fed.server.state["rad"].numel() if r == 2 else 0)  # ...and kept
        assert bytes_down["kernels"] == len(cohort) * 4 * 16 * 16
        assert 0 < metrics["train/rad_cka"] <= 1
        kernels = [normalized_kernel(fed.states[c]["rad_representations"]) for c in range(NUM_CLIENTS)]
        expected = sum(kernels) / NUM_CLIENTS  # equal weights: 1 or n_j = 10 for every client
        assert torch.allclose(fed.aggregate_kernel(), expected, atol=1e-8)
    assert fed.server.state["kernel_weight"] == (NUM_CLIENTS if kernel_weights == "uniform" else 10 * NUM_CLIENTS)
    assert fed.server.state["has_rad"].all()


def test_alignment_term_changes_training_and_its_gradient_reaches_every_network(synthetic_raw):
    scenario, method = make(synthetic_raw)
    fed = Federation(scenario, method)
    fed.round(1, range(NUM_CLIENTS))
    kernel = fed.aggregate_kernel().float()
    rad = to_float(fed.server.state["rad"])
    online = fed.workspace[method.client_tier[0]].online
    method.restore(fed.workspace[method.client_tier[0]], fed.states[0], 0)
    online.zero_grad()
    Alignment(rad, kernel, torch.Generator().manual_seed(0), 8).loss(online).backward()
    for name in ("encoder", "projector", "predictor"):
        assert sum(p.grad.abs().sum() for p in online[name].parameters()) > 0, name
    states = dict(fed.states)
    aligned, _, _ = fed.round(2, (0,))
    _, fed.method = make(synthetic_raw, mu=0.0)  # the same round 1, then local-only SSL
    fed.states = states
    unaligned, _, _ = fed.round(2, (0,))
    a, b = aligned.client_states[0]["networks"], unaligned.client_states[0]["networks"]
    assert not all(torch.equal(a[k], b[k]) for k in a)


def test_client_model_survives_rounds_and_worker_restarts(synthetic_raw, tmp_path):
    scenario, method = make(synthetic_raw, tiers=TIERS)
    fed = Federation(scenario, method)
    fed.round(1, range(NUM_CLIENTS))
    fed.round(2, (0, 1))
    store = ClientStateStore(tmp_path / "store")
    store.put({cid: dumps(state) for cid, state in fed.states.items()})
    store.commit()
    stored = {cid: loads(blob) for cid, blob in store.get(list(range(NUM_CLIENTS))).items()}
    initial = method.flat_state(*method.client_networks(method.client_tier[0], 0))
    trained = stored[0]["networks"]
    assert any(not torch.equal(initial[k], trained[k]) for k in trained)  # rounds 1, 2 trained it
    # a restarted worker: a new method object, a fresh workspace, the state read from the store
    _, restarted = make(synthetic_raw, tiers=TIERS)
    workspace = restarted.make_workspace(torch.device("cpu"))
    restarted.restore(workspace[restarted.client_tier[0]], stored[0], 0)
    assert all(torch.equal(v, trained[k]) for k, v in workspace[restarted.client_tier[0]].slots.items())
    # round 3 of client 0: from the old (dirtied by other clients) workspace and from the fresh one
    before = fed.server.state
    fed.round(3, (0, 2))
    fresh = Federation(scenario, restarted)
    fresh.server.state = before
    ctx = RoundContext(3, 4, (0,), scenario["seed"], freeze(scenario))
    broadcast, extras, _ = fresh.server.payload(ctx, [[0]])
    again = simulate_clients(restarted, workspace, load_client, broadcast, extras[0], [0], ctx, {0: stored[0]})
    for k, v in fed.states[0]["networks"].items():
        assert torch.equal(again.client_states[0]["networks"][k], v)
    networks = restarted.eval_networks(fed.server.state, lambda cid: stored.get(cid))
    label = f"{restarted.tiers[restarted.client_tier[0]].encoder}/client_0"
    assert set(networks[label]) == {"encoder", "projector"}
    for k, v in networks[label].state_dict().items():
        assert torch.equal(v, trained[f"online.{k}"])


def test_store_does_not_grow_across_rounds(synthetic_raw, tmp_path):
    scenario, method = make(synthetic_raw)
    fed = Federation(scenario, method)
    store = ClientStateStore(tmp_path / "store")
    sizes = []
    for r, cohort in ((1, range(NUM_CLIENTS)), (2, (0, 1)), (3, (2, 3)), (4, (0, 3))):
        result, _, _ = fed.round(r, cohort)
        store.put({cid: dumps(state) for cid, state in result.client_states.items()})
        store.commit()
        sizes.append((len(list((tmp_path / "store").glob("client_*.pt"))), store.nbytes()))
    assert sizes == [sizes[0]] * 4 and sizes[0][0] == NUM_CLIENTS


def test_tiers_assign_architectures_and_label_evaluations(synthetic_raw):
    tiers = assign_tiers(8, [0.25, 0.75], seed=5)
    assert np.bincount(tiers).tolist() == [2, 6]
    assert np.array_equal(tiers, assign_tiers(8, [0.25, 0.75], seed=5))
    scenario, method = make(synthetic_raw, tiers=TIERS)
    small, large = method.make_workspace(torch.device("cpu"))
    count = lambda space: sum(p.numel() for p in space.online["encoder"].parameters())  # noqa: E731
    assert count(large) > 5 * count(small)
    labels = method.eval_networks(Server(method).state, lambda cid: None)
    tier_names = sorted(label.split("/")[0] for label in labels)
    assert tier_names == ["large_cnn", "large_cnn", "small_cnn", "small_cnn"]
    for label in labels:
        cid = int(label.split("_")[-1])
        assert label.startswith(method.tiers[method.client_tier[cid]].encoder)


def test_rad_is_disjoint_from_the_evaluated_test_images(synthetic_raw):
    scenario, _ = make(synthetic_raw, rad_size=200)
    rad = load_rad(scenario, 200).flatten(1)
    tested = load_eval_data(scenario).test_x.flatten(1)
    assert len(rad) == 200
    assert not (rad[:, None, :] == tested[None, :, :]).all(-1).any()
    with pytest.raises(ValueError, match=r"^method.rad_size: expected at most 200 .*got 201$"):
        load_rad(scenario, 201)  # 500 test images, 300 evaluated


@pytest.mark.parametrize("method, match", [
    ({"objective": "simclr"}, "method.objective"),
    ({"mu": -1.0}, "method.mu"),
    ({"kernel_weights": "size"}, "method.kernel_weights"),
    ({"tiers": [{"fraction": 0.5, "encoder": "small_cnn"}]}, "method.tiers: expected fractions summing to 1"),
    ({"tiers": [{"fraction": 1.0, "encoder": "vit"}]}, "method.tiers: expected a list"),
    ({"tiers": [{"fraction": 0.5, "encoder": "small_cnn"}] * 2}, "method.tiers: expected distinct encoders"),
])
def test_bad_values_are_one_line_errors(synthetic_raw, method, match):
    with pytest.raises(ValueError, match=match):
        make(synthetic_raw, **method)


def test_results_do_not_depend_on_the_number_of_workers(synthetic_raw):
    scenario, method = make(synthetic_raw)
    one, two = Federation(scenario, method), Federation(scenario, method)
    one.round(1, (0, 1, 2))
    ctx = RoundContext(1, 4, (0, 1, 2), scenario["seed"], freeze(scenario))
    shares = [[0, 2], [1]]
    broadcast, extras, _ = two.server.payload(ctx, shares)
    results = [simulate_clients(method, method.make_workspace(torch.device("cpu")), load_client, broadcast,
                                share_extras, share, ctx, {}) for share, share_extras in zip(shares, extras)]
    two.server.aggregate(ctx, results)
    assert torch.equal(one.server.state["kernel_sum"], two.server.state["kernel_sum"])
    for result in results:
        for cid, state in result.client_states.items():
            assert all(torch.equal(v, one.states[cid]["networks"][k]) for k, v in state["networks"].items())
