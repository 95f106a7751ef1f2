"""Hetero-SSFL in-process (no Ray): the local loss and one SGD step against hand computations, the
server's kernels, tiers, per-client models across rounds and restarts, and the RAD control."""
import numpy as np
import pytest
import torch

from methods import build_method
from methods.base import DataSpec
from methods.hetero_ssfl import assign_tiers, normalized_kernel
from methods.networks import build_networks
from methods.objective_step import composed_loss
from methods.weight_averaging import flat_state
from simulator.augment import BatchAugment, to_float
from simulator.client_store import ClientStateStore, dumps, loads
from simulator.context import RoundContext, derive_seed, freeze
from simulator.data.synthetic import make_synthetic
from simulator.held_out import HeldOutImages
from simulator.population import CohortSchedule
from simulator.federation import Server, simulate_clients
from simulator.scenario import resolve

DATA = make_synthetic(train_per_class=4, test_per_class=1, seed=1)  # 40 images: 4 clients of 10
NUM_CLIENTS = 4
TIERS = [{"fraction": 0.5, "encoder": "small_cnn"}, {"fraction": 0.5, "encoder": "large_cnn"}]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: on 2 shared cores, two threads per process contend and run ~10x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def load_client(cid):
    return DATA.train_x[10 * cid:10 * cid + 10], DATA.train_y[10 * cid:10 * cid + 10]


def make(synthetic_raw, training=None, head_norm="none", sizes=(10,) * NUM_CLIENTS, **method):
    """Small_cnn clients unless ``tiers`` says otherwise (large_cnn is ~10x slower); ``sizes``: the
    clients' sample counts the method is told (the loader must give as many)."""
    raw = {**synthetic_raw, "model": {**synthetic_raw.get("model", {}), "head_norm": head_norm},
           "method": {"name": "hetero_ssfl", "rad_size": 16, "rad_batch_size": 8, **method},
           "population": {"num_clients": NUM_CLIENTS, "clients_per_round": 2},
           "training": {"rounds": 4, "batch_size": 5, "lr": 0.05, **(training or {})},
           "eval": {"test_subset": 300}}
    scenario = resolve(raw)
    spec = DataSpec(1, 28, 10, sizes, HeldOutImages.of(scenario), CohortSchedule.of(scenario, sizes))
    return scenario, build_method(scenario, spec)


class Federation:
    """Server, one workspace and the client states (the store), driven round by round."""

    def __init__(self, scenario, method, loader=load_client):
        self.scenario, self.method, self.loader = scenario, method, loader
        self.server = Server(method)
        self.workspace = method.make_workspace(torch.device("cpu"))
        self.states = {}

    def round(self, r, cohort):
        ctx = RoundContext(r, 4, tuple(cohort), self.scenario["seed"], freeze(self.scenario))
        broadcast, extras, bytes_down = self.server.payload(ctx, [list(cohort)])
        result = simulate_clients(self.method, self.workspace, self.loader, broadcast, extras[0], list(cohort),
                                  ctx, self.states)
        metrics = self.server.aggregate(ctx, [result])
        self.states.update(result.client_states)
        return result, metrics, bytes_down

    def aggregate_kernel(self):
        return self.server.state["kernel_sum"] / self.server.state["kernel_weight"]


# ---- hand computations (written from the papers, not from the method's code) ----------------------
def cos_rows(a, b):
    return (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))


def heads(online, x):
    """(projection z, prediction p) of the online networks."""
    z = online["projector"](online["encoder"](x))
    return z, online["predictor"](z)


def hand_ssl(objective, online, target, v1, v2):
    """BYOL: (mean 2 - 2 cos(p1, sg z'2) + mean 2 - 2 cos(p2, sg z'1)) / 2 with z' the EMA target's
    projections; SimSiam: -(mean cos(p1, sg z2) + mean cos(p2, sg z1)) / 2 with the online z."""
    (z1, p1), (z2, p2) = heads(online, v1), heads(online, v2)
    if objective == "byol":
        with torch.no_grad():
            t1, t2 = (target["projector"](target["encoder"](v)) for v in (v1, v2))
        return ((2 - 2 * cos_rows(p1, t2)).mean() + (2 - 2 * cos_rows(p2, t1)).mean()) / 2
    return -(cos_rows(p1, z2.detach()).mean() + cos_rows(p2, z1.detach()).mean()) / 2


