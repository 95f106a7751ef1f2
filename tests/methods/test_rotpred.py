"""RotPred's client step (SGD on the rotation cross-entropy of rotated images, turns paired with
their images) and server step (the sample-weighted average), against hand computations."""
import copy

import torch
import torch.nn.functional as F

from methods import build_method
from methods.base import ClientData, DataSpec
from methods.objectives import project
from simulator.augment import rotate90, to_float
from simulator.context import RoundContext, freeze
from simulator.data.synthetic import make_synthetic
from simulator.federation import Server
from simulator.scenario import resolve

DATA = make_synthetic(train_per_class=4, test_per_class=1, seed=2)  # 40 images


def setup(synthetic_raw):
    synthetic_raw["training"] = {"rounds": 2, "batch_size": 40, "lr": 0.1, "momentum": 0.0, "weight_decay": 0.0}
    scenario = resolve({**synthetic_raw, "method": {"name": "rotpred"}})
    method = build_method(scenario, DataSpec(1, 28, 10, (40, 20)))
    return method, scenario, RoundContext(1, 2, (0, 1), scenario["seed"], freeze(scenario))


def test_client_step_is_one_sgd_step_on_the_rotation_cross_entropy(synthetic_raw):
    method, scenario, ctx = setup(synthetic_raw)
    state = Server(method).state
    workspace = method.make_workspace(torch.device("cpu"))
    expected_net = copy.deepcopy(workspace.online)
    expected_net.load_state_dict({k[len("online."):]: v for k, v in state["weights"].items()})
    workspace.online.eval()  # a workspace left in eval mode: the client step still trains in train mode
    upload = method.client_update(workspace, method.broadcast(state, ctx), None,
                                  ClientData(0, DATA.train_x, DATA.train_y), ctx)
    # by hand: the batch order, then the quarter turns, from the client's round stream
    generator = ctx.client_generator(0)
    rows = torch.randperm(40, generator=generator)
    turns = torch.randint(4, (40,), generator=generator)
    assert len(set(turns.tolist())) == 4
    expected_net.train()
    logits = expected_net["rotation"](project(expected_net, rotate90(to_float(DATA.train_x[rows]), turns)))
    loss = F.cross_entropy(logits, turns)
    assert abs(upload.metrics["loss"] - loss.item()) < 1e-5
    # a turn paired with another image's rotation is a different loss
    assert abs(F.cross_entropy(logits, turns.roll(1)).item() - loss.item()) > 1e-3
    loss.backward()
    uploaded = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}
    assert not any(k.endswith("num_batches_tracked") for k in uploaded)
    for name, parameter in expected_net.named_parameters():
        torch.testing.assert_close(uploaded[f"online.{name}"], parameter.detach() - 0.1 * parameter.grad,
                                   rtol=1e-4, atol=1e-6)
    # the projector ends in a BatchNorm without affine parameters: its running statistics moved
    assert not torch.equal(uploaded["online.projector.4.running_mean"], state["weights"]["online.projector.4.running_mean"])


def test_server_step_is_the_sample_weighted_average(synthetic_raw):
    method, scenario, ctx = setup(synthetic_raw)
    server = Server(method)
    state = server.state
    workspace = method.make_workspace(torch.device("cpu"))
    clients = [ClientData(0, DATA.train_x, DATA.train_y), ClientData(1, DATA.train_x[:20], DATA.train_y[:20])]
    uploads = [method.client_update(workspace, method.broadcast(state, ctx), None, c, ctx) for c in clients]
    new, _ = method.server_update(state, uploads[0].stats + uploads[1].stats, {}, ctx)
    name = "online.rotation.weight"
    w0, w1 = (u.stats.average()[f"weights/{name}"] for u in uploads)
    torch.testing.assert_close(new["weights"][name], (40 * w0 + 20 * w1) / 60, rtol=0, atol=1e-6)
    assert not torch.equal(w0, w1)
