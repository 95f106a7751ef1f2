"""FedSC's local objective (Eq. 5 / Eq. 80) against a hand computation and Eq. 6."""
import torch

from methods.losses.fedsc import fedsc_local_objective, fedsc_local_objective_parts
from methods.losses.spectral import correlation_matrix, spectral_contrastive

Z1 = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
Z2 = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
OTHERS = torch.tensor([[1.0, 2.0], [0.0, 1.0]])  # not symmetric, as a noisy shared matrix can be


def test_loss_matches_hand_computation():
    # Tr(R+) = (<z1_0, z2_0> + <z1_1, z2_1>) / 2 = (1 + 2) / 2 = 1.5
    # R = (Z1^T Z1 + Z2^T Z2) / 4 = [[2, 1], [1, 6]] / 4 = [[0.5, 0.25], [0.25, 1.5]], ||R||^2 = 2.625
    # Tr(R Rbar) = 0.5*1 + 0.25*0 + 0.25*2 + 1.5*1 = 2.5
    # alpha = 0.25: -1.5 + 0.125 * 2.625 + 0.75 * 2.5 = 0.703125
    assert torch.isclose(fedsc_local_objective(Z1, Z2, OTHERS, 0.25), torch.tensor(0.703125))
    # alpha = 0 keeps only contraction and inter-client contrast: -1.5 + 2.5
    assert torch.isclose(fedsc_local_objective(Z1, Z2, OTHERS, 0.0), torch.tensor(1.0))
    # its two logged parts: L_SC = -1.5 + 0.5 * 2.625 = -0.1875, the correction 0.75 (2.5 - 2.625 / 2) = 0.890625
    plain, correction = fedsc_local_objective_parts(Z1, Z2, OTHERS, 0.25)
    assert torch.isclose(plain, torch.tensor(-0.1875)) and torch.isclose(correction, torch.tensor(0.890625))


def test_gradient_matches_hand_computation():
    # dL/dZ1 = (-Z2 + alpha Z1 R + (1 - alpha) Z1 (Rbar + Rbar^T) / 2) / B, likewise for Z2 (B = 2):
    # R = [[0.5, 0.25], [0.25, 1.5]], (Rbar + Rbar^T) / 2 = [[1, 1], [1, 1]], alpha = 0.25
    z1, z2 = Z1.clone().requires_grad_(True), Z2.clone().requires_grad_(True)
    fedsc_local_objective(z1, z2, OTHERS, 0.25).backward()
    # Z1: (-[[1, 1], [0, 1]] + 0.25 [[0.5, 0.25], [0.5, 3]] + 0.75 [[1, 1], [2, 2]]) / 2
    assert torch.allclose(z1.grad, torch.tensor([[-0.0625, -0.09375], [0.8125, 0.625]]))
    # Z2: (-[[1, 0], [0, 2]] + 0.25 [[0.75, 1.75], [0.25, 1.5]] + 0.75 [[2, 2], [1, 1]]) / 2
    assert torch.allclose(z2.grad, torch.tensor([[0.34375, 0.96875], [0.40625, -0.4375]]))


def test_alpha_one_is_the_spectral_loss_exactly():
    assert torch.equal(fedsc_local_objective(Z1, Z2, OTHERS, 1.0), spectral_contrastive(Z1, Z2))


def test_shared_matrix_is_a_constant():
    others = OTHERS.clone().requires_grad_(True)
    z1 = Z1.clone().requires_grad_(True)
    fedsc_local_objective(z1, Z2, others, 0.5).backward()
    assert others.grad is None and z1.grad is not None


def test_weighted_local_gradients_equal_the_global_gradient():
    """Eq. 6: with alpha_j = q_j and Rbar_{-j} the exact other-client correlation, sum_j q_j grad L_j
    is the gradient of the spectral loss on the union of the clients' batches."""
    generator = torch.Generator().manual_seed(0)
    sizes = [3, 5, 4]
    z1 = [torch.randn(n, 4, generator=generator, requires_grad=True) for n in sizes]
    z2 = [torch.randn(n, 4, generator=generator, requires_grad=True) for n in sizes]
    q = [n / sum(sizes) for n in sizes]
    spectral_contrastive(torch.cat(z1), torch.cat(z2)).backward()
    global_grads = [z.grad.clone() for z in z1 + z2]
    for z in z1 + z2:
        z.grad = None
    local = [correlation_matrix(a, b).detach() for a, b in zip(z1, z2)]
    total = 0
    for j in range(len(sizes)):
        others = sum(q[k] * local[k] for k in range(len(sizes)) if k != j) / (1 - q[j])
        total = total + q[j] * fedsc_local_objective(z1[j], z2[j], others, q[j])
    total.backward()
    for mine, expected in zip([z.grad for z in z1 + z2], global_grads):
        assert torch.allclose(mine, expected, atol=1e-6)
