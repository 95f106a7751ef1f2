"""Orchestra's clustering loss: cross-entropy between target and online assignments to centroids."""

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
    centroids = F.normalize(centroids.detach(), dim=1)
    with torch.no_grad():
        target_probs = torch.softmax(F.normalize(target, dim=1) @ centroids.T / temperature, dim=1)
    online_log_probs = torch.log_softmax(F.normalize(online, dim=1) @ centroids.T / temperature, dim=1)
    return -(target_probs * online_log_probs).sum(dim=1).mean()
