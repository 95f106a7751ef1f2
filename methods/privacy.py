"""DP-CalR's Gaussian mechanism (Jing et al., FedSC, ICML 2024, Algorithm 2) and its accounting.

A client shares ``R~_j = 1/(n_j V) sum_x sum_v zc_v(x) zc_v(x)^T + N(0, sigma^2 I)``, where
``zc = NormClip(z, sqrt(mu))`` and the noise is i.i.d. on all H x H entries (as in Algorithm 2).

Sensitivity used here: replace-one neighbouring datasets (same n_j, one sample swapped). Each
sample contributes ``A(x) = 1/V sum_v zc_v zc_v^T``, a positive semi-definite matrix with
``||A(x)||_F <= max ||zc||^2 = mu``. For two PSD matrices ``<A, A'> = Tr(A A') >= 0``, hence
``||A(x) - A(x')||_F <= sqrt(||A||_F^2 + ||A'||_F^2) <= sqrt(2) mu`` and the l2 (Frobenius)
sensitivity of the shared matrix is ``sqrt(2) mu / n_j``. (Proposition 6.6's proof bounds the change
of one sample's contribution by ``mu / n_j``.) The Gaussian mechanism with noise multiplier
``z = sigma / sensitivity`` is ``(a, a / (2 z^2))``-RDP; T shares compose to ``T a / (2 z^2)``
(Opacus's RDP analysis with sampling rate 1), converted to (epsilon, delta)-DP with Opacus's
conversion (Balle et al. 2020), which is never looser than Proposition 6.6's closed form.

This is the privacy of the correlation matrices only (the paper's "additional leakage"): the model
weights that FedAvg uploads are not protected.
"""
from __future__ import annotations

import math

import numpy as np
import torch

# RDP orders a: a - 1 on a geometric grid from 1e-3 to 1e6 (ratio ~1.02 between neighbours).
ORDERS = [float(a) for a in 1 + np.geomspace(1e-3, 1e6, 1000)]


def correlation_sensitivity(mu: float, num_samples: int) -> float:
    """l2 sensitivity of the clipped correlation matrix under replace-one: sqrt(2) mu / n_j."""
    return math.sqrt(2) * mu / num_samples


def add_gaussian_noise(matrix: torch.Tensor, sigma: float, generator: torch.Generator) -> torch.Tensor:
    """Line 8 of Algorithm 2: ``matrix + N(0, sigma^2 I)`` on every entry (drawn on the CPU)."""
    noise = torch.randn(matrix.shape, generator=generator, dtype=torch.float64)
    return matrix + sigma * noise.to(matrix.device, matrix.dtype)


def rdp_epsilon(noise_multiplier: float, shares: int, delta: float) -> float:
    """Epsilon after ``shares`` Gaussian releases with ``noise_multiplier`` (Opacus RDP accountant)."""
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent  # lazy: importing opacus takes seconds
    if shares == 0:
        return 0.0
    rdp = compute_rdp(q=1.0, noise_multiplier=noise_multiplier, steps=shares, orders=ORDERS)
    epsilon, _ = get_privacy_spent(orders=ORDERS, rdp=rdp, delta=delta)
    return float(epsilon)


def noise_multiplier_for(target_epsilon: float, delta: float, shares: int) -> float:
    """The smallest noise multiplier (to Opacus's 0.01 tolerance in epsilon) whose ``shares``
    releases stay within ``(target_epsilon, delta)``."""
    from opacus.accountants.utils import get_noise_multiplier  # lazy: importing opacus takes seconds
    return float(get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta, sample_rate=1.0,
                                      steps=shares, accountant="rdp", alphas=ORDERS))
