"""Orchestra's client and server steps, in-process (no Ray), against hand computations."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F

from methods import build_method
from methods.base import ClientData, DataSpec
from methods.local_training import copy_into
from methods.orchestra import RecentProjections, orchestra_projector
from methods.sinkhorn import equal_size_clustering
from simulator.augment import to_float
from simulator.context import RoundContext, derive_seed, freeze
from simulator.data.synthetic import make_synthetic
from simulator.federation import Server, simulate_clients
from simulator.models import build_encoder, mlp
from simulator.scenario import resolve

SIZE = 16
DATA = make_synthetic(train_per_class=4, test_per_class=1, image_size=SIZE, seed=1)  # 40 samples
PARTS = (slice(0, None, 2), slice(1, None, 4), slice(3, None, 4))
CLIENTS = [(DATA.train_x[part], DATA.train_y[part]) for part in PARTS]  # 20, 10, 10 samples
LOCAL, GLOBAL, DIM = 4, 6, 16


RAW = {"name": "tiny-orchestra", "seed": 3, "dataset": {"name": "synthetic"},
       "population": {"num_clients": 3, "clients_per_round": 2},
       "model": {"hidden_dim": 32, "projector_dim": DIM},
       "training": {"rounds": 2, "batch_size": 8, "lr": 0.05}}


def setup(training=None, sections=None, **method):
    """The method of ``RAW`` with these ``training`` keys, top-level ``sections`` and ``method`` keys."""
    raw = {**RAW, **(sections or {}), "training": {**RAW["training"], **(training or {})},
           "method": {"name": "orchestra", "num_global_clusters": GLOBAL, "num_local_clusters": LOCAL,
                      "memory_size": 8, "global_clustering_steps": 50, **method}}
    scenario = resolve(raw)
    return build_method(scenario, DataSpec(1, SIZE, 10, tuple(len(y) for _, y in CLIENTS))), scenario


@pytest.fixture(scope="module")
def after_setup():
    """The default method, its scenario and the global state after the setup round."""
    method, scenario = setup()
    server = Server(method)
    metrics, _ = run_round(method, server, context(scenario, 0), [[0, 1, 2]])
    return method, scenario, server.state, metrics


def context(scenario, round_index, cohort=(0, 1, 2)):
    return RoundContext(round_index, 2, cohort, scenario["seed"], freeze(scenario))


def run_round(method, server, ctx, shares):
    broadcast, extras, bytes_down = server.payload(ctx, shares)
    results = [simulate_clients(method, method.make_workspace(torch.device("cpu")), lambda c: CLIENTS[c],
                                broadcast, share_extras, share, ctx) for share, share_extras in zip(shares, extras)]
    return server.aggregate(ctx, results), bytes_down


def server_at(method, state):
    server = Server(method)
    server.state = state
    return server


def uploaded(upload):
    return {k.split("/", 1)[1]: v for k, v in upload.stats.average().items()}


def parameter_names(method, prefix):
    online, target = method.build_networks()
    network = online if prefix == "online" else target
    return [f"{prefix}.{name}" for name, _ in network.named_parameters()]


# ---- the projector -----------------------------------------------------------------------------
def mean_pairwise_cosine(z):
    z = F.normalize(z, dim=1)
    similarity = z @ z.T
    return ((similarity.sum() - similarity.diag().sum()) / (len(z) * (len(z) - 1))).item()


def test_projector_is_the_reference_mlp_and_centres_every_coordinate():
    """Linear -> BatchNorm(affine) -> ReLU -> Linear -> BatchNorm(affine=False), batch statistics in
    train mode: by hand, and its outputs have zero mean and unit variance per coordinate; at init
    the projections of an encoder's post-ReLU features spread out (mean pairwise cosine ~ 0), where
    a plain MLP's all point the same way (~ 1, the inert clustering loss)."""
    torch.manual_seed(0)
    encoder = build_encoder("small_cnn", 1, SIZE, "group")
    projector = orchestra_projector(encoder.out_dim, 32, DIM)
    with torch.no_grad():
        projector[1].weight.uniform_(0.5, 1.5)
        projector[1].bias.uniform_(-0.5, 0.5)
    projector.train()
    images = to_float(DATA.train_x[:32])
    with torch.no_grad():
        h = encoder(images)
        z = projector(h)

    def batch_norm(a):
        return (a - a.mean(0)) / (a.var(0, unbiased=False) + 1e-5).sqrt()

    hidden = torch.relu(batch_norm(h @ projector[0].weight.T) * projector[1].weight + projector[1].bias)
    assert torch.allclose(z, batch_norm(hidden @ projector[3].weight.T), atol=1e-4)
    assert projector[0].bias is None and projector[3].bias is None and projector[4].weight is None
    assert z.mean(0).abs().max() < 1e-5
    assert (z.var(0, unbiased=False) - 1).abs().max() < 1e-3
    assert abs(mean_pairwise_cosine(z)) < 0.1
    assert mean_pairwise_cosine(mlp(encoder.out_dim, 32, DIM)(h)) > 0.8


def test_method_builds_the_normalised_projector_for_online_and_target():
    method, _ = setup()
    online, target = method.build_networks()
    for network in (online, target):
        assert isinstance(network["projector"][-1], torch.nn.BatchNorm1d)
        assert not network["projector"][-1].affine
    assert online["rotation"].in_features == DIM  # the rotation head reads the projection
    workspace = method.make_workspace(torch.device("cpu"))
    z = workspace.online["projector"](workspace.online["encoder"](to_float(DATA.train_x[:16])))
    assert z.mean(0).abs().max() < 1e-5 and abs(mean_pairwise_cosine(z.detach())) < 0.15


