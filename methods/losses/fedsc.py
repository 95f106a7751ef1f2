"""FedSC's local objective (Jing et al., "FedSC: Provable Federated Self-supervised Learning with
Spectral Contrastive Objective over Non-i.i.d. Data", ICML 2024, Eq. 5 with Appendix C's alpha)."""

from torch import Tensor

from methods.losses.spectral import correlation_matrix, spectral_contrastive


def fedsc_local_objective(z1: Tensor, z2: Tensor, others_correlation: Tensor, alpha: float) -> Tensor:
    """Client j's local spectral contrastive objective (Eq. 5, with q_j replaced by alpha as in
    Appendix C, Eq. 80)::

        L_j = -Tr(R+_j) + alpha/2 ||R_j||_F^2 + (1 - alpha) Tr(R_j Rbar_{-j})

    written as the plain spectral contrastive loss plus the inter-client correction::

        L_j = L_SC + (1 - alpha) (Tr(R_j Rbar_{-j}) - 1/2 ||R_j||_F^2)

    so that alpha = 1 gives exactly :func:`spectral_contrastive` (FedAvg+SC). ``R+_j`` and ``R_j``
    are the batch estimates of :mod:`methods.losses.spectral` over the two views.

    Args:
        z1: representations of the first views, shape [B, H] (not normalised).
        z2: representations of the second views, shape [B, H].
        others_correlation: ``Rbar_{-j}``, the aggregate correlation matrix of the other clients,
            shape [H, H]; a constant (no gradient flows into it). It need not be symmetric (DP noise).
        alpha: weight of the intra-client contrast, in [0, 1].

    Returns:
        Scalar loss.
    """
    plain, correction = fedsc_local_objective_parts(z1, z2, others_correlation, alpha)
    return plain + correction


def fedsc_local_objective_parts(z1: Tensor, z2: Tensor, others_correlation: Tensor, alpha: float
                                ) -> tuple[Tensor, Tensor]:
    """The two terms :func:`fedsc_local_objective` sums, in its order of operations: ``L_SC`` and the
    inter-client correction ``(1 - alpha) (Tr(R_j Rbar_{-j}) - 1/2 ||R_j||_F^2)``."""
    local = correlation_matrix(z1, z2)
    inter_client = (local * others_correlation.detach().T).sum()  # Tr(R_j Rbar_{-j})
    plain = spectral_contrastive(z1, z2)
    return plain, (1 - alpha) * (inter_client - 0.5 * local.square().sum())
