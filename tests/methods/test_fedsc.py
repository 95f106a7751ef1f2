"""FedSC's client and server steps in-process (no Ray): the clip bound, DP-CalR against a hand
computation, the per-client privacy accounting, the local step's gradient against a hand
computation, the incremental sum of Algorithm 1 and the weight average, alpha = 1."""
import math
from collections import Counter

import numpy as np
import pytest
import torch

from methods import build_method
from methods.base import ClientData, DataSpec
from methods.fedsc import FedSCSpectral
from methods.objectives import project
from methods.privacy import correlation_sensitivity, rdp_epsilon
from simulator.augment import to_float
from simulator.context import RoundContext, freeze
from simulator.data.synthetic import make_synthetic
from simulator.federation import Server, add_phase_metrics, simulate_clients
from simulator.scenario import resolve

DATA = make_synthetic(train_per_class=6, test_per_class=1, seed=2)
# four clients, two classes each (non-i.i.d.), of different sizes
CLIENTS = [(DATA.train_x[mask], DATA.train_y[mask])
           for mask in ((DATA.train_y < 2), (DATA.train_y >= 2) & (DATA.train_y < 4),
                        (DATA.train_y >= 4) & (DATA.train_y < 7), DATA.train_y >= 7)]
SPEC = DataSpec(1, 28, 10, tuple(len(y) for _, y in CLIENTS))
DIM = 32  # projector_dim of the synthetic scenario


def build(synthetic_raw, spec=SPEC, rounds=3, **method):
    raw = {**synthetic_raw, "method": method,
           "training": {**synthetic_raw["training"], "rounds": rounds}}
    scenario = resolve(raw)
    return build_method(scenario, spec), scenario


def run_round(method, server, scenario, round_index, cohort):
    """Every pass of a round in-process: the last pass's result and extras, the round's metrics
    and the bytes sent down over its passes."""
    workspace = method.make_workspace(torch.device("cpu"))
    metrics, bytes_down = {}, Counter()
    for phase in method.phases(round_index):
        ctx = RoundContext(round_index, scenario["training"]["rounds"], cohort, scenario["seed"], freeze(scenario),
                           phase)
        broadcast, extras, down = server.payload(ctx, [list(cohort)])
        result = simulate_clients(method, workspace, lambda c: CLIENTS[c], broadcast, extras[0], list(cohort), ctx)
        metrics = add_phase_metrics(metrics, server.aggregate(ctx, [result]))
        bytes_down += down
    return result, metrics, extras[0], bytes_down


def test_setup_round_collects_every_clients_correlation_without_training(synthetic_raw):
    method, scenario = build(synthetic_raw, name="fedsc", share_clip_mu=0.01, share_views=2)
    server = Server(method)
    before = {k: v.clone() for k, v in server.state["weights"].items()}
    result, metrics, _, _ = run_round(method, server, scenario, 0, (0, 1, 2, 3))
    assert result.stats is None and sorted(result.records) == [0, 1, 2, 3]
    for cid, record in result.records.items():
        matrix = record["correlation"]
        assert matrix.shape == (DIM, DIM) and torch.allclose(matrix, matrix.T, atol=1e-6)
        assert torch.linalg.eigvalsh(matrix.double()).min() > -1e-6  # an average of z z^T: PSD
        # every z (norms up to ~0.9 at initialisation) clipped to norm sqrt(mu) = 0.1: the mean of ||zc||^2
        assert matrix.trace().item() == pytest.approx(0.01, rel=1e-5)
        assert torch.equal(server.state["correlations"][cid], matrix)
    assert all(torch.equal(before[k], server.state["weights"][k]) for k in before)
    assert metrics["bytes_up/correlation"] == 4 * 4 * DIM * DIM and "bytes_up/weights" not in metrics
    assert metrics["fedsc/clients_with_matrix"] == 4


def test_incremental_sum_equals_recomputed_sum_after_many_partial_rounds(synthetic_raw):
    """Algorithm 1's R~ <- R~ - q_j R~_j_old + q_j R~_j_new, with clients that appear late."""
    sizes = (30, 7, 12, 51, 3, 20)
    spec = DataSpec(1, 28, 10, sizes)
    method, scenario = build(synthetic_raw, spec, rounds=60, name="fedsc")
    state = method.init_state()
    rng = np.random.default_rng(0)
    q = torch.tensor(sizes, dtype=torch.float64) / sum(sizes)
    for r in range(1, 61):
        cohort = tuple(sorted(rng.choice(6, size=2, replace=False).tolist()))
        ctx = RoundContext(r, 60, cohort, 0, freeze(scenario))
        records = {c: {"correlation": torch.randn(DIM, DIM, dtype=torch.float32) * 3} for c in cohort}
        state, _ = method.server_update(state, None, records, ctx)
        has = state["shared"] > 0
        recomputed = sum(q[j] * state["correlations"][j].double() for j in range(6) if has[j])
        assert torch.allclose(state["correlation_sum"], recomputed, rtol=0, atol=1e-10)
        assert state["correlation_mass"] == pytest.approx(q[has].sum().item())
        for j in range(6):  # Rbar_{-j}: the q-weighted mean of the OTHER clients' last matrices
            others = [k for k in range(6) if k != j and has[k]]
            extra = method.client_extra(state, j, ctx)
            if not others:
                assert extra is None
                continue
            expected = sum(q[k] * state["correlations"][k].double() for k in others) / q[others].sum()
            assert torch.allclose(extra["correlation"], expected.float(), atol=1e-5)
    assert (state["shared"] > 0).all() and state["shared"].sum() == 120


