"""FedU and FedEMA (``methods.divergence_aware``, ``methods.fedu``, ``methods.fedema``): the divergence,
the first participation, FedU's predictor switch at its threshold and FedEMA's blending weight over
three participations, against hand computations; the client state carried by the real client step."""
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
    start = {"online.encoder.a.weight": torch.zeros(2, 1, 3, 3), "online.encoder.b.weight": torch.zeros(1, 1, 1, 1),
             "online.encoder.n.weight": torch.zeros(4), "online.predictor.0.weight": torch.zeros(3, 3),
             "target.encoder.a.weight": torch.zeros(2, 1, 3, 3)}
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
    for name, value in kept["weights"].items():
        torch.testing.assert_close(value, uploaded[name], rtol=0, atol=1e-5)


@pytest.mark.parametrize("head_norm", ["none", "batch"])
@pytest.mark.parametrize("distance, global_predictor", [(0.39, True), (0.41, False)])
def test_fedu_takes_the_global_predictor_only_below_its_threshold(synthetic_raw, distance, global_predictor, head_norm):
    # with head_norm batch the heads' BatchNorm statistics go with their networks, as EasyFL swaps
    # whole modules: the predictor's with the predictor, the target's stay the client's, the online
    # encoder's and projector's are the server's
    scenario, method = make(synthetic_raw, "fedu", head_norm, dapu_threshold=0.4)
    state = Server(method).state
    first = participate(method, scenario, state, 1, None).client_state
    returning = {**first, "distance": distance}
    start = method.start_weights(method.make_workspace(torch.device("cpu")), state["weights"], returning,
                                 at(scenario, 2))
    for name, value in start.items():
        if name.startswith("online.predictor."):
            expected = state["weights"][name] if global_predictor else first["weights"][name]
        elif name.startswith("target."):
            expected = first["weights"][name]  # the client's own target
        else:
            expected = state["weights"][name]  # encoder and projector: always the global ones
        assert torch.equal(value, expected), name
    assert not torch.equal(state["weights"]["online.predictor.0.weight"], first["weights"]["online.predictor.0.weight"])
    statistics = [name for name in start if name.endswith("running_mean")]
    assert len(statistics) == (3 if head_norm == "batch" else 0)  # online projector and predictor, target projector
    for name in statistics:  # the client's statistics differ from the server's: each check can fail
        assert not torch.equal(state["weights"][name], first["weights"][name]), name


@pytest.mark.parametrize("head_norm", ["none", "batch"])
def test_fedema_blends_with_mu_tau_then_lambda_times_the_new_divergence(synthetic_raw, head_norm):
    scenario, method = make(synthetic_raw, "fedema", head_norm, ema_tau=0.7)
    server = Server(method)
    state = server.state
    workspace = method.make_workspace(torch.device("cpu"))
    first = participate(method, scenario, state, 1, None).client_state
    d1 = first["distance"]
    parameters = {"online." + n for n, _ in workspace.online.named_parameters()}
    start = method.start_weights(workspace, state["weights"], first, at(scenario, 2))
    for name in parameters:  # second participation: lambda = tau / d1, so mu = tau exactly
        torch.testing.assert_close(start[name], 0.3 * state["weights"][name] + 0.7 * first["weights"][name])
    for name in start:  # the target (its BatchNorm statistics too) is the client's; the online
        # networks' statistics (head_norm batch) are the server's
        if name.startswith("target."):
            assert torch.equal(start[name], first["weights"][name])
        elif name not in parameters:
            assert torch.equal(start[name], state["weights"][name]), name
    second = participate(method, scenario, state, 2, first).client_state
    assert second["scaler"] == pytest.approx(0.7 / d1)
    assert second["distance"] == pytest.approx(divergence(start, second["weights"]))
    mu = min(0.7 / d1 * second["distance"], 1.0)  # third participation: lambda kept, the new d
    assert method.blend(second) == pytest.approx(mu)
    third = method.start_weights(workspace, state["weights"], second, at(scenario, 3))
    name = "online.encoder.features.0.0.weight"
    torch.testing.assert_close(third[name], (1 - mu) * state["weights"][name] + mu * second["weights"][name])
    assert method.blend({**second, "distance": 100 * second["distance"]}) == 1.0  # capped at 1


@pytest.mark.parametrize("selective", [False, True])
def test_selective_fedema_mixes_only_after_training_in_the_previous_round(synthetic_raw, selective):
    # EasyFL's selective_ema (its FedEMA under random selection): a client that trained in round 1
    # mixes in round 2; in round 3 it starts from the global networks, target copied from the online
    scenario, method = make(synthetic_raw, "fedema", ema_tau=0.7, selective=selective)
    state = Server(method).state
    workspace = method.make_workspace(torch.device("cpu"))
    first = participate(method, scenario, state, 1, None).client_state
    fresh = method.start_weights(workspace, state["weights"], None, at(scenario, 1))
    mixed = method.start_weights(workspace, state["weights"], first, at(scenario, 2))
    name = "online.encoder.features.0.0.weight"
    torch.testing.assert_close(mixed[name], 0.3 * state["weights"][name] + 0.7 * first["weights"][name])
    later = method.start_weights(workspace, state["weights"], first, at(scenario, 3))
    for key in later:
        assert torch.equal(later[key], fresh[key] if selective else mixed[key]), key
    assert not torch.equal(mixed["target.encoder.features.0.0.weight"], fresh["target.encoder.features.0.0.weight"])


def test_fedu_and_fedema_accept_only_byol(synthetic_raw):
    from simulator.scenario import ScenarioError
    for name in ("fedu", "fedema"):
        with pytest.raises(ScenarioError, match=r"method.objective: expected byol"):
            resolve({**synthetic_raw, "method": {"name": name, "objective": "simclr"}})
