"""Orchestra's unsupervised hyper-parameter score: alignment and uniformity of representations.

Lubana et al. 2022 (Orchestra, section 5, Eq. 5) pick hyper-parameters without labels by
maximising ``Align + 0.2 * Unif`` with ``tau = 0.2`` (after Wang & Isola 2020), where, with
``s`` the cosine similarity of representations,

    Align = E_x E_{x~ ~ T(x)} [ s(x, x~) ]
    Unif  = -E_x [ log E_y [ exp(s(x, y) / tau) ] ]

Both are large for good representations (augmentations agree, distinct samples spread out); the
paper reports R = 0.87 with kNN accuracy. The paper averages per client over the client's data;
an evaluator computes it on one pool of unlabelled images (the pool is one "client"). As Eq. 5
is written, the inner expectation of Unif runs over all y, x itself included. Here on the
backbone's features of a clean and an augmented view; the authors' code (``hparam_method.py``)
scores projector outputs of two augmented views, per client in batches of 256, with Unif at t = 1
over the negatives only: the numbers are not comparable with theirs (a secondary score, deciding
nothing).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from simulator.augment import BatchAugment, to_float

TAU = 0.2
UNIFORMITY_WEIGHT = 0.2


@torch.no_grad()
def alignment_uniformity(features: Tensor, augmented: Tensor, tau: float = TAU,
                         weight: float = UNIFORMITY_WEIGHT, chunk: int = 1024) -> dict[str, float]:
    """Align, Unif and the score ``Align + weight * Unif`` (Eq. 5) from paired representations.

    Args:
        features: representations f(x) of N samples, shape [N, D] (normalised here).
        augmented: representations f(x~) of an augmented view of the same samples, shape [N, D].
        tau: vMF temperature of the uniformity term.
        weight: weight of Unif in the score.
        chunk: rows of the N x N similarity matrix computed at a time.
    """
    z = F.normalize(features.double(), dim=1)
    z_augmented = F.normalize(augmented.double(), dim=1)
    align = (z * z_augmented).sum(dim=1).mean().item()
    log_means = [torch.logsumexp(rows @ z.T / tau, dim=1) - math.log(len(z)) for rows in z.split(chunk)]
    unif = -torch.cat(log_means).mean().item()
    return {"align": align, "unif": unif, "align_unif_score": align + weight * unif}


@torch.no_grad()
def align_uniform_score(encoder: nn.Module, images_uint8: Tensor, augment: BatchAugment,
                        generator: torch.Generator, batch_size: int = 512) -> dict[str, float]:
    """Eq. 5 for ``encoder``'s backbone features on unlabelled ``images_uint8`` [N, C, H, W].

    Each image is encoded as is and after one draw of ``augment`` (random stream ``generator``);
    the encoder runs in eval mode (its mode is restored afterwards).
    """
    device = next(encoder.parameters(), torch.empty(0)).device  # CPU for a parameter-free encoder
    was_training = encoder.training
    encoder.eval()
    features, augmented = [], []
    try:
        for batch in images_uint8.split(batch_size):
            images = to_float(batch.to(device))
            features.append(encoder(images).float().cpu())
            augmented.append(encoder(augment(images, generator)).float().cpu())
    finally:
        encoder.train(was_training)
    return alignment_uniformity(torch.cat(features), torch.cat(augmented))