def test_a_client_whose_matrix_is_the_only_one_trains_plain_sc(synthetic_raw):
    # Rbar_{-j} is over the OTHER clients' matrices: with only its own shared there is none (not 0 / 0)
    method, scenario = build(synthetic_raw, name="fedsc")
    matrix = torch.randn(DIM, DIM, generator=torch.Generator().manual_seed(0))
    state, _ = method.server_update(method.init_state(), None, {2: {"correlation": matrix}},
                                    RoundContext(1, 3, (2,), 0, freeze(scenario), "share"))
    train = RoundContext(1, 3, (2,), 0, freeze(scenario), "train")
    assert method.client_extra(state, 2, train) is None
    assert torch.allclose(method.client_extra(state, 0, train)["correlation"], matrix)


def test_alpha_one_reproduces_fedavg_spectral_bitwise(synthetic_raw):
    # clip_mu small enough that the training clip bites: FedAvg+SC must clip the same way
    fedsc, scenario = build(synthetic_raw, rounds=2, name="fedsc", alpha_start=1.0, alpha_end=1.0, share_views=1,
                            clip_mu=0.01)
    fedavg, _ = build(synthetic_raw, rounds=2, name="fedavg", objective="spectral", clip_mu=0.01)
    unclipped, _ = build(synthetic_raw, rounds=2, name="fedavg", objective="spectral")
    decaying, _ = build(synthetic_raw, rounds=2, name="fedsc", alpha_start=0.5, share_views=1, clip_mu=0.01)
    methods = {"fedsc": fedsc, "fedavg": fedavg, "unclipped": unclipped, "decaying": decaying}
    servers = {name: Server(m) for name, m in methods.items()}
    run_round(fedsc, servers["fedsc"], scenario, 0, (0, 1, 2, 3))
    run_round(decaying, servers["decaying"], scenario, 0, (0, 1, 2, 3))
    for r, cohort in ((1, (0, 2)), (2, (1, 3))):
        _, _, extras, _ = run_round(fedsc, servers["fedsc"], scenario, r, cohort)
        assert sorted(extras) == list(cohort)  # every trained client received the others' matrix...
        assert all(extra["correlation"].abs().sum() > 0 for extra in extras.values())  # ...a live third term
        for name in ("fedavg", "unclipped", "decaying"):
            run_round(methods[name], servers[name], scenario, r, cohort)
    weights = {name: s.state["weights"] for name, s in servers.items()}
    assert all(torch.equal(weights["fedsc"][k], weights["fedavg"][k]) for k in weights["fedavg"])
    for other in ("decaying", "unclipped"):
        assert not all(torch.equal(weights[other][k], weights["fedavg"][k]) for k in weights["fedavg"])


def test_alpha_decays_linearly_over_the_rounds(synthetic_raw):
    method, scenario = build(synthetic_raw, rounds=5, name="fedsc", alpha_start=1.0, alpha_end=0.2)
    alphas = [method.alpha(RoundContext(r, 5, (), 0, freeze(scenario))) for r in range(1, 6)]
    assert alphas == pytest.approx([1.0, 0.84, 0.68, 0.52, 0.36])


@pytest.mark.parametrize("rounds, share_from_round, share_every, hand_count", [
    (3, 1, 2, 2),  # rounds 1 and 3: the last round shares
    (4, 0, 2, 3),  # the setup round 0, then 2 and 4 (round 1 would share the setup round's weights again)
    (5, 2, 1, 4),  # rounds 2, 3, 4, 5
    (4, 0, 1, 4),  # the defaults: the setup round 0, then 2, 3, 4 (not round 1, as above)
])
def test_the_privacy_budget_counts_every_sharing_round_the_last_included(synthetic_raw, rounds, share_from_round,
                                                                          share_every, hand_count):
    """The noise multiplier is set so that the shares a client can make over the whole run spend at
    most target_epsilon: the count of sharing rounds, by hand, against the method's."""
    method, _ = build(synthetic_raw, rounds=rounds, name="fedsc", share_clip_mu=2.0, share_from_round=share_from_round,
                      share_every=share_every, target_epsilon=8.0, delta=1e-4)
    assert method.planned_shares == hand_count
    # spent to the accountant's 0.01 tolerance, not over-protected (e.g. sized for one share more)
    assert 8.0 - 0.02 <= rdp_epsilon(method.noise_multiplier, hand_count, 1e-4) <= 8.0


