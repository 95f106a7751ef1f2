import math

import torch

from methods.losses.uv import uv_loss

ROWS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])


def test_uv_loss_matches_a_hand_computation():
    u1 = torch.tensor([[2.0, 0.0]])  # unit input (1, 0): cosine logits (1, 0, -1)
    u2 = torch.tensor([[0.0, 3.0]])  # unit input (0, 1): cosine logits (0, 1, 0)
    e = math.e
    expected = -math.log(e / (e + 1 + 1 / e)) - math.log(1 / (1 + e + 1))
    assert math.isclose(uv_loss(u1, u2, ROWS, 0).item(), expected, rel_tol=1e-6)
    # client 1 on the same views: its own logits are 0 and 1
    expected_1 = -math.log(1 / (e + 1 + 1 / e)) - math.log(e / (1 + e + 1))
    assert math.isclose(uv_loss(u1, u2, ROWS, 1).item(), expected_1, rel_tol=1e-6)
    # (by symmetry client 1's loss equals client 0's) client 2: its own logits are -1 and 0
    expected_2 = -math.log((1 / e) / (e + 1 + 1 / e)) - math.log(1 / (1 + e + 1))
    assert math.isclose(uv_loss(u1, u2, ROWS, 2).item(), expected_2, rel_tol=1e-6)
    assert not math.isclose(expected_2, expected, rel_tol=1e-3)


def test_uv_loss_averages_over_the_batch_and_ignores_norms():
    u1 = torch.tensor([[2.0, 0.0], [0.0, 5.0]])
    u2 = torch.tensor([[0.0, 3.0], [1.0, 0.0]])
    per_sample = [uv_loss(u1[i:i + 1], u2[i:i + 1], ROWS, 2) for i in range(2)]
    assert torch.allclose(uv_loss(u1, u2, ROWS, 2), (per_sample[0] + per_sample[1]) / 2)
    assert torch.allclose(uv_loss(u1, u2, 4 * ROWS, 2), uv_loss(u1, u2, ROWS, 2))


def test_uv_loss_normalises_each_input_row_not_each_column():
    # two rows sharing a column: u1 rows (3, 4) and (3, 0) are unit (0.6, 0.8) and (1, 0) row by row
    # (column-wise normalising would give (0.707, 1) and (0.707, 0)); rows (1, 0) and (0, 1), client 0
    u = torch.tensor([[3.0, 4.0], [3.0, 0.0]])
    rows = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    e = math.e
    per_view = (-math.log(e**0.6 / (e**0.6 + e**0.8)) - math.log(e / (e + 1))) / 2
    assert math.isclose(uv_loss(u, u, rows, 0).item(), 2 * per_view, rel_tol=1e-6)
