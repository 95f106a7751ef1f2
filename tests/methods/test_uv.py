"""Federated SimCLR (FedAvg with the UV head), in-process; its semi-supervised variant is in
``test_semi_supervised.py``."""
import math

import pytest
import torch

from methods import build_method
from methods.base import ClientData, DataSpec
from methods.base import ClientUpload
from methods.uv import ROWS_KEY, UVHead
from simulator.context import RoundContext, freeze
from simulator.data.synthetic import make_synthetic
from simulator.federation import Server
from simulator.scenario import resolve
from simulator.stats import Stats

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
    own = workspace.parts["uv"].own_row.detach()
    assert not torch.allclose(own, rows[CLIENT])
    assert torch.allclose(own.norm(), torch.tensor(1.0))
    assert torch.equal(workspace.parts["uv"].rows, rows)  # the other rows were kept fixed
    # the upload: the own row's delta in the client's row of a [num_clients x d] matrix, one row's bytes
    delta = upload.stats.average()[ROWS_KEY]
    others = [k for k in range(NUM_CLIENTS) if k != CLIENT]
    assert not delta[others].any()
    assert torch.allclose(delta[CLIENT], own - rows[CLIENT], atol=1e-7)
    assert upload.bytes_by_kind()["heads"] == 4 * 32
    assert upload.record is None
    # one client, plain average with server_lr 1: its row is the new global row; the others stay
    assert torch.allclose(state["uv_rows"][CLIENT], own, atol=1e-6)
    assert torch.allclose(state["uv_rows"][others], rows[others])
    assert torch.allclose(state["uv_rows"].norm(dim=1), torch.ones(NUM_CLIENTS))
    # the UV projector is trained and averaged like the other networks
    new = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items() if k.startswith("weights/")}
    assert not torch.allclose(new["online.uv_projector.0.weight"], broadcast["weights"]["online.uv_projector.0.weight"])


def test_the_own_row_is_projected_back_after_every_local_step(synthetic_raw, monkeypatch):
    # projected SGD: each step starts from a unit row (40 samples in batches of 16: three steps)
    synthetic_raw["training"] = {**synthetic_raw["training"], "batch_size": 16}
    method, ctx = setup(synthetic_raw)
    norms_before_projection = []
    project = UVHead.project_row

    def recorded(head):
        norms_before_projection.append(head.own_row.detach().norm().item())
        project(head)

    monkeypatch.setattr(UVHead, "project_row", recorded)
    workspace, _, _, _ = client_round(method, ctx)
    assert len(norms_before_projection) == 3
    assert all(abs(norm - 1) > 1e-6 for norm in norms_before_projection)  # each step left the sphere
    assert torch.allclose(workspace.parts["uv"].own_row.detach().norm(), torch.tensor(1.0))


# ---- the rows' server step on a hand-computed example: 3 clients, rows in 2-d ------------------
SIZES = (30, 10, 20)
ROWS = [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]


def normalise(row):
    norm = math.sqrt(sum(x * x for x in row))
    return [x / norm for x in row]


def hand_setup(synthetic_raw, **method):
    synthetic_raw["model"] = {**synthetic_raw["model"], "projector_dim": 2}
    raw = {**synthetic_raw, "method": {"name": "fedavg", "objective": "simclr", "uv": True, **method}}
    scenario = resolve(raw)
    method = build_method(scenario, DataSpec(1, 28, 10, SIZES))
    state = {**method.init_state(), "uv_rows": torch.tensor(ROWS)}
    return method, state, RoundContext(1, 2, (0, 1, 2), scenario["seed"], freeze(scenario))


def hand_round(method, state, ctx, new_rows):
    """Clients ``new_rows`` (id -> the row it trained) upload as FedAvg's clients do (unchanged
    weights, the row delta through UVHead); the server step; returns the new state."""
    total = None
    for cid, row in new_rows.items():
        head = UVHead(len(SIZES), 2)
        head.load(state["uv_rows"], cid)
        head.own_row.data.copy_(torch.tensor(row))
        tensors = {f"weights/{k}": v for k, v in state["weights"].items()}
        tensors[ROWS_KEY] = head.delta_matrix()
        upload = ClientUpload(stats=Stats.from_tensors(tensors, SIZES[cid]), sparse_rows=(ROWS_KEY,))
        assert upload.bytes_by_kind()["heads"] == 4 * 2  # one row
        total = upload.stats if total is None else total + upload.stats
    state, _ = method.server_update(state, total, {}, ctx)
    return state


def mean_delta(rows, new_rows):
    """The pseudo-gradient's negative: sum_j n_j (new_j - row_j) e_j / sum_j n_j over the reporters."""
    mass = sum(SIZES[c] for c in new_rows)
    return [[SIZES[k] * (new_rows[k][i] - rows[k][i]) / mass if k in new_rows else 0.0 for i in range(2)]
            for k in range(len(rows))]


