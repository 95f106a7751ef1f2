"""The local step of a method that trains an objective (``methods.objective_step.train_objective``):
the EMA target takes BYOL's step after every SGD step, from that step's online networks, and the
client uploads the last of that chain."""
import pytest
import torch

from methods import objective_step
from methods.base import ClientData
from simulator.context import RoundContext, freeze
from simulator.data.synthetic import make_synthetic
from simulator.federation import Server
from tests.methods.test_objectives import CLIENT, setup


def test_byol_target_is_an_ema_of_the_online_networks_inside_the_method(synthetic_raw):
    # one local step (one batch, one epoch): the uploaded target is m t0 + (1 - m) o1, o1 the uploaded
    # online networks, t0 the broadcast target (made different from the broadcast online networks)
    synthetic_raw["training"] = {**synthetic_raw["training"], "batch_size": 64}
    method, workspace, scenario = setup(synthetic_raw, objective="byol", target_momentum=0.9)
    ctx = RoundContext(1, 2, (CLIENT,), scenario["seed"], freeze(scenario))
    broadcast = method.broadcast(Server(method).state, ctx)
    torch.manual_seed(6)
    weights = {k: v + 0.05 * torch.randn_like(v) if k.startswith("target.") else v
               for k, v in broadcast["weights"].items()}
    data = make_synthetic(train_per_class=4, test_per_class=1, seed=1)
    upload = method.client_update(workspace, {"weights": weights}, None,
                                  ClientData(CLIENT, data.train_x, data.train_y), ctx)
    new = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}
    targets = [k for k in new if k.startswith("target.")]
    assert targets
    for k in targets:
        online = new["online." + k[len("target."):]]
        assert not torch.allclose(online, weights[k], atol=1e-5)
        assert torch.allclose(new[k], 0.9 * weights[k] + 0.1 * online, atol=1e-6), k


def test_byol_target_moves_after_every_local_step(synthetic_raw, monkeypatch):
    # several steps (40 samples in batches of 16: 16, 16, 8): the target takes one EMA step after each
    # SGD step, from the online networks of that step (BYOL's per-step EMA; EasyFL's too), and the
    # uploaded target is the last of that chain
    synthetic_raw["training"] = {**synthetic_raw["training"], "batch_size": 16}
    method, workspace, scenario = setup(synthetic_raw, objective="byol", target_momentum=0.9)
    ctx = RoundContext(1, 2, (CLIENT,), scenario["seed"], freeze(scenario))
    broadcast = method.broadcast(Server(method).state, ctx)
    chain, online_seen = [], []
    real_update = objective_step.ema_update

    def recorded(target, online, momentum):
        before = [t.detach().clone() for t in target.parameters()]
        real_update(target, online, momentum)
        online_seen.append([p.detach().clone() for name in target for p in online[name].parameters()])
        chain.append((before, [t.detach().clone() for t in target.parameters()]))

    monkeypatch.setattr(objective_step, "ema_update", recorded)
    data = make_synthetic(train_per_class=4, test_per_class=1, seed=1)
    upload = method.client_update(workspace, broadcast, None, ClientData(CLIENT, data.train_x, data.train_y), ctx)
    assert len(chain) == 3
    for (before, after), online in zip(chain, online_seen):
        for t0, t1, o in zip(before, after, online):
            assert torch.allclose(t1, 0.9 * t0 + 0.1 * o, atol=1e-6)
    assert not torch.allclose(online_seen[0][0], online_seen[-1][0])  # the online networks moved in between
    new = {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}
    uploaded = [new[name] for name, _ in workspace.target.named_parameters(prefix="target")]
    for got, expected in zip(uploaded, chain[-1][1]):
        assert torch.allclose(got, expected, atol=1e-6)
    # the last EMA step saw the online networks the client uploads (after its last SGD step)
    final_online = [new["online." + name] for name in workspace.target for name in
                    [f"{name}.{p}" for p, _ in workspace.target[name].named_parameters()]]
    for got, seen in zip(final_online, online_seen[-1]):
        assert torch.allclose(got, seen, atol=1e-6)


def test_a_client_draws_its_views_and_order_from_its_own_round_stream(synthetic_raw):
    """``ctx.client_generator(client_id)``: two clients holding the same samples in the same round
    train on different draws (views and batch order), and the same client again on the same ones."""
    method, workspace, scenario = setup(synthetic_raw, objective="simclr")
    ctx = RoundContext(1, 2, (CLIENT, CLIENT + 1), scenario["seed"], freeze(scenario))
    broadcast = method.broadcast(Server(method).state, ctx)
    data = make_synthetic(train_per_class=2, test_per_class=1, seed=1)
    uploads = [method.client_update(workspace, broadcast, None, ClientData(cid, data.train_x, data.train_y), ctx)
               for cid in (CLIENT, CLIENT + 1, CLIENT)]
    name = next(k for k in uploads[0].stats.sums if k.startswith("weights/online.encoder."))
    assert not torch.equal(uploads[0].stats.sums[name], uploads[1].stats.sums[name])
    assert torch.equal(uploads[0].stats.sums[name], uploads[2].stats.sums[name])


