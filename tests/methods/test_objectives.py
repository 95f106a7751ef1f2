"""Every loss term as the method computes it (the objective composed with the method's extensions,
:func:`methods.objective_step.composed_loss`, as its client step does: the objective's ``embed``
and ``rows_loss``, the UV head), against a reference written out here from
the papers' formulas: values (sign, pairing of views) and gradients of every online parameter
(stop-gradients, which networks are trained). The semi-supervised terms are checked with these
helpers in ``test_semi_supervised.py``, the EMA target of the local step in
``test_objective_step.py``."""
import pytest
import torch
import torch.nn.functional as F

from methods import build_method
from methods.base import ClientData, DataSpec
from methods.objective_step import composed_loss
from simulator.context import RoundContext, freeze
from simulator.data.synthetic import make_synthetic
from simulator.federation import Server
from simulator.scenario import resolve

NUM_CLIENTS, CLIENT, BATCH = 4, 2, 6
GENERATOR = torch.Generator().manual_seed(11)
VIEWS = [torch.rand(BATCH, 1, 28, 28, generator=GENERATOR) for _ in range(2)]  # two different views
LABELS = torch.tensor([0, 1, 0, 2, 1, 0])


def setup(synthetic_raw, **method):
    raw = {**synthetic_raw, "method": {"name": "fedavg", **method}}
    scenario = resolve(raw)
    method = build_method(scenario, DataSpec(1, 28, 10, (40,) * NUM_CLIENTS))
    workspace = method.make_workspace(torch.device("cpu"))
    torch.manual_seed(5)
    if workspace.target is not None:  # a target that differs from the online networks
        with torch.no_grad():
            for t in workspace.target.parameters():
                t.add_(0.05 * torch.randn_like(t))
    rows = F.normalize(torch.randn(NUM_CLIENTS, 32), dim=1)
    data = ClientData(CLIENT, torch.zeros(BATCH, 1, 28, 28, dtype=torch.uint8), LABELS)
    ctx = RoundContext(1, 2, (CLIENT,), scenario["seed"], freeze(scenario))
    workspace.terms = [extension.bind(workspace, method.objective, {"heads": rows}, data, ctx)
                       for extension in method.extensions]  # the extensions as the client step binds them
    return method, workspace, scenario


def method_loss(method, workspace, views, labelled=None, rows=None):
    """The batch loss the client step trains on (``labelled``: which of the client's samples are
    labelled; ``rows``: the batch's rows among them, by default the first ``BATCH``)."""
    for term in workspace.terms:
        if labelled is not None and hasattr(term, "labelled"):
            term.labelled = labelled
    return composed_loss(method.objective, workspace, workspace.terms)(
        views, LABELS, torch.arange(BATCH) if rows is None else rows)[0]


def trainable(workspace):
    params = dict(workspace.online.named_parameters())
    if "uv" in workspace.parts:
        params["uv_head.own_row"] = workspace.parts["uv"].own_row
    return params


def value_and_grads(workspace, loss_fn):
    params = trainable(workspace)
    for p in params.values():
        p.grad = None
    loss = loss_fn()
    loss.backward()
    grads = {k: None if p.grad is None else p.grad.clone() for k, p in params.items()}
    for p in params.values():
        p.grad = None
    return loss.detach(), grads


def cos(a, b):
    return (a / a.norm(dim=1, keepdim=True) * (b / b.norm(dim=1, keepdim=True))).sum(1)


def reference_nt_xent(z1, z2, temperature):
    z = torch.cat([z1, z2])
    z = z / z.norm(dim=1, keepdim=True)
    n = len(z1)
    terms = []
    for i in range(2 * n):
        positive = (i + n) % (2 * n)
        others = torch.stack([z[i] @ z[k] / temperature for k in range(2 * n) if k != i])
        terms.append(-(z[i] @ z[positive] / temperature - torch.logsumexp(others, 0)))
    return torch.stack(terms).mean()


def reference_spectral(z1, z2, mu):
    if mu > 0:
        z1, z2 = (z * torch.clamp(mu**0.5 / z.norm(dim=1, keepdim=True), max=1.0) for z in (z1, z2))
    b = len(z1)
    correlation = (z1.T @ z1 + z2.T @ z2) / (2 * b)
    return -(z1 * z2).sum() / b + 0.5 * (correlation**2).sum()