def test_dp_noise_scale_and_per_client_epsilon(synthetic_raw):
    """Noise of std multiplier * sqrt(2) mu / n_j on every entry; epsilon counts only the rounds in
    which the client shared (here rounds 1 and 3: share_every 2 from round 1)."""
    options = dict(name="fedsc", share_clip_mu=2.0, share_from_round=1, share_every=2, delta=1e-4, share_views=1)
    private, scenario = build(synthetic_raw, rounds=4, target_epsilon=8.0, **options)
    clean, _ = build(synthetic_raw, rounds=4, **options)
    assert private.planned_shares == 2  # rounds 1 and 3
    assert rdp_epsilon(private.noise_multiplier, 2, 1e-4) <= 8.0
    ctx = RoundContext(1, 4, (0,), scenario["seed"], freeze(scenario))
    workspace = private.make_workspace(torch.device("cpu"))
    data = ClientData(0, *CLIENTS[0])
    noisy = private.shared_correlation(workspace, data, ctx)
    exact = clean.shared_correlation(workspace, data, ctx)
    sigma = private.noise_multiplier * correlation_sensitivity(2.0, len(CLIENTS[0][1]))
    assert abs((noisy - exact).std().item() - sigma) < 0.1 * sigma

    server = Server(private)
    # round 0 is not a sharing round: the run has no setup round (it starts at round 1)
    assert not type(private).has_setup_round(private.config)
    assert type(private).has_setup_round(build(synthetic_raw, rounds=4, name="fedsc")[0].config)
    _, m1, extras, _ = run_round(private, server, scenario, 1, (0, 1))
    assert sorted(extras) == [0, 1]  # each trains against the other's matrix, shared this round
    _, m2, extras, bytes_down = run_round(private, server, scenario, 2, (1, 2))
    assert "bytes_up/correlation" not in m2 and sorted(extras) == [1, 2]
    assert bytes_down["correlation"] == 2 * 4 * DIM * DIM and bytes_down["weights"] > 0
    _, m3, _, two_passes = run_round(private, server, scenario, 3, (1, 3))
    assert two_passes["weights"] == bytes_down["weights"]  # the weights go down once per round
    assert server.state["shared"].tolist() == [1, 2, 0, 1]
    expected = rdp_epsilon(private.noise_multiplier, 2, 1e-4)  # client 1: shared twice
    assert m3["privacy/epsilon_max"] == pytest.approx(expected)
    assert m3["summary/privacy_epsilon_max"] == m3["privacy/epsilon_max"] <= 8.0
    assert m1["privacy/epsilon_max"] == pytest.approx(rdp_epsilon(private.noise_multiplier, 1, 1e-4))


@pytest.mark.parametrize("option, message", [
    ({"objective": "simclr"}, "method.objective: expected spectral, got 'simclr'"),
    ({"alpha_end": 1.5}, r"method.alpha_end: expected a number in \[0, 1\], got 1.5"),
    ({"noise_sigma": 0.01, "target_epsilon": 3.0}, "method.target_epsilon: expected 0 when"),
    ({"delta": 1.0}, r"method.delta: expected a number in \(0, 1\), got 1.0"),
    ({"target_epsilon": -1.0}, r"method.target_epsilon: expected a number in \[0, 1e6\] \(0: no target\), got -1.0"),
    # past 1e6 (at 1e300 Opacus's search for the noise multiplier never ended)
    ({"target_epsilon": 2e6}, r"method.target_epsilon: expected a number in \[0, 1e6\] \(0: no target\), got 2"),
    ({"share_clip_mu": -1.0}, r"method.share_clip_mu: expected a non-negative number \(0: method.clip_mu\), got -1.0"),
    ({"clip_mu": 0.0}, "method.share_clip_mu: expected a positive number when method.clip_mu is 0"),
    ({"clip_mu": -1.0}, "method.clip_mu: expected a non-negative number, got -1.0"),
    ({"share_from_round": 9}, r"method.share_from_round: expected a round in \[0, 3\], got 9"),
    # each bound at its first value outside (rounds = 3)
    ({"share_from_round": 4}, r"method.share_from_round: expected a round in \[0, 3\], got 4"),
    ({"alpha_start": 1.01}, r"method.alpha_start: expected a number in \[0, 1\], got 1.01"),
    ({"alpha_start": -0.01}, r"method.alpha_start: expected a number in \[0, 1\], got -0.01"),
    ({"alpha_end": -0.01}, r"method.alpha_end: expected a number in \[0, 1\], got -0.01"),
    ({"share_views": 0}, "method.share_views: expected a positive integer, got 0"),
    ({"share_every": 0}, "method.share_every: expected a positive integer, got 0"),
    ({"noise_sigma": -0.01}, "method.noise_sigma: expected a non-negative number, got -0.01"),
    ({"delta": 0.0}, r"method.delta: expected a number in \(0, 1\), got 0.0"),
])
def test_bad_options_give_one_line_errors(synthetic_raw, option, message):
    with pytest.raises(ValueError, match=message):
        build(synthetic_raw, name="fedsc", **option)


def last_linear(online):
    """The projector's last Linear layer (z = W h + b) and its flat-state prefix."""
    index = len(online["projector"]) - 1
    return online["projector"][index], f"online.projector.{index}"


def scale_projections(method, weights, images, median_norm):
    """Scale the projector's last layer in ``weights`` (in place) so that the median projection norm
    of ``images`` is ``median_norm`` (z scales with the layer exactly)."""
    workspace = method.make_workspace(torch.device("cpu"))
    for name, slot in workspace.slots.items():
        slot.data.copy_(weights[name])
    with torch.no_grad():
        norms = project(workspace.online.eval(), to_float(images)).norm(dim=1)
    factor = median_norm / norms.median().item()
    _, prefix = last_linear(workspace.online)
    for key in (f"{prefix}.weight", f"{prefix}.bias"):
        weights[key].mul_(factor)