# ---- setup and training rounds -------------------------------------------------------------------
def test_setup_round_initialises_global_centroids_without_training(after_setup):
    method, scenario, state, metrics = after_setup
    initial = Server(method).state
    assert initial["centroids"] is None
    assert "centroids" not in method.broadcast(initial, context(scenario, 0))
    assert "bytes_up/weights" not in metrics  # clients only cluster in the setup round
    assert metrics["bytes_up/centroids"] == 3 * LOCAL * DIM * 4
    assert metrics["clustering/local_centroids"] == 3 * LOCAL
    for name, value in initial["weights"].items():
        assert torch.equal(state["weights"][name], value)
    centroids = state["centroids"]
    assert centroids.shape == (GLOBAL, DIM)
    assert torch.allclose(centroids.norm(dim=1), torch.ones(GLOBAL), atol=1e-5)
    assert "centroids" in method.broadcast(state, context(scenario, 1))


def test_setup_memory_is_target_projections_in_train_mode_with_statistics_restored(after_setup):
    """The memory of the setup round: the target's projections of random samples with batch
    statistics (centred coordinates), in batches of ``batch_size``; BatchNorm buffers unchanged."""
    method, scenario, state, _ = after_setup
    workspace = method.make_workspace(torch.device("cpu"))
    weights = dict(state["weights"])
    generator = torch.Generator().manual_seed(12)
    for name in parameter_names(method, "target"):  # a target other than the online model
        weights[name] = weights[name] + 0.05 * torch.randn(weights[name].shape, generator=generator)
    broadcast = method.broadcast({**state, "weights": weights}, context(scenario, 0))
    for name, slot in workspace.slots.items():
        slot.copy_(broadcast["weights"][name])
    ctx = context(scenario, 0)
    data = ClientData(0, *CLIENTS[0])
    memory = method.fill_memory(workspace, data, ctx, ctx.client_generator(0, "train"))
    rows = torch.randperm(len(data.labels), generator=ctx.client_generator(0, "train"))[:8]
    target = copy.deepcopy(workspace.target).train()
    with torch.no_grad():
        expected = F.normalize(target["projector"](target["encoder"](to_float(data.images[rows]))), dim=1)
        online = copy.deepcopy(workspace.online).train()
        by_online = F.normalize(online["projector"](online["encoder"](to_float(data.images[rows]))), dim=1)
    assert torch.allclose(memory, expected, atol=1e-5)
    assert not torch.allclose(memory, by_online, atol=1e-3)
    for name, slot in workspace.slots.items():
        assert torch.equal(slot, broadcast["weights"][name]), name


@pytest.mark.parametrize("batch_size", [4, 3])
def test_setup_memory_is_projected_batch_by_batch(after_setup, batch_size):
    """With a memory of two batches, each batch is projected with its own batch statistics (the
    reference's reset_memory runs its data loader's batches), not the whole memory at once; with
    batches of 3 the 8 rows make 8 // 3 = 2 chunks of 4 (at least batch_size rows each), not 3, 3, 2."""
    _, _, state, _ = after_setup
    method, scenario = setup(training={"batch_size": batch_size})
    workspace = method.make_workspace(torch.device("cpu"))
    copy_into(workspace.slots, method.broadcast(state, context(scenario, 0))["weights"])
    ctx = context(scenario, 0)
    data = ClientData(0, *CLIENTS[0])
    memory = method.fill_memory(workspace, data, ctx, ctx.client_generator(0, "train"))
    rows = torch.randperm(len(data.labels), generator=ctx.client_generator(0, "train"))[:8]
    target = copy.deepcopy(workspace.target).train()

    def projected(images):
        with torch.no_grad():
            return F.normalize(target["projector"](target["encoder"](to_float(images))), dim=1)

    by_batch = torch.cat([projected(data.images[rows[:4]]), projected(data.images[rows[4:]])])
    assert torch.allclose(memory, by_batch, atol=1e-5)
    assert not torch.allclose(memory, projected(data.images[rows]), atol=1e-3)


def test_training_round_uploads_weights_and_local_centroids(after_setup):
    method, scenario, state, _ = after_setup
    server = server_at(method, state)
    setup_centroids = server.state["centroids"]
    broadcast = method.broadcast(server.state, context(scenario, 1))
    upload = method.client_update(method.make_workspace(torch.device("cpu")), broadcast, None,
                                  ClientData(0, *CLIENTS[0]), context(scenario, 1))
    assert upload.stats.weight == len(CLIENTS[0][1])
    assert set(upload.metrics) == {"loss", "loss_cluster", "loss_rotation", "assignment_entropy"}
    assert upload.record["centroids"].shape == (LOCAL, DIM)
    new = uploaded(upload)
    # every weight and BatchNorm statistic, but not BatchNorm's integer step counter
    assert new.keys() == {k for k in broadcast["weights"] if not k.endswith("num_batches_tracked")}
    assert any(k.startswith("online.rotation.") for k in new)
    assert any(k.endswith("running_var") for k in new)
    changed = {k for k in new if not torch.allclose(new[k], broadcast["weights"][k].float())}
    for part in ("online.encoder.", "target.encoder.", "online.projector.", "target.projector.",
                 "online.rotation."):
        assert any(k.startswith(part) for k in changed), part
    assert {k for k in changed if "running_" in k} == {k for k in new if "running_" in k}
    metrics, _ = run_round(method, server, context(scenario, 1, (0, 2)), [[0, 2]])
    assert metrics["bytes_up/centroids"] == 2 * LOCAL * DIM * 4
    assert not torch.equal(server.state["centroids"], setup_centroids)
    counter = "online.projector.4.num_batches_tracked"
    assert server.state["weights"][counter].dtype == torch.int64
    assert torch.equal(server.state["weights"][counter], state["weights"][counter])
    # the evaluated projector carries the averaged running statistics
    evaluated = method.eval_network(server.state)
    assert torch.equal(evaluated["projector"][4].running_var, server.state["weights"]["online.projector.4.running_var"])