def reference_objective(name, online, target, views, rows, config):
    """The objective's loss on the rows ``rows`` of the batch, from the modules themselves."""
    v1, v2 = (v[rows] for v in views)
    h1, h2 = online["encoder"](v1), online["encoder"](v2)
    z1, z2 = online["projector"](h1), online["projector"](h2)
    if name == "simclr":
        return reference_nt_xent(z1, z2, config.temperature)
    if name == "spectral":
        return reference_spectral(z1, z2, config.clip_mu)
    p1, p2 = online["predictor"](z1), online["predictor"](z2)
    if name == "byol":  # the prediction of each view regresses the TARGET projection of the other
        with torch.no_grad():
            t1 = target["projector"](target["encoder"](v1))
            t2 = target["projector"](target["encoder"](v2))
        return ((2 - 2 * cos(p1, t2)).mean() + (2 - 2 * cos(p2, t1)).mean()) / 2
    if name == "simsiam":  # the prediction of each view against the stop-grad projection of the other
        return -(cos(p1, z2.detach()).mean() + cos(p2, z1.detach()).mean()) / 2
    raise ValueError(name)


def assert_same_grads(got, expected):
    assert got.keys() == expected.keys()
    for name in got:
        if expected[name] is None:
            assert got[name] is None or not got[name].any(), name
        else:
            assert got[name] is not None, name
            assert torch.allclose(got[name], expected[name], rtol=1e-4, atol=1e-6), name


def assert_trained(grads, prefixes):
    """Every parameter under each prefix receives a nonzero gradient."""
    for prefix in prefixes:
        names = [k for k in grads if k.startswith(prefix + ".")]
        assert names, prefix
        for name in names:
            assert grads[name] is not None and grads[name].abs().sum() > 0, name


@pytest.mark.parametrize("objective, extra", [("simclr", {"temperature": 0.3}), ("spectral", {"clip_mu": 0.0}),
                                              ("spectral", {"clip_mu": 0.5}), ("byol", {}), ("simsiam", {})])
def test_objective_loss_inside_the_method(synthetic_raw, objective, extra):
    method, workspace, _ = setup(synthetic_raw, objective=objective, **extra)
    online, target = workspace.online, workspace.target
    got, got_grads = value_and_grads(workspace, lambda: method_loss(method, workspace, VIEWS))
    all_rows = torch.arange(BATCH)
    expected, expected_grads = value_and_grads(
        workspace, lambda: reference_objective(objective, online, target, VIEWS, all_rows, method.config))
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert_same_grads(got_grads, expected_grads)
    trained = ["encoder", "projector"] + (["predictor"] if objective in ("byol", "simsiam") else [])
    assert_trained(got_grads, trained)
    if target is not None:
        assert all(t.grad is None for t in target.parameters())


@pytest.mark.parametrize("objective", ["byol", "simsiam"])
def test_predictions_pair_with_the_other_view(synthetic_raw, objective):
    # what a version pairing each prediction with its own view would compute: different from the
    # method's loss (so the value check above tells them apart)
    method, workspace, _ = setup(synthetic_raw, objective=objective)
    online, target = workspace.online, workspace.target
    with torch.no_grad():
        got = method_loss(method, workspace, VIEWS)
        z = [online["projector"](online["encoder"](v)) for v in VIEWS]
        p = [online["predictor"](zi) for zi in z]
        reference = z if target is None else [target["projector"](target["encoder"](v)) for v in VIEWS]
        same_view = -(cos(p[0], reference[0]).mean() + cos(p[1], reference[1]).mean()) / 2
        if objective == "byol":
            same_view = 2 + 2 * same_view
    assert not torch.allclose(got, same_view, atol=1e-4)


def test_simsiam_stop_gradient_changes_the_gradient(synthetic_raw):
    # without the stop-gradient the loss value is the same but the projector's and encoder's gradients
    # differ: the gradient check of test_objective_loss_inside_the_method tells them apart
    method, workspace, _ = setup(synthetic_raw, objective="simsiam")
    online = workspace.online

    def no_stop_gradient():
        z = [online["projector"](online["encoder"](v)) for v in VIEWS]
        p = [online["predictor"](zi) for zi in z]
        return -(cos(p[0], z[1]).mean() + cos(p[1], z[0]).mean()) / 2

    _, got = value_and_grads(workspace, lambda: method_loss(method, workspace, VIEWS))
    _, wrong = value_and_grads(workspace, no_stop_gradient)
    name = "encoder.0.weight" if "encoder.0.weight" in got else next(k for k in got if k.startswith("encoder."))
    assert not torch.allclose(got[name], wrong[name], rtol=1e-3, atol=1e-6)


