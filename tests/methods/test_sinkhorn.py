"""Equal-size Sinkhorn-Knopp assignments and the clustering built on them."""
import pytest
import torch
import torch.nn.functional as F

from methods.sinkhorn import (equal_size_clustering, initial_global_centroids, sgd_global_clustering,
                              sinkhorn_knopp)


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


def test_a_cluster_whose_members_cancel_out_is_re_seeded_at_a_point():
    # one cluster takes every point: u and -u sum to exactly 0, a mean with no direction (normalising
    # it would return the zero vector); the centroid is re-seeded at one of the points instead
    u = unit_rows(1, 16, 5)
    (centroid,) = equal_size_clustering(torch.cat([u, -u]), 1, seeded(0), iterations=1)
    assert torch.equal(centroid, u[0]) or torch.equal(centroid, -u[0])


def test_both_clusterings_see_only_the_points_directions():
    """Cosine geometry: rows of any norms give what their unit rows give (every fixture above is
    unit-norm, where dropping the normalisation changed nothing)."""
    unit = unit_rows(60, 16, 7)
    norms = torch.linspace(0.2, 5.0, 60, dtype=torch.float64).float()[torch.randperm(60, generator=seeded(8))]
    scaled = unit * norms[:, None]
    torch.testing.assert_close(equal_size_clustering(scaled, 6, seeded(1)), equal_size_clustering(unit, 6, seeded(1)))
    start = initial_global_centroids(6, 16, seeded(3))
    torch.testing.assert_close(sgd_global_clustering(scaled, start, 0.1, steps=4),
                               sgd_global_clustering(unit, start, 0.1, steps=4))


def test_clustering_without_points_is_an_error():
    with pytest.raises(ValueError, match="no points"):
        equal_size_clustering(torch.empty(0, 4), 2, seeded(0))


def reference_transport(scores, max_iterations=100):
    """The reference code's ``sknopp`` written out in its own layout: P = softmax(25 s)^T is
    [K, N]; r = (1/K) / (P c), c' = (1/N) / (r^T P)^T; the change sum |c / c' - 1| is computed at
    iterations 0, 10, 20... and the loop stops when it is below 1e-2; returns (N P * c^T * r)^T."""
    probs = torch.softmax(25 * scores.double(), dim=1).T
    k, n = probs.shape
    c = torch.ones(n, 1, dtype=torch.float64) / n
    error = 1e3
    for it in range(max_iterations):
        r = (1 / k) / (probs @ c)
        c_new = (1 / n) / (r.T @ probs).T
        if it % 10 == 0:
            error = (c / c_new - 1).abs().sum()
        c = c_new
        if error < 1e-2:
            break
    return (n * probs * c.T * r).T


@pytest.mark.parametrize("n, k, iterations", [(200, 16, 100), (128, 16, 10), (40, 64, 100), (300, 8, 10)])
def test_assignments_are_the_reference_transport(n, k, iterations):
    # cosine scores, also with centroids that are not unit vectors (the global clustering's first step)
    scores = unit_rows(n, 32, n) @ (0.6 * unit_rows(k, 32, k + 1)).T
    expected = reference_transport(scores, iterations)
    assert torch.allclose(sinkhorn_knopp(scores, max_iterations=iterations).double(), expected, atol=1e-6)


def test_the_stopping_test_runs_every_tenth_iteration():
    # within the tolerance from iteration 6 on, yet the loop runs on to iteration 10 (11 in all)
    scores = 0.2 * unit_rows(100, 16, 0) @ unit_rows(8, 16, 1).T
    at_ten = reference_transport(scores, 11)
    assert torch.allclose(sinkhorn_knopp(scores).double(), at_ten, atol=1e-7)
    every_iteration = sinkhorn_knopp(scores, check_every=1).double()
    assert torch.allclose(every_iteration, reference_transport(scores, 7), atol=1e-7)
    assert not torch.allclose(every_iteration, at_ten, atol=1e-7)


def reference_local_clustering(points, initial_rows, num_clusters, loops=5):
    """The reference code's ``local_clustering`` written out as it is: centroids start at the
    memory rows ``initial_rows``; ``loops`` times: assignments ``argmax sknopp(Z C^T, max_iters=10)``,
    then per cluster the normalised mean of its members (an empty cluster would take a random row;
    the data below leave none empty)."""
    centroids = points[initial_rows].clone()
    for _ in range(loops):
        choice = reference_transport(points @ centroids.T, max_iterations=10).argmax(dim=1)
        for index in range(num_clusters):
            selected = points[torch.nonzero(choice == index).squeeze(1)]
            assert len(selected) > 0, "the hand computation assumes no empty cluster"
            centroids[index] = F.normalize(selected.mean(dim=0), dim=0)
    return centroids


