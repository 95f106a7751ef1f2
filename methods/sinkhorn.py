"""Equal-size clustering with Sinkhorn-Knopp assignments (Orchestra's clustering function C).

Orchestra (Lubana et al. 2022, section 4 and Appendix C.2) clusters with size constraints both on
the clients (their recent representations into L local centroids) and on the server (all received
local centroids into G global centroids). The authors' reference code does the two differently,
and so does this module:

* ``sinkhorn_knopp``: the equal-mass transport of Genevay et al. (2019), the reference code's
  ``sknopp`` (lambda = 25, at most 100 iterations, the stopping test every 10th iteration).
* ``equal_size_clustering``: the clients' local clustering (the reference's ``local_clustering``):
  a k-means-style loop on the unit sphere whose assignment step is the argmax of a Sinkhorn-Knopp
  assignment with at most 10 iterations.
* ``sgd_global_clustering``: the server's global clustering (the reference's
  ``global_clustering``): SGD steps on the centroid matrix that make the centroids' softmax
  assignments of the local centroids match their Sinkhorn-Knopp assignments.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from methods.local_training import MomentumSGD

SHARPNESS = 25.0  # lambda of the entropic transport (reference code)
SINKHORN_ITERATIONS = 10  # Sinkhorn iterations per assignment step inside the local clustering loop
TOLERANCE = 1e-2
CHECK_EVERY = 10  # the reference code tests for convergence at iterations 0, 10, 20...
GLOBAL_MOMENTUM = 0.9  # the reference's global clustering optimiser: SGD(lr, momentum 0.9, wd 1e-4)
GLOBAL_WEIGHT_DECAY = 1e-4


@torch.no_grad()
def sinkhorn_knopp(scores: Tensor, sharpness: float = SHARPNESS, max_iterations: int = 100,
                   tolerance: float = TOLERANCE, check_every: int = CHECK_EVERY) -> Tensor:
    """Equal-mass soft assignments of N samples to K clusters from their similarity ``scores`` [N, K].

    Starts from ``P = softmax(sharpness * scores)`` and a sample scaling ``c = 1/N``, then
    alternately rescales clusters (``r = (1/K) / (P^T c)``) and samples (``c' = (1/N) / (P r)``).
    At iterations 0, ``check_every``, 2 ``check_every``... it stops when the sample scaling changed
    by less than ``tolerance`` (``sum |c / c' - 1|``), as the reference's ``sknopp`` does (it
    computes that change only every 10th iteration); else after ``max_iterations``.
    Returns ``N * diag(c) P diag(r)`` as [N, K] (float32): every row sums to 1 (a distribution over
    clusters) and every column to about N / K (equal mass). Computed in float64 (the reference:
    float32).
    """
    n, k = scores.shape
    probs = torch.softmax(sharpness * scores.double(), dim=1)  # [N, K]
    sample_scale = torch.full((n,), 1.0 / n, dtype=torch.float64, device=scores.device)
    for iteration in range(max_iterations):  # a / x as torch computes it, x.reciprocal() * a, in place
        cluster_scale = (sample_scale @ probs).reciprocal_().mul_(1.0 / k)
        new_sample_scale = (probs @ cluster_scale).reciprocal_().mul_(1.0 / n)
        converged = (iteration % check_every == 0
                     and (sample_scale / new_sample_scale - 1).abs().sum().item() < tolerance)
        sample_scale = new_sample_scale
        if converged:
            break
    return (n * sample_scale[:, None] * probs * cluster_scale[None, :]).float()


def initial_rows(num_points: int, num_clusters: int, generator: torch.Generator) -> Tensor:
    """Distinct random rows to seed the centroids; rows repeat only when there are fewer points."""
    rows = torch.randperm(num_points, generator=generator)[:num_clusters]
    missing = num_clusters - len(rows)
    return torch.cat([rows, torch.randint(num_points, (missing,), generator=generator)])


@torch.no_grad()
def equal_size_clustering(points: Tensor, num_clusters: int, generator: torch.Generator,
                          iterations: int = 5, sharpness: float = SHARPNESS,
                          sinkhorn_iterations: int = SINKHORN_ITERATIONS) -> Tensor:
    """``num_clusters`` unit-norm centroids [K, D] of ``points`` [N, D] (cosine geometry).

    Centroids start at random rows; each iteration assigns every point to the argmax of its
    Sinkhorn-Knopp (equal-size) assignment against the cosine scores and moves each centroid to
    the normalised mean of its points. A cluster left empty is re-seeded at a random point, so no
    returned centroid is empty, also when N < K (then some centroids repeat points). All random
    draws come from ``generator`` (CPU), so the result is a function of the inputs.
    """
    if len(points) == 0:
        raise ValueError("equal_size_clustering: no points to cluster")
    points = F.normalize(points.float(), dim=1)
    centroids = points[initial_rows(len(points), num_clusters, generator).to(points.device)]
    for _ in range(iterations):
        assignment = sinkhorn_knopp(points @ centroids.T, sharpness, sinkhorn_iterations).argmax(dim=1)
        sums = torch.zeros_like(centroids).index_add_(0, assignment, points)
        # empty, or members that cancel out (a mean of norm ~0 has no direction)
        empty = (torch.bincount(assignment, minlength=num_clusters) == 0) | (sums.norm(dim=1) < 1e-6)
        reseeded = points[torch.randint(len(points), (num_clusters,), generator=generator).to(points.device)]
        centroids = torch.where(empty[:, None], reseeded, F.normalize(sums, dim=1))
    return centroids


def initial_global_centroids(num_clusters: int, dim: int, generator: torch.Generator) -> Tensor:
    """The reference's initial centroid matrix: an ``nn.Linear(dim, num_clusters, bias=False)``
    weight, i.e. uniform in +-1/sqrt(dim) (not normalised: the first step sees it as it is)."""
    bound = dim ** -0.5
    return (2 * torch.rand(num_clusters, dim, generator=generator) - 1) * bound


def sgd_global_clustering(points: Tensor, centroids: Tensor, temperature: float, steps: int = 500,
                          lr: float = 0.01, momentum: float = GLOBAL_MOMENTUM,
                          weight_decay: float = GLOBAL_WEIGHT_DECAY) -> Tensor:
    """The reference code's global clustering: ``steps`` SGD steps on the centroids [G, D].

    Each step: Sinkhorn-Knopp assignments ``Q = sknopp(points @ C^T)`` (no gradient) are the
    target, ``P = softmax(points @ C^T / temperature)`` the prediction, the loss is
    ``-mean_i cos(Q_i, P_i)``; one step of SGD (``lr``, ``momentum``, ``weight_decay``, a fresh
    optimiser per call as in the reference), then every centroid is normalised to unit norm.
    ``centroids`` is the warm start (the previous round's global centroids). ``points`` are
    normalised first (the reference normalises them for P only; Orchestra's local centroids are
    unit vectors, so the two agree, and one product serves both). Returns unit-norm
    centroids [G, D] (float32). Deterministic: no random draws.
    """
    if len(points) == 0:
        raise ValueError("sgd_global_clustering: no points to cluster")
    unit_points = F.normalize(points.detach().float(), dim=1)
    weights = centroids.detach().float().clone().requires_grad_(True)
    optimizer = MomentumSGD([weights], lr=lr, momentum=momentum, weight_decay=weight_decay)
    with torch.enable_grad():
        for _ in range(steps):
            scores = unit_points @ weights.T
            target = sinkhorn_knopp(scores.detach())
            probs = torch.softmax(scores / temperature, dim=1)
            loss = -F.cosine_similarity(target, probs, dim=-1).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                weights.copy_(F.normalize(weights, dim=1))
    return weights.detach()