def test_supervised_objective_inside_the_method(synthetic_raw):
    method, workspace, _ = setup(synthetic_raw, objective="supervised")
    online = workspace.online
    got, got_grads = value_and_grads(workspace, lambda: method_loss(method, workspace, VIEWS[:1]))

    def reference():
        logits = online["classifier"](online["encoder"](VIEWS[0]))
        return -logits.log_softmax(1)[torch.arange(BATCH), LABELS].mean()

    expected, expected_grads = value_and_grads(workspace, reference)
    assert torch.allclose(got, expected, rtol=1e-5)
    assert_same_grads(got_grads, expected_grads)
    rows = torch.tensor([4, 1, 3])  # a subset of the batch (``rows_loss``' contract): the rows' own labels
    with torch.no_grad():
        subset = method.objective.rows_loss(method.objective.embed(online, None, VIEWS[:1]), LABELS, rows)
        logits = online["classifier"](online["encoder"](VIEWS[0][rows]))
        assert torch.allclose(subset, -logits.log_softmax(1)[torch.arange(3), LABELS[rows]].mean(), rtol=1e-5)


def reference_uv(online, own_row, rows, views, client):
    """-(mean log r(s | u1) + mean log r(s | u2)) with the cosine classifier; only row ``client`` is
    ``own_row`` (the trainable one), the others are the fixed ``rows``."""
    weights = torch.cat([rows[:client], own_row.unsqueeze(0), rows[client + 1:]])
    weights = weights / weights.norm(dim=1, keepdim=True)
    total = 0
    for v in views:
        u = online["uv_projector"](online["encoder"](v))
        u = u / u.norm(dim=1, keepdim=True)
        total = total - (u @ weights.T).log_softmax(1)[:, client].mean()
    return total


@pytest.mark.parametrize("objective", ["simclr", "byol"])
def test_uv_term_enters_with_plus_uv_weight_and_trains_only_the_own_row(synthetic_raw, objective):
    method, workspace, _ = setup(synthetic_raw, objective=objective, uv=True, uv_weight=0.7)
    online, target, head = workspace.online, workspace.target, workspace.parts["uv"]
    got, got_grads = value_and_grads(workspace, lambda: method_loss(method, workspace, VIEWS))
    all_rows = torch.arange(BATCH)

    def reference():
        return (reference_objective(objective, online, target, VIEWS, all_rows, method.config)
                + 0.7 * reference_uv(online, head.own_row, head.rows, VIEWS, CLIENT))

    expected, expected_grads = value_and_grads(workspace, reference)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert_same_grads(got_grads, expected_grads)
    assert_trained(got_grads, ["uv_projector", "uv_head"])
    assert not head.rows.requires_grad  # the other clients' rows are constants
    with torch.no_grad():  # the UV term makes a difference (so its sign is checked by the value)
        assert (reference_uv(online, head.own_row, head.rows, VIEWS, CLIENT) > 0.1).item()