def test_memory_keeps_the_most_recent_projections():
    memory = RecentProjections(5)
    for start in range(0, 12, 3):  # batches of 3 rows: 0-2, 3-5, 6-8, 9-11
        memory.push(torch.arange(start, start + 3, dtype=torch.float32)[:, None])
    assert memory.contents().flatten().tolist() == [7, 8, 9, 10, 11]
    assert len(memory.batches) == 2  # older batches are dropped
    exact = RecentProjections(6)  # two batches of 3 fill it exactly: the third-newest is dropped
    for start in range(0, 12, 3):
        exact.push(torch.arange(start, start + 3, dtype=torch.float32)[:, None])
    assert exact.contents().flatten().tolist() == [6, 7, 8, 9, 10, 11] and len(exact.batches) == 2


# ---- the client step, replayed by hand -----------------------------------------------------------
def replay_client(method, scenario, broadcast, client_id, ctx):
    """Algorithm 1 written out: for each batch x (order from the client's stream), x~ = T'(x) for the
    online model, x for the target (no gradient), rotation by a uniform quarter turn of x for the
    rotation head on the online projection; L = H(softmax(cos(z_T, mu)/T), softmax(cos(z_O, mu)/T))
    + cross-entropy of the rotation; SGD with momentum and weight decay by hand; then
    t <- m t + (1 - m) o over the target's parameters (with ``ema_before_forward``: before the
    target's forward pass instead). With ``reference_views`` the target and the rotation get
    augmented views too (drawn before and after the online view). Returns (weights by name, local centroids,
    the losses of the steps, the first step's loss after that step on the same inputs, the entropy
    of each step's target assignments, mean over the batch)."""
    training, config = scenario["training"], scenario["method"]
    online, target = method.build_networks()
    online.load_state_dict({k[7:]: v for k, v in broadcast["weights"].items() if k.startswith("online.")})
    target.load_state_dict({k[7:]: v for k, v in broadcast["weights"].items() if k.startswith("target.")})
    online.train(), target.train()
    workspace = method.make_workspace(torch.device("cpu"))
    augment, augment_prime = workspace.augment, workspace.augment_prime  # T, T' (augment_prime's changes)
    generator = ctx.client_generator(client_id, "train")
    images = to_float(CLIENTS[client_id][0])
    centroids = F.normalize(broadcast["centroids"], dim=1)
    temperature, m = config["temperature"], config["target_momentum"]
    lr, momentum, decay = training["lr"], training["momentum"], training["weight_decay"]
    params = dict(online.named_parameters())
    velocity = {}

    def ema():
        with torch.no_grad():
            for name, t in target.named_parameters():
                t.copy_(m * t + (1 - m) * params[name])
    memory, losses, after_first, entropies = [], [], None, []

    def loss_of(net, x_rotation, x_tilde, z_target, turns):
        z_online = net["projector"](net["encoder"](x_tilde))
        p_target = torch.softmax(z_target @ centroids.T / temperature, dim=1)
        log_p_online = torch.log_softmax(F.normalize(z_online, dim=1) @ centroids.T / temperature, dim=1)
        cluster = -(p_target * log_p_online).sum(dim=1).mean()
        rotated = torch.stack([torch.rot90(image, int(k), dims=(1, 2)) for image, k in zip(x_rotation, turns)])
        logits = net["rotation"](net["projector"](net["encoder"](rotated)))
        return cluster - torch.log_softmax(logits, dim=1)[torch.arange(len(turns)), turns].mean()

    for _ in range(training["local_epochs"]):
        order = torch.randperm(len(images), generator=generator)
        for start in range(0, len(images), training["batch_size"]):
            x = images[order[start:start + training["batch_size"]]]
            x_target = augment(x, generator) if config["reference_views"] else x
            x_tilde = augment_prime(x, generator)
            x_rotation = augment(x, generator) if config["reference_views"] else x
            if config["ema_before_forward"]:
                ema()
            with torch.no_grad():
                z_target = F.normalize(target["projector"](target["encoder"](x_target)), dim=1)
            turns = torch.randint(4, (len(x),), generator=generator)
            loss = loss_of(online, x_rotation, x_tilde, z_target, turns)
            grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
            with torch.no_grad():
                for name, p in params.items():
                    step = grads[name] + decay * p
                    velocity[name] = step if name not in velocity else momentum * velocity[name] + step
                    p -= lr * velocity[name]
            if not config["ema_before_forward"]:
                ema()
            if after_first is None:
                with torch.no_grad():
                    after_first = loss_of(copy.deepcopy(online), x_rotation, x_tilde, z_target, turns).item()
            losses.append(loss.item())
            p_target = torch.softmax(z_target @ centroids.T / temperature, dim=1)
            entropies.append(-(p_target * p_target.log()).sum(dim=1).mean().item())
            memory.append(z_target)
    weights = {f"online.{k}": v for k, v in online.state_dict().items()}
    weights.update({f"target.{k}": v for k, v in target.state_dict().items()})
    memory = torch.cat(memory)[-min(config["memory_size"], len(images)):]
    local = equal_size_clustering(memory, config["num_local_clusters"],
                                  ctx.client_generator(client_id, "local-clustering"), config["clustering_iterations"])
    return weights, local, losses, after_first, entropies


