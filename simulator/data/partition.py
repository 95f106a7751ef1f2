"""Splitting a training set among simulated clients: iid, label skew, covariate (rotation) skew, or both.

Every kind first decides an owner (client id) for each training sample, so every sample goes to
exactly one client; all randomness comes from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

PARTITION_KINDS = ("iid", "dirichlet", "classes_per_client", "rotation", "joint")
# Bins of one degree at least: a narrower one turns a 32-pixel image's corner by under a third of a pixel, and every
# client draws a weight for each bin (a hundred billion bins were 745 GiB per client, numpy's MemoryError).
MAX_ROTATION_BINS = 360


class ClientCountError(ValueError):
    """The number of clients cannot be split this way (a scenario's ``population.num_clients``, not its
    ``partition``)."""


@dataclass(frozen=True, eq=False)
class Partition:
    """Per client: sorted int64 indices into the train set and, for rotation kinds, float32 angles in
    degrees, drawn over ``rotation_bins`` bins of 360 / ``rotation_bins`` degrees."""

    indices: tuple[np.ndarray, ...]
    rotations: tuple[np.ndarray, ...] | None = None
    rotation_bins: int | None = None

    def sizes(self) -> np.ndarray:
        """Number of samples of each client."""
        return np.array([len(i) for i in self.indices], dtype=np.int64)

    def heterogeneity(self, labels: np.ndarray) -> dict[str, float]:
        """How skewed the split is, in the terms papers report (Lubana et al. 2022, Table 4), as means
        over the clients: ``classes_per_client`` (classes a client holds a sample of),
        ``classes_per_client_1pct`` (classes holding at least 1% of its samples),
        ``largest_class_share`` (of its samples); ``distinct_class_sets`` (how many different sets of
        classes the clients hold); ``client_size_min`` / ``client_size_max``; and for rotation kinds
        ``rotation_bins_per_client`` (bins it holds a sample of) of ``rotation_bins``."""
        _, classes = np.unique(np.asarray(labels), return_inverse=True)
        counts = np.stack([np.bincount(classes[i], minlength=classes.max() + 1) for i in self.indices])
        sizes = counts.sum(axis=1)
        stats = {"classes_per_client": float((counts >= 1).sum(axis=1).mean()),
                 "classes_per_client_1pct": float((counts >= 0.01 * sizes[:, None]).sum(axis=1).mean()),
                 "largest_class_share": float((counts.max(axis=1) / sizes).mean()),
                 "distinct_class_sets": len(np.unique(counts >= 1, axis=0)),
                 "client_size_min": int(sizes.min()), "client_size_max": int(sizes.max())}
        if self.rotations is not None:
            width = 360.0 / self.rotation_bins
            stats["rotation_bins_per_client"] = float(np.mean(
                [len(np.unique((angles // width).astype(np.int64))) for angles in self.rotations]))
            stats["rotation_bins"] = self.rotation_bins
        return stats


def _iid_owners(num_samples: int, num_clients: int, rng: np.random.Generator) -> np.ndarray:
    """Random equal split: client sizes differ by at most one."""
    return rng.permutation(np.arange(num_samples) % num_clients)


def _apportion(total: int, weights: np.ndarray) -> np.ndarray:
    """Split the integer ``total`` proportionally to ``weights`` (largest remainder rounding)."""
    exact = total * weights / weights.sum()
    counts = np.floor(exact).astype(np.int64)
    counts[np.argsort(counts - exact, kind="stable")[: total - counts.sum()]] += 1
    return counts


def _client_class_counts(target: int, proportions: np.ndarray, prior: np.ndarray, available: np.ndarray,
                         rng: np.random.Generator) -> np.ndarray:
    """How many samples of each class a client of size ``target`` takes, following its class proportions.

    Classes that run out are dropped and the proportions renormalised over the rest; when the rest
    carries no weight (tiny alpha), all weight goes to one remaining class drawn by prior, which is
    the limit of the Dirichlet draw as alpha goes to zero.
    """
    taken = np.zeros_like(available)
    while (needed := target - taken.sum()) > 0:
        left = available - taken
        weights = np.where(left > 0, proportions, 0.0)
        if not weights.sum() > 0:
            open_prior = np.where(left > 0, prior, 0.0)
            weights = np.eye(len(prior))[rng.choice(len(prior), p=open_prior / open_prior.sum())]
        taken += np.minimum(_apportion(needed, weights), left)
    return taken


def _in_order_counts(proportions: np.ndarray, targets: np.ndarray, prior: np.ndarray, available: np.ndarray,
                     rng: np.random.Generator) -> np.ndarray:
    """Client 0 takes its share first, then client 1, ...: the early clients hold their draws, and the
    classes they exhaust are missing for the late ones, whose class mixes depart from their draws.
    Equal sizes and the class totals leave no exact Dir(alpha) split; measured on Fashion-MNIST's
    labels, 100 clients, 5 seeds, the mean share of a client's largest class (the Dirichlet's own
    expectation in brackets): alpha 0.5, first quarter 0.387, last quarter 0.470 (0.380: the last
    clients more skewed); alpha 0.1 x prior, 0.945 and 0.900 (0.943: less skewed)."""
    available = available.copy()
    counts = np.empty((len(targets), len(prior)), dtype=np.int64)
    for client in range(len(targets)):
        counts[client] = _client_class_counts(targets[client], proportions[client], prior, available, rng)
        available -= counts[client]
    return counts


def _random_order_counts(proportions: np.ndarray, targets: np.ndarray, prior: np.ndarray, available: np.ndarray,
                         rng: np.random.Generator) -> np.ndarray:
    """Sample by sample, in a random order of the clients' places (FedLab's
    ``client_inner_dirichlet_partition``): the place's client draws a class from its proportions over
    the classes with samples left, so the shortfall of exhausted classes falls on every client alike
    (an all-zero weight over those classes, at tiny alpha, falls back on the prior, as in
    :func:`_client_class_counts`). Every client then departs from its draw: measured as for
    :func:`_in_order_counts`, alpha 0.5 gives 0.373 and 0.375 (0.380), alpha 0.1 x prior 0.823 and
    0.835 (0.943: every client less skewed than drawn)."""
    available = available.copy()
    counts = np.zeros((len(targets), len(prior)), dtype=np.int64)
    places = rng.permutation(np.repeat(np.arange(len(targets)), targets))
    draws = rng.random(len(places))
    for client, u in zip(places, draws):
        weights = np.where(available > 0, proportions[client], 0.0)
        if not weights.sum() > 0:
            weights = np.where(available > 0, prior, 0.0)
        cumulative = np.cumsum(weights)
        cls = min(int(np.searchsorted(cumulative, u * cumulative[-1], side="right")), len(prior) - 1)
        while available[cls] == 0:  # u * total fell on a rounding edge past the last open class
            cls -= 1
        counts[client, cls] += 1
        available[cls] -= 1
    return counts


DIRICHLET_FILLS = {"in_order": _in_order_counts, "random_order": _random_order_counts}


def _dirichlet_owners(classes: np.ndarray, num_clients: int, alpha: float, scale_by_prior: bool, fill: str,
                      rng: np.random.Generator) -> np.ndarray:
    """Label skew after Hsu et al. (2019): equal-size clients with class proportions ~ Dir(alpha * prior
    or 1), the samples dealt out by ``fill`` (:data:`DIRICHLET_FILLS`)."""
    class_counts = np.bincount(classes)
    prior = class_counts / len(classes)
    concentration = alpha * (prior if scale_by_prior else np.ones_like(prior))
    proportions = rng.dirichlet(concentration, size=num_clients)
    targets = np.bincount(np.arange(len(classes)) % num_clients)
    counts = DIRICHLET_FILLS[fill](proportions, targets, prior, class_counts, rng)
    owners = np.empty(len(classes), dtype=np.int64)
    for cls, class_members in enumerate(_members_by_class(classes, rng)):
        owners[class_members] = np.repeat(np.arange(num_clients), counts[:, cls])
    return owners


def _members_by_class(classes: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Sample indices of each class, in random order."""
    order = rng.permutation(len(classes))
    order = order[np.argsort(classes[order], kind="stable")]
    return np.split(order, np.cumsum(np.bincount(classes))[:-1])


