"""What FedU and FedEMA share (``methods.divergence_aware``): the divergence, the first participation
and the client state carried by the real client step, against hand computations; the objective
rule. FedU's own mix is in ``test_fedu.py``, FedEMA's in ``test_fedema.py`` (with the helpers here)."""
import pytest
import torch

from methods import build_method
from methods.base import ClientData, DataSpec
from methods.divergence_aware import divergence
from simulator.context import RoundContext, freeze
from simulator.data.synthetic import make_synthetic
from simulator.federation import Server
from simulator.scenario import resolve

DATA = make_synthetic(train_per_class=4, test_per_class=1, seed=3)


def make(synthetic_raw, name, head_norm="none", **params):
    model = {**synthetic_raw.get("model", {}), "head_norm": head_norm}
    scenario = resolve({**synthetic_raw, "model": model, "method": {"name": name, **params}})
    return scenario, build_method(scenario, DataSpec(1, 28, 10, (40, 40)))


def at(scenario, round_index):
    return RoundContext(round_index, 4, (0,), scenario["seed"], freeze(scenario))


def participate(method, scenario, state, round_index, client_state):
    workspace = method.make_workspace(torch.device("cpu"))
    ctx = at(scenario, round_index)
    upload = method.client_update(workspace, method.broadcast(state, ctx), None,
                                  ClientData(0, DATA.train_x, DATA.train_y), ctx, client_state)
    return upload


def test_divergence_is_the_mean_l2_change_of_the_encoders_convolution_kernels():
    # a start away from 0 (there ||end|| alone would pass for the change), a 2-d encoder weight (a linear
    # layer's) and a 1-d one left out
    start = {"online.encoder.a.weight": torch.full((2, 1, 3, 3), 3.0), "online.encoder.b.weight": torch.full((1, 1, 1, 1), -2.0),
             "online.encoder.n.weight": torch.zeros(4), "online.encoder.fc.weight": torch.zeros(3, 3),
             "online.predictor.0.weight": torch.zeros(3, 3), "target.encoder.a.weight": torch.zeros(2, 1, 3, 3)}
    end = {k: v + 1 for k, v in start.items()}
    assert divergence(start, end) == pytest.approx((18 ** 0.5 + 1.0) / 2)  # only the two 4-d kernels


@pytest.mark.parametrize("name", ["fedu", "fedema"])
def test_first_participation_starts_from_global_online_with_the_target_copied_from_it(synthetic_raw, name):
    scenario, method = make(synthetic_raw, name)
    state = Server(method).state
    # a global target apart from the global online networks (as after a round): the start must not take it
    moved = {k: v + 1 if k.startswith("target.") else v for k, v in state["weights"].items()}
    start = method.start_weights(method.make_workspace(torch.device("cpu")), moved, None, at(scenario, 1))
    for key, value in start.items():
        source = "online." + key[len("target."):] if key.startswith("target.") else key
        assert torch.equal(value, moved[source])
        if key.startswith("target."):
            assert not torch.equal(value, moved[key])
    upload = participate(method, scenario, state, 1, None)
    kept = upload.client_state
    uploaded = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}
    assert set(kept["weights"]) == set(uploaded) and kept["distance"] > 0 and kept["round"] == 1
    assert kept["distance"] == pytest.approx(divergence(start, kept["weights"]))
    # a first participation logs its divergence beside the loss, and no mix (it started from the global networks)
    assert sorted(upload.metrics) == ["divergence", "loss"] and upload.metrics["divergence"] == kept["distance"]
    for name, value in kept["weights"].items():
        torch.testing.assert_close(value, uploaded[name], rtol=0, atol=1e-5)


def test_a_kept_state_is_a_copy_that_the_next_client_in_the_workspace_leaves_alone(synthetic_raw):
    """A worker runs its share's clients one after another in one workspace and sends their states
    back together (``simulator.federation.simulate_clients``): a client's kept networks must not be
    the workspace's tensors, which the next client overwrites (on a CPU ``.cpu()`` copies nothing)."""
    scenario, method = make(synthetic_raw, "fedu")
    state = Server(method).state
    workspace = method.make_workspace(torch.device("cpu"))
    ctx = at(scenario, 1)
    broadcast = method.broadcast(state, ctx)
    first = method.client_update(workspace, broadcast, None, ClientData(0, DATA.train_x, DATA.train_y), ctx)
    kept = {name: value.clone() for name, value in first.client_state["weights"].items()}
    method.client_update(workspace, broadcast, None, ClientData(1, DATA.train_x[:20], DATA.train_y[:20]), ctx)
    assert any(not torch.equal(value, kept[name]) for name, value in workspace.slots.items())  # the next client trained
    for name, value in first.client_state["weights"].items():
        assert torch.equal(value, kept[name]), name


def test_fedu_and_fedema_accept_only_byol(synthetic_raw):
    from simulator.scenario import ScenarioError
    for name in ("fedu", "fedema"):
        with pytest.raises(ScenarioError, match=r"method.objective: expected byol"):
            resolve({**synthetic_raw, "method": {"name": name, "objective": "simclr"}})