@pytest.mark.parametrize("training, options, steps", [
    ({"batch_size": 7}, {}, 2),
    # two epochs through a memory larger than the client (it keeps the last 10 projections, not 16 of
    # two epochs) and a temperature other than the default
    ({"batch_size": 5, "local_epochs": 2}, {"memory_size": 16, "temperature": 0.5}, 4),
])
def test_client_step_is_algorithm_1_by_hand(after_setup, training, options, steps):
    """Every uploaded tensor (online encoder, projector and rotation head, target, BatchNorm
    statistics) and the local centroids against the replay above, over two steps with momentum;
    the target differs from the online model, so swapping the views of online and target, the
    networks that produce them, the EMA direction or the loss's sign all show. The first step
    lowers the loss on its own inputs."""
    method, scenario = setup(training, **options)
    state = after_setup[2]
    weights = dict(state["weights"])
    generator = torch.Generator().manual_seed(11)
    for name in parameter_names(method, "target"):
        weights[name] = weights[name] + 0.05 * torch.randn(weights[name].shape, generator=generator)
    ctx = context(scenario, 1)
    broadcast = {**method.broadcast({**state, "weights": weights}, ctx)}
    upload = method.client_update(method.make_workspace(torch.device("cpu")), broadcast, None,
                                  ClientData(2, *CLIENTS[2]), ctx)
    expected, local, losses, after, entropies = replay_client(method, scenario, broadcast, 2, ctx)
    new = uploaded(upload)
    assert new.keys() == {k for k in expected if not k.endswith("num_batches_tracked")}
    for name, value in new.items():
        assert torch.allclose(value, expected[name].float(), atol=1e-4), name
    assert torch.allclose(upload.record["centroids"], local, atol=1e-5)
    assert len(losses) == steps and upload.metrics["loss"] == pytest.approx(sum(losses) / steps, rel=1e-5)
    assert upload.metrics["assignment_entropy"] == pytest.approx(sum(entropies) / steps, rel=1e-5)
    assert after < losses[0]


def test_every_trainable_tensor_receives_a_gradient(after_setup):
    method, scenario, state, _ = after_setup
    workspace = method.make_workspace(torch.device("cpu"))
    for name, slot in workspace.slots.items():
        slot.copy_(state["weights"][name])
    workspace.online.train(), workspace.target.train()
    loss, cluster, rotation, _ = method.step_loss(workspace, to_float(DATA.train_x[:8]), state["centroids"],
                                                  torch.Generator().manual_seed(0))
    cluster.backward(retain_graph=True)
    for name, p in workspace.online.named_parameters():
        if not name.startswith("rotation."):
            assert p.grad is not None and p.grad.norm() > 1e-4, f"clustering loss: {name}"
    workspace.online.zero_grad()
    loss.backward()
    for name, p in workspace.online.named_parameters():
        assert p.grad is not None and p.grad.norm() > 1e-4, name  # a bias before a BatchNorm gets ~1e-9
    assert all(p.grad is None for p in workspace.target.parameters())


@pytest.mark.parametrize("degeneracy", [True, False])
def test_a_local_step_lowers_the_loss(after_setup, degeneracy):
    method, scenario = setup(degeneracy=degeneracy)
    state = after_setup[2]
    workspace = method.make_workspace(torch.device("cpu"))
    online = dict(workspace.online.named_parameters())
    for name, slot in workspace.slots.items():
        if name in state["weights"]:
            slot.copy_(state["weights"][name])
    x = to_float(DATA.train_x[:16])
    loss, cluster, _, _ = method.step_loss(workspace, x, state["centroids"], torch.Generator().manual_seed(5))
    grads = torch.autograd.grad(loss, list(online.values()))
    with torch.no_grad():
        for p, g in zip(online.values(), grads):
            p -= 0.01 * g
    new_loss, new_cluster, _, _ = method.step_loss(workspace, x, state["centroids"], torch.Generator().manual_seed(5))
    assert new_loss < loss
    if not degeneracy:
        assert new_cluster < cluster


@pytest.mark.parametrize("momentum", [0.0, 1.0])
def test_target_follows_the_ema_rule(after_setup, momentum):
    method, scenario = setup(target_momentum=momentum)
    broadcast = method.broadcast(after_setup[2], context(scenario, 1))
    upload = method.client_update(method.make_workspace(torch.device("cpu")), broadcast, None,
                                  ClientData(1, *CLIENTS[1]), context(scenario, 1))
    new = uploaded(upload)
    for name in parameter_names(method, "target"):
        # m = 1: the target never moves; m = 0: after every step it is the online model
        expected = broadcast["weights"][name] if momentum == 1.0 else new["online." + name[len("target."):]]
        assert torch.allclose(new[name], expected.float(), atol=1e-6), name


def client_step_against_replay(after_setup, sections=None, **options):
    """One client's round-1 upload with ``options`` (batch 7) and the hand replay of Algorithm 1,
    after checking every uploaded tensor and the local centroids against the replay; returns
    (broadcast, context, replayed weights)."""
    method, scenario = setup({"batch_size": 7}, sections, **options)
    ctx = context(scenario, 1)
    broadcast = method.broadcast(after_setup[2], ctx)
    upload = method.client_update(method.make_workspace(torch.device("cpu")), broadcast, None,
                                  ClientData(1, *CLIENTS[1]), ctx)
    expected, local, *_ = replay_client(method, scenario, broadcast, 1, ctx)
    for name, value in uploaded(upload).items():
        assert torch.allclose(value, expected[name].float(), atol=1e-4), name
    assert torch.allclose(upload.record["centroids"], local, atol=1e-5)
    return broadcast, ctx, expected


