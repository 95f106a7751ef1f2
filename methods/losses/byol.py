"""BYOL loss: normalised mean squared error between online predictions and target projections."""

import torch.nn.functional as F
from torch import Tensor


def byol_loss(p1: Tensor, p2: Tensor, z1: Tensor, z2: Tensor) -> Tensor:
    """Symmetrised BYOL loss (Grill et al. 2020, "Bootstrap Your Own Latent", Eq. 2)::

        L(p, z') = || p / ||p|| - z' / ||z'|| ||_2^2 = 2 - 2 cos(p, sg(z'))

    computed for the pairs (p1, z2) and (p2, z1). Normalisation: each direction is averaged over
    the batch, and the two directions are averaged, ``(L(p1, z2) + L(p2, z1)) / 2`` — half of the
    paper's symmetrised sum ``L + L~`` — so the value lies in [0, 4]. The stop-gradient ``sg`` is
    applied here: no gradient reaches ``z1`` or ``z2``.

    Args:
        p1: online predictions of the first views, shape [B, D].
        p2: online predictions of the second views, shape [B, D].
        z1: target projections of the first views, shape [B, D].
        z2: target projections of the second views, shape [B, D].

    Returns:
        Scalar loss.
    """
    cos_12 = F.cosine_similarity(p1, z2.detach(), dim=1).mean()
    cos_21 = F.cosine_similarity(p2, z1.detach(), dim=1).mean()
    return ((2 - 2 * cos_12) + (2 - 2 * cos_21)) / 2
