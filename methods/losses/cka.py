"""Linear centred kernel alignment (CKA) and the Hetero-SSFL alignment loss built on it."""

from torch import Tensor

EPS = 1e-12


def linear_kernel(representations: Tensor) -> Tensor:
    """``K = A A^T`` for representations ``A`` of shape [L, d]: the [L, L] linear kernel."""
    return representations @ representations.T


def center_kernel(kernel: Tensor) -> Tensor:
    """``H K H`` with the centring matrix ``H = I - 11^T / L`` (row, column and grand means removed)."""
    return (kernel - kernel.mean(dim=0, keepdim=True) - kernel.mean(dim=1, keepdim=True)
            + kernel.mean())


def linear_cka(kernel_a: Tensor, kernel_b: Tensor) -> Tensor:
    """Linear CKA of two [L, L] kernels over the same L samples (Kornblith et al. 2019, Eq. 4)::

        CKA(K, K') = <H K H, H K' H>_F / (||H K H||_F ||H K' H||_F)

    For linear kernels ``K = A A^T``, ``K' = B B^T`` this is ``||B_c^T A_c||_F^2 /
    (||A_c^T A_c||_F ||B_c^T B_c||_F)`` with column-centred ``A_c``, ``B_c``: Eq. 1 of Makhija et
    al. (Hetero-SSFL), who write it without the centring; we centre as Kornblith et al. define
    CKA, which adds invariance to a translation of the representations. The value lies in [0, 1]
    and is invariant to orthogonal transforms and isotropic scaling of ``A`` or ``B`` (their kernels
    are unchanged, resp. scaled). Gradients flow into both arguments.
    """
    centred_a, centred_b = center_kernel(kernel_a), center_kernel(kernel_b)
    return (centred_a * centred_b).sum() / (centred_a.norm() * centred_b.norm() + EPS)


def cka_alignment_loss(representations: Tensor, target_kernel: Tensor) -> Tensor:
    """Hetero-SSFL's proximal term d(K_k, Kbar(t-1)) (Makhija et al., Eq. 2) as ``1 - CKA``.

    ``representations``: the client's predictor outputs on RAD samples, [L, d] (gradient flows
    through them); ``target_kernel``: the server's aggregated kernel on the same samples, [L, L]
    (a constant). Eq. 2 writes ``+ mu * Linear-CKA(K_k, Kbar)``; minimising a similarity would push
    the client away from the others, against the paper's own text ("a proximal term that measures
    the distance", and mu -> infinity making the models identical), so the distance ``1 - CKA`` is
    used: 0 when the client's kernel matches the aggregate up to scale, at most 1.
    """
    return 1 - linear_cka(linear_kernel(representations), target_kernel.detach())