def test_ema_before_forward_updates_the_target_before_each_step(after_setup):
    """The reference's order (``ema_before_forward``): the target moves towards the online model at
    the start of each step, before its forward pass; every uploaded tensor against the replay."""
    broadcast, ctx, expected = client_step_against_replay(after_setup, target_momentum=0.5,
                                                          ema_before_forward=True)
    default, _ = setup({"batch_size": 7}, target_momentum=0.5)
    after_step = uploaded(default.client_update(default.make_workspace(torch.device("cpu")), broadcast, None,
                                                ClientData(1, *CLIENTS[1]), ctx))
    assert not torch.allclose(after_step["target.encoder.features.0.0.weight"],
                              expected["target.encoder.features.0.0.weight"], atol=1e-4)


def test_grad_clip_norm_bounds_the_local_step(after_setup):
    # a single plain SGD step at lr 1 moves the online weights by the clipped gradient, of norm 1e-3
    training = {"batch_size": 64, "lr": 1.0, "momentum": 0.0, "weight_decay": 0.0, "grad_clip_norm": 1e-3}
    method, scenario = setup(training)
    broadcast = method.broadcast(after_setup[2], context(scenario, 1))
    upload = method.client_update(method.make_workspace(torch.device("cpu")), broadcast, None,
                                  ClientData(1, *CLIENTS[1]), context(scenario, 1))
    new = uploaded(upload)
    step = torch.cat([(new[k] - broadcast["weights"][k].float()).flatten() for k in parameter_names(method, "online")])
    assert step.norm().item() == pytest.approx(1e-3, rel=1e-3)


@pytest.mark.parametrize("samples", [1, 3])
def test_client_with_fewer_samples_than_local_clusters(after_setup, samples):
    method, scenario, state, _ = after_setup
    broadcast = method.broadcast(state, context(scenario, 1))
    tiny = ClientData(7, DATA.train_x[:samples], DATA.train_y[:samples])  # fewer than L = 4
    workspace = method.make_workspace(torch.device("cpu"))
    for round_index, payload in ((0, {"weights": broadcast["weights"]}), (1, broadcast)):
        upload = method.client_update(workspace, payload, None, tiny, context(scenario, round_index, (7,)))
        centroids = upload.record["centroids"]
        assert centroids.shape == (LOCAL, DIM)
        assert torch.isfinite(centroids).all()
        assert torch.allclose(centroids.norm(dim=1), torch.ones(LOCAL), atol=1e-5)
    assert upload.stats.weight == samples


def test_drop_last_client_smaller_than_a_batch_clusters_its_setup_style_memory(after_setup):
    # training.drop_last (the reference's loaders): 6 samples in batches of 8 take no step; the client
    # uploads the broadcast networks and clusters a memory filled as in the setup round
    _, _, state, _ = after_setup
    method, scenario = setup(training={"drop_last": True})
    broadcast = method.broadcast(state, context(scenario, 1))
    small = ClientData(7, DATA.train_x[:6], DATA.train_y[:6])
    ctx = context(scenario, 1, (7,))
    upload = method.client_update(method.make_workspace(torch.device("cpu")), broadcast, None, small, ctx)
    for name, value in upload.stats.average().items():
        torch.testing.assert_close(value, broadcast["weights"][name.split("/", 1)[1]], rtol=0, atol=1e-5)
    assert "loss" not in upload.metrics
    workspace = method.make_workspace(torch.device("cpu"))
    copy_into(workspace.slots, broadcast["weights"])
    generator = ctx.client_generator(7, "train")
    torch.randperm(6, generator=generator)  # the one local epoch's order, drawn before its (no) batches
    memory = method.fill_memory(workspace, small, ctx, generator)
    expected = method.local_centroids(memory, ctx.client_generator(7, "local-clustering"))
    assert torch.equal(upload.record["centroids"], expected)


def test_reference_views_feed_augmented_views_to_target_and_rotation(after_setup):
    """``reference_views``: the target and the rotation see augmented views (the reference code's
    three views); every uploaded tensor against the replay."""
    client_step_against_replay(after_setup, reference_views=True)


def test_the_online_view_is_augmented_by_augment_prime_and_the_others_by_augment(after_setup):
    """The reference's two pipelines: T (``augment``: blur p 0.5) for the target's and the rotation's
    views, T' (``augment_prime``'s changes: blur p 0.1, solarisation p 0.2) for the online model's;
    every uploaded tensor against the replay, which differs from the run with T' for every view."""
    views = {"augment": {"blur_prob": 0.5}, "augment_prime": {"blur_prob": 0.1, "solarize_prob": 0.2}}
    _, _, expected = client_step_against_replay(after_setup, views, reference_views=True)
    same = {"augment": {"blur_prob": 0.1, "solarize_prob": 0.2}}
    _, _, all_prime = client_step_against_replay(after_setup, same, reference_views=True)
    name = "online.encoder.features.0.0.weight"
    assert not torch.allclose(all_prime[name], expected[name], atol=1e-4)


# ---- the server step ---------------------------------------------------------------------------
def hand_sinkhorn(scores, iterations=100):
    """The reference's transport, as written in its code: P = softmax(25 s)^T [K, N], r and c."""
    probs = torch.softmax(25 * scores.double(), dim=1).T
    k, n = probs.shape
    c = torch.full((n, 1), 1 / n, dtype=torch.float64)
    for it in range(iterations):
        r = (1 / k) / (probs @ c)
        c_new = (1 / n) / (r.T @ probs).T
        done = it % 10 == 0 and (c / c_new - 1).abs().sum() < 1e-2
        c = c_new
        if done:
            break
    return (n * probs * c.T * r).T.float()


