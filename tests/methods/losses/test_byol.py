import math

import pytest
import torch

from methods.losses import byol_loss


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_matches_hand_computation():
    # Direction (p1, z2): cos = 0 and cos = 1 -> (2 - 0 + 2 - 2) / 2 = 1.
    # Direction (p2, z1): cos = -1 and cos = 1/sqrt(2) -> (4 + 2 - sqrt(2)) / 2.
    p1 = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    z2 = torch.tensor([[0.0, 3.0], [2.0, 2.0]])
    p2 = torch.tensor([[1.0, 0.0], [0.0, 5.0]])
    z1 = torch.tensor([[-1.0, 0.0], [1.0, 1.0]])
    expected = (1.0 + (6 - math.sqrt(2)) / 2) / 2
    assert byol_loss(p1, p2, z1, z2).item() == pytest.approx(expected, rel=1e-6)


def test_matches_loop_computation():
    p1, p2 = [[0.2, -1.0], [1.5, 0.4]], [[-0.7, 0.1], [0.9, 0.9]]
    z1, z2 = [[1.0, 2.0], [-0.5, 1.0]], [[0.3, -1.0], [2.0, 0.5]]
    direction_12 = sum(2 - 2 * cosine(p, z) for p, z in zip(p1, z2)) / 2
    direction_21 = sum(2 - 2 * cosine(p, z) for p, z in zip(p2, z1)) / 2
    tensors = [torch.tensor(x) for x in (p1, p2, z1, z2)]
    assert byol_loss(*tensors).item() == pytest.approx((direction_12 + direction_21) / 2, rel=1e-6)


def test_identical_predictions_and_targets_give_zero():
    generator = torch.Generator().manual_seed(0)
    z1 = torch.randn(8, 5, generator=generator)
    z2 = torch.randn(8, 5, generator=generator)
    assert byol_loss(z2.clone(), z1.clone(), z1, z2).item() == pytest.approx(0.0, abs=1e-6)


def test_no_gradient_reaches_targets():
    p1, p2, z1, z2 = (torch.randn(4, 3, requires_grad=True) for _ in range(4))
    byol_loss(p1, p2, z1, z2).backward()
    assert z1.grad is None and z2.grad is None
    assert p1.grad is not None and p1.grad.abs().sum() > 0
    assert p2.grad is not None and p2.grad.abs().sum() > 0
