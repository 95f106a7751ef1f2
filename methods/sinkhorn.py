"""Equal-size clustering with Sinkhorn-Knopp assignments (Orchestra's clustering function C).

Orchestra (Lubana et al. 2022, section 4 and Appendix C.2) clusters with size constraints both on
the clients (their recent representations into L local centroids) and on the server (all received
local centroids into G global centroids). Both use ``equal_size_clustering`` below: a k-means-style
loop on the unit sphere whose assignment step is the Sinkhorn-Knopp equal-mass transport of
Genevay et al. (2019), as in the reference code's ``sknopp`` (lambda = 25, at most 100 iterations,
stopping when the per-sample scaling changes by less than 1e-2 in total).

The reference code runs its global clustering as 500 SGD steps on the centroid matrix; here the
server runs the same loop as the clients (the paper uses one clustering function C for both).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

SHARPNESS = 25.0  # lambda of the entropic transport (reference code)
SINKHORN_ITERATIONS = 10  # Sinkhorn iterations per assignment step inside the clustering loop
TOLERANCE = 1e-2


@torch.no_grad()
def sinkhorn_knopp(scores: Tensor, sharpness: float = SHARPNESS, max_iterations: int = 100,
                   tolerance: float = TOLERANCE) -> Tensor:
    """Equal-mass soft assignments of N samples to K clusters from their similarity ``scores`` [N, K].

    Starts from ``P = softmax(sharpness * scores)`` and alternately rescales clusters
    (``r = (1/K) / (P c)``) and samples (``c = (1/N) / (r^T P)``) until the sample scaling changes
    by less than ``tolerance`` (sum of relative changes) or ``max_iterations`` is reached.
    Returns ``N * diag(c) P diag(r)`` as [N, K] (float32): every row sums to 1 (a distribution over
    clusters) and every column to about N / K (equal mass). Computed in float64.
    """
    n, k = scores.shape
    probs = torch.softmax(sharpness * scores.double(), dim=1)  # [N, K]
    sample_scale = torch.full((n,), 1.0 / n, dtype=torch.float64, device=scores.device)
    for _ in range(max_iterations):
        cluster_scale = (1.0 / k) / (sample_scale @ probs)
        new_sample_scale = (1.0 / n) / (probs @ cluster_scale)
        change = (sample_scale / new_sample_scale - 1).abs().sum().item()
        sample_scale = new_sample_scale
        if change < tolerance:
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