@pytest.mark.parametrize("n, k, seed", [(128, 16, 0), (96, 8, 1)])
def test_local_clustering_is_the_reference_loop(n, k, seed):
    # Orchestra's clients: 5 loops of a 10-iteration Sinkhorn-Knopp at lambda 25 (the reference's
    # local_clustering), started from distinct random rows of the memory
    points = unit_rows(n, 12, seed)
    rows = torch.randperm(n, generator=seeded(seed + 10))[:k]  # what initial_rows draws first
    found = equal_size_clustering(points, k, seeded(seed + 10))
    assert torch.allclose(found, reference_local_clustering(points, rows, k), atol=1e-6)
    # each of the reference's counts matters on these data: 4 loops, or the transport run to 100
    # iterations, give other centroids
    assert not torch.allclose(found, reference_local_clustering(points, rows, k, loops=4), atol=1e-3)
    assert not torch.allclose(found, equal_size_clustering(points, k, seeded(seed + 10), sinkhorn_iterations=100),
                              atol=1e-3)


def reference_global_clustering(points, centroids, temperature, steps, lr=0.01):
    """The reference code's ``global_clustering``: SGD(lr, momentum 0.9, weight decay 1e-4) on the
    centroid matrix C; per step Q = sknopp(Z C^T) (no gradient), P = softmax(normalize(Z) C^T / T),
    loss = -mean cos(Q, P), then C's rows normalised. The gradient by autograd, the step by hand."""
    weights, velocity = centroids.clone().double(), None
    unit = F.normalize(points.double(), dim=1)
    for _ in range(steps):
        w = weights.clone().requires_grad_(True)
        target = reference_transport(points.double() @ weights.T)
        probs = torch.softmax(unit @ w.T / temperature, dim=1)
        loss = -((target * probs).sum(1) / (target.norm(dim=1) * probs.norm(dim=1))).mean()
        (grad,) = torch.autograd.grad(loss, w)
        step = grad + 1e-4 * weights
        velocity = step if velocity is None else 0.9 * velocity + step
        weights = weights - lr * velocity
        weights = weights / weights.norm(dim=1, keepdim=True)
    return weights.float()


def test_sgd_global_clustering_is_the_reference_loop():
    points = unit_rows(48, 16, 2)
    start = initial_global_centroids(8, 16, seeded(3))
    assert start.abs().max() <= 0.25 and start.abs().max() > 0.2  # U(+-1/sqrt(16))
    found = sgd_global_clustering(points, start, 0.1, steps=4)
    assert torch.allclose(found, reference_global_clustering(points, start, 0.1, 4), atol=1e-5)
    assert torch.allclose(found.norm(dim=1), torch.ones(8), atol=1e-5)
    assert torch.equal(found, sgd_global_clustering(points, start, 0.1, steps=4))  # no randomness
    # every point counts: without the last one the centroids differ
    assert not torch.allclose(found, sgd_global_clustering(points[:-1], start, 0.1, steps=4), atol=1e-6)
    # the reference's weight decay (1e-4) and momentum are the defaults: at lr 0.01 weight decay moves the
    # centroids by ~1e-7, under the tolerance above; at lr 1 by ~1.6e-4 (dropping it survived the test above)
    fast = sgd_global_clustering(points, start, 0.1, steps=4, lr=1.0)
    assert torch.allclose(fast, reference_global_clustering(points, start, 0.1, 4, lr=1.0), atol=1e-6)
    assert not torch.allclose(fast, sgd_global_clustering(points, start, 0.1, steps=4, lr=1.0, weight_decay=0.0),
                              atol=1e-5)


def test_sgd_global_clustering_lowers_its_loss():
    points = unit_rows(64, 16, 4)
    start = F.normalize(initial_global_centroids(8, 16, seeded(5)), dim=1)

    def loss(centroids):
        target = sinkhorn_knopp(points @ centroids.T)
        return -F.cosine_similarity(target, torch.softmax(points @ centroids.T / 0.1, dim=1), dim=-1).mean()

    assert loss(sgd_global_clustering(points, start, 0.1, steps=200, lr=0.1)) < loss(start)
