"""Orchestra's clustering loss: cross-entropy between target and online assignments to centroids
(and the entropy of the assignments, the monitor its client logs)."""

import torch
import torch.nn.functional as F
from torch import Tensor


def orchestra_clustering_loss(online: Tensor, target: Tensor, centroids: Tensor,
                              temperature: float) -> Tensor:
    """Clustering loss of Orchestra (Lubana et al. 2022, "Orchestra: Unsupervised Federated Learning
    via Globally Consistent Clustering", Eq. 4 and Algorithm 1 line 13)::

        L = E_i [ H(P_T(x_i), P_O(x~_i)) ] = -1/N sum_i sum_g P_T(x_i)_g log P_O(x~_i)_g

    with ``P(z) = softmax(cos(z, mu_g) / temperature)`` over the G global centroids ``mu``
    (the reference code's temperature is 0.1). The target assignments and the centroids carry no
    gradient (stop-gradient); representations and centroids are L2-normalised here.

    Args:
        online: online-model projections of the augmented views, shape [N, D].
        target: target-model projections of the original samples, shape [N, D].
        centroids: global centroids, shape [G, D].
        temperature: softmax temperature T > 0.

    Returns:
        Scalar loss (mean over the N samples).
    """
    with torch.no_grad():
        target_probs = torch.softmax(assignment_logits(target, centroids, temperature), dim=1)
    online_log_probs = torch.log_softmax(assignment_logits(online, centroids, temperature), dim=1)
    return -(target_probs * online_log_probs).sum(dim=1).mean()


def assignment_logits(z: Tensor, centroids: Tensor, temperature: float) -> Tensor:
    """``cos(z_i, mu_g) / temperature``, shape [N, G]: the logits of Orchestra's soft assignment
    ``P(z)`` (the centroids carry no gradient)."""
    return F.normalize(z, dim=1) @ F.normalize(centroids.detach(), dim=1).T / temperature


@torch.no_grad()
def assignment_entropy(z: Tensor, centroids: Tensor, temperature: float) -> Tensor:
    """Mean entropy, in nats, of the soft assignments ``P(z_i)`` over the G centroids: a monitor of
    whether the clustering loss can work, not a loss term. At ``log G`` every assignment is uniform
    (all projections equally close to every centroid): the loss's target is the same for every
    sample and the loss is inert, as it was before Orchestra's projector had its final
    normalisation (``results/orchestra.md``); at 0 each sample sits on one centroid."""
    logits = assignment_logits(z, centroids, temperature)
    return -(torch.softmax(logits, dim=1) * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