def record_views(workspace):
    """Wrap the workspace's augmentations (of first and second views): every call's input batch, output
    views and the generator's state after it."""
    calls = []

    def recording(augment):
        def augmented(batch, generator):
            views = augment(batch, generator)
            calls.append((batch.clone(), views.clone(), generator.get_state()))
            return views
        return augmented

    workspace.augment, workspace.augment_prime = recording(workspace.augment), recording(workspace.augment_prime)
    return calls


def test_one_clip_bound_governs_the_loss_and_dp_calr_by_default(synthetic_raw):
    """The reference code's one mu (4) clips the loss's and the shared matrix's projections; a user's
    clip_mu moves both, an explicit share_clip_mu only DP-CalR's."""
    method, scenario = build(synthetic_raw, name="fedsc")
    assert method.config.share_views == 5
    assert method.config.clip_mu == 4.0 and method.config.share_clip_mu == 0.0 and method.share_mu == 4.0
    weights = {k: v.clone() for k, v in method.init_state()["weights"].items()}
    images = CLIENTS[0][0]
    scale_projections(method, weights, images, 20.0)  # every projection far beyond norm sqrt(4) = 2
    workspace = method.make_workspace(torch.device("cpu"))
    for name, slot in workspace.slots.items():
        slot.data.copy_(weights[name])
    ctx = RoundContext(0, 3, (0,), scenario["seed"], freeze(scenario), "share")
    shared = method.shared_correlation(workspace, ClientData(0, *CLIENTS[0]), ctx)
    assert shared.trace().item() == pytest.approx(4.0, rel=1e-5)  # the mean of ||zc||^2 = mu
    # the training loss (the objective client_update binds) clips at the same bound
    objective = FedSCSpectral(method.objective, shared, 0.5)
    embedding = objective.embed(workspace.online, None, [to_float(images)] * 2)
    assert embedding["z"][0].norm(dim=1).min() > 10
    for z in objective.clipped_projections(embedding, None):
        assert torch.allclose(z.norm(dim=1), torch.full((len(images),), 2.0), atol=1e-5)

    moved, _ = build(synthetic_raw, name="fedsc", clip_mu=1.0)
    assert moved.config.clip_mu == moved.share_mu == 1.0
    split, _ = build(synthetic_raw, name="fedsc", clip_mu=0.0, share_clip_mu=9.0)  # Eq. 5 unclipped, DP-CalR at 9
    assert split.config.clip_mu == 0.0 and split.share_mu == 9.0
    # the split bounds in use: DP-CalR clips at sqrt(9) = 3 (the projections are ~20 long), the loss not
    split_workspace = split.make_workspace(torch.device("cpu"))
    for name, slot in split_workspace.slots.items():
        slot.data.copy_(weights[name])
    assert split.shared_correlation(split_workspace, ClientData(0, *CLIENTS[0]), ctx).trace().item() == \
        pytest.approx(9.0, rel=1e-5)
    unclipped = FedSCSpectral(split.objective, shared, 0.5)
    z_loss = unclipped.clipped_projections(unclipped.embed(split_workspace.online, None, [to_float(images)] * 2), None)
    assert all(z.norm(dim=1).min() > 10 for z in z_loss)


@pytest.mark.parametrize("case", ["clipped, noise_sigma", "clipped, target_epsilon", "unclipped, no noise"])
def test_dp_calr_equals_the_hand_computation(synthetic_raw, case):
    """Algorithm 2: R~_j = 1/(n V) sum_x sum_v zc zc^T + N(0, sigma^2) on every entry, zc =
    NormClip(z, sqrt(mu)); projections 3-5x longer than sqrt(mu) (the clip bites on every row), or
    all shorter (it leaves them alone). The networks run in eval mode, as in the reference code (a
    BatchNorm encoder here, so that it matters)."""
    mu, views, cid = 0.5, 3, 2
    privacy = {"clipped, noise_sigma": {"noise_sigma": 0.01}, "clipped, target_epsilon": {"target_epsilon": 4.0},
               "unclipped, no noise": {}}[case]
    raw = {**synthetic_raw, "model": {**synthetic_raw["model"], "norm": "batch"},  # eval mode matters
           "training": {**synthetic_raw["training"], "batch_size": 5}}  # 18 samples: batches of 5, 5, 5, 3
    method, scenario = build(raw, rounds=3, name="fedsc", clip_mu=mu, share_views=views, **privacy)
    images, labels = CLIENTS[cid]
    n = len(labels)
    weights = {k: v.clone() for k, v in method.init_state()["weights"].items()}
    scale_projections(method, weights, images, (4.0 if case.startswith("clipped") else 0.1) * math.sqrt(mu))
    workspace = method.make_workspace(torch.device("cpu"))
    for name, slot in workspace.slots.items():
        slot.data.copy_(weights[name])
    calls = record_views(workspace)
    ctx = RoundContext(2, 3, (cid,), scenario["seed"], freeze(scenario), "share")
    shared = method.shared_correlation(workspace, ClientData(cid, images, labels), ctx).double()

    # every sample augmented V times, batch by batch
    assert n == 18 and [len(batch) for batch, _, _ in calls] == [5] * views + [5] * views + [5] * views + [3] * views
    assert sum(len(batch) for batch, _, _ in calls) == n * views
    # on the client's own "correlation" stream of the round, not its training stream
    first_batch, first_views, _ = calls[0]
    replay = method.make_workspace(torch.device("cpu")).augment
    assert torch.equal(replay(first_batch, ctx.client_generator(cid, "correlation")), first_views)
    assert not torch.equal(replay(first_batch, ctx.client_generator(cid)), first_views)
    assert torch.allclose(sum(batch.sum(0) for batch, _, _ in calls), views * to_float(images).sum(0), atol=1e-4)
    # the hand computation, one row at a time, on the recorded views
    total = torch.zeros(DIM, DIM, dtype=torch.float64)
    online = workspace.online.eval()
    norms = []
    with torch.no_grad():
        for _, augmented, _ in calls:
            for z in project(online, augmented).double():
                norm = z.norm().item()
                norms.append(norm / math.sqrt(mu))
                clipped = z * (math.sqrt(mu) / norm) if norm > math.sqrt(mu) else z
                total += torch.outer(clipped, clipped)
    expected = total / (n * views)
    if case.startswith("clipped"):
        assert min(norms) > 2.5 and np.median(norms) > 3  # the clip bites on every row
        assert expected.trace().item() == pytest.approx(mu)
    else:
        assert max(norms) < 1
    sigma = {"clipped, noise_sigma": 0.01,
             "clipped, target_epsilon": (method.noise_multiplier or 0) * math.sqrt(2) * mu / n,
             "unclipped, no noise": 0.0}[case]
    assert method.noise_std(n) == pytest.approx(sigma)
    if sigma == 0:
        assert torch.allclose(shared, expected, rtol=0, atol=1e-6)
        return
    if method.noise_multiplier is not None:  # sigma derived from the target: the budget holds
        assert rdp_epsilon(method.noise_multiplier, method.planned_shares, 1e-5) <= 4.0
    # exact: the noise is the next draws of the client's seeded stream, after the augmentations
    generator = torch.Generator()
    generator.set_state(calls[-1][2])
    noise = sigma * torch.randn((DIM, DIM), generator=generator, dtype=torch.float64)
    assert torch.allclose(shared, expected + noise, rtol=0, atol=1e-6)
    # statistical: the difference from the clean matrix has the stated std on its H^2 entries
    difference = (shared - expected) / sigma
    assert abs(difference.std().item() - 1) < 0.1 and abs(difference.mean().item()) < 0.15
    assert not torch.allclose(difference, difference.T)  # i.i.d. entries, not symmetrised


