import math

import pytest
import torch

from methods.losses.rotation import rotation_loss


def test_matches_hand_computation():
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]])
    turns = torch.tensor([3, 0])
    # row 1: uniform -> log 4; row 2: -log(e^2 / (e^2 + 3))
    expected = (math.log(4) - math.log(math.exp(2) / (math.exp(2) + 3))) / 2
    assert rotation_loss(logits, turns).item() == pytest.approx(expected, rel=1e-6)


def test_confident_correct_predictions_give_almost_zero():
    turns = torch.tensor([0, 1, 2, 3])
    assert rotation_loss(30 * torch.eye(4), turns).item() == pytest.approx(0.0, abs=1e-9)
    assert rotation_loss(30 * torch.eye(4), turns.flip(0)).item() > 10
