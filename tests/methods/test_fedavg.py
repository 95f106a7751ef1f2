"""FedAvg's client and server steps, in-process (no Ray), for every local objective; the server
step's weight averaging (server optimiser, target) is in ``test_weight_averaging.py``."""
import pytest
import torch

from methods import build_method
from methods.base import ClientData, DataSpec
from simulator.context import RoundContext, freeze
from simulator.data.synthetic import make_synthetic
from simulator.federation import Server
from simulator.scenario import resolve

DATA = make_synthetic(train_per_class=8, test_per_class=1, seed=1)


def setup(synthetic_raw, **method):
    raw = {**synthetic_raw, "method": {"name": "fedavg", **method}}
    scenario = resolve(raw)
    method = build_method(scenario, DataSpec(1, 28, 10, (80,)))
    ctx = RoundContext(1, 2, (0,), scenario["seed"], freeze(scenario))
    return method, ctx


def one_client(method, ctx):
    server = Server(method)
    workspace = method.make_workspace(torch.device("cpu"))
    broadcast = method.broadcast(server.state, ctx)
    upload = method.client_update(workspace, broadcast, None, ClientData(0, DATA.train_x, DATA.train_y), ctx)
    return server, broadcast, upload


@pytest.mark.parametrize("objective", ["simclr", "spectral", "byol", "simsiam", "supervised"])
def test_client_update_trains_and_uploads_weights(synthetic_raw, objective):
    method, ctx = setup(synthetic_raw, objective=objective)
    server, broadcast, upload = one_client(method, ctx)
    assert upload.stats.weight == len(DATA.train_y)
    assert torch.isfinite(torch.tensor(upload.metrics["loss"]))
    new = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}
    assert new.keys() == broadcast["weights"].keys()
    changed = [k for k in new if not torch.allclose(new[k], broadcast["weights"][k].float())]
    assert any(k.startswith("online.encoder.") for k in changed)
    if objective == "byol":
        assert any(k.startswith("target.") for k in changed)
    else:
        assert not any(k.startswith("target.") for k in new)
    # a single client's average is its own model: the server takes it as the new global model
    state, _ = method.server_update(server.state, upload.stats, {}, ctx)
    for k in new:
        assert torch.equal(state["weights"][k], new[k])


def test_client_update_is_deterministic_and_restores_in_place(synthetic_raw):
    method, ctx = setup(synthetic_raw, objective="simclr")
    _, _, first = one_client(method, ctx)
    server = Server(method)
    workspace = method.make_workspace(torch.device("cpu"))
    broadcast = method.broadcast(server.state, ctx)
    other = ClientData(1, DATA.train_x[:20], DATA.train_y[:20])
    method.client_update(workspace, broadcast, None, other, ctx)  # dirty the workspace
    again = method.client_update(workspace, broadcast, None, ClientData(0, DATA.train_x, DATA.train_y), ctx)
    for k in first.stats.sums:
        assert torch.equal(first.stats.sums[k], again.stats.sums[k])


def test_non_finite_loss_names_round_client_and_method(synthetic_raw):
    method, ctx = setup(synthetic_raw, objective="simclr")
    server = Server(method)
    workspace = method.make_workspace(torch.device("cpu"))
    broadcast = method.broadcast(server.state, ctx)
    broadcast = {"weights": {k: v * float("nan") if v.is_floating_point() else v
                             for k, v in broadcast["weights"].items()}}
    with pytest.raises(FloatingPointError, match=r"round 1, client 0, method fedavg/simclr: loss is nan"):
        method.client_update(workspace, broadcast, None, ClientData(0, DATA.train_x, DATA.train_y), ctx)


@pytest.mark.parametrize("grad_clip_norm", [0.0, 1e-3])
def test_grad_clip_norm_bounds_a_local_step(synthetic_raw, grad_clip_norm):
    # one plain SGD step (a single batch, no momentum or weight decay, lr 1) moves the weights by
    # the gradient itself: by exactly the clip norm when clipped, by much more when not
    synthetic_raw["training"] = {"rounds": 2, "batch_size": 128, "lr": 1.0, "momentum": 0.0, "weight_decay": 0.0,
                                 "grad_clip_norm": grad_clip_norm}
    method, ctx = setup(synthetic_raw, objective="spectral")
    _, broadcast, upload = one_client(method, ctx)
    new = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}
    step = torch.cat([(new[k] - broadcast["weights"][k].float()).flatten() for k in new]).norm().item()
    if grad_clip_norm:
        assert step == pytest.approx(grad_clip_norm, rel=1e-3)
    else:
        assert step > 100 * 1e-3


@pytest.mark.parametrize("objective, evaluated", [("spectral", {"encoder", "projector"}),
                                                  ("byol", {"encoder", "projector"}),
                                                  ("supervised", {"encoder"})])
def test_eval_network_is_the_states_encoder_and_projector(synthetic_raw, objective, evaluated):
    method, ctx = setup(synthetic_raw, objective=objective, uv=objective == "spectral")
    server, _, upload = one_client(method, ctx)
    state, _ = method.server_update(server.state, upload.stats, {}, ctx)
    network = method.eval_network(state)
    assert set(network) == evaluated
    weights = {k: v for k, v in state["weights"].items() if k.split(".")[:2] in [["online", e] for e in evaluated]}
    assert {f"online.{k}" for k in network.state_dict()} == weights.keys()
    for k, v in network.state_dict().items():
        assert torch.equal(v, weights[f"online.{k}"])


def test_every_extension_s_keys_are_fedavg_s():
    """An extension's ``Params`` must be among ``FedAvgParams``' bases (else its keys are unknown to
    the scenario loader and the extension fails when it reads them): registered in both places."""
    from methods.fedavg import EXTENSIONS, FedAvg, FedAvgParams
    assert EXTENSIONS and all(issubclass(FedAvgParams, extension.Params) for extension in EXTENSIONS)
    assert all(name in FedAvg.params for extension in EXTENSIONS for name in extension.Params.defaults())


def test_byol_s_default_target_momentum_is_easyfl_s(synthetic_raw):
    """t <- m t + (1 - m) o with m = 0.99 unless a scenario says otherwise: EasyFL's ``BYOLModel``
    (``moving_average_decay=0.99``), the reference of the FedAvg-family baselines."""
    method, _ = setup(synthetic_raw, objective="byol")
    assert method.config.target_momentum == 0.99
