"""Federated SimCLR (FedAvg with the UV head) and its semi-supervised variant, in-process."""
import numpy as np
import pytest
import torch

from methods import build_method
from methods.base import ClientData, DataSpec
from methods.losses import nt_xent
from methods.losses.supervised_contrastive import within_class_loss
from methods.semi_supervised import (labelled_mask, labelled_positions, labelled_train_indices,
                                     semi_supervised_loss)
from methods.uv import UVHead
from simulator.context import RoundContext, freeze
from simulator.data.partition import make_partition
from simulator.data.synthetic import make_synthetic
from simulator.federation import Server
from simulator.scenario import resolve

DATA = make_synthetic(train_per_class=4, test_per_class=1, seed=1)
NUM_CLIENTS = 6
CLIENT = 3


def setup(synthetic_raw, **method):
    raw = {**synthetic_raw, "method": {"name": "fedavg", "objective": "simclr", "uv": True, **method}}
    scenario = resolve(raw)
    method = build_method(scenario, DataSpec(1, 28, 10, (40,) * NUM_CLIENTS))
    ctx = RoundContext(1, 2, (CLIENT,), scenario["seed"], freeze(scenario))
    return method, ctx


def client_round(method, ctx):
    server = Server(method)
    workspace = method.make_workspace(torch.device("cpu"))
    broadcast = method.broadcast(server.state, ctx)
    upload = method.client_update(workspace, broadcast, None, ClientData(CLIENT, DATA.train_x, DATA.train_y), ctx)
    state, _ = method.server_update(server.state, upload.stats, {CLIENT: upload.record}, ctx)
    return workspace, broadcast, upload, state


@pytest.mark.parametrize("objective", ["simclr", "spectral", "simsiam"])
def test_a_client_changes_only_its_own_row_and_rows_stay_unit_norm(synthetic_raw, objective):
    method, ctx = setup(synthetic_raw, objective=objective)
    workspace, broadcast, upload, state = client_round(method, ctx)
    rows = broadcast["heads"]
    assert rows.shape == (NUM_CLIENTS, 32)  # model.projector_dim of the tiny scenario
    assert torch.allclose(rows.norm(dim=1), torch.ones(NUM_CLIENTS))
    own = upload.record["heads"]
    assert not torch.allclose(own, rows[CLIENT])
    assert torch.allclose(own.norm(), torch.tensor(1.0))
    assert torch.equal(workspace.uv_head.rows, rows)  # the other rows were kept fixed
    others = [k for k in range(NUM_CLIENTS) if k != CLIENT]
    assert torch.equal(state["uv_rows"][others], rows[others])
    assert torch.equal(state["uv_rows"][CLIENT], own)
    assert upload.bytes_by_kind()["heads"] == 4 * 32
    # the UV projector is trained and averaged like the other networks
    new = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}
    assert not torch.allclose(new["online.uv_projector.0.weight"], broadcast["weights"]["online.uv_projector.0.weight"])


def test_rows_are_written_back_while_the_weights_take_the_adam_step(synthetic_raw):
    method, ctx = setup(synthetic_raw, server_optimizer="adam", server_lr=0.01)
    _, broadcast, upload, state = client_round(method, ctx)
    assert torch.equal(state["uv_rows"][CLIENT], upload.record["heads"])
    assert "online.uv_projector.0.weight" in state["trainable"]
    name = "online.uv_projector.0.weight"
    step = state["weights"][name] - broadcast["weights"][name]
    assert step.abs().max() <= 0.01 + 1e-6  # Adam's first step is at most server_lr per coordinate


def test_uv_weight_zero_is_local_simclr_with_an_untrained_projector(synthetic_raw):
    local, ctx = setup(synthetic_raw, uv=False)
    uv_off, _ = setup(synthetic_raw, uv_weight=0.0)
    _, _, local_upload, _ = client_round(local, ctx)
    _, _, off_upload, _ = client_round(uv_off, ctx)
    local_avg, off_avg = local_upload.stats.average(), off_upload.stats.average()
    for key in local_avg:  # the UV projector exists but gets no gradient: the rest is plain SimCLR
        assert torch.allclose(local_avg[key], off_avg[key], atol=1e-5), key