def hand_cka(representations, kernel):
    """<H A A^T H, H Kbar H>_F / (||H A A^T H||_F ||H Kbar H||_F), H the explicit centring matrix."""
    n = len(representations)
    h = torch.eye(n, dtype=kernel.dtype) - 1.0 / n
    k = h @ (representations @ representations.T).to(kernel.dtype) @ h
    kbar = h @ kernel @ h
    return (k * kbar).sum() / (k.norm() * kbar.norm())


def hand_kernel(method, networks, cid, rad):
    """Client ``cid``'s uploaded kernel from its persisted networks: predictor outputs A on the whole RAD
    in eval mode (the heads' BatchNorm on its running statistics), H A A^T H over its Frobenius norm,
    in float64."""
    online, _ = load_networks(method, networks, cid)
    online.eval()
    with torch.no_grad():
        a = heads(online, to_float(rad))[1].double()
    n = len(a)
    h = torch.eye(n, dtype=torch.float64) - 1.0 / n
    k = h @ a @ a.T @ h
    return k / k.norm()


def load_networks(method, networks, cid):
    online, target = method.client_networks(method.client_tier[cid], cid)
    online.load_state_dict({k[len("online."):]: v for k, v in networks.items() if k.startswith("online.")})
    if target is not None:
        target.load_state_dict({k[len("target."):]: v for k, v in networks.items() if k.startswith("target.")})
    return online, target


def hand_step(method, scenario, networks, cid, ctx, rad, kbar):
    """The client's networks after one local epoch that is one SGD step (batch size >= its 10 images):
    p <- p - lr (g + wd p) (momentum's first step), target <- m t + (1 - m) p; g the gradient of
    l_SSL + mu (1 - CKA) (``rad_term: cka``) or l_SSL + mu l_SSL(two augmented views of the RAD rows)
    (``rad_term: ssl``), the RAD term only when there is a ``kbar``."""
    config, training = method.config, scenario["training"]
    online, target = load_networks(method, networks, cid)
    augments = BatchAugment(method.augment_config), BatchAugment(method.augment_prime_config)  # T, T'
    generator = ctx.client_generator(cid)
    images = to_float(load_client(cid)[0])[torch.randperm(10, generator=generator)]
    views = [augment(images, generator) for augment in augments]
    loss = hand_ssl(config.objective, online, target, *views)
    if kbar is not None:
        rows = torch.randperm(len(rad), generator=ctx.client_generator(cid, "rad"))[:config.rad_batch_size]
        batch = to_float(rad)[rows]
        if config.rad_term == "cka":
            term = 1 - hand_cka(heads(online, batch)[1], kbar[rows][:, rows])
        else:
            rad_generator = ctx.client_generator(cid, "rad-augment")
            rad_views = [augment(batch, rad_generator) for augment in augments]
            term = hand_ssl(config.objective, online, target, *rad_views)
        loss = loss + config.mu * term
    names, parameters = zip(*online.named_parameters())
    grads = torch.autograd.grad(loss, parameters)
    lr, wd, m = training["lr"], training["weight_decay"], config.target_momentum
    new = {f"online.{n}": (p - lr * (g + wd * p)).detach() for n, p, g in zip(names, parameters, grads)}
    for n, t in target.named_parameters():
        new[f"target.{n}"] = m * t.detach() + (1 - m) * new[f"online.{n}"]
    return new


def random_views(n=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.rand(n, 1, 28, 28, generator=generator) for _ in range(2)]


def client_workspace(method, cid, networks=None):
    """Client ``cid``'s workspace restored to ``networks`` (its initial networks when None)."""
    space = method.make_workspace(torch.device("cpu"))[method.client_tier[cid]]
    method.restore(space, None if networks is None else {"networks": networks}, cid)
    space.online.train()
    return space


def perturbed_target(method, cid):
    """Initial networks with the target moved off the online networks (as after some EMA steps)."""
    online, target = method.client_networks(method.client_tier[cid], cid)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for t in [] if target is None else target.parameters():
            t.add_(0.05 * torch.randn(t.shape, generator=generator))
    return flat_state(online, target)