def test_reported_epsilon_uses_the_clip_sensitivity_of_each_client(synthetic_raw):
    """A fixed sigma: client j's noise multiplier is sigma / (sqrt(2) mu / n_j) with the one clip mu,
    and its epsilon after T shares is the Gaussian mechanism's (accountant checked against a hand
    computation in test_privacy.py)."""
    method, _ = build(synthetic_raw, name="fedsc", noise_sigma=0.02, clip_mu=0.5, delta=1e-5)
    for cid, n in enumerate(SPEC.client_sizes):
        multiplier = 0.02 / (math.sqrt(2) * 0.5 / n)
        for shares in (1, 3):
            assert method.epsilon(cid, shares) == pytest.approx(rdp_epsilon(multiplier, shares, 1e-5), rel=1e-12)
    assert method.epsilon(0, 3) > method.epsilon(2, 3)  # the smaller client leaks more


def test_the_largest_epsilon_is_over_every_client_the_last_included(synthetic_raw):
    method, scenario = build(synthetic_raw, name="fedsc", noise_sigma=0.02, clip_mu=0.5, delta=1e-5)
    last = len(SPEC.client_sizes) - 1  # the only client that has shared
    _, metrics = method.server_update(method.init_state(), None, {last: {"correlation": torch.zeros(DIM, DIM)}},
                                      RoundContext(1, 3, (last,), 0, freeze(scenario), "share"))
    assert metrics["privacy/epsilon_max"] == pytest.approx(method.epsilon(last, 1)) and method.epsilon(last, 1) > 0
    assert metrics["privacy/shares_max"] == 1.0


def hand_step(h1, h2, weight, bias, others, alpha, mu, lr):
    """W and b after one SGD step (no momentum buffer yet, no weight decay) on Eq. 5 with
    z = h W^T + b clipped to norm sqrt(mu), the gradient written out by hand:
    dL/dzc1 = (-zc2 + alpha zc1 R + (1 - alpha) zc1 (Rbar + Rbar^T) / 2) / B, and through the clip
    d zc / dz = (s / |z|) (I - u u^T) for rows longer than s = sqrt(mu)."""
    s = math.sqrt(mu)
    z1, z2 = h1 @ weight.T + bias, h2 @ weight.T + bias
    n1, n2 = z1.norm(dim=1, keepdim=True), z2.norm(dim=1, keepdim=True)
    c1, c2 = z1 * torch.clamp(s / n1, max=1), z2 * torch.clamp(s / n2, max=1)
    batch = len(z1)
    correlation = (c1.T @ c1 + c2.T @ c2) / (2 * batch)
    symmetric = (others + others.T) / 2
    g1 = (-c2 + alpha * c1 @ correlation + (1 - alpha) * c1 @ symmetric) / batch
    g2 = (-c1 + alpha * c2 @ correlation + (1 - alpha) * c2 @ symmetric) / batch

    def through_clip(g, z, norm):
        u = z / norm
        projected = (s / norm) * (g - u * (u * g).sum(dim=1, keepdim=True))
        return torch.where(norm > s, projected, g)

    d1, d2 = through_clip(g1, z1, n1), through_clip(g2, z2, n2)
    return weight - lr * (d1.T @ h1 + d2.T @ h2), bias - lr * (d1.sum(0) + d2.sum(0))


