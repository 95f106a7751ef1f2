"""FedSC's client and server steps in-process (no Ray): sharing, the incremental sum, alpha = 1,
DP-CalR's noise and the per-client privacy accounting."""
from collections import Counter

import numpy as np
import pytest
import torch

from methods import build_method
from methods.base import ClientData, DataSpec
from methods.privacy import correlation_sensitivity, rdp_epsilon
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
    method, scenario = build(synthetic_raw, name="fedsc", share_clip_mu=1.0, share_views=2)
    server = Server(method)
    before = {k: v.clone() for k, v in server.state["weights"].items()}
    result, metrics, _, _ = run_round(method, server, scenario, 0, (0, 1, 2, 3))
    assert result.stats is None and sorted(result.records) == [0, 1, 2, 3]
    for cid, record in result.records.items():
        matrix = record["correlation"]
        assert matrix.shape == (DIM, DIM) and torch.allclose(matrix, matrix.T, atol=1e-6)
        assert torch.linalg.eigvalsh(matrix.double()).min() > -1e-6  # an average of z z^T: PSD
        assert matrix.trace() <= 1.0 + 1e-5  # every z clipped to norm sqrt(mu) = 1
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
        assert all(extra["correlation"].abs().sum() > 0 for extra in extras.values())  # a live third term
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
    assert private.phases(0) == ()  # round 0 is not a sharing round: no pass at all
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
    ({"share_clip_mu": 0.0}, "method.share_clip_mu: expected a positive number, got 0.0"),
    ({"clip_mu": -1.0}, "method.clip_mu: expected a non-negative number, got -1.0"),
    ({"share_from_round": 9}, r"method.share_from_round: expected a round in \[0, 3\], got 9"),
])
def test_bad_options_give_one_line_errors(synthetic_raw, option, message):
    with pytest.raises(ValueError, match=message):
        build(synthetic_raw, name="fedsc", **option)


def test_cohort_trains_against_the_matrices_it_shared_this_round(synthetic_raw):
    """Algorithm 1: the sampled clients upload R~_j on the round's global weights before anyone
    trains, so Rbar_{-j} holds the co-sampled clients' fresh matrices, not last round's."""
    method, scenario = build(synthetic_raw, rounds=3, name="fedsc", share_views=1)
    assert [method.phases(r) for r in range(4)] == [("share",), ("train",), ("share", "train"), ("share", "train")]
    server = Server(method)
    run_round(method, server, scenario, 0, (0, 1, 2, 3))
    run_round(method, server, scenario, 1, (0, 2))
    global_weights = {k: v.clone() for k, v in server.state["weights"].items()}
    _, _, extras, _ = run_round(method, server, scenario, 2, (0, 2))

    workspace = method.make_workspace(torch.device("cpu"))
    for name, slot in workspace.slots.items():
        slot.data.copy_(global_weights[name])
    share_ctx = RoundContext(2, 3, (0, 2), scenario["seed"], freeze(scenario), "share")
    fresh = {c: method.shared_correlation(workspace, ClientData(c, *CLIENTS[c]), share_ctx) for c in (0, 2)}
    q = method.client_weights
    expected = (q[1] * server.state["correlations"][1].double() + q[2] * fresh[2].double()
                + q[3] * server.state["correlations"][3].double()) / (q[1] + q[2] + q[3])
    assert torch.equal(server.state["correlations"][2], fresh[2])
    assert torch.allclose(extras[0]["correlation"], expected.float(), atol=1e-6)
