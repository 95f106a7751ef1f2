"""Linear CKA and the Hetero-SSFL alignment loss, against hand computations."""
import torch

from methods.losses.cka import center_kernel, cka_alignment_loss, linear_cka, linear_kernel


def cka_of(a, b):
    return linear_cka(linear_kernel(a), linear_kernel(b)).item()


def test_hand_computed_value():
    # one feature each: x = (1,2,3) centres to (-1,0,1), y = (1,0,0) to (2,-1,-1)/3;
    # y^T x = -1, x^T x = 2, y^T y = 2/3  ->  CKA = 1 / (2 * 2/3) = 3/4 (the squared correlation)
    x = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    y = torch.tensor([[1.0], [0.0], [0.0]], dtype=torch.float64)
    assert abs(cka_of(x, y) - 0.75) < 1e-12


def test_matches_the_feature_formula_for_different_widths():
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(12, 5, generator=generator, dtype=torch.float64)
    b = torch.randn(12, 3, generator=generator, dtype=torch.float64)
    ac, bc = a - a.mean(0), b - b.mean(0)
    expected = (bc.T @ ac).norm() ** 2 / ((ac.T @ ac).norm() * (bc.T @ bc).norm())
    assert abs(cka_of(a, b) - expected.item()) < 1e-12


def test_self_similarity_is_one_and_invariances():
    generator = torch.Generator().manual_seed(1)
    a = torch.randn(20, 6, generator=generator, dtype=torch.float64)
    b = torch.randn(20, 4, generator=generator, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=generator, dtype=torch.float64))
    assert abs(cka_of(a, a) - 1) < 1e-12
    assert abs(cka_of(a, a @ q) - 1) < 1e-12
    assert abs(cka_of(a, 7.5 * a) - 1) < 1e-12
    reference = cka_of(a, b)
    assert 0 < reference < 1
    assert abs(cka_of(a @ q, b) - reference) < 1e-12  # orthogonal transform
    assert abs(cka_of(0.01 * a, 30 * b) - reference) < 1e-12  # isotropic scaling
    assert abs(cka_of(a + 4.0, b) - reference) < 1e-12  # translation (the centring)


def test_center_kernel_is_h_k_h():
    generator = torch.Generator().manual_seed(2)
    k = torch.randn(5, 5, generator=generator, dtype=torch.float64)
    h = torch.eye(5, dtype=torch.float64) - torch.full((5, 5), 1 / 5, dtype=torch.float64)
    assert torch.allclose(center_kernel(k), h @ k @ h, atol=1e-12)


def test_alignment_loss_is_one_minus_cka_and_its_gradient_aligns():
    generator = torch.Generator().manual_seed(3)
    a = torch.randn(16, 4, generator=generator, dtype=torch.float64, requires_grad=True)
    target = linear_kernel(torch.randn(16, 3, generator=generator, dtype=torch.float64)).requires_grad_()
    loss = cka_alignment_loss(a, target)
    assert abs(loss.item() - (1 - linear_cka(linear_kernel(a), target).item())) < 1e-12
    loss.backward()
    assert a.grad.abs().sum() > 0
    assert target.grad is None  # Kbar(t-1) is a constant
    with torch.no_grad():
        stepped = cka_alignment_loss(a - 0.05 * a.grad / a.grad.norm(), target)
    assert stepped < loss  # a small gradient step moves the client's kernel towards the aggregate
    assert abs(cka_alignment_loss(a.detach(), linear_kernel(a.detach()))) < 1e-12
