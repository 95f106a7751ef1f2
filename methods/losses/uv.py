"""User-verification (client-ID) loss of Federated SimCLR."""

import torch
import torch.nn.functional as F
from torch import Tensor


def uv_loss(u1: Tensor, u2: Tensor, rows: Tensor, client_id: int) -> Tensor:
    """User-verification loss on both views (Louizos et al. 2024, "A Mutual Information Perspective
    on Federated Contrastive Learning", the client-ID terms of Eq. 6, section 2.1)::

        L_uv = -( log r(s | u1) + log r(s | u2) ),   r(. | u) = softmax_k( <u / ||u||, w_k / ||w_k||> )

    a bias-free linear client-ID classifier over all clients whose inputs and weight rows are unit
    norm (a cosine classifier, no temperature: the paper names none). ``s`` is the id of the client
    computing the loss; every row of the batch carries that label. Each log-probability is averaged
    over the batch and the two views are summed, as in Eq. 6. Which rows get gradients is the
    caller's choice (the client trains only its own row).

    Args:
        u1: UV-projector outputs of the first views, shape [B, D] (normalised here).
        u2: UV-projector outputs of the second views, shape [B, D].
        rows: the classifier's weight rows, one per client, shape [K, D] (normalised here).
        client_id: the label ``s``, an index into ``rows``.

    Returns:
        Scalar loss.
    """
    weights = F.normalize(rows, dim=1)
    target = torch.full((u1.shape[0],), client_id, dtype=torch.long, device=u1.device)
    return sum(F.cross_entropy(F.normalize(u, dim=1) @ weights.T, target) for u in (u1, u2))