def test_the_uv_term_and_the_objective_are_the_logged_parts_of_the_loss(synthetic_raw):
    method, workspace, _ = setup(synthetic_raw, objective="simclr", uv=True, uv_weight=0.7)
    online, target, head = workspace.online, workspace.target, workspace.parts["uv"]
    total, parts = composed_loss(method.objective, workspace, workspace.terms)(VIEWS, LABELS, torch.arange(BATCH))
    with torch.no_grad():
        objective = reference_objective("simclr", online, target, VIEWS, torch.arange(BATCH), method.config)
        uv = 0.7 * reference_uv(online, head.own_row, head.rows, VIEWS, CLIENT)
    assert sorted(parts) == ["loss_objective", "loss_uv"]
    torch.testing.assert_close(parts["loss_objective"].detach(), objective, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(parts["loss_uv"].detach(), uv, rtol=1e-5, atol=1e-6)
    assert total.item() == (parts["loss_objective"] + parts["loss_uv"]).item()
    plain, plain_workspace, _ = setup(synthetic_raw, objective="simclr")
    _, parts = composed_loss(plain.objective, plain_workspace, plain_workspace.terms)(VIEWS, LABELS,
                                                                                       torch.arange(BATCH))
    assert parts == {}  # nothing added: the loss is its only part


@pytest.mark.parametrize("objective,head_norm", [("byol", "none"), ("byol", "batch"), ("simsiam", "group")])
def test_heads_normalise_their_hidden_layer_as_head_norm_says(synthetic_raw, objective, head_norm):
    # BYOL's projector and predictor (Grill et al. 2020, section 3.3): Linear -> BatchNorm1d -> ReLU ->
    # Linear; the hidden layer standardised over the batch with the batch's own statistics. The SimSiam
    # heads of Louizos et al. 2024 (Appendix A): a GroupNorm instead, each sample's hidden units
    # standardised within groups (at most 32 groups of at least 4 units: 16 groups of the 64 here)
    synthetic_raw["model"] = {**synthetic_raw.get("model", {}), "head_norm": head_norm}
    method, workspace, _ = setup(synthetic_raw, objective=objective)
    online = workspace.online
    h = online["encoder"](VIEWS[0])
    for head, x in (("projector", h), ("predictor", online["projector"](h))):
        layers = list(online[head])
        first, last = layers[0], layers[-1]
        pre = x @ first.weight.T + first.bias
        if head_norm == "batch":
            assert [type(m).__name__ for m in layers] == ["Linear", "BatchNorm1d", "ReLU", "Linear"]
            pre = (pre - pre.mean(0)) / torch.sqrt(pre.var(0, unbiased=False) + 1e-5)
        elif head_norm == "group":
            assert [type(m).__name__ for m in layers] == ["Linear", "GroupNorm", "ReLU", "Linear"]
            groups = pre.reshape(len(pre), 16, 4)
            groups = (groups - groups.mean(2, keepdim=True)) / torch.sqrt(groups.var(2, unbiased=False,
                                                                                    keepdim=True) + 1e-5)
            pre = groups.reshape(pre.shape) * layers[1].weight + layers[1].bias
        else:
            assert [type(m).__name__ for m in layers] == ["Linear", "ReLU", "Linear"]
        expected = pre.clamp_min(0) @ last.weight.T + last.bias
        assert torch.allclose(online[head](x), expected, atol=1e-5), head
    # the normalisation's running statistics travel with the weights (broadcast and upload); its step
    # counter stays home (it grows every round and would overflow the fixed-point sum of long runs)
    ctx = RoundContext(1, 2, (CLIENT,), 0, freeze(resolve(synthetic_raw)))
    broadcast = method.broadcast(Server(method).state, ctx)
    data = make_synthetic(train_per_class=4, test_per_class=1, seed=1)
    uploaded = method.client_update(workspace, broadcast, None, ClientData(CLIENT, data.train_x, data.train_y),
                                    ctx).stats.average()
    for names in (broadcast["weights"], [name.split("/", 1)[1] for name in uploaded]):
        assert any(name.endswith("projector.1.running_mean") for name in names) == (head_norm == "batch")
    assert not any(name.endswith("num_batches_tracked") for name in uploaded)


def test_objectives_are_chosen_by_what_they_build(monkeypatch):
    """A method needing a predictor (Hetero-SSFL) or a predictor and an EMA target (FedU, FedEMA) takes
    every objective that builds them, not a list of names: one added to ``OBJECTIVES`` is taken too."""
    from methods.objectives import BYOL, OBJECTIVES, objectives_with
    assert objectives_with(has_predictor=True) == ["byol", "simsiam"]
    assert objectives_with(uses_target=True, has_predictor=True) == ["byol"]
    assert objectives_with(has_predictor=False, uses_labels=False) == ["simclr", "spectral"]
    encoder = torch.nn.Linear(3, 3)
    encoder.out_dim = 3
    for name, cls in OBJECTIVES.items():  # what each builds agrees with its flag
        built = cls(None, {"hidden_dim": 8, "projector_dim": 4, "head_norm": "none"}, 10).build(encoder)
        assert ("predictor" in built) == cls.has_predictor, name
    monkeypatch.setitem(OBJECTIVES, "byol_copy", type("ByolCopy", (BYOL,), {"name": "byol_copy"}))
    assert objectives_with(uses_target=True, has_predictor=True) == ["byol", "byol_copy"]


def test_only_the_two_view_objectives_draw_two_views():
    """``draws_two_views``: True for the SSL objectives, False for the supervised one (one view) and for a
    name that is no objective (as its docstring says, not a KeyError)."""
    from methods.objectives import draws_two_views
    assert [draws_two_views(name) for name in ("simclr", "spectral", "byol", "simsiam")] == [True] * 4
    assert draws_two_views("supervised") is False
    assert draws_two_views("no_such_objective") is False


def test_the_supervised_classifier_has_one_output_per_class_of_the_data():
    """``build_objective`` hands the data's class count to the objective: 7 classes -> 7 logits (not the
    10 of every other test's data)."""
    from types import SimpleNamespace

    from methods.objectives import build_objective
    encoder = torch.nn.Linear(3, 5)
    encoder.out_dim = 5
    model = {"hidden_dim": 8, "projector_dim": 4, "head_norm": "none"}
    objective = build_objective(SimpleNamespace(objective="supervised"), {"model": model}, 7)
    classifier = objective.build(encoder)["classifier"]
    assert (classifier.in_features, classifier.out_features) == (5, 7)