@pytest.mark.parametrize("alpha_start, alpha_end, alpha", [(1.0, 0.1, 0.7), (1.0, 1.0, 1.0)])
def test_local_step_gradient_equals_the_hand_computation(synthetic_raw, alpha_start, alpha_end, alpha):
    """One local SGD step of the method's client update on a fixed batch (client 0's 12 samples):
    the projector's last layer moves by -lr times the hand gradient of Eq. 5 with Rbar_{-j} =
    (R~ - q_j R~_j) / (1 - q_j) from the server's matrices, held constant, and + (1 - alpha) on the
    inter-client term; alpha = 1 is plain SC (FedAvg+SC's gradient). Round 2 of 3: alpha =
    alpha_start + (alpha_end - alpha_start) / 3."""
    raw = {**synthetic_raw, "training": {**synthetic_raw["training"], "batch_size": 64, "local_epochs": 1,
                                         "momentum": 0.0, "weight_decay": 0.0, "lr": 0.5}}
    method, scenario = build(raw, rounds=3, name="fedsc", alpha_start=alpha_start, alpha_end=alpha_end)
    mu, lr, cid = method.config.clip_mu, 0.5, 0
    state = method.init_state()
    images, labels = CLIENTS[cid]
    scale_projections(method, state["weights"], images, math.sqrt(mu))  # about half the rows clip
    # every client's last matrix: the outer products of random projections of norm ~2
    generator = torch.Generator().manual_seed(5)
    matrices = {}
    for j in range(4):
        z = torch.randn(40, DIM, generator=generator) * (2 / math.sqrt(DIM)) + 0.3 * (j - 1.5) / math.sqrt(DIM)
        matrices[j] = z.T @ z / 40
    share_ctx = RoundContext(0, 3, (0, 1, 2, 3), scenario["seed"], freeze(scenario), "share")
    state, _ = method.server_update(state, None, {j: {"correlation": m} for j, m in matrices.items()}, share_ctx)
    ctx = RoundContext(2, 3, (cid, 1), scenario["seed"], freeze(scenario), "train")
    assert method.alpha(ctx) == pytest.approx(alpha)
    q = torch.tensor(SPEC.client_sizes, dtype=torch.float64) / sum(SPEC.client_sizes)  # q_j = n_j / n
    total = sum(q[j] * matrices[j].double() for j in range(4))
    others = (total - q[cid] * matrices[cid].double()) / (1 - q[cid])
    extra = method.client_extra(state, cid, ctx)
    assert torch.allclose(extra["correlation"].double(), others, atol=1e-6)

    workspace = method.make_workspace(torch.device("cpu"))
    calls = record_views(workspace)
    method.client_update(workspace, {"weights": state["weights"]}, extra, ClientData(cid, images, labels), ctx)
    assert len(calls) == 2 and all(len(batch) == len(labels) for batch, _, _ in calls)  # one batch, two views

    before = method.make_workspace(torch.device("cpu"))
    for name, slot in before.slots.items():
        slot.data.copy_(state["weights"][name])
    layer, prefix = last_linear(before.online)
    hidden = before.online["projector"][:-1]
    with torch.no_grad():
        h1, h2 = (hidden(before.online["encoder"](views)).double() for _, views, _ in calls)
    weight, bias = layer.weight.detach().double(), layer.bias.detach().double()
    norms = (h1 @ weight.T + bias).norm(dim=1)
    assert (norms > math.sqrt(mu)).any() and (norms < math.sqrt(mu)).any()  # both branches of the clip
    expected_w, expected_b = hand_step(h1, h2, weight, bias, others, alpha, mu, lr)
    trained, _ = last_linear(workspace.online)
    assert torch.allclose(trained.weight.double(), expected_w, rtol=0, atol=2e-6)
    assert torch.allclose(trained.bias.double(), expected_b, rtol=0, atol=2e-6)
    if alpha < 1:  # the test tells the sign of the inter-client term and the matrix apart
        flipped_w, _ = hand_step(h1, h2, weight, bias, -others, alpha, mu, lr)
        own_w, _ = hand_step(h1, h2, weight, bias, total, alpha, mu, lr)
        for wrong in (flipped_w, own_w):
            assert (wrong - expected_w).abs().max() > 100 * 2e-6