def _classes_per_client_owners(classes: np.ndarray, num_clients: int, k: int,
                               rng: np.random.Generator) -> np.ndarray:
    """Pathological split: client i holds classes perm[i*k : (i+1)*k] (cyclically), each class shared evenly
    (every holder of a class gets at least one of its samples, or ClientCountError)."""
    num_classes = classes.max() + 1
    if num_clients * k < num_classes:
        raise ValueError(f"num_clients * k must be at least the number of classes ({num_classes}) so that every "
                         f"sample is used, got {num_clients} * {k}")
    slot_classes = rng.permutation(num_classes)[np.arange(num_clients * k) % num_classes]
    slot_clients = np.repeat(np.arange(num_clients), k)
    owners = np.empty(len(classes), dtype=np.int64)
    for cls, class_members in enumerate(_members_by_class(classes, rng)):
        holders = slot_clients[slot_classes == cls]
        if len(class_members) < len(holders):  # a holder would get none of it: fewer than k classes
            raise ClientCountError(
                f"num_clients must be small enough that each client holds a sample of each of its k = {k} "
                f"classes, got {num_clients}: class {cls} has {len(class_members)} samples for {len(holders)} "
                f"clients; use fewer clients or a smaller partition.k")
        owners[class_members] = holders[np.arange(len(class_members)) * len(holders) // len(class_members)]
    return owners


def _rotations(indices: tuple[np.ndarray, ...], bins: int, alpha: float,
               rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Per-sample angles in [0, 360): each client draws bin weights ~ Dir(alpha), each sample a bin
    from its client's weights and a uniform angle within that bin."""
    bin_weights = rng.dirichlet(np.full(bins, alpha), size=len(indices))
    rotations = []
    for client_indices, weights in zip(indices, bin_weights):
        sample_bins = rng.choice(bins, size=len(client_indices), p=weights)
        angles = (sample_bins + rng.random(len(client_indices))) * (360.0 / bins)
        rotations.append(angles.astype(np.float32) % np.float32(360))  # float32 rounding may reach 360
    return tuple(rotations)


def _check_arguments(kind: str, classes: np.ndarray, num_clients: int, alpha: float, k: int,
                     rotation_bins: int, rotation_alpha: float) -> None:
    """Raise ValueError naming the first argument that is out of range for ``kind``."""
    num_classes = classes.max() + 1
    checks = [
        (kind in PARTITION_KINDS, "kind", f"one of {', '.join(PARTITION_KINDS)}", kind),
        (1 <= num_clients <= len(classes), "num_clients", f"between 1 and the number of samples ({len(classes)})",
         num_clients),
    ]
    if kind in ("dirichlet", "joint"):
        checks.append((alpha > 0, "alpha", "positive", alpha))
    if kind == "classes_per_client":
        checks.append((1 <= k <= num_classes, "k", f"between 1 and the number of classes ({num_classes})", k))
    if kind in ("rotation", "joint"):
        checks += [(1 <= rotation_bins <= MAX_ROTATION_BINS, "rotation_bins",
                    f"between 1 and {MAX_ROTATION_BINS} (bins of one degree at least)", rotation_bins),
                   (rotation_alpha > 0, "rotation_alpha", "positive", rotation_alpha)]
    for ok, name, expected, value in checks:
        if not ok:
            error = ClientCountError if name == "num_clients" else ValueError
            raise error(f"{name} must be {expected}, got {value!r}")


def make_partition(kind: str, labels: np.ndarray, num_clients: int, seed: int, *, alpha: float = 0.5,
                   scale_by_prior: bool = False, fill: str = "in_order", k: int = 2, rotation_bins: int = 10,
                   rotation_alpha: float = 0.1) -> Partition:
    """Split the samples with ``labels`` among ``num_clients`` clients; deterministic in ``seed``.

    iid: random equal split. dirichlet: equal-size clients with class proportions ~ Dir(alpha * prior)
    if ``scale_by_prior`` else Dir(alpha) (every client holds ``len(labels) // num_clients`` samples,
    or one more), dealt out client by client (``fill: in_order``: the last clients depart from their
    draws) or sample by sample in a random order of the clients (``random_order``: every client does).
    classes_per_client: each client holds ``k`` classes. rotation: iid, plus per-sample rotation angles
    skewed per client over ``rotation_bins`` bins by Dir(rotation_alpha) per bin (no prior: the UV paper's
    "alpha 0.1, one or two bins a client" over 10 bins is ``rotation_alpha`` 0.01). joint: dirichlet plus
    rotation.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) == 0 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be a non-empty 1-D integer array, got {labels.dtype} {labels.shape}")
    _, classes = np.unique(labels, return_inverse=True)  # classes present, numbered 0..C-1
    _check_arguments(kind, classes, num_clients, alpha, k, rotation_bins, rotation_alpha)
    if fill not in DIRICHLET_FILLS:
        raise ValueError(f"fill must be one of {', '.join(DIRICHLET_FILLS)}, got {fill!r}")
    rng = np.random.default_rng(seed)
    if kind in ("iid", "rotation"):
        owners = _iid_owners(len(classes), num_clients, rng)
    elif kind in ("dirichlet", "joint"):
        owners = _dirichlet_owners(classes, num_clients, alpha, scale_by_prior, fill, rng)
    else:
        owners = _classes_per_client_owners(classes, num_clients, k, rng)
    sizes = np.bincount(owners, minlength=num_clients)
    if sizes.min() == 0:
        raise ClientCountError(f"num_clients must be small enough that no client is empty, got {num_clients} "
                               f"({np.count_nonzero(sizes == 0)} empty)")
    indices = tuple(np.split(np.argsort(owners, kind="stable"), np.cumsum(sizes)[:-1]))
    if kind not in ("rotation", "joint"):
        return Partition(indices)
    return Partition(indices, _rotations(indices, rotation_bins, rotation_alpha, rng), rotation_bins)


def build_partition(scenario: Mapping[str, Any], train_labels: np.ndarray) -> Partition:
    """The scenario's client partition of the training set (deterministic in the seed)."""
    part = scenario["partition"]
    return make_partition(part["kind"], train_labels, scenario["population"]["num_clients"], scenario["seed"],
                          alpha=part["alpha"], scale_by_prior=part["scale_by_prior"], fill=part["fill"], k=part["k"],
                          rotation_bins=part["rotation_bins"], rotation_alpha=part["rotation_alpha"])
