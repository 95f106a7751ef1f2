import pytest
import torch

from methods.losses import correlation_matrix, norm_clip, spectral_contrastive


def test_identity_batch_matches_hand_computation():
    # Z1 = Z2 = I (B = 2, d = 2): R+ = (I + I) / 4 = I / 2, Tr = 1; R = I / 2, ||R||_F^2 = 1/2.
    # L = -1 + 1/2 * 1/2 = -0.75.
    z = torch.eye(2)
    torch.testing.assert_close(correlation_matrix(z, z.clone()), torch.eye(2) / 2)
    assert spectral_contrastive(z, z.clone()).item() == pytest.approx(-0.75)


def test_matches_loop_computation():
    z1 = [[1.0, 2.0], [-0.5, 1.0]]
    z2 = [[0.3, -1.0], [2.0, 0.5]]
    batch, dim = 2, 2
    positive_trace = sum(z1[b][a] * z2[b][a] for b in range(batch) for a in range(dim)) / batch
    correlation = [
        [sum(z1[b][r] * z1[b][c] + z2[b][r] * z2[b][c] for b in range(batch)) / (2 * batch)
         for c in range(dim)]
        for r in range(dim)
    ]
    expected = -positive_trace + 0.5 * sum(x * x for row in correlation for x in row)

    torch.testing.assert_close(
        correlation_matrix(torch.tensor(z1), torch.tensor(z2)), torch.tensor(correlation)
    )
    assert spectral_contrastive(torch.tensor(z1), torch.tensor(z2)).item() == pytest.approx(
        expected, rel=1e-6
    )


def test_equals_definition_via_correlation_matrices():
    generator = torch.Generator().manual_seed(0)
    z1 = torch.randn(16, 6, generator=generator)
    z2 = torch.randn(16, 6, generator=generator)
    positive_correlation = (z1.T @ z2 + z2.T @ z1) / (2 * 16)
    expected = (
        -torch.trace(positive_correlation)
        + 0.5 * torch.linalg.matrix_norm(correlation_matrix(z1, z2), ord="fro") ** 2
    )
    torch.testing.assert_close(spectral_contrastive(z1, z2), expected)


def test_not_invariant_to_scale_of_z():
    # z is not normalised: scaling it changes the loss.
    z1 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    z2 = torch.tensor([[1.0, 0.5], [0.0, 1.0]])
    assert spectral_contrastive(2 * z1, 2 * z2).item() != pytest.approx(
        spectral_contrastive(z1, z2).item()
    )


def test_norm_clip_caps_long_rows_and_keeps_short_ones():
    z = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    clipped = norm_clip(z, mu=4.0)  # norm at most 2
    assert torch.allclose(clipped[0], torch.tensor([1.2, 1.6]))
    assert torch.equal(clipped[1:], z[1:])