def hand_global_clustering(points, centroids, temperature, steps, lr=0.01):
    """The reference's global clustering: SGD(lr, momentum 0.9, weight decay 1e-4) on the centroid
    matrix, loss -cos(sknopp(Z C^T), softmax(Z C^T / T)), rows renormalised after each step."""
    weights, velocity = centroids.clone(), None
    for _ in range(steps):
        w = weights.clone().requires_grad_(True)
        target = hand_sinkhorn(points @ weights.T)
        probs = torch.softmax(points @ w.T / temperature, dim=1)
        cosine = (target * probs).sum(1) / (target.norm(dim=1) * probs.norm(dim=1))
        (grad,) = torch.autograd.grad(-cosine.mean(), w)
        step = grad + 1e-4 * weights
        velocity = step if velocity is None else 0.9 * velocity + step
        weights = F.normalize(weights - lr * velocity, dim=1)
    return weights


@pytest.mark.parametrize("temperature, lr", [(0.1, 0.01), (0.5, 0.05)])  # the defaults, and others
def test_server_clusters_the_local_centroids_of_all_reporting_clients(after_setup, temperature, lr):
    """The global centroids: the reference's SGD global clustering of the local centroids of every
    reporting client (in client-id order), warm-started from the previous global centroids, at the
    configured temperature and clustering lr."""
    method, scenario = setup(global_clustering_steps=3, temperature=temperature, global_clustering_lr=lr)
    state = after_setup[2]
    generator = torch.Generator().manual_seed(0)
    records = {cid: {"centroids": F.normalize(torch.randn(LOCAL, DIM, generator=generator), dim=1)}
               for cid in (5, 2)}
    ctx = context(scenario, 1, (2, 5))
    new, metrics = method.server_update(state, None, records, ctx)
    points = torch.cat([records[2]["centroids"], records[5]["centroids"]])
    expected = hand_global_clustering(points, state["centroids"], temperature, 3, lr)
    assert torch.allclose(new["centroids"], expected, atol=1e-5)
    assert metrics["clustering/local_centroids"] == 2 * LOCAL
    for cid in (2, 5):  # one client's centroids alone give other centroids
        alone = hand_global_clustering(records[cid]["centroids"], state["centroids"], temperature, 3, lr)
        assert not torch.allclose(new["centroids"], alone, atol=1e-3)
    again, _ = method.server_update(state, None, records, ctx)
    assert torch.equal(again["centroids"], new["centroids"])


def test_setup_round_starts_the_global_clustering_from_seeded_random_centroids():
    """Before any global centroids: the reference's nn.Linear initialisation, U(+-1/sqrt(D)), drawn
    from the scenario seed; deterministic in the seed, different for another seed."""
    results = {}
    for seed in (3, 3, 4):
        method, scenario = setup(global_clustering_steps=2)
        scenario = {**scenario, "seed": seed}
        state = method.init_state()
        records = {0: {"centroids": F.normalize(torch.ones(LOCAL, DIM) + torch.eye(LOCAL, DIM), dim=1)}}
        new, _ = method.server_update(state, None, records, context(scenario, 0))
        generator = torch.Generator().manual_seed(derive_seed(seed, "global-centroids"))
        initial = (2 * torch.rand(GLOBAL, DIM, generator=generator) - 1) / math.sqrt(DIM)
        assert torch.allclose(new["centroids"], hand_global_clustering(records[0]["centroids"], initial, 0.1, 2),
                              atol=1e-5)
        results.setdefault(seed, []).append(new["centroids"])
    assert torch.equal(results[3][0], results[3][1])
    assert not torch.allclose(results[3][0], results[4][0])


def test_kmeans_global_clustering_separates_the_clients_groups(after_setup):
    """``global_clustering: kmeans``: with two clients whose local centroids lie around different
    directions and G = 2, one global centroid per client's group (one client's alone would put
    both in one group); deterministic in (seed, round)."""
    method, scenario = setup(global_clustering="kmeans", num_global_clusters=2)
    generator = torch.Generator().manual_seed(1)
    directions = torch.eye(2, DIM)
    noise = 0.1 * torch.randn(2, LOCAL, DIM, generator=generator)
    records = {cid: {"centroids": F.normalize(directions[cid] + noise[cid], dim=1)} for cid in (0, 1)}
    new, _ = method.server_update(after_setup[2], None, records, context(scenario, 1, (0, 1)))
    similarity = new["centroids"] @ directions.T
    assert sorted(similarity.argmax(dim=1).tolist()) == [0, 1]
    assert (similarity.max(dim=1).values > 0.9).all()
    again, _ = method.server_update(after_setup[2], None, records, context(scenario, 1, (0, 1)))
    assert torch.equal(again["centroids"], new["centroids"])
    local = torch.cat([records[cid]["centroids"] for cid in (0, 1)])
    for round_index in (1, 2):  # each round's clustering draws from its own stream, (seed, round)
        stream = torch.Generator().manual_seed(derive_seed(scenario["seed"], round_index, "global-clustering"))
        hand = equal_size_clustering(local, 2, stream, scenario["method"]["clustering_iterations"])
        got, _ = method.server_update(after_setup[2], None, records, context(scenario, round_index, (0, 1)))
        assert torch.equal(got["centroids"], hand)
        # records in arrival order, not id order: the points are still concatenated by client id
        arrived = {1: records[1], 0: records[0]}
        got, _ = method.server_update(after_setup[2], None, arrived, context(scenario, round_index, (0, 1)))
        assert torch.equal(got["centroids"], hand)


