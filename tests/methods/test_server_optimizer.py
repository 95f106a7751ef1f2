import math

import torch

from methods.params import ServerOptimizerParams
from methods.server_optimizer import server_step

ADAM = ServerOptimizerParams(server_optimizer="adam", server_lr=0.1, server_betas=(0.9, 0.999), server_eps=1e-8)


def delta(averaged: dict, params: dict) -> dict:
    return {k: averaged[k] - params[k] for k in params}


def test_two_adam_steps_match_a_hand_computation():
    params = {"w": torch.tensor([1.0, -2.0])}
    lr, (b1, b2), eps = 0.1, (0.9, 0.999), 1e-8
    new, state = server_step(params, delta({"w": torch.tensor([0.5, -2.0])}, params), None, ADAM)
    # step 1: g = [0.5, 0]; m = 0.1 g, v = 0.001 g^2; m_hat = g, v_hat = g^2 -> update lr * sign(g)
    assert torch.allclose(new["w"], torch.tensor([1.0 - 0.1, -2.0]))
    new2, state2 = server_step(new, delta({"w": torch.tensor([0.9, -1.0])}, new), state, ADAM)
    # step 2: g = [0.0, -1.0]
    m = [0.9 * 0.05 + 0.1 * 0.0, 0.9 * 0.0 + 0.1 * -1.0]
    v = [0.999 * 0.00025 + 0.001 * 0.0, 0.999 * 0.0 + 0.001 * 1.0]
    expected = [p - lr * (mi / (1 - b1**2)) / (math.sqrt(vi / (1 - b2**2)) + eps)
                for p, mi, vi in zip([0.9, -2.0], m, v)]
    assert torch.allclose(new2["w"], torch.tensor(expected))
    assert state2["step"] == 2


def test_adams_betas_and_eps_are_the_configured_ones():
    """betas (0.5, 0.9) and eps 0.1 (the defaults' (0.9, 0.999) and 1e-8 give other numbers): two
    steps by hand on one coordinate, pseudo-gradients -delta = 1 then 3."""
    config = ServerOptimizerParams(server_optimizer="adam", server_lr=1.0, server_betas=(0.5, 0.9), server_eps=0.1)
    params = {"w": torch.tensor([0.0])}
    new, state = server_step(params, {"w": torch.tensor([-1.0])}, None, config)
    # step 1: m = 0.5, v = 0.1; m_hat = 1, v_hat = 1 -> w = 0 - 1 / (1 + 0.1)
    assert torch.allclose(new["w"], torch.tensor([-1 / 1.1]))
    new2, _ = server_step(new, {"w": torch.tensor([-3.0])}, state, config)
    # step 2: m = 0.5 * 0.5 + 0.5 * 3 = 1.75, v = 0.9 * 0.1 + 0.1 * 9 = 0.99;
    # m_hat = 1.75 / 0.75, v_hat = 0.99 / 0.19
    expected = -1 / 1.1 - (1.75 / 0.75) / (math.sqrt(0.99 / 0.19) + 0.1)
    assert torch.allclose(new2["w"], torch.tensor([expected]))


def test_avg_moves_by_the_server_lr_of_the_delta_and_keeps_no_state():
    params = {"w": torch.tensor([1.0, -2.0])}
    config = ServerOptimizerParams(server_optimizer="avg", server_lr=0.5)
    new, state = server_step(params, delta({"w": torch.tensor([0.0, 2.0])}, params), None, config)
    assert torch.equal(new["w"], torch.tensor([0.5, 0.0]))  # 1 + 0.5 (0 - 1), -2 + 0.5 (2 + 2)
    assert state is None
