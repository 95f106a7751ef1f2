"""Spectral contrastive loss (HaoChen et al. 2021) in the correlation-matrix form of FedSC."""

import math

from torch import Tensor


def norm_clip(z: Tensor, mu: float) -> Tensor:
    """``NormClip(z, sqrt(mu))``: each row scaled down to l2 norm at most ``sqrt(mu)``, shorter rows
    unchanged. HaoChen et al. 2021 bound the representations of the spectral contrastive loss this
    way (their code's ``mu``); FedSC (Jing et al. ICML 2024) uses the same bound in DP-CalR
    (Algorithm 2, line 5), where it caps each sample's contribution to the shared matrix."""
    norms = z.norm(dim=1, keepdim=True)
    return z * (math.sqrt(mu) / norms.clamp_min(math.sqrt(mu)))


def correlation_matrix(z1: Tensor, z2: Tensor) -> Tensor:
    """Batch estimate of the representation correlation matrix ``R = E[z z^T]`` (Jing et al.,
    "FedSC: Provable Federated Self-supervised Learning with Spectral Contrastive Objective over
    Non-i.i.d. Data", ICML 2024, Eq. 1), averaged over both views::

        R_hat = (Z1^T Z1 + Z2^T Z2) / (2B)

    Args:
        z1: representations of the first views, shape [B, D] (not normalised).
        z2: representations of the second views, shape [B, D].

    Returns:
        The [D, D] matrix ``R_hat``.
    """
    batch_size = z1.shape[0]
    return (z1.T @ z1 + z2.T @ z2) / (2 * batch_size)


def spectral_contrastive(z1: Tensor, z2: Tensor) -> Tensor:
    """Spectral contrastive loss as FedSC writes it (Jing et al. ICML 2024, Eq. 1): the loss of
    HaoChen et al. 2021, "Provable Guarantees for Self-Supervised Deep Learning with Spectral
    Contrastive Loss", ``-2 E[z(x)^T z(x+)] + E[(z(x)^T z(x-))^2]``, divided by 2 and rewritten
    with correlation matrices::

        L = -Tr(R+) + 1/2 ||R||_F^2

    with the plug-in batch estimates ``R+_hat = (Z1^T Z2 + Z2^T Z1) / (2B)`` (so
    ``Tr(R+_hat) = sum_b <z1_b, z2_b> / B``) and ``R_hat`` from :func:`correlation_matrix`, which
    includes every pair of rows of the batch, a row with itself included. ``z`` is used as is: no
    L2 normalisation (HaoChen et al. bound the norm by clipping instead; that is the caller's
    choice).

    Args:
        z1: representations of the first views, shape [B, D].
        z2: representations of the second views, shape [B, D]; row ``b`` pairs with ``z1[b]``.

    Returns:
        Scalar loss.
    """
    batch_size = z1.shape[0]
    positive_trace = (z1 * z2).sum() / batch_size
    return -positive_trace + 0.5 * correlation_matrix(z1, z2).square().sum()