def test_the_logged_parts_are_the_plain_spectral_loss_and_the_inter_client_correction(synthetic_raw):
    """The client step's loss parts (``train/loss_objective``, ``train/loss_inter_client``): Eq. 1's plain
    spectral contrastive loss of the clipped projections and (1 - alpha) (Tr(R Rbar) - ||R||_F^2 / 2),
    each by hand in float64; they sum to the trained loss. Before another client's matrix exists the
    correction is 0."""
    from methods.objective_step import composed_loss
    method, _ = build(synthetic_raw, name="fedsc")
    workspace = method.make_workspace(torch.device("cpu"))
    images = to_float(CLIENTS[1][0])
    views = [images, images.flip(3)]
    generator = torch.Generator().manual_seed(3)
    others = torch.randn(DIM, DIM, generator=generator) * 0.05  # not symmetric, as under DP noise
    with torch.no_grad():
        z1, z2 = (project(workspace.online, v).double() for v in views)
        z1, z2 = (z * (2 / z.norm(dim=1, keepdim=True).clamp_min(2)) for z in (z1, z2))  # clipped at sqrt(4)
    batch = len(images)
    r = (z1.T @ z1 + z2.T @ z2) / (2 * batch)
    plain = -(z1 * z2).sum() / batch + 0.5 * (r ** 2).sum()
    correction = 0.3 * ((r * others.double().T).sum() - 0.5 * (r ** 2).sum())
    rows = torch.arange(batch)
    loss, parts = composed_loss(FedSCSpectral(method.objective, others, 0.7), workspace, [])(
        views, CLIENTS[1][1], rows)
    assert sorted(parts) == ["loss_inter_client", "loss_objective"]
    assert not any(value.requires_grad for value in parts.values())  # logged, not trained
    assert parts["loss_objective"].item() == pytest.approx(plain.item(), rel=1e-5)
    assert parts["loss_inter_client"].item() == pytest.approx(correction.item(), rel=1e-4)
    assert abs(correction.item()) > 1e-3 and abs(plain.item()) > 1e-3
    assert loss.item() == pytest.approx(plain.item() + correction.item(), rel=1e-5)
    _, first = composed_loss(FedSCSpectral(method.objective, None, 0.7), workspace, [])(
        views, CLIENTS[1][1], rows)
    assert first["loss_inter_client"].item() == 0
    assert first["loss_objective"].item() == pytest.approx(plain.item(), rel=1e-5)
    # with labels (Algorithm 2 of the UV paper): the plain part on the unlabelled rows split the same way
    from methods.semi_supervised import semi_supervised_loss
    objective = FedSCSpectral(method.objective, others, 0.7)
    embedding = objective.embed(workspace.online, None, views)
    labelled = torch.arange(batch) % 3 == 0
    total, parts = semi_supervised_loss(objective, embedding, CLIENTS[1][1], labelled,
                                        torch.nn.Linear(embedding["features"][0].shape[1], 10))
    unlabelled = (~labelled).nonzero().squeeze(1)
    _, alone = objective.rows_loss_parts(embedding, CLIENTS[1][1], unlabelled)
    assert sorted(parts) == ["loss_inter_client", "loss_label", "loss_objective", "loss_within_class"]
    assert parts["loss_inter_client"].item() == alone["loss_inter_client"].item() != 0
    assert total.item() == pytest.approx(sum(value.item() for value in parts.values()), rel=1e-5)
    # a batch with every row labelled still has FedSC's parts, at 0, so that the step means sum to the loss
    _, parts = semi_supervised_loss(objective, embedding, CLIENTS[1][1], torch.ones(batch, dtype=torch.bool),
                                    torch.nn.Linear(embedding["features"][0].shape[1], 10))
    assert parts["loss_objective"] == 0 and parts["loss_inter_client"] == 0 and parts["loss_within_class"] != 0


def run_passes(method, server, scenario, round_index, cohort):
    """Every pass of a round through the server, one worker per client; per pass: the broadcast, the
    extras, the records and the server's state after the pass."""
    passes = {}
    workspace = method.make_workspace(torch.device("cpu"))
    for phase in method.phases(round_index):
        ctx = RoundContext(round_index, scenario["training"]["rounds"], cohort, scenario["seed"],
                           freeze(scenario), phase)
        shares = [[c] for c in cohort]
        broadcast, extras, _ = server.payload(ctx, shares)
        results = [simulate_clients(method, workspace, lambda c: CLIENTS[c], broadcast, extras[i], share, ctx)
                   for i, share in enumerate(shares)]
        server.aggregate(ctx, results)
        passes[phase] = {"ctx": ctx, "broadcast": broadcast,
                         "extras": {c: e for share_extras in extras for c, e in share_extras.items()},
                         "records": {c: r for result in results for c, r in result.records.items()},
                         "state": server.state}
    return passes


ROUNDS = {0: (0, 1, 2, 3), 1: (0, 2), 2: (1, 2), 3: (0, 3)}  # round 0: the setup share; 2 of 4 after


@pytest.fixture(scope="module")
def four_rounds(tmp_path_factory):
    """Rounds 0-3 of FedSC with 2 of the 4 clients per round (rounds 2 and 3 share, then train)."""
    tmp_path = tmp_path_factory.mktemp("fedsc")
    raw = {"name": "tiny", "seed": 3, "dataset": {"name": "synthetic", "cache_dir": str(tmp_path / "cache")},
           "model": {"hidden_dim": 64, "projector_dim": DIM}, "training": {"batch_size": 32, "lr": 0.05},
           "output": {"dir": str(tmp_path / "runs")}}  # the synthetic scenario of conftest.py, as far as used here
    method, scenario = build(raw, rounds=3, name="fedsc", share_views=1)
    server = Server(method)
    return method, scenario, {r: run_passes(method, server, scenario, r, cohort) for r, cohort in ROUNDS.items()}