def test_server_step_of_every_tensor_over_two_rounds_by_hand(after_setup, one_thread):
    """(Single-threaded: with two threads the replay and the real client step can differ in the last
    bits of a convolution's gradient, which Adam's normalised step can amplify past the tolerance.)
    Two rounds of two clients with FedAdam: each client's networks from the replay of Algorithm 1
    (EMA target included), the sample-weighted average of every tensor, Adam (moments carried from
    round 1 to round 2) on the online networks' parameters, the plain average for the target and
    the BatchNorm statistics, the step counters kept; and the global centroids from the clients'
    replayed local centroids. Against the state of the server after real rounds."""
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
    method, scenario = setup({"batch_size": 7}, server_optimizer="adam", server_lr=lr, global_clustering_steps=3)
    server = server_at(method, after_setup[2])
    trainable = set(server.state["trainable"])
    assert trainable == set(parameter_names(method, "online"))
    first, second = {}, {}
    cohort = (0, 2)
    sizes = [len(CLIENTS[c][1]) for c in cohort]
    for round_index in (1, 2):
        ctx = context(scenario, round_index, cohort)
        old = {k: v.clone() for k, v in server.state["weights"].items()}
        broadcast = method.broadcast(server.state, ctx)
        replays = [replay_client(method, scenario, broadcast, cid, ctx) for cid in cohort]
        run_round(method, server, ctx, [[0], [2]])
        got = server.state["weights"]
        for name, previous in old.items():
            if name.endswith("num_batches_tracked"):
                assert torch.equal(got[name], previous), name
                continue
            average = sum(n * r[0][name].double() for n, r in zip(sizes, replays)) / sum(sizes)
            if name in trainable:
                grad = previous.double() - average
                first[name] = b1 * first.get(name, 0) + (1 - b1) * grad
                second[name] = b2 * second.get(name, 0) + (1 - b2) * grad**2
                scale = (second[name] / (1 - b2**round_index)).sqrt()
                expected = previous.double() - lr * (first[name] / (1 - b1**round_index)) / (scale + eps)
                moved = scale > 1e-5  # elsewhere float32 rounding of the average decides Adam's step
                assert moved.float().mean() > 0.5, name
            else:
                expected, moved = average, torch.ones_like(average, dtype=torch.bool)
            assert torch.allclose(got[name].double()[moved], expected[moved], atol=2e-5), name
        points = torch.cat([r[1] for r in replays])
        assert torch.allclose(server.state["centroids"], hand_global_clustering(points, broadcast["centroids"], 0.1, 3),
                              atol=1e-4)
        assert server.state["server_opt"]["step"] == round_index


# ---- determinism, ablations, configuration -------------------------------------------------------
def test_round_is_deterministic_and_independent_of_shares(after_setup):
    method, scenario, state, _ = after_setup
    states = []
    for shares in ([[0, 2]], [[2], [0]]):
        server = server_at(method, state)
        run_round(method, server, context(scenario, 1, (0, 2)), shares)
        states.append(server.state)
    assert torch.equal(states[0]["centroids"], states[1]["centroids"])
    for name, value in states[0]["weights"].items():
        assert torch.equal(value, states[1]["weights"][name])


@pytest.mark.parametrize("switch, absent", [("degeneracy", "online.rotation."), ("target", "target.")])
def test_ablations_drop_their_networks(switch, absent):
    method, scenario = setup(**{switch: False})
    server = Server(method)
    assert not any(k.startswith(absent) for k in server.state["weights"])
    run_round(method, server, context(scenario, 0), [[0, 1, 2]])
    metrics, _ = run_round(method, server, context(scenario, 1, (1,)), [[1]])
    assert torch.isfinite(torch.tensor(metrics["train/loss"]))
    assert ("train/loss_rotation" in metrics) == (switch != "degeneracy")


def test_rotation_only_ablation_trains_on_the_rotation_loss_alone(after_setup):
    """``clustering: false`` (RotPred): the step's loss is the rotation loss, so the centroids do not
    move the weights; the clustering loss is still computed for logging."""
    method, scenario = setup(clustering=False)
    state = after_setup[2]
    workspace = method.make_workspace(torch.device("cpu"))
    for name, slot in workspace.slots.items():
        slot.copy_(state["weights"][name])
    x = to_float(DATA.train_x[:8])
    online = [p for _, p in workspace.online.named_parameters()]
    gradients = []
    for centroids in (state["centroids"], torch.nn.functional.normalize(torch.randn_like(state["centroids"]), dim=1)):
        loss, cluster, rotation, _ = method.step_loss(workspace, x, centroids, torch.Generator().manual_seed(2))
        assert torch.equal(loss, rotation) and cluster > 0
        gradients.append(torch.autograd.grad(loss, online, allow_unused=True))
    for first, second in zip(*gradients):
        assert (first is None and second is None) or torch.equal(first, second)
    full, _ = setup()
    loss, cluster, rotation, _ = full.step_loss(workspace, x, state["centroids"], torch.Generator().manual_seed(2))
    assert torch.allclose(loss, cluster + rotation)


@pytest.mark.parametrize("key, value, message", [
    ("clustering", False, "method.clustering: expected true when degeneracy is false"),
    ("num_local_clusters", 0, "method.num_local_clusters: expected a positive integer, got 0"),
    ("temperature", 0.0, "method.temperature: expected a positive number, got 0.0"),
    ("global_clustering_lr", 0.0, "method.global_clustering_lr: expected a positive number, got 0.0"),
    ("num_global_clusters", 2 ** 16 + 1, "method.num_global_clusters: expected at most 65536"),
    ("target_momentum", 1.5, r"method.target_momentum: expected a number in \[0, 1\], got 1.5"),
    ("global_clustering", "spectral", "method.global_clustering: expected one of sgd, kmeans, got 'spectral'"),
])
def test_bad_values_are_one_line_errors(key, value, message):
    with pytest.raises(ValueError, match=message):
        setup(**{key: value, **({"degeneracy": False} if key == "clustering" else {})})