def assert_grads_close(actual, expected, parameters):
    """Equal gradients up to float32 rounding (the CKA's centring cancels: 1e-3 of each tensor's largest,
    and 1e-6 of the largest of all, for tensors whose gradient is zero but for rounding, such as a
    Linear's bias before a BatchNorm)."""
    a = torch.autograd.grad(actual, parameters, retain_graph=True, allow_unused=True)
    e = torch.autograd.grad(expected, parameters, retain_graph=True, allow_unused=True)
    largest = max(ge.abs().max().item() for ge in e)
    for ga, ge in zip(a, e):
        ga = torch.zeros_like(ge) if ga is None else ga
        torch.testing.assert_close(ga, ge, rtol=1e-3, atol=1e-3 * ge.abs().max().item() + 1e-6 * largest + 1e-9)


def client_loss(method, space, views, terms=()):
    """The batch loss the client step trains on (:func:`methods.objective_step.composed_loss`)."""
    return composed_loss(method.objective, space, list(terms))(views, torch.zeros(len(views[0]), dtype=torch.long),
                                                               torch.arange(len(views[0])))[0]


@pytest.mark.parametrize("objective", ["byol", "simsiam"])
def test_local_ssl_loss_pairs_views_and_stops_gradients(synthetic_raw, objective):
    """Hetero-SSFL's local loss (no RAD term) is BYOL / SimSiam with the cross-view pairing (p1 with the
    other view's z) and no gradient through z (BYOL: the EMA target; SimSiam: the online z)."""
    scenario, method = make(synthetic_raw, objective=objective)
    space = client_workspace(method, 0, perturbed_target(method, 0))
    views = random_views()
    loss = client_loss(method, space, views)
    expected = hand_ssl(objective, space.online, space.target, *views)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    assert_grads_close(loss, expected, list(space.online.parameters()))
    if space.target is not None:
        client_loss(method, space, views).backward()
        assert all(t.grad is None and not t.requires_grad for t in space.target.parameters())