def test_server_keeps_algorithm_1_matrices_over_two_partial_rounds(four_rounds):
    """After each share pass: each client's stored matrix is its last upload (stale for the clients not
    sampled), R~ follows R~ <- R~ - q_j R~_j_old + q_j R~_j_new, the uploads are DP-CalR on the
    round's global weights, and the training clients receive Rbar_{-j} = (R~ - q_j R~_j) / (1 - q_j)
    with the co-sampled client's fresh matrix."""
    method, scenario, rounds = four_rounds
    assert [tuple(rounds[r]) for r in range(4)] == [("share",), ("train",), ("share", "train"), ("share", "train")]
    q = torch.tensor(SPEC.client_sizes, dtype=torch.float64) / sum(SPEC.client_sizes)  # q_j = n_j / n
    last = {c: rounds[0]["share"]["records"][c]["correlation"] for c in range(4)}
    aggregate = sum(q[c] * last[c].double() for c in range(4))  # Algorithm 1, t = 1: every client
    for r in (0, 2, 3):
        share = rounds[r]["share"]
        assert sorted(share["records"]) == list(ROUNDS[r])
        workspace = method.make_workspace(torch.device("cpu"))
        for name, slot in workspace.slots.items():
            slot.data.copy_(share["broadcast"]["weights"][name])
        for c in ROUNDS[r]:
            fresh = method.shared_correlation(workspace, ClientData(c, *CLIENTS[c]), share["ctx"])
            assert torch.equal(share["records"][c]["correlation"], fresh)
            if r > 0:
                aggregate = aggregate - q[c] * last[c].double() + q[c] * fresh.double()
            last[c] = fresh
        state = share["state"]
        for c in range(4):
            assert torch.equal(state["correlations"][c], last[c])
        assert torch.allclose(state["correlation_sum"], aggregate, rtol=0, atol=1e-12)
        assert state["correlation_mass"] == pytest.approx(1.0)
        assert state["shared"].tolist() == [sum(c in ROUNDS[t] for t in (0, 2, 3) if t <= r) for c in range(4)]
        train_round = 1 if r == 0 else r
        extras = rounds[train_round]["train"]["extras"]
        assert sorted(extras) == list(ROUNDS[train_round])
        for c in ROUNDS[train_round]:
            expected = (aggregate - q[c] * last[c].double()) / (1 - q[c])
            assert torch.allclose(extras[c]["correlation"].double(), expected, rtol=0, atol=1e-6)
    assert not torch.equal(last[0], rounds[0]["share"]["records"][0]["correlation"])  # refreshed in round 3
    assert torch.equal(last[1], rounds[2]["share"]["records"][1]["correlation"])  # stale after round 3


def test_every_trainable_tensor_is_the_size_weighted_mean_of_the_cohort(four_rounds):
    """After each train pass (rounds 1-3, 2 of 4 clients of sizes 12 and 18): every trainable tensor
    is sum_j n_j w_j / sum_j n_j of the clients' locally trained weights (FedAvg's average)."""
    method, scenario, rounds = four_rounds
    for r in (1, 2, 3):
        train = rounds[r]["train"]
        previous = train["broadcast"]["weights"]
        local = {}
        for c in ROUNDS[r]:
            workspace = method.make_workspace(torch.device("cpu"))
            method.client_update(workspace, train["broadcast"], train["extras"].get(c), ClientData(c, *CLIENTS[c]),
                                 train["ctx"])
            local[c] = {k: v.detach().clone().double() for k, v in workspace.slots.items()}
        sizes = {c: len(CLIENTS[c][1]) for c in ROUNDS[r]}
        weights = train["state"]["weights"]
        trainable = train["state"]["trainable"]
        assert trainable and set(trainable) <= set(weights)
        for key in trainable:
            expected = sum(sizes[c] * local[c][key] for c in sizes) / sum(sizes.values())
            assert torch.allclose(weights[key].double(), expected, rtol=0, atol=1e-6), (r, key)
            assert not torch.equal(weights[key], previous[key]), (r, key)
        unweighted = sum(local[c][trainable[0]] for c in sizes) / len(sizes)
        assert not torch.allclose(weights[trainable[0]].double(), unweighted, rtol=0, atol=1e-6)


def test_round_metrics_and_the_share_pass_by_hand(synthetic_raw):
    """Two share passes (clients 0, 1, then 1, 2), with noise: the server's round metrics against hand
    values (alpha = 1 + (0.2 - 1) (t - 1) / T; the clients holding a matrix, not the uploads of the pass;
    the most shares of one client, not their sum), and no matrix goes down in a share pass even when
    other clients hold one (it is not used there)."""
    method, scenario = build(synthetic_raw, rounds=5, name="fedsc", noise_sigma=0.02, clip_mu=0.5)
    state = method.init_state()
    for round_index, cohort in ((1, (0, 1)), (3, (1, 2))):
        share = RoundContext(round_index, 5, cohort, 0, freeze(scenario), "share")
        records = {c: {"correlation": torch.eye(DIM) * (c + 1)} for c in cohort}
        state, metrics = method.server_update(state, None, records, share)
    assert metrics["fedsc/alpha"] == pytest.approx(1 - 0.8 * 2 / 5)  # round 3 of 5: 0.68
    assert metrics["fedsc/clients_with_matrix"] == 3.0  # clients 0, 1 and 2; the pass uploaded 2
    assert metrics["privacy/shares_max"] == 2.0  # client 1 twice (the shares sum to 4)
    assert method.client_extra(state, 3, share) is None  # a share pass: nothing to train against
    train = RoundContext(3, 5, (1, 2), 0, freeze(scenario), "train")
    assert method.client_extra(state, 3, train) is not None
