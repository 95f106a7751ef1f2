"""Weight averaging with a server optimiser (``methods.weight_averaging``), through FedAvg's server
step: the plain average moved by ``server_lr``, FedAdam, and every tensor of the new global state over
two rounds (the online networks stepped, the EMA target plainly averaged)."""
import pytest
import torch

from methods import build_method
from methods.base import ClientData, DataSpec
from simulator.context import RoundContext, freeze
from simulator.federation import Server
from simulator.scenario import resolve
from tests.methods.test_fedavg import DATA, one_client, setup


def test_server_adam_moves_towards_the_average(synthetic_raw):
    method, ctx = setup(synthetic_raw, objective="simclr", server_optimizer="adam", server_lr=0.01)
    server, broadcast, upload = one_client(method, ctx)
    state, _ = method.server_update(server.state, upload.stats, {}, ctx)
    averaged = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}
    name = state["trainable"][0]
    old, avg, new = broadcast["weights"][name], averaged[name], state["weights"][name]
    moved = (avg - old).abs() > 1e-4  # where eps is negligible against |g|
    assert moved.sum() > 0
    # the first Adam step moves every coordinate by server_lr in the direction of the average
    assert torch.allclose((new - old)[moved], 0.01 * torch.sign(avg - old)[moved], atol=1e-6)
    assert state["server_opt"]["step"] == 1


def test_plain_average_with_server_lr(synthetic_raw):
    method, ctx = setup(synthetic_raw, objective="simclr", server_lr=0.5)
    server, broadcast, upload = one_client(method, ctx)
    state, _ = method.server_update(server.state, upload.stats, {}, ctx)
    averaged = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}
    name = state["trainable"][0]
    assert torch.allclose(state["weights"][name], 0.5 * (broadcast["weights"][name] + averaged[name]))


@pytest.mark.parametrize("optimizer, lr", [("adam", 0.01), ("avg", 0.5)])
def test_server_step_of_every_tensor_over_two_rounds(synthetic_raw, optimizer, lr):
    """Two clients of different sizes, two rounds, BYOL with the UV head and the label classifier (so
    encoder, projector, predictor, UV projector, label classifier, UV rows and BYOL target are all
    there): every tensor of the new global state against the server step written out here, Adam's
    moments carried from round 1 to round 2. The BYOL target is not trained by gradients: it takes
    the plain weighted average of the clients' targets in both settings."""
    clients = [(DATA.train_x[0::3], DATA.train_y[0::3]), (DATA.train_x[1::5], DATA.train_y[1::5])]  # 27, 16
    sizes = [len(y) for _, y in clients]
    raw = {**synthetic_raw, "method": {"name": "fedavg", "objective": "byol", "uv": True, "labelled_fraction": 0.25,
                                       "server_optimizer": optimizer, "server_lr": lr}}
    scenario = resolve(raw)
    method = build_method(scenario, DataSpec(1, 28, 10, tuple(sizes)))
    workspace = method.make_workspace(torch.device("cpu"))
    state = Server(method).state
    trainable = set(state["trainable"])
    b1, b2, eps = 0.9, 0.999, 1e-8
    first, second = {}, {}  # the hand-carried Adam moments, by tensor name
    for round_index in (1, 2):
        ctx = RoundContext(round_index, 2, (0, 1), scenario["seed"], freeze(scenario))
        broadcast = method.broadcast(state, ctx)
        models, rows = [], []
        total = None
        for cid, (x, y) in enumerate(clients):
            upload = method.client_update(workspace, broadcast, None, ClientData(cid, x, y), ctx)
            models.append({k.split("/", 1)[1]: v.double() for k, v in upload.stats.average().items()
                           if k.startswith("weights/")})
            rows.append(workspace.parts["uv"].own_row.detach().double().clone())
            total = upload.stats if total is None else total + upload.stats
        new_state, _ = method.server_update(state, total, {}, ctx)

        # the pseudo-gradient of the rows: the clients' row deltas, each in its row, weighted by size
        old_rows = broadcast["heads"].double()
        delta = torch.zeros_like(old_rows)
        for cid in range(2):
            delta[cid] = sizes[cid] * (rows[cid] - old_rows[cid]) / sum(sizes)
        params = {k: v.double() for k, v in state["weights"].items()}
        params["uv_rows"] = old_rows
        averages = {k: sum(n * m[k] for n, m in zip(sizes, models)) / sum(sizes) for k in state["weights"]}
        averages["uv_rows"] = old_rows + delta
        got = {**new_state["weights"], "uv_rows": new_state["uv_rows"]}
        checked = set()
        for name, old in params.items():
            avg = averages[name]
            if name not in trainable and name != "uv_rows":  # the BYOL target
                assert name.startswith("target.")
                expected, moved = avg, torch.ones_like(avg, dtype=torch.bool)
            elif optimizer == "adam":
                grad = old - avg
                first[name] = b1 * first.get(name, 0) + (1 - b1) * grad
                second[name] = b2 * second.get(name, 0) + (1 - b2) * grad**2
                scale = (second[name] / (1 - b2**round_index)).sqrt()
                expected = old - lr * (first[name] / (1 - b1**round_index)) / (scale + eps)
                moved = scale > 3e-5 + 3e-4 * old.abs()  # elsewhere float32 rounding decides Adam's step
                assert moved.float().mean() > 0.5, name
            else:
                expected, moved = old + lr * (avg - old), torch.ones_like(avg, dtype=torch.bool)
            if name == "uv_rows":
                expected = expected / expected.norm(dim=1, keepdim=True)
            # Adam divides the float32 pseudo-gradient (a difference of nearby numbers) by its own
            # scale: a relative error of 1e-3 of the step is float32 rounding, an error in the rule is
            # of the order of the step itself
            tol = 1e-3 * lr if optimizer == "adam" and (name in trainable or name == "uv_rows") else 1e-7
            assert torch.allclose(got[name].double()[moved], expected[moved], atol=tol), name
            checked.add(name)
        assert checked == set(got)
        for part in ("online.encoder.", "online.projector.", "online.predictor.", "online.uv_projector.",
                     "online.label_classifier.", "target.encoder.", "target.projector."):
            assert any(k.startswith(part) for k in checked), part
        if optimizer == "adam":
            assert new_state["server_opt"]["step"] == round_index and new_state["uv_opt"]["step"] == round_index
        state = new_state


