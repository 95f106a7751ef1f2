"""Orchestra's client and server steps, in-process (no Ray)."""
import pytest
import torch

from methods import build_method
from methods.base import ClientData, DataSpec
from methods.orchestra import RecentProjections
from simulator.context import RoundContext, freeze
from simulator.data.synthetic import make_synthetic
from simulator.federation import Server, simulate_clients
from simulator.scenario import resolve

DATA = make_synthetic(train_per_class=4, test_per_class=1, seed=1)  # 40 samples
CLIENTS = [(DATA.train_x[i::3], DATA.train_y[i::3]) for i in range(3)]
LOCAL, GLOBAL = 4, 6


RAW = {"name": "tiny-orchestra", "seed": 3, "dataset": {"name": "synthetic"},
       "population": {"num_clients": 3, "clients_per_round": 2},
       "model": {"hidden_dim": 64, "projector_dim": 32},
       "training": {"rounds": 2, "batch_size": 8, "lr": 0.05}}


def setup(training=None, **method):
    raw = {**RAW, "training": {**RAW["training"], **(training or {})}, "method": {"name": "orchestra", "num_global_clusters": GLOBAL,
                             "num_local_clusters": LOCAL, "memory_size": 8, **method}}
    scenario = resolve(raw)
    return build_method(scenario, DataSpec(1, 28, 10, tuple(len(y) for _, y in CLIENTS))), scenario


@pytest.fixture(scope="module")
def after_setup():
    """The default method, its scenario and the global state after the setup round."""
    method, scenario = setup()
    server = Server(method)
    metrics, _ = run_round(method, server, context(scenario, 0), [[0, 1, 2]])
    return method, scenario, server.state, metrics


def context(scenario, round_index, cohort=(0, 1, 2)):
    return RoundContext(round_index, 2, cohort, scenario["seed"], freeze(scenario))


def run_round(method, server, ctx, shares):
    broadcast, extras, bytes_down = server.payload(ctx, shares)
    results = [simulate_clients(method, method.make_workspace(torch.device("cpu")), lambda c: CLIENTS[c],
                                broadcast, share_extras, share, ctx) for share, share_extras in zip(shares, extras)]
    return server.aggregate(ctx, results), bytes_down


def test_setup_round_initialises_global_centroids_without_training(after_setup):
    method, scenario, state, metrics = after_setup
    initial = Server(method).state
    assert initial["centroids"] is None
    assert "centroids" not in method.broadcast(initial, context(scenario, 0))
    assert "bytes_up/weights" not in metrics  # clients only cluster in the setup round
    assert metrics["bytes_up/centroids"] == 3 * LOCAL * 32 * 4
    assert metrics["clustering/local_centroids"] == 3 * LOCAL
    for name, value in initial["weights"].items():
        assert torch.equal(state["weights"][name], value)
    centroids = state["centroids"]
    assert centroids.shape == (GLOBAL, 32)
    assert torch.allclose(centroids.norm(dim=1), torch.ones(GLOBAL), atol=1e-5)
    assert "centroids" in method.broadcast(state, context(scenario, 1))


def server_at(method, state):
    server = Server(method)
    server.state = state
    return server


def test_training_round_uploads_weights_and_local_centroids(after_setup):
    method, scenario, state, _ = after_setup
    server = server_at(method, state)
    setup_centroids = server.state["centroids"]
    broadcast = method.broadcast(server.state, context(scenario, 1))
    upload = method.client_update(method.make_workspace(torch.device("cpu")), broadcast, None,
                                  ClientData(0, *CLIENTS[0]), context(scenario, 1))
    assert upload.stats.weight == len(CLIENTS[0][1])
    assert set(upload.metrics) == {"loss", "loss_cluster", "loss_rotation"}
    assert upload.record["centroids"].shape == (LOCAL, 32)
    new = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}
    assert new.keys() == broadcast["weights"].keys()
    assert any(k.startswith("online.rotation.") for k in new)
    changed = {k for k in new if not torch.allclose(new[k], broadcast["weights"][k].float())}
    assert any(k.startswith("online.encoder.") for k in changed)
    assert any(k.startswith("target.encoder.") for k in changed)
    metrics, _ = run_round(method, server, context(scenario, 1, (0, 2)), [[0, 2]])
    assert metrics["bytes_up/centroids"] == 2 * LOCAL * 32 * 4
    assert not torch.equal(server.state["centroids"], setup_centroids)


