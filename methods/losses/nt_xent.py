"""NT-Xent, the normalised temperature-scaled cross-entropy loss of SimCLR."""

import torch
import torch.nn.functional as F
from torch import Tensor


def nt_xent(z1: Tensor, z2: Tensor, temperature: float) -> Tensor:
    """NT-Xent loss of SimCLR (Chen et al. 2020, "A Simple Framework for Contrastive Learning of
    Visual Representations", Eq. 1 and the loss of Algorithm 1).

    The two views are stacked into 2N rows and L2-normalised. For row ``i`` with positive ``j``
    (the other view of the same image)::

        l(i, j) = -log( exp(sim(z_i, z_j) / T) / sum_{k != i} exp(sim(z_i, z_k) / T) )

    where ``sim`` is the cosine similarity. The returned loss is the mean of ``l`` over all 2N
    rows, i.e. both ``l(i, j)`` and ``l(j, i)`` of every pair, as in the paper.

    Args:
        z1: projections of the first views, shape [N, D].
        z2: projections of the second views, shape [N, D]; row ``n`` pairs with ``z1[n]``.
        temperature: the temperature ``T`` (> 0).

    Returns:
        Scalar loss.
    """
    batch_size = z1.shape[0]
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    logits = z @ z.T / temperature
    self_mask = torch.eye(2 * batch_size, dtype=torch.bool, device=z.device)
    logits = logits.masked_fill(self_mask, float("-inf"))
    positive_index = torch.arange(2 * batch_size, device=z.device).roll(batch_size)
    return F.cross_entropy(logits, positive_index)