@pytest.mark.parametrize("optimizer", ["avg", "adam"])
def test_only_the_online_parameters_take_the_server_step_buffers_and_target_the_plain_average(optimizer):
    """``initial_state``'s trainable names are the online networks' parameters (no BatchNorm statistic,
    no target); ``averaged_weights`` steps those alone, a buffer and the target take the average, and an
    entry nobody uploaded (the step counter) keeps its value. By hand on a Linear + BatchNorm1d (the
    FedAvg scenarios above have no online buffer, so stepping every uploaded online tensor survived them)."""
    from methods.params import ServerOptimizerParams
    from methods.weight_averaging import averaged_weights, initial_state, weight_uploads
    torch.manual_seed(0)
    online = torch.nn.ModuleDict({"encoder": torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))})
    target = torch.nn.ModuleDict({"encoder": torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))})
    state = initial_state(online, target)
    assert state["trainable"] == ["online.encoder.0.weight", "online.encoder.0.bias", "online.encoder.1.weight",
                                  "online.encoder.1.bias"]
    uploaded = weight_uploads(state["weights"])
    assert "weights/online.encoder.1.num_batches_tracked" not in uploaded
    mean = {k: v + 0.5 for k, v in uploaded.items()}  # every average 0.5 above the global value
    config = ServerOptimizerParams(server_optimizer=optimizer, server_lr=0.1)
    new = averaged_weights(state, mean, config)["weights"]
    for name, old in state["weights"].items():
        if name.endswith("num_batches_tracked"):
            assert torch.equal(new[name], old), name
        elif name in state["trainable"]:  # avg: old + 0.1 x 0.5; adam's first step: old + lr x sign(0.5)
            torch.testing.assert_close(new[name], old + (0.05 if optimizer == "avg" else 0.1), msg=name)
        else:  # running statistics, the target
            torch.testing.assert_close(new[name], old + 0.5, msg=name)
