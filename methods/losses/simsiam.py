"""SimSiam loss: negative cosine similarity with a stop-gradient on the projections."""

import torch.nn.functional as F
from torch import Tensor


def simsiam_loss(p1: Tensor, p2: Tensor, z1: Tensor, z2: Tensor) -> Tensor:
    """Symmetrised SimSiam loss (Chen & He 2021, "Exploring Simple Siamese Representation
    Learning", Eq. 1-2 with the stop-gradient of Eq. 3)::

        L = -(cos(p1, sg(z2)) + cos(p2, sg(z1))) / 2

    each cosine averaged over the batch; the value lies in [-1, 1]. The stop-gradient ``sg`` is
    applied here: no gradient reaches ``z1`` or ``z2``.

    Args:
        p1: predictions of the first views, shape [B, D].
        p2: predictions of the second views, shape [B, D].
        z1: projections of the first views, shape [B, D].
        z2: projections of the second views, shape [B, D].

    Returns:
        Scalar loss.
    """
    cos_12 = F.cosine_similarity(p1, z2.detach(), dim=1).mean()
    cos_21 = F.cosine_similarity(p2, z1.detach(), dim=1).mean()
    return -(cos_12 + cos_21) / 2
