import math

import pytest
import torch

from methods.losses import nt_xent


def nt_xent_by_loops(z1: list[list[float]], z2: list[list[float]], temperature: float) -> float:
    """NT-Xent written out row by row with plain Python floats (SimCLR Eq. 1)."""
    rows = z1 + z2
    n = len(z1)

    def cosine(a: list[float], b: list[float]) -> float:
        dot = sum(x * y for x, y in zip(a, b))
        return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))

    total = 0.0
    for i in range(2 * n):
        positive = (i + n) % (2 * n)
        denominator = sum(
            math.exp(cosine(rows[i], rows[k]) / temperature) for k in range(2 * n) if k != i
        )
        total += -math.log(math.exp(cosine(rows[i], rows[positive]) / temperature) / denominator)
    return total / (2 * n)


def test_identical_orthogonal_views_match_closed_form():
    # Rows a, b, a, b with a ⟂ b: every row sees its positive at cos 1 and two others at cos 0,
    # so each row's loss is -log(e / (e + 2)) = log(1 + 2/e) at T = 1.
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert nt_xent(z, z.clone(), temperature=1.0).item() == pytest.approx(math.log(1 + 2 / math.e))


def test_matches_loop_computation():
    z1 = [[1.0, 2.0], [-0.5, 1.0]]
    z2 = [[0.3, -1.0], [2.0, 0.5]]
    loss = nt_xent(torch.tensor(z1), torch.tensor(z2), temperature=0.5)
    assert loss.item() == pytest.approx(nt_xent_by_loops(z1, z2, 0.5), rel=1e-6)


def test_invariant_to_scale_of_z():
    generator = torch.Generator().manual_seed(0)
    z1 = torch.randn(8, 5, generator=generator)
    z2 = torch.randn(8, 5, generator=generator)
    reference = nt_xent(z1, z2, temperature=0.2)
    torch.testing.assert_close(nt_xent(7.0 * z1, 0.01 * z2, temperature=0.2), reference)


def test_symmetric_in_the_two_views():
    generator = torch.Generator().manual_seed(1)
    z1 = torch.randn(6, 4, generator=generator)
    z2 = torch.randn(6, 4, generator=generator)
    torch.testing.assert_close(nt_xent(z1, z2, 0.5), nt_xent(z2, z1, 0.5))


def test_gradient_reaches_both_views():
    z1 = torch.randn(4, 3, requires_grad=True)
    z2 = torch.randn(4, 3, requires_grad=True)
    nt_xent(z1, z2, 0.5).backward()
    assert z1.grad is not None and z1.grad.abs().sum() > 0
    assert z2.grad is not None and z2.grad.abs().sum() > 0