@pytest.mark.parametrize("head_norm", ["none", "batch"])
def test_alignment_term_sign_and_gradient_inside_the_method(synthetic_raw, head_norm):
    """The bound term is + mu (1 - CKA(K_k, Kbar)) on the RAD rows of stream "rad"; its gradient flows
    through the client's own predictor outputs into encoder, projector and predictor; Kbar gets none.
    With BatchNorm heads the RAD rows go through them in train mode (batch statistics), as the local
    batches do."""
    scenario, method = make(synthetic_raw, head_norm=head_norm, mu=0.5)
    space = client_workspace(method, 0)
    assert space.online.training
    rad = method.init_state()["rad"]
    generator = torch.Generator().manual_seed(1)
    kbar = normalized_kernel(torch.randn(16, 5, generator=generator)).float().requires_grad_()
    ctx = RoundContext(2, 4, (0,), scenario["seed"], freeze(scenario))
    terms = method.rad_terms(space, rad, kbar, ctx, 0)
    views = random_views()
    loss = client_loss(method, space, views, terms)
    ssl = client_loss(method, space, views)  # without the term
    rows = torch.randperm(16, generator=ctx.client_generator(0, "rad"))[:8]
    cka = hand_cka(heads(space.online, to_float(rad)[rows])[1], kbar.detach()[rows][:, rows])
    assert 0 < cka.item() < 1
    term = 0.5 * (1 - cka)
    torch.testing.assert_close(loss - ssl, term, rtol=1e-5, atol=1e-6)
    _, parts = composed_loss(method.objective, space, method.rad_terms(space, rad, kbar, ctx, 0))(
        views, torch.zeros(len(views[0]), dtype=torch.long), torch.arange(len(views[0])))  # the same rows again
    assert sorted(parts) == ["loss_objective", "loss_rad"]  # what the client logs beside its loss
    torch.testing.assert_close(parts["loss_rad"], term, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(parts["loss_objective"], ssl, rtol=1e-5, atol=1e-6)
    for name in ("encoder", "projector", "predictor"):
        parameters = list(space.online[name].parameters())
        assert sum(g.abs().sum() for g in torch.autograd.grad(term, parameters, retain_graph=True)) > 0, name
    assert_grads_close(loss, ssl + term, list(space.online.parameters()))
    loss.backward()
    assert kbar.grad is None  # Kbar(t-1) is a constant
    assert method.rad_terms(space, rad, None, ctx, 0) == []  # round 1: no Kbar, no term
    _, unaligned = make(synthetic_raw, mu=0.0)
    assert unaligned.rad_terms(space, rad, kbar, ctx, 0) == []


def test_control_trains_on_the_rad_images_without_alignment(synthetic_raw):
    """``rad_term: ssl``: + mu l_SSL(two augmented views of the same RAD rows, by ``augment`` and
    ``augment_prime``), no Kbar in the loss."""
    synthetic_raw["augment_prime"] = {"solarize_prob": 0.5}
    scenario, method = make(synthetic_raw, mu=0.5, rad_term="ssl")
    space = client_workspace(method, 0, perturbed_target(method, 0))
    rad = method.init_state()["rad"]
    ctx = RoundContext(2, 4, (0,), scenario["seed"], freeze(scenario))
    views = random_views()
    ssl = client_loss(method, space, views)
    losses = []
    for seed in (1, 2):  # two unrelated aggregates: the loss does not depend on Kbar
        kbar = normalized_kernel(torch.randn(16, 5, generator=torch.Generator().manual_seed(seed))).float()
        losses.append(client_loss(method, space, views, method.rad_terms(space, rad, kbar, ctx, 0)))
    assert torch.equal(losses[0], losses[1])
    rows = torch.randperm(16, generator=ctx.client_generator(0, "rad"))[:8]
    rad_generator = ctx.client_generator(0, "rad-augment")
    rad_views = [BatchAugment(config)(to_float(rad)[rows], rad_generator)
                 for config in (method.augment_config, method.augment_prime_config)]
    term = 0.5 * hand_ssl("byol", space.online, space.target, *rad_views)
    assert term.item() > 0.01
    torch.testing.assert_close(losses[0] - ssl, term, rtol=1e-5, atol=1e-6)
    assert_grads_close(losses[0], ssl + term, list(space.online.parameters()))


@pytest.mark.parametrize("head_norm", ["none", "batch"])
def test_server_kernel_is_the_uniform_mean_of_hand_computed_kernels(synthetic_raw, head_norm):
    """Kbar after rounds 1 and 2 (and the broadcast of rounds 2 and 3) is the mean, with equal weights,
    of the kernels recomputed by hand from the persisted networks of every client that has trained
    (in eval mode: with BatchNorm heads, on their running statistics)."""
    scenario, method = make(synthetic_raw, head_norm=head_norm, mu=0.5)
    fed = Federation(scenario, method)
    rad = fed.server.state["rad"]
    for r, cohort, trained in ((1, (0, 1, 2), (0, 1, 2)), (2, (1, 3), (0, 1, 2, 3))):
        fed.round(r, cohort)
        expected = sum(hand_kernel(method, fed.states[c]["networks"], c, rad) for c in trained) / len(trained)
        torch.testing.assert_close(fed.aggregate_kernel(), expected, rtol=0, atol=1e-7)
        ctx = RoundContext(r + 1, 4, (0,), scenario["seed"], freeze(scenario))
        torch.testing.assert_close(method.broadcast(fed.server.state, ctx)["kernels"], expected.float(),
                                   rtol=0, atol=1e-6)
    assert fed.server.state["kernel_weight"] == 4


@pytest.mark.parametrize("rad_term, target_momentum", [("cka", 0.99), ("ssl", 0.99), ("cka", 0.5)])
def test_persisted_models_after_two_rounds_match_hand_sgd_steps(synthetic_raw, tmp_path, rad_term, target_momentum):
    """Rounds 1 (cohort 0, 1, 2: no Kbar, SSL only) and 2 (cohort 0, 3: with the RAD term) of one SGD
    step each, through the client-state store: every tensor of a trained client's stored networks
    equals the hand step (and the in-process client step's output, bitwise); clients not sampled in
    round 2 keep their round-1 state bitwise."""
    scenario, method = make(synthetic_raw, training={"batch_size": 10}, mu=0.5, rad_term=rad_term,
                            target_momentum=target_momentum)
    fed = Federation(scenario, method)
    store = ClientStateStore(tmp_path / "store")
    rad = fed.server.state["rad"]
    results = {}
    for r, cohort in ((1, (0, 1, 2)), (2, (0, 3))):
        results[r], _, _ = fed.round(r, cohort)
        store.put({cid: dumps(state) for cid, state in results[r].client_states.items()})
        store.commit()
    stored = {cid: loads(blob) for cid, blob in store.get(list(range(NUM_CLIENTS))).items()}
    for cid in (1, 2):
        round1 = results[1].client_states[cid]["networks"]
        assert all(torch.equal(stored[cid]["networks"][k], v) for k, v in round1.items())
    initial = {cid: flat_state(*method.client_networks(method.client_tier[cid], cid)) for cid in (0, 3)}
    ctx1 = RoundContext(1, 4, (0, 1, 2), scenario["seed"], freeze(scenario))
    ctx2 = RoundContext(2, 4, (0, 3), scenario["seed"], freeze(scenario))
    kbar = (sum(hand_kernel(method, results[1].client_states[c]["networks"], c, rad) for c in (0, 1, 2)) / 3).float()
    cases = [(results[1].client_states[0]["networks"], hand_step(method, scenario, initial[0], 0, ctx1, rad, None)),
             (stored[0]["networks"],
              hand_step(method, scenario, results[1].client_states[0]["networks"], 0, ctx2, rad, kbar)),
             (stored[3]["networks"], hand_step(method, scenario, initial[3], 3, ctx2, rad, kbar))]
    for actual, expected in cases:
        assert set(actual) == set(expected)  # every tensor is trainable (GroupNorm: no buffers)
        for name, value in expected.items():
            # float32 rounding: < 3e-7 here; the RAD term moves these tensors by ~1e-3
            torch.testing.assert_close(actual[name], value, rtol=0, atol=2e-6, msg=lambda m, n=name: f"{n}: {m}")
    for cid in (0, 3):
        in_process = results[2].client_states[cid]["networks"]
        assert all(torch.equal(stored[cid]["networks"][k], v) for k, v in in_process.items())


@pytest.mark.parametrize("kernel_weights", ["uniform", "samples"])
def test_server_kernel_is_the_weighted_mean_of_every_clients_current_kernel(synthetic_raw, kernel_weights):
    scenario, method = make(synthetic_raw, kernel_weights=kernel_weights)
    fed = Federation(scenario, method)
    _, metrics, bytes_down = fed.round(1, (0, 1, 2))
    assert "kernels" not in bytes_down and "train/rad_cka" not in metrics  # no aggregate yet
    assert bytes_down["rad"] == 3 * fed.server.state["rad"].numel()  # the RAD is downloaded once per client...
    assert torch.allclose(fed.aggregate_kernel(), sum(normalized_kernel(fed.states[c]["rad_representations"])
                                                      for c in range(3)) / 3, atol=1e-8)
    for r, cohort in ((2, (0, 3)), (3, (1, 3))):
        before = fed.aggregate_kernel().float().double()  # sent to the clients in float32
        result, metrics, bytes_down = fed.round(r, cohort)
        assert bytes_down["rad"] == (fed.server.state["rad"].numel() if r == 2 else 0)  # ...and kept
        assert bytes_down["kernels"] == len(cohort) * 4 * 16 * 16
        # train/rad_cka: each trained client's new kernel against the aggregate it was sent (equal sizes: a mean)
        assert metrics["train/rad_cka"] == pytest.approx(sum(
            hand_cka(fed.states[c]["rad_representations"].double(), before) for c in cohort).item() / len(cohort),
            abs=1e-9)
        kernels = [normalized_kernel(fed.states[c]["rad_representations"]) for c in range(NUM_CLIENTS)]
        expected = sum(kernels) / NUM_CLIENTS  # equal weights: 1 or n_j = 10 for every client
        assert torch.allclose(fed.aggregate_kernel(), expected, atol=1e-8)
    assert fed.server.state["kernel_weight"] == (NUM_CLIENTS if kernel_weights == "uniform" else 10 * NUM_CLIENTS)
    assert fed.server.state["has_rad"].all()


def test_sample_weighted_kernels_weigh_each_client_by_its_own_sample_count(synthetic_raw):
    """``kernel_weights: samples`` with clients of 6, 10, 14 and 10 samples: the aggregate is
    sum_j n_j K_j / sum_j n_j, not the uniform mean (equal sizes above cannot tell the two apart, nor
    a client weighed by another's count)."""
    sizes = (6, 10, 14, 10)
    starts = [sum(sizes[:c]) for c in range(NUM_CLIENTS)]
    scenario, method = make(synthetic_raw, kernel_weights="samples", sizes=sizes)
    fed = Federation(scenario, method, lambda cid: (DATA.train_x[starts[cid]:starts[cid] + sizes[cid]],
                                                    DATA.train_y[starts[cid]:starts[cid] + sizes[cid]]))
    for r, cohort in ((1, (0, 1, 2)), (2, (2, 3))):
        fed.round(r, cohort)
    kernels = [normalized_kernel(fed.states[c]["rad_representations"]) for c in range(NUM_CLIENTS)]
    weighted = sum(n * k for n, k in zip(sizes, kernels)) / sum(sizes)
    assert torch.allclose(fed.aggregate_kernel(), weighted, atol=1e-8)
    assert not torch.allclose(weighted, sum(kernels) / NUM_CLIENTS, atol=1e-4)
    assert fed.server.state["kernel_weight"] == sum(sizes)


def test_a_sampled_client_that_does_not_report_is_sent_the_rad_again(synthetic_raw):
    # it received the RAD but kept nothing (no client state): only the clients that report hold it
    scenario, method = make(synthetic_raw)
    server = Server(method)
    ctx = RoundContext(1, 4, (0, 1), scenario["seed"], freeze(scenario), unreported=(2,))
    state, _ = method.server_update(server.state, None, {}, ctx)  # (no kernels: only the marks matter here)
    assert state["has_rad"].tolist() == [True, True, False, False]
    later = RoundContext(2, 4, (0, 2), scenario["seed"], freeze(scenario))
    assert method.client_extra(state, 0, later) is None
    assert torch.equal(method.client_extra(state, 2, later)["rad"], state["rad"])


def test_every_client_starts_from_its_own_initial_model(synthetic_raw):
    # clients keep their own models (Algorithm 1): each is initialised from (run seed, client id), so two
    # clients of one tier start apart, and a client's first restore is that initialisation
    scenario, method = make(synthetic_raw)
    initial = [flat_state(*method.client_networks(0, cid)) for cid in (0, 1)]
    assert any(not torch.equal(initial[0][k], initial[1][k]) for k in initial[0])
    seed = derive_seed(scenario["seed"], 1, "init")
    assert all(torch.equal(v, initial[1][k]) for k, v in flat_state(*build_networks(
        method.objective, scenario, method.spec, seed)).items())
    (workspace,) = method.make_workspace(torch.device("cpu"))
    method.restore(workspace, None, 1)
    assert all(torch.equal(v, initial[1][k]) for k, v in workspace.slots.items())


def test_client_model_survives_rounds_and_worker_restarts(synthetic_raw, tmp_path):
    scenario, method = make(synthetic_raw, tiers=TIERS)
    fed = Federation(scenario, method)
    fed.round(1, range(NUM_CLIENTS))
    fed.round(2, (0, 1))
    store = ClientStateStore(tmp_path / "store")
    store.put({cid: dumps(state) for cid, state in fed.states.items()})
    store.commit()
    stored = {cid: loads(blob) for cid, blob in store.get(list(range(NUM_CLIENTS))).items()}
    initial = flat_state(*method.client_networks(method.client_tier[0], 0))
    trained = stored[0]["networks"]
    assert any(not torch.equal(initial[k], trained[k]) for k in trained)  # rounds 1, 2 trained it
    # a restarted worker: a new method object, a fresh workspace, the state read from the store
    _, restarted = make(synthetic_raw, tiers=TIERS)
    workspace = restarted.make_workspace(torch.device("cpu"))
    restarted.restore(workspace[restarted.client_tier[0]], stored[0], 0)
    assert all(torch.equal(v, trained[k]) for k, v in workspace[restarted.client_tier[0]].slots.items())
    # round 3 of client 0: from the old (dirtied by other clients) workspace and from the fresh one
    before = fed.server.state
    fed.round(3, (0, 2))
    fresh = Federation(scenario, restarted)
    fresh.server.state = before
    ctx = RoundContext(3, 4, (0,), scenario["seed"], freeze(scenario))
    broadcast, extras, _ = fresh.server.payload(ctx, [[0]])
    again = simulate_clients(restarted, workspace, load_client, broadcast, extras[0], [0], ctx, {0: stored[0]})
    for k, v in fed.states[0]["networks"].items():
        assert torch.equal(again.client_states[0]["networks"][k], v)
    networks = restarted.eval_networks(fed.server.state, lambda cid: stored.get(cid))
    label = f"{restarted.tiers[restarted.client_tier[0]].encoder}/client_0"
    assert set(networks[label]) == {"encoder", "projector"}
    for k, v in networks[label].state_dict().items():
        assert torch.equal(v, trained[f"online.{k}"])


def test_store_does_not_grow_across_rounds(synthetic_raw, tmp_path):
    scenario, method = make(synthetic_raw)
    fed = Federation(scenario, method)
    store = ClientStateStore(tmp_path / "store")
    sizes = []
    for r, cohort in ((1, range(NUM_CLIENTS)), (2, (0, 1)), (3, (2, 3)), (4, (0, 3))):
        result, _, _ = fed.round(r, cohort)
        store.put({cid: dumps(state) for cid, state in result.client_states.items()})
        store.commit()
        files = list((tmp_path / "store").glob("client_*.pt"))
        sizes.append((len(files), sum(p.stat().st_size for p in files)))
    assert sizes == [sizes[0]] * 4 and sizes[0][0] == NUM_CLIENTS


def test_tiers_assign_architectures_and_label_evaluations(synthetic_raw):
    tiers = assign_tiers(8, [0.25, 0.75], seed=5)
    assert np.bincount(tiers).tolist() == [2, 6]
    assert np.array_equal(tiers, assign_tiers(8, [0.25, 0.75], seed=5))
    # a fraction of the population that is no whole number of clients rounds to the nearest (3.4 -> 3)
    assert np.bincount(assign_tiers(10, [0.34, 0.66], seed=5)).tolist() == [3, 7]
    assert np.bincount(assign_tiers(10, [0.36, 0.64], seed=5)).tolist() == [4, 6]
    # each tier takes the clients whose mid-point (rank + 1/2) / N lies in [its start, its end): a half-way
    # count (2.5 of 5, as the CIFAR 5(5) scenarios' halves) falls to the later tier
    assert np.bincount(assign_tiers(5, [0.5, 0.5], seed=5)).tolist() == [2, 3]
    scenario, method = make(synthetic_raw, tiers=TIERS)
    small, large = method.make_workspace(torch.device("cpu"))
    count = lambda space: sum(p.numel() for p in space.online["encoder"].parameters())  # noqa: E731
    assert count(large) > 5 * count(small)
    labels = method.eval_networks(Server(method).state, lambda cid: None)
    tier_names = sorted(label.split("/")[0] for label in labels)
    assert tier_names == ["large_cnn", "large_cnn", "small_cnn", "small_cnn"]
    for label in labels:
        cid = int(label.split("_")[-1])
        assert label.startswith(method.tiers[method.client_tier[cid]].encoder)


def test_the_alignment_weight_defaults_to_the_paper_s(synthetic_raw):
    """mu = 0.5, Makhija et al.'s CIFAR setting (section 5.1; 1 for Tiny-ImageNet)."""
    _, method = make(synthetic_raw)
    assert method.config.mu == 0.5


def test_the_rad_is_the_held_out_images_handed_in(synthetic_raw):
    scenario, method = make(synthetic_raw, rad_size=200)
    assert torch.equal(method.init_state()["rad"], HeldOutImages.of(scenario).take(200))
    _, too_big = make(synthetic_raw, rad_size=201)  # 500 test images, 300 evaluated
    with pytest.raises(ValueError, match=r"^method.rad_size: expected at most 200 .*got 201$"):
        too_big.init_state()
    # check_data (before any run): a RAD of exactly the 200 left-out images fits, 201 do not
    method.check_data(method.config, method.spec.held_out)
    with pytest.raises(ValueError, match=r"^method.rad_size: expected at most 200 .*got 201$"):
        too_big.check_data(too_big.config, too_big.spec.held_out)


@pytest.mark.parametrize("method, match", [
    ({"objective": "simclr"}, "method.objective"),
    ({"mu": -1.0}, "method.mu"),
    ({"kernel_weights": "size"}, "method.kernel_weights"),
    ({"rad_term": "none"}, r"^<scenario>: method.rad_term: expected cka .* or ssl .*, got 'none'$"),
    ({"rad_term": "ssl", "mu": 0.0}, r"^<scenario>: method.rad_term: expected cka with mu = 0 .*got 'ssl'$"),
    ({"tiers": [{"fraction": 0.5, "encoder": "small_cnn"}]}, "method.tiers: expected fractions summing to 1"),
    ({"tiers": [{"fraction": 1.0, "encoder": "vit"}]},
     r"^<scenario>: method.tiers\[0\].encoder: expected one of narrow_cnn, .*, got 'vit'$"),
    ({"tiers": [{"fraction": 0.5, "encoder": "small_cnn"}] * 2},
     r"^<scenario>: method.tiers\[1\].encoder: expected a value no earlier item has, got 'small_cnn'$"),
    ({"tiers": [{"fraction": 0, "encoder": "small_cnn"}]}, r"method.tiers\[0\].fraction: expected a positive number"),
    ({"tiers": [{"fraction": 1.0}]}, r"method.tiers\[0\]: expected a mapping \{fraction, encoder\}"),
    ({"rad_size": 1, "rad_batch_size": 1}, r"^<scenario>: method.rad_size: expected an integer >= 2"),
    ({"rad_batch_size": 1}, r"^<scenario>: method.rad_batch_size: expected an integer >= 2"),
    ({"eval_clients_per_tier": 0}, r"^<scenario>: method.eval_clients_per_tier: expected a positive integer"),
    ({"tiers": [{"fraction": 0.5, "encoder": "small_cnn"}, {"fraction": 0.45, "encoder": "large_cnn"}]},
     "method.tiers: expected fractions summing to 1"),
])
def test_bad_values_are_one_line_errors(synthetic_raw, method, match):
    with pytest.raises(ValueError, match=match):
        make(synthetic_raw, **method)


@pytest.mark.parametrize("method", [{"mu": 0.0}, {"rad_size": 8, "rad_batch_size": 8}, {"target_momentum": 1.0},
                                    {"target_momentum": 0.0}, {"rad_size": 2, "rad_batch_size": 2}])
def test_boundary_values_are_accepted(synthetic_raw, method):
    """The closed ends of the rules: mu = 0 (local SSL), a RAD batch of the whole RAD, a frozen or
    copied target (momentum 1 or 0), the smallest RAD (2 images)."""
    _, built = make(synthetic_raw, **method)
    assert all(getattr(built.config, k) == v for k, v in method.items())


def test_results_do_not_depend_on_the_number_of_workers(synthetic_raw):
    scenario, method = make(synthetic_raw)
    one, two = Federation(scenario, method), Federation(scenario, method)
    one.round(1, (0, 1, 2))
    ctx = RoundContext(1, 4, (0, 1, 2), scenario["seed"], freeze(scenario))
    shares = [[0, 2], [1]]
    broadcast, extras, _ = two.server.payload(ctx, shares)
    results = [simulate_clients(method, method.make_workspace(torch.device("cpu")), load_client, broadcast,
                                share_extras, share, ctx, {}) for share, share_extras in zip(shares, extras)]
    two.server.aggregate(ctx, results)
    assert torch.equal(one.server.state["kernel_sum"], two.server.state["kernel_sum"])
    for result in results:
        for cid, state in result.client_states.items():
            assert all(torch.equal(v, one.states[cid]["networks"][k]) for k, v in state["networks"].items())


@pytest.mark.parametrize("seed, hand_counts, hand_tiers, hand_chosen", [
    (3, [1, 2, 3, 4], [1, 1, 0, 0], [1, 3]),  # tier 0 = clients 2, 3 (3 and 4 rounds), tier 1 = 0, 1 (1 and 2)
    (2, [3, 3, 2, 2], [1, 1, 0, 0], [0, 2]),  # ties within each tier: the lowest id
])
def test_the_evaluated_clients_are_each_tiers_most_trained(synthetic_raw, seed, hand_counts, hand_tiers, hand_chosen):
    """Per tier, the client completing the most of the run's 5 rounds (the cohorts are fixed by the
    seed), the lowest id among ties; the counts read off the schedule, the choice made by hand."""
    _, method = make({**synthetic_raw, "seed": seed}, training={"rounds": 5}, tiers=TIERS, eval_clients_per_tier=1)
    counts = np.zeros(NUM_CLIENTS, dtype=np.int64)
    for completed in method.spec.schedule.completed(range(1, 6)):
        counts[list(completed)] += 1
    assert counts.tolist() == hand_counts and method.client_tier.tolist() == hand_tiers
    assert method.eval_clients() == hand_chosen
