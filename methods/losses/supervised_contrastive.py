"""The within-class contrastive term of the semi-supervised SimCLR of Louizos et al. 2024."""

from typing import Callable

import torch
from torch import Tensor


def within_class_loss(rows_loss: Callable[[Tensor], Tensor], labels: Tensor) -> Tensor:
    """Label-dependent contrastive term (Louizos et al. 2024, "A Mutual Information Perspective on
    Federated Contrastive Learning", Eq. 9 and Algorithm 2 of Appendix C)::

        L = sum_{i in classes of the batch} L_ul( z1[y == i], z2[y == i] )

    the unsupervised loss evaluated within each class separately (for SimCLR: InfoNCE whose
    negatives all share the anchor's class), summed over the classes present, as Algorithm 2 adds
    one term per label. Classes absent from the batch add nothing.

    Args:
        rows_loss: the unsupervised loss of a subset of the batch, given the subset's row indices
            (e.g. ``lambda r: nt_xent(z1[r], z2[r], T)``).
        labels: the labels of the batch's rows, shape [B].

    Returns:
        Scalar loss (0 for an empty batch).
    """
    total = torch.zeros((), device=labels.device)
    for label in labels.unique():
        total = total + rows_loss((labels == label).nonzero().squeeze(1))
    return total
