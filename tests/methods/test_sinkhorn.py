"""Equal-size Sinkhorn-Knopp assignments and the clustering built on them."""
import pytest
import torch
import torch.nn.functional as F

from methods.sinkhorn import equal_size_clustering, sinkhorn_knopp


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def unit_rows(n: int, d: int, seed: int) -> torch.Tensor:
    return F.normalize(torch.randn(n, d, generator=seeded(seed)), dim=1)


@pytest.mark.parametrize("n, k", [(200, 16), (128, 16), (1600, 128), (5, 16)])
def test_assignments_have_equal_mass_on_random_inputs(n, k):
    scores = unit_rows(n, 32, n) @ unit_rows(k, 32, k).T
    plain = torch.softmax(25 * scores, dim=1).sum(dim=0)
    assert (plain - n / k).abs().max() > 0.3 * n / k  # without the transport, masses are unequal
    q = sinkhorn_knopp(scores)
    assert (q >= 0).all()
    assert torch.allclose(q.sum(dim=1), torch.ones(n), atol=1e-5)
    assert torch.allclose(q.sum(dim=0), torch.full((k,), n / k), rtol=1e-2)  # default stopping rule
    tight = sinkhorn_knopp(scores, tolerance=1e-8, max_iterations=2000)
    assert torch.allclose(tight.sum(dim=0), torch.full((k,), n / k), rtol=1e-5)


def test_assignments_follow_the_scores():
    # two samples, two clusters: each sample prefers a different cluster
    scores = torch.tensor([[0.9, 0.1], [0.2, 0.8]])
    q = sinkhorn_knopp(scores, sharpness=5.0, tolerance=1e-9)
    assert q[0, 0] > 0.5 and q[1, 1] > 0.5
    assert torch.allclose(q.sum(dim=0), torch.ones(2), atol=1e-6)


def test_equal_mass_overrides_a_shared_preference():
    # all samples prefer cluster 0, yet half of the mass must go to cluster 1
    scores = torch.tensor([[0.9, 0.1], [0.8, 0.1], [0.7, 0.1], [0.6, 0.1]])
    q = sinkhorn_knopp(scores, tolerance=1e-9, max_iterations=1000)
    assert torch.allclose(q.sum(dim=0), torch.tensor([2.0, 2.0]), atol=1e-4)
    assert q[3, 1] > q[0, 1]  # the least attached sample moves first


def test_clustering_finds_separated_groups():
    centres = F.normalize(torch.eye(4, 8), dim=1)
    noise = 0.05 * torch.randn(4, 30, 8, generator=seeded(1))
    points = (centres[:, None, :] + noise).reshape(120, 8)
    found = equal_size_clustering(points, 4, seeded(2), iterations=5)
    similarity = found @ centres.T  # each found centroid matches one group, all groups are found
    assert (similarity.max(dim=1).values > 0.98).all()
    assert sorted(similarity.argmax(dim=1).tolist()) == [0, 1, 2, 3]


def test_clustering_is_deterministic_in_the_generator():
    points = unit_rows(100, 16, 0)
    a = equal_size_clustering(points, 8, seeded(5))
    assert torch.equal(a, equal_size_clustering(points, 8, seeded(5)))
    assert not torch.equal(a, equal_size_clustering(points, 8, seeded(6)))


@pytest.mark.parametrize("points", [
    unit_rows(5, 16, 3),  # fewer points than clusters
    unit_rows(1, 16, 4).expand(40, 16),  # all points equal: one cluster takes them all
    torch.cat([unit_rows(1, 16, 5), -unit_rows(1, 16, 5)]).repeat(20, 1),  # members that cancel out
])
def test_clustering_never_returns_an_empty_cluster(points):
    centroids = equal_size_clustering(points, 16, seeded(0))
    assert centroids.shape == (16, 16)
    assert torch.allclose(centroids.norm(dim=1), torch.ones(16), atol=1e-5)
    # every centroid lies on a point or is the mean direction of some points: never a zero vector
    assert (centroids @ F.normalize(points, dim=1).T).max(dim=1).values.min() > 0.3


def test_clustering_without_points_is_an_error():
    with pytest.raises(ValueError, match="no points"):
        equal_size_clustering(torch.empty(0, 4), 2, seeded(0))