def test_uv_head_gradient_reaches_only_the_own_row():
    head = UVHead(4, 3)
    head.load(torch.nn.functional.normalize(torch.randn(4, 3), dim=1), client_id=2)
    u = torch.randn(5, 3, requires_grad=True)
    head.loss(u, u.flip(0)).backward()
    assert head.own_row.grad is not None and head.own_row.grad.abs().sum() > 0
    assert not head.rows.requires_grad
    head.own_row.data.mul_(3.0)
    head.project_row()
    assert torch.allclose(head.own_row.norm(), torch.tensor(1.0))


def test_semi_supervised_loss_is_algorithm_2(synthetic_raw):
    method, _ = setup(synthetic_raw, uv=False, labelled_fraction=0.5)
    workspace = method.make_workspace(torch.device("cpu"))
    online = workspace.online
    views = [DATA.train_x[:8].float() / 255, DATA.train_x[:8].flip(3).float() / 255]
    labels = torch.tensor([0, 1, 0, 2, 1, 0, 3, 3])
    labelled = torch.tensor([True, True, False, True, True, False, False, True])
    embedding = method.objective.embed(online, None, views)
    z1, z2 = embedding["z"]
    h1, h2 = embedding["features"]
    lab, unl = labelled.nonzero().squeeze(1), (~labelled).nonzero().squeeze(1)
    ce = torch.nn.functional.cross_entropy
    expected = (nt_xent(z1[unl], z2[unl], 0.5)
                + within_class_loss(lambda r: nt_xent(z1[lab][r], z2[lab][r], 0.5), labels[lab])
                + ce(online["label_classifier"](h1[lab]), labels[lab])
                + ce(online["label_classifier"](h2[lab]), labels[lab]))
    got = semi_supervised_loss(method.objective, embedding, labels, labelled, online["label_classifier"])
    assert torch.allclose(got, expected)


def test_semi_supervised_client_trains_the_label_classifier(synthetic_raw):
    method, ctx = setup(synthetic_raw, labelled_fraction=0.25)
    _, broadcast, upload, _ = client_round(method, ctx)
    new = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}
    name = "online.label_classifier.weight"
    assert not torch.allclose(new[name], broadcast["weights"][name])


def test_labelled_subset_is_fixed_per_client_and_rebuildable_from_the_partition():
    mask = labelled_mask(7, 2, 50, 0.1)
    assert mask.sum() == 5 and torch.equal(mask, labelled_mask(7, 2, 50, 0.1))
    assert not torch.equal(mask, labelled_mask(7, 3, 50, 0.1))
    labels = np.repeat(np.arange(10), 30)
    partition = make_partition("dirichlet", labels, 5, seed=7, alpha=0.5)
    indices = labelled_train_indices(partition, 7, 0.1)
    expected = [partition.indices[c][labelled_mask(7, c, len(partition.indices[c]), 0.1).numpy()]
                for c in range(5)]
    assert np.array_equal(indices, np.sort(np.concatenate(expected)))
    assert len(indices) == sum(len(labelled_positions(7, c, len(partition.indices[c]), 0.1)) for c in range(5))


@pytest.mark.parametrize("method, message", [
    ({"objective": "supervised"}, "method.uv: expected false"),
    ({"uv_weight": -1.0}, "method.uv_weight: expected a non-negative number"),
    ({"uv": False, "labelled_fraction": 1.5}, r"method.labelled_fraction: expected a fraction in \[0, 1\]"),
    ({"uv": False, "objective": "supervised", "labelled_fraction": 0.1}, "method.labelled_fraction: expected 0"),
])
def test_bad_values_are_one_line_errors(synthetic_raw, method, message):
    with pytest.raises(ValueError, match=message):
        setup(synthetic_raw, **method)