def test_memory_keeps_the_most_recent_projections():
    memory = RecentProjections(5)
    for start in range(0, 12, 3):  # batches of 3 rows: 0-2, 3-5, 6-8, 9-11
        memory.push(torch.arange(start, start + 3, dtype=torch.float32)[:, None])
    assert memory.contents().flatten().tolist() == [7, 8, 9, 10, 11]
    assert len(memory.batches) == 2  # older batches are dropped


@pytest.mark.parametrize("momentum", [0.0, 1.0])
def test_target_follows_the_ema_rule(after_setup, momentum):
    method, scenario = setup(target_momentum=momentum)
    broadcast = method.broadcast(after_setup[2], context(scenario, 1))
    upload = method.client_update(method.make_workspace(torch.device("cpu")), broadcast, None,
                                  ClientData(1, *CLIENTS[1]), context(scenario, 1))
    new = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}
    for name in (k for k in new if k.startswith("target.")):
        # m = 1: the target never moves; m = 0: after every step it is the online model
        expected = broadcast["weights"][name] if momentum == 1.0 else new["online." + name[len("target."):]]
        assert torch.allclose(new[name], expected.float(), atol=1e-6), name



def test_grad_clip_norm_bounds_the_local_step(after_setup):
    # a single plain SGD step at lr 1 moves the online weights by the clipped gradient, of norm 1e-3
    training = {"batch_size": 64, "lr": 1.0, "momentum": 0.0, "weight_decay": 0.0, "grad_clip_norm": 1e-3}
    method, scenario = setup(training)
    broadcast = method.broadcast(after_setup[2], context(scenario, 1))
    upload = method.client_update(method.make_workspace(torch.device("cpu")), broadcast, None,
                                  ClientData(1, *CLIENTS[1]), context(scenario, 1))
    new = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}
    step = torch.cat([(new[k] - broadcast["weights"][k].float()).flatten() for k in new if k.startswith("online.")])
    assert step.norm().item() == pytest.approx(1e-3, rel=1e-3)

def test_client_with_fewer_samples_than_local_clusters(after_setup):
    method, scenario, state, _ = after_setup
    broadcast = method.broadcast(state, context(scenario, 1))
    tiny = ClientData(7, DATA.train_x[:3], DATA.train_y[:3])  # 3 samples < L = 4
    workspace = method.make_workspace(torch.device("cpu"))
    for round_index, payload in ((0, {"weights": broadcast["weights"]}), (1, broadcast)):
        upload = method.client_update(workspace, payload, None, tiny, context(scenario, round_index, (7,)))
        centroids = upload.record["centroids"]
        assert centroids.shape == (LOCAL, 32)
        assert torch.isfinite(centroids).all()
        assert torch.allclose(centroids.norm(dim=1), torch.ones(LOCAL), atol=1e-5)
    assert upload.stats.weight == 3


def test_round_is_deterministic_and_independent_of_shares(after_setup):
    method, scenario, state, _ = after_setup
    states = []
    for shares in ([[0, 2]], [[2], [0]]):
        server = server_at(method, state)
        run_round(method, server, context(scenario, 1, (0, 2)), shares)
        states.append(server.state)
    assert torch.equal(states[0]["centroids"], states[1]["centroids"])
    for name, value in states[0]["weights"].items():
        assert torch.equal(value, states[1]["weights"][name])


@pytest.mark.parametrize("switch, absent", [("degeneracy", "online.rotation."), ("target", "target.")])
def test_ablations_drop_their_networks(switch, absent):
    method, scenario = setup(**{switch: False})
    server = Server(method)
    assert not any(k.startswith(absent) for k in server.state["weights"])
    run_round(method, server, context(scenario, 0), [[0, 1, 2]])
    metrics, _ = run_round(method, server, context(scenario, 1, (1,)), [[1]])
    assert torch.isfinite(torch.tensor(metrics["train/loss"]))
    assert ("train/loss_rotation" in metrics) == (switch != "degeneracy")


@pytest.mark.parametrize("key, value, message", [
    ("num_local_clusters", 0, "method.num_local_clusters: expected a positive integer, got 0"),
    ("temperature", 0.0, "method.temperature: expected a positive number, got 0.0"),
    ("target_momentum", 1.5, r"method.target_momentum: expected a number in \[0, 1\], got 1.5"),
])
def test_bad_values_are_one_line_errors(key, value, message):
    with pytest.raises(ValueError, match=message):
        setup(**{key: value})
