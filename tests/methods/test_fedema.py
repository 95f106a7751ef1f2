"""FedEMA (``methods.fedema``): a returning client's blend of global and own networks, mu = tau at its
second participation then lambda times the new divergence, capped at 1, and EasyFL's selective rule."""
import re

import pytest
import torch

from methods.divergence_aware import divergence
from simulator.federation import Server
from tests.methods.test_divergence_aware import at, make, participate


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
    upload = participate(method, scenario, state, 2, first)
    second = upload.client_state
    assert second["scaler"] == pytest.approx(0.7 / d1)
    # logged beside the loss: this training's divergence and the mix the client started from (tau)
    assert upload.metrics["divergence"] == second["distance"] and upload.metrics["ema_mu"] == pytest.approx(0.7)
    assert second["distance"] == pytest.approx(divergence(start, second["weights"]))
    mu = min(0.7 / d1 * second["distance"], 1.0)  # third participation: lambda kept, the new d
    assert method.blend(second) == pytest.approx(mu) and mu != pytest.approx(0.7)
    assert participate(method, scenario, state, 3, second).metrics["ema_mu"] == pytest.approx(mu)
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
    # a client that starts afresh logs no mix (the mean of train/ema_mu is over the clients that mixed)
    logged = participate(method, scenario, state, 3, first).metrics
    assert ("ema_mu" in logged) is not selective and logged["divergence"] > 0
    assert not torch.equal(mixed["target.encoder.features.0.0.weight"], fresh["target.encoder.features.0.0.weight"])


def test_a_fixed_ema_scaler_is_every_client_s_lambda_from_its_second_participation(synthetic_raw):
    scenario, method = make(synthetic_raw, "fedema", ema_tau=0.7, ema_scaler=0.25)
    state = Server(method).state
    workspace = method.make_workspace(torch.device("cpu"))
    first = participate(method, scenario, state, 1, None).client_state
    mu = min(0.25 * first["distance"], 1.0)  # not tau: lambda is the scaler, times the divergence
    assert mu != pytest.approx(0.7) and method.blend(first) == pytest.approx(mu)
    start = method.start_weights(workspace, state["weights"], first, at(scenario, 2))
    name = "online.encoder.features.0.0.weight"
    torch.testing.assert_close(start[name], (1 - mu) * state["weights"][name] + mu * first["weights"][name])
    second = participate(method, scenario, state, 2, first).client_state
    assert second["scaler"] == 0.25 and method.blend(second) == pytest.approx(min(0.25 * second["distance"], 1.0))


@pytest.mark.parametrize("method, key, expected", [
    ({"ema_tau": 0.0}, "ema_tau", "a positive number, got 0.0"),
    ({"ema_scaler": -0.1}, "ema_scaler", "a non-negative number (0: tau / d at the second round), got -0.1"),
])
def test_bad_values_are_one_line_errors(synthetic_raw, method, key, expected):
    with pytest.raises(ValueError, match=re.escape(f"<scenario>: method.{key}: expected {expected}")):
        make(synthetic_raw, "fedema", **method)


def test_fedema_s_default_tau_is_the_easyfl_readme_s(synthetic_raw):
    """tau = 0.7, the ``--auto_scaler_target`` of EasyFL's FedEMA README runs (its ``main.py`` defaults to
    0.8); ``fedavg/fedema.yaml`` leaves it at the default. No fixed scaler: lambda = tau / d."""
    _, method = make(synthetic_raw, "fedema")
    assert method.config.ema_tau == 0.7 and method.config.ema_scaler == 0.0


def test_mu_is_tau_at_the_second_participation_however_small_the_divergence(synthetic_raw):
    """lambda = tau / d_1 for any d_1 > 0 (a client that barely moved too: d_1 = 2e-4 gives lambda = 3500,
    mu = tau = 0.7); a kept lambda times a later d: 3500 x 1e-4 = 0.35; with no movement at all, mu = 0."""
    _, method = make(synthetic_raw, "fedema", ema_tau=0.7)
    assert method.blend({"distance": 2e-4}) == pytest.approx(0.7)
    assert method.scaler({"distance": 2e-4}) == pytest.approx(3500.0)
    assert method.blend({"distance": 1e-4, "scaler": 3500.0}) == pytest.approx(0.35)
    assert method.blend({"distance": 0.0}) == 0.0
