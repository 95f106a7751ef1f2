"""DP-CalR's pieces: sensitivity, noise scale, and the RDP accountant against Prop. 6.6."""
import math

import numpy as np
import pytest
import torch

from methods.losses import norm_clip
from methods.privacy import add_gaussian_noise, correlation_sensitivity, noise_multiplier_for, rdp_epsilon


def closed_form_epsilon(noise_multiplier: float, shares: int, delta: float) -> float:
    """Proposition 6.6 of the paper with sigma / sensitivity = ``noise_multiplier``:
    ``T / (2 z^2) + sqrt(2 T log(1/delta)) / z``."""
    return shares / (2 * noise_multiplier**2) + math.sqrt(2 * shares * math.log(1 / delta)) / noise_multiplier


def test_sensitivity_bounds_a_replaced_sample_and_is_attained():
    mu, n = 4.0, 10
    generator = torch.Generator().manual_seed(0)
    rest = norm_clip(torch.randn(n - 1, 3, generator=generator) * 3, mu)
    # two orthogonal samples at the clipping norm: the worst case of replace-one
    x, x_prime = torch.tensor([[2.0, 0.0, 0.0]]), torch.tensor([[0.0, 2.0, 0.0]])
    r, r_prime = ((torch.cat([rest, s]).T @ torch.cat([rest, s])) / n for s in (x, x_prime))
    assert math.isclose((r - r_prime).norm().item(), correlation_sensitivity(mu, n), rel_tol=1e-6)
    for _ in range(20):  # random replacements never exceed it
        a, b = (norm_clip(torch.randn(1, 3, generator=generator) * 3, mu) for _ in range(2))
        diff = (a.T @ a - b.T @ b) / n
        assert diff.norm().item() <= correlation_sensitivity(mu, n) + 1e-6


def test_noise_has_the_requested_scale():
    generator = torch.Generator().manual_seed(1)
    matrix = torch.eye(200)
    noisy = add_gaussian_noise(matrix, 0.03, generator)
    noise = noisy - matrix
    assert abs(noise.std().item() - 0.03) < 0.03 * 0.02
    assert abs(noise.mean().item()) < 0.03 * 0.02
    assert not torch.equal(noise, noise.T)  # i.i.d. on every entry, as in Algorithm 2


@pytest.mark.parametrize("shares, multiplier, delta",
                         [(1, 0.5, 1e-2), (5, 1.0, 1e-1), (51, 6.5, 1e-5), (200, 20.0, 1e-5), (1000, 100.0, 1e-6)])
def test_accountant_never_exceeds_the_closed_form_of_proposition_6_6(shares, multiplier, delta):
    epsilon = rdp_epsilon(multiplier, shares, delta)
    assert 0 < epsilon <= closed_form_epsilon(multiplier, shares, delta)
    # and it is the same order: the closed form is its RDP bound with a looser conversion
    assert epsilon > 0.5 * closed_form_epsilon(multiplier, shares, delta)


def test_epsilon_grows_with_shares_and_is_zero_without():
    assert rdp_epsilon(3.0, 0, 1e-5) == 0.0
    values = [rdp_epsilon(3.0, t, 1e-5) for t in (1, 2, 10, 100)]
    assert values == sorted(values) and len(set(values)) == 4


def test_noise_multiplier_for_a_target_epsilon():
    multiplier = noise_multiplier_for(6.0, 1e-5, 51)
    assert 5.99 - 0.01 <= rdp_epsilon(multiplier, 51, 1e-5) <= 6.0
    assert rdp_epsilon(multiplier * 0.98, 51, 1e-5) > 6.0


def hand_epsilons(multiplier, shares, delta):
    """The Gaussian mechanism's RDP ``a T / (2 z^2)`` (Mironov 2017, composed over T releases),
    minimised over orders a on a fine grid, with Mironov's conversion ``rdp + log(1/delta)/(a - 1)``
    and with Balle et al. 2020's (Theorem 21) ``rdp + log((a - 1)/a) - (log delta + log a)/(a - 1)``."""
    orders = 1 + np.geomspace(1e-4, 1e6, 2_000_001)
    rdp = orders * shares / (2 * multiplier**2)
    mironov = rdp + math.log(1 / delta) / (orders - 1)
    balle = rdp + np.log((orders - 1) / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
    return float(mironov.min()), float(balle.min())


@pytest.mark.parametrize("multiplier, shares, delta",
                         [(0.8, 1, 1e-2), (2.0, 5, 1e-1), (6.5, 51, 1e-5), (20.0, 200, 1e-5), (3.0, 15, 1e-5),
                          (50.0, 1, 1e-5)])  # its best order a ~ 340: the grid of orders must reach that far
def test_epsilon_for_a_fixed_multiplier_equals_the_hand_computation(multiplier, shares, delta):
    mironov, balle = hand_epsilons(multiplier, shares, delta)
    epsilon = rdp_epsilon(multiplier, shares, delta)
    assert epsilon == pytest.approx(balle, rel=2e-4)  # the accountant's conversion, on its grid of orders
    assert balle < mironov
    # Mironov's conversion minimised in closed form is Proposition 6.6's bound
    assert closed_form_epsilon(multiplier, shares, delta) == pytest.approx(mironov, rel=1e-6)
