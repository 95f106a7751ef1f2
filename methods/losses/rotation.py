"""Rotation prediction: Orchestra's degeneracy regulariser (Gidaris et al. 2018)."""

import torch.nn.functional as F
from torch import Tensor


def rotation_loss(logits: Tensor, quarter_turns: Tensor) -> Tensor:
    """Degeneracy loss of Orchestra (Lubana et al. 2022, Eq. 3 and Algorithm 1 line 14)::

        L_deg = -1/N sum_i log softmax(W_r^T f_O(R(x_i, alpha_{a_i})))_{a_i}

    the cross-entropy of the 4-way rotation head's prediction against the rotation index
    ``a_i`` in {0, 1, 2, 3} (multiples of 90 degrees). Eq. 3 writes the accuracy it maximises;
    Algorithm 1 trains its cross-entropy, which is what this computes.

    Args:
        logits: rotation-head outputs ``W_r^T f_O(x^)`` for the rotated samples, shape [N, 4].
        quarter_turns: rotation index of each sample, int64 shape [N], values in {0, 1, 2, 3}.

    Returns:
        Scalar loss (mean over the N samples).
    """
    return F.cross_entropy(logits, quarter_turns)
