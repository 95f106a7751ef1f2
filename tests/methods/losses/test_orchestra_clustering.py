import math

import pytest
import torch

from methods.losses.orchestra_clustering import assignment_entropy, orchestra_clustering_loss


def softmax(values: list[float]) -> list[float]:
    exps = [math.exp(v) for v in values]
    return [e / sum(exps) for e in exps]


def test_matches_hand_computation():
    # centroids e1, e2; temperature 0.5
    centroids = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    target = torch.tensor([[2.0, 0.0], [0.0, 3.0]])  # cosines (1, 0) and (0, 1)
    online = torch.tensor([[1.0, 1.0], [-1.0, 0.0]])  # cosines (1/sqrt2, 1/sqrt2) and (-1, 0)
    p_t = [softmax([2.0, 0.0]), softmax([0.0, 2.0])]
    p_o = [softmax([2 / math.sqrt(2), 2 / math.sqrt(2)]), softmax([-2.0, 0.0])]
    expected = -sum(pt[g] * math.log(po[g]) for pt, po in zip(p_t, p_o) for g in range(2)) / 2
    loss = orchestra_clustering_loss(online, target, centroids, 0.5)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_no_gradient_reaches_target_or_centroids():
    generator = torch.Generator().manual_seed(0)
    online = torch.randn(6, 4, generator=generator, requires_grad=True)
    target = torch.randn(6, 4, generator=generator, requires_grad=True)
    centroids = torch.randn(3, 4, generator=generator, requires_grad=True)
    orchestra_clustering_loss(online, target, centroids, 0.1).backward()
    assert online.grad is not None and online.grad.abs().sum() > 0
    assert target.grad is None and centroids.grad is None


def test_gradient_moves_online_assignment_towards_target():
    centroids = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    target = torch.tensor([[1.0, 0.0]])
    online = torch.tensor([[0.6, 0.8]], requires_grad=True)
    before = orchestra_clustering_loss(online, target, centroids, 0.1)
    before.backward()
    with torch.no_grad():
        stepped = online - 0.01 * online.grad
    assert orchestra_clustering_loss(stepped, target, centroids, 0.1) < before
    assert stepped[0, 0] / stepped.norm() > 0.6  # closer to the target's centroid e1


def test_reference_definition_on_a_three_cluster_example():
    """The reference code's loss: z_O normalised, log of the softmax of its cosines with the unit
    centroids over T = 0.1, weighted by the target's softmax, summed over centroids, averaged over
    samples; online and target play different roles (swapping them changes the loss)."""
    s = 1 / math.sqrt(2)
    centroids = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [s, 0.0, s]])
    online = torch.tensor([[3.0, 0.0, 4.0], [0.0, -2.0, 0.0]])  # cosines (.6, 0, .7 s + .6 s), (0, -1, 0)
    target = torch.tensor([[0.0, 0.0, 2.0], [1.0, 1.0, 0.0]])  # cosines (0, 0, s), (s, s, 1/2)
    cos_online = [[0.6, 0.0, (0.6 + 0.8) * s], [0.0, -1.0, 0.0]]
    cos_target = [[0.0, 0.0, s], [s, s, 0.5]]
    expected = 0.0
    for co, ct in zip(cos_online, cos_target):
        p_target = softmax([c / 0.1 for c in ct])
        p_online = softmax([c / 0.1 for c in co])
        expected -= sum(pt * math.log(po) for pt, po in zip(p_target, p_online)) / 2
    loss = orchestra_clustering_loss(online, target, centroids, 0.1)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    swapped = orchestra_clustering_loss(target, online, centroids, 0.1)
    assert swapped.item() != pytest.approx(expected, rel=1e-2)


def test_assignment_entropy_matches_hand_computation():
    """Mean over samples of -sum_g P_g log P_g, P = softmax(cos(z, mu) / T): by hand on two samples
    (cosines (1, 0) and (1/sqrt2, 1/sqrt2) with centroids e1, e2, T 0.5); a sample orthogonal to
    every centroid is assigned uniformly, entropy log G."""
    centroids = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    z = torch.tensor([[5.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    expected = 0.0
    for cosines in ([1.0, 0.0], [1 / math.sqrt(2), 1 / math.sqrt(2)]):
        p = softmax([c / 0.5 for c in cosines])
        expected -= sum(q * math.log(q) for q in p) / 2
    assert assignment_entropy(z, centroids, 0.5).item() == pytest.approx(expected, rel=1e-6)
    orthogonal = torch.tensor([[0.0, 0.0, 7.0]])
    assert assignment_entropy(orthogonal, centroids, 0.1).item() == pytest.approx(math.log(2), rel=1e-6)