def test_the_largest_cluster_counts_are_accepted():
    setup(num_global_clusters=2 ** 16, num_local_clusters=2 ** 16)  # MAX_CLUSTERS itself is allowed


def one_loop_by_hand(points, num_clusters, generator):
    """One loop of the equal-size clustering written out: centroids at the first ``num_clusters`` rows
    of a random permutation (the generator's first draw), each point to the argmax of its 10-iteration
    transport (``hand_sinkhorn``), each centroid the normalised mean of its members (none is empty)."""
    centroids = points[torch.randperm(len(points), generator=generator)[:num_clusters]]
    choice = hand_sinkhorn(points @ centroids.T, iterations=10).argmax(dim=1)
    assert torch.bincount(choice, minlength=num_clusters).min() > 0, "the hand computation assumes no empty cluster"
    return torch.stack([F.normalize(points[choice == index].mean(dim=0), dim=0) for index in range(num_clusters)])


def test_clustering_iterations_sets_the_loops_of_the_local_and_kmeans_clusterings(after_setup):
    """``clustering_iterations: 1``: the client's local centroids (and with ``kmeans`` the server's
    global ones) are one loop of the clustering, not the default five."""
    method, scenario = setup(clustering_iterations=1, global_clustering="kmeans")
    points = F.normalize(torch.randn(48, DIM, generator=torch.Generator().manual_seed(4)), dim=1)
    local = method.local_centroids(points, torch.Generator().manual_seed(9))
    assert torch.allclose(local, one_loop_by_hand(points, LOCAL, torch.Generator().manual_seed(9)), atol=1e-6)
    five = equal_size_clustering(points, LOCAL, torch.Generator().manual_seed(9), iterations=5)
    assert not torch.allclose(local, five, atol=1e-3)
    records = {0: {"centroids": points[:24]}, 1: {"centroids": points[24:]}}
    got, _ = method.server_update(after_setup[2], None, records, context(scenario, 1, (0, 1)))
    stream = torch.Generator().manual_seed(derive_seed(scenario["seed"], 1, "global-clustering"))
    assert torch.allclose(got["centroids"], one_loop_by_hand(points, GLOBAL, stream), atol=1e-6)
    stream = torch.Generator().manual_seed(derive_seed(scenario["seed"], 1, "global-clustering"))
    assert not torch.allclose(got["centroids"], equal_size_clustering(points, GLOBAL, stream, iterations=5), atol=1e-3)


def test_defaults_are_the_reference_config():
    """The reference's config.py: G 128, L 16, a memory of 128, T 0.1, 5 loops of the local clustering,
    500 global SGD steps at lr 0.01; the paper's cross-device EMA rate 0.996."""
    method, _ = setup()
    defaults = type(method.config)()
    assert (defaults.num_global_clusters, defaults.num_local_clusters, defaults.memory_size) == (128, 16, 128)
    assert (defaults.temperature, defaults.target_momentum, defaults.clustering_iterations) == (0.1, 0.996, 5)
    assert (defaults.global_clustering_steps, defaults.global_clustering_lr) == (500, 0.01)
    assert defaults.global_clustering == "sgd"


def test_client_step_runs_in_train_mode_from_a_workspace_left_in_eval_mode(after_setup):
    """Online and target run in train mode (batch statistics) whatever mode the workspace was left in."""
    method, scenario, state, _ = after_setup
    ctx = context(scenario, 1)
    broadcast = method.broadcast(state, ctx)
    uploads = []
    for mode in ("train", "eval"):
        workspace = method.make_workspace(torch.device("cpu"))
        workspace.online.train(mode == "train"), workspace.target.train(mode == "train")
        uploads.append(method.client_update(workspace, broadcast, None, ClientData(1, *CLIENTS[1]), ctx))
    for name, value in uploaded(uploads[0]).items():
        assert torch.equal(uploaded(uploads[1])[name], value), name


def test_setup_memory_with_reference_views_projects_views_of_augment(after_setup):
    """``reference_views``: the setup memory holds the target's projections of views T(x) (``augment``,
    as the reference's reset_memory), drawn after the rows, not of views T'(x)."""
    views = {"augment": {"blur_prob": 0.5}, "augment_prime": {"blur_prob": 0.1, "solarize_prob": 0.2}}
    method, scenario = setup(sections=views, reference_views=True)
    workspace = method.make_workspace(torch.device("cpu"))
    copy_into(workspace.slots, method.broadcast(after_setup[2], context(scenario, 0))["weights"])
    ctx = context(scenario, 0)
    data = ClientData(0, *CLIENTS[0])
    memory = method.fill_memory(workspace, data, ctx, ctx.client_generator(0, "train"))
    target = copy.deepcopy(workspace.target).train()
    expected = {}
    for name in ("augment", "augment_prime"):
        generator = ctx.client_generator(0, "train")
        rows = torch.randperm(len(data.labels), generator=generator)[:8]
        with torch.no_grad():
            view = getattr(workspace, name)(to_float(data.images[rows]), generator)
            expected[name] = F.normalize(target["projector"](target["encoder"](view)), dim=1)
    assert torch.allclose(memory, expected["augment"], atol=1e-5)
    assert not torch.allclose(memory, expected["augment_prime"], atol=1e-3)