def test_uv_rows_take_the_server_adam_step_with_moments_carried(synthetic_raw):
    lr, (b1, b2), eps = 0.1, (0.9, 0.999), 1e-8
    method, state, ctx = hand_setup(synthetic_raw, server_optimizer="adam", server_lr=lr)
    # round 1: clients 0 and 2 report; client 1 does not (delta 0)
    round1 = {0: [0.8, 0.6], 2: [0.0, 1.0]}
    state = hand_round(method, state, ctx, round1)
    # mean delta: row 0 = 30/50 [-0.2, 0.6], row 1 = 0, row 2 = 20/50 [-0.6, 0.2]; Adam's first step
    # moves each coordinate by lr in the direction of the delta (0 where it is 0); then unit norm
    expected1 = [normalise([0.9, 0.1]), [0.0, 1.0], normalise([0.5, 0.9])]
    assert torch.allclose(state["uv_rows"], torch.tensor(expected1), atol=1e-6)
    # round 2: clients 1 and 2 report; row 0 still moves, by Adam's first moment
    rows1 = state["uv_rows"].tolist()
    round2 = {1: normalise([0.3, 0.9]), 2: normalise([rows1[2][0] - 0.1, rows1[2][1]])}
    state = hand_round(method, state, ctx, round2)
    g1 = [[-d for d in row] for row in mean_delta(ROWS, round1)]
    g2 = [[-d for d in row] for row in mean_delta(rows1, round2)]
    expected2 = []
    for k in range(3):
        row = []
        for i in range(2):
            m = b1 * (1 - b1) * g1[k][i] + (1 - b1) * g2[k][i]
            v = b2 * (1 - b2) * g1[k][i] ** 2 + (1 - b2) * g2[k][i] ** 2
            row.append(rows1[k][i] - lr * (m / (1 - b1**2)) / (math.sqrt(v / (1 - b2**2)) + eps))
        expected2.append(normalise(row))
    assert torch.allclose(state["uv_rows"], torch.tensor(expected2), atol=1e-5)
    assert not torch.allclose(state["uv_rows"][0], torch.tensor(rows1[0]), atol=1e-3)
    assert state["uv_opt"]["step"] == 2


def test_uv_rows_take_the_plain_average_step_with_server_lr(synthetic_raw):
    method, state, ctx = hand_setup(synthetic_raw, server_lr=0.5)
    state = hand_round(method, state, ctx, {0: [0.8, 0.6], 2: [0.0, 1.0]})
    # rows + 0.5 * mean delta, then unit norm
    expected = [normalise([1 - 0.5 * 0.12, 0.5 * 0.36]), [0.0, 1.0], normalise([0.6 - 0.5 * 0.24, 0.8 + 0.5 * 0.08])]
    assert torch.allclose(state["uv_rows"], torch.tensor(expected), atol=1e-6)
    assert state["uv_opt"] is None
    # server_lr 1 with a single client: its row is the new global row
    method, state, ctx = hand_setup(synthetic_raw, server_lr=1.0)
    state = hand_round(method, state, ctx, {1: normalise([0.5, 0.5])})
    assert torch.allclose(state["uv_rows"], torch.tensor([ROWS[0], normalise([0.5, 0.5]), ROWS[2]]), atol=1e-6)


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


@pytest.mark.parametrize("method, message", [
    ({"objective": "supervised"}, "method.uv: expected false"),
    ({"uv_weight": -1.0}, "method.uv_weight: expected a non-negative number"),
])
def test_bad_values_are_one_line_errors(synthetic_raw, method, message):
    with pytest.raises(ValueError, match=message):
        setup(synthetic_raw, **method)


def test_uv_head_loads_the_own_row_and_puts_it_in_its_own_place_only():
    rows = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    head = UVHead(3, 2)
    head.load(rows, client_id=1)
    assert torch.equal(head.own_row.detach(), rows[1])
    head.own_row.data.copy_(torch.tensor([0.8, 0.6]))
    assert torch.equal(head.weights().detach(), torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8]]))


def test_uv_term_takes_one_view_each_through_the_projector():
    # the term is uv_weight * (CE(view 1) + CE(view 2)) with each view's features projected
    from methods.uv import UVTerm
    rows = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    head = UVHead(2, 2)
    head.load(rows, client_id=0)
    term = UVTerm(head, torch.nn.Identity(), 0.5)
    e = math.e
    loss = term.loss({"features": (torch.tensor([[2.0, 0.0]]), torch.tensor([[0.0, 3.0]]))})
    # view 1 logits (1, 0), view 2 logits (0, 1), label 0
    expected = 0.5 * (-math.log(e / (e + 1)) - math.log(1 / (1 + e)))
    assert math.isclose(loss.item(), expected, rel_tol=1e-6)


def test_uv_is_refused_with_centralized_training(synthetic_raw):
    synthetic_raw["training"] = {**synthetic_raw["training"], "centralized": True}
    with pytest.raises(ValueError, match="method.uv: expected false with training.centralized"):
        setup(synthetic_raw)
