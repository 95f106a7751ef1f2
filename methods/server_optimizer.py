"""Server optimisers applied to the averaged client model (FedOpt, Reddi et al. 2021)."""
from __future__ import annotations

import torch

from methods.params import ServerOptimizerParams


def server_step(params: dict[str, torch.Tensor], deltas: dict[str, torch.Tensor], state: dict | None,
                config: ServerOptimizerParams) -> tuple[dict[str, torch.Tensor], dict | None]:
    """``params`` after the server step on the round's averaged client deltas ``deltas`` (the
    average minus ``params``): ``avg`` moves by ``server_lr`` times the delta (FedAvg with a server
    learning rate); ``adam`` feeds the pseudo-gradient ``-delta`` to :func:`adam_update` with the
    moments of ``state`` (FedAdam). Returns (new params, new state; ``avg`` keeps ``state``)."""
    if config.server_optimizer == "adam":
        return adam_update(params, {name: -delta for name, delta in deltas.items()}, state, config.server_lr,
                           tuple(config.server_betas), config.server_eps)
    return {name: value + config.server_lr * deltas[name] for name, value in params.items()}, state


def adam_update(params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], state: dict | None,
                lr: float, betas: tuple[float, float], eps: float) -> tuple[dict[str, torch.Tensor], dict]:
    """One Adam step on the pseudo-gradients ``grads`` (minus the averaged client delta).

    Adam (Kingma & Ba 2015, Algorithm 1) with bias correction; ``state`` holds the step count and
    the first and second moments (``None`` before the first step). Returns (new params, new state).
    """
    beta1, beta2 = betas
    step = 1 if state is None else state["step"] + 1
    first, second, new_params = {}, {}, {}
    for name, value in params.items():
        grad = grads[name]
        m_prev = torch.zeros_like(value) if state is None else state["first"][name]
        v_prev = torch.zeros_like(value) if state is None else state["second"][name]
        first[name] = beta1 * m_prev + (1 - beta1) * grad
        second[name] = beta2 * v_prev + (1 - beta2) * grad * grad
        m_hat = first[name] / (1 - beta1**step)
        v_hat = second[name] / (1 - beta2**step)
        new_params[name] = value - lr * m_hat / (v_hat.sqrt() + eps)
    return new_params, {"step": step, "first": first, "second": second}