def test_a_client_trains_in_train_mode_whatever_mode_its_workspace_was_left_in(synthetic_raw):
    # a worker's workspace may be left in eval mode (FedSC's DP-CalR pass, Hetero-SSFL's RAD kernel): the
    # next client step still normalises the BatchNorm heads by batch statistics and moves their running
    # statistics, so its upload is the one a workspace in train mode gives
    synthetic_raw["model"] = {**synthetic_raw.get("model", {}), "head_norm": "batch"}
    method, workspace, scenario = setup(synthetic_raw, objective="simclr")
    ctx = RoundContext(1, 2, (CLIENT,), scenario["seed"], freeze(scenario))
    broadcast = method.broadcast(Server(method).state, ctx)
    data = make_synthetic(train_per_class=4, test_per_class=1, seed=1)
    uploads = []
    for mode in (True, False):
        workspace.online.train(mode)
        upload = method.client_update(workspace, broadcast, None, ClientData(CLIENT, data.train_x, data.train_y), ctx)
        uploads.append(upload.stats.sums)
    assert any(k.endswith("running_mean") for k in uploads[0])
    for key, value in uploads[0].items():
        assert torch.equal(value, uploads[1][key]), key


def test_the_client_logs_each_added_loss_term_beside_the_loss(synthetic_raw):
    # the step means of the loss and of its parts: the loss is their sum (UV on); the loss alone (UV off)
    synthetic_raw["training"] = {**synthetic_raw["training"], "batch_size": 16}
    data = make_synthetic(train_per_class=4, test_per_class=1, seed=1)
    # with labels (Algorithm 2), the semi-supervised loss's own parts, each batch's a sum to its loss
    semi = ["loss", "loss_label", "loss_objective", "loss_uv", "loss_within_class"]
    for settings, names in (({"uv": True}, ["loss", "loss_objective", "loss_uv"]), ({"uv": False}, ["loss"]),
                            ({"uv": True, "labelled_fraction": 0.5}, semi)):
        method, workspace, scenario = setup(synthetic_raw, objective="simclr", **settings)
        ctx = RoundContext(1, 2, (CLIENT,), scenario["seed"], freeze(scenario))
        upload = method.client_update(workspace, method.broadcast(Server(method).state, ctx), None,
                                      ClientData(CLIENT, data.train_x, data.train_y), ctx)
        assert sorted(upload.metrics) == names
        parts = [name for name in names if name != "loss"]
        if parts:
            assert all(upload.metrics[name] > 0.1 for name in parts)
            assert upload.metrics["loss"] == pytest.approx(sum(upload.metrics[name] for name in parts), rel=1e-6)


@pytest.mark.parametrize("objective, pipelines", [("byol", ["T", "T'"]), ("supervised", ["T"])])
def test_a_batch_s_second_view_is_augmented_by_augment_prime(synthetic_raw, objective, pipelines):
    """Each batch's first view comes from ``augment`` (T), its second from ``augment_prime`` (T', here
    with solarisation), in that order of draws; a one-view objective draws T alone."""
    synthetic_raw["augment_prime"] = {"solarize_prob": 1.0} if len(pipelines) == 2 else {}
    synthetic_raw["training"] = {**synthetic_raw["training"], "batch_size": 16}
    method, workspace, scenario = setup(synthetic_raw, objective=objective)
    made, seen = [], []

    def recording(name, augment):
        def augmented(batch, generator):
            made.append((name, augment(batch, generator)))
            return made[-1][1]
        return augmented

    workspace.augment = recording("T", workspace.augment)
    workspace.augment_prime = recording("T'", workspace.augment_prime)
    embed = method.objective.embed
    method.objective.embed = lambda online, target, views: seen.append(views) or embed(online, target, views)
    data = make_synthetic(train_per_class=4, test_per_class=1, seed=1)  # 40 samples: 3 batches
    ctx = RoundContext(1, 2, (CLIENT,), scenario["seed"], freeze(scenario))
    method.client_update(workspace, method.broadcast(Server(method).state, ctx), None,
                         ClientData(CLIENT, data.train_x, data.train_y), ctx)
    assert [name for name, _ in made] == pipelines * 3 and len(seen) == 3
    for step, views in enumerate(seen):
        assert len(views) == len(pipelines)
        assert all(view is made[len(pipelines) * step + i][1] for i, view in enumerate(views))


def test_a_batch_s_labels_are_its_samples_labels(synthetic_raw):
    """The supervised objective sees each batch's own labels: sample i's image is filled with i, so a
    batch's images name its samples, whose labels must be the ones the loss receives (labels taken in
    another order than the images survived every test)."""
    synthetic_raw["training"] = {**synthetic_raw["training"], "batch_size": 16}
    method, workspace, scenario = setup(synthetic_raw, objective="supervised")
    count = 40
    images = torch.arange(count, dtype=torch.uint8).view(count, 1, 1, 1).expand(count, 1, 28, 28).contiguous()
    labels = torch.randperm(count, generator=torch.Generator().manual_seed(0)) % 10
    seen, given = [], []
    views = workspace.views
    workspace.views = lambda batch, generator, n: seen.append(batch.clone()) or views(batch, generator, n)
    loss_parts = method.objective.rows_loss_parts
    method.objective.rows_loss_parts = lambda embedding, batch_labels, *rest: (
        given.append(batch_labels.clone()) or loss_parts(embedding, batch_labels, *rest))
    ctx = RoundContext(1, 2, (CLIENT,), scenario["seed"], freeze(scenario))
    method.client_update(workspace, method.broadcast(Server(method).state, ctx), None,
                         ClientData(CLIENT, images, labels), ctx)
    assert len(seen) == len(given) == 3
    for batch, batch_labels in zip(seen, given):
        samples = (batch[:, 0, 0, 0] * 255).round().long()
        assert sorted(samples.tolist()) == sorted(set(samples.tolist()))  # distinct samples: the images name them
        assert torch.equal(batch_labels, labels[samples])
