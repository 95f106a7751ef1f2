"""Evaluation of an encoder: feature extraction, weighted kNN monitor, linear probe, and the
label-efficient protocol (class-stratified label subsets, fine-tuning of a copy of the encoder)."""

import copy
import math
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from simulator.context import derive_seed


@torch.no_grad()
def extract_features(encoder: nn.Module, inputs: Tensor, batch_size: int = 256) -> Tensor:
    """Encode uint8 images (or float features, e.g. for a projector head) with ``encoder`` in eval mode.

    Each batch of uint8 images is converted with ``x.float() / 255`` (encoders take [0, 1] input);
    float inputs are passed as they are. Batches are moved to the device of the encoder's
    parameters (CPU for a parameter-free encoder). The encoder's previous train/eval mode is
    restored afterwards.

    Args:
        encoder: maps a float batch [B, C, H, W] in [0, 1] (or [B, D_in]) to features [B, D] (or [B, D, 1, 1]).
        inputs: images, shape [N, C, H, W], dtype uint8, or float features [N, D_in].
        batch_size: rows per forward pass.

    Returns:
        float32 features of shape [N, D] on the CPU.
    """
    device = next(encoder.parameters(), torch.empty(0)).device
    was_training = encoder.training
    encoder.eval()
    try:
        features = [
            encoder(batch.to(device).float() / 255 if batch.dtype == torch.uint8 else batch.to(device))
            .flatten(1).float().cpu()
            for batch in inputs.split(batch_size)
        ]
    finally:
        encoder.train(was_training)
    return torch.cat(features)


@torch.no_grad()
def knn_top1(
    train_features: Tensor,
    train_labels: Tensor,
    test_features: Tensor,
    test_labels: Tensor,
    num_classes: int,
    k: int = 200,
    temperature: float = 0.1,
    chunk: int = 256,
) -> float:
    """Top-1 accuracy of the weighted kNN classifier used as a representation monitor.

    As in the weighted kNN classifier of Wu et al. 2018 (InstDisc) and the Orchestra and FedSC code:
    features are L2-normalised; each test row takes its ``k`` most cosine-similar rows of the
    train bank, each neighbour votes for its label with weight ``exp(sim / temperature)``, and the
    class with the largest total vote is the prediction (ties go to the lowest class index).

    Args:
        train_features: the bank, shape [N, D].
        train_labels: labels of the bank, shape [N], integers in [0, num_classes).
        test_features: queries, shape [M, D].
        test_labels: labels of the queries, shape [M].
        num_classes: number of classes.
        k: neighbours per query; clipped to the bank size N.
        temperature: temperature of the vote weights.
        chunk: test rows per step; memory is O(chunk * N).

    Returns:
        Fraction of test rows classified correctly, in [0, 1].
    """
    bank = F.normalize(train_features.float(), dim=1)
    queries = F.normalize(test_features.float(), dim=1)
    bank_labels = train_labels.long()
    k = min(k, bank.shape[0])
    correct = 0
    for query_chunk, label_chunk in zip(queries.split(chunk), test_labels.split(chunk)):
        neighbour_sims, neighbour_index = (query_chunk @ bank.T).topk(k, dim=1)
        weights = (neighbour_sims / temperature).exp()
        votes = torch.zeros(query_chunk.shape[0], num_classes, device=bank.device)
        votes.scatter_add_(1, bank_labels[neighbour_index], weights)
        correct += (votes.argmax(dim=1) == label_chunk.long()).sum().item()
    return correct / queries.shape[0]


def zero_linear(in_features: int, out_features: int, device: torch.device | str = "cpu") -> nn.Linear:
    """A linear layer with zero weights and bias, made without drawing from torch's global generator
    (``nn.Linear`` draws its initial values from it): evaluation runs in a thread of its own, beside
    rounds that seed that generator to build networks."""
    layer = nn.utils.skip_init(nn.Linear, in_features, out_features, device=device)
    with torch.no_grad():
        layer.weight.zero_()
        layer.bias.zero_()
    return layer


def linear_probe_top1(
    train_features: Tensor,
    train_labels: Tensor,
    test_features: Tensor,
    test_labels: Tensor,
    num_classes: int,
    weight_decay: float = 1e-4,
    max_iter: int = 100,
) -> float:
    """Test top-1 accuracy of a logistic-regression probe fitted on frozen features.

    Features are standardised with the train mean and standard deviation. The probe
    ``softmax(W x + b)`` minimises the mean cross-entropy plus ``weight_decay / 2 * ||W||_F^2``
    (the bias is not penalised). The problem is convex and small, so it is solved full-batch with
    L-BFGS (strong-Wolfe line search, at most ``max_iter`` iterations) from ``W = 0, b = 0``:
    deterministic, no learning rate or seed to tune, and a few seconds on two CPU cores. At the
    default 100 iterations it stops before convergence on 10k x 128 features (which take 180-290
    iterations), about 0.1 point below the optimum (a review's measurement on one run).

    Not the papers' probes: the features are those of the un-augmented images; Orchestra's reference
    code trains its probe by SGD (cosine decay, 50 epochs) on crops of 50-100% and flips, FedSC's
    reference by Adam (3e-3, 200 epochs) on un-augmented images, as here (``results/protocol.md``,
    last section).

    Args:
        train_features: shape [N, D].
        train_labels: shape [N], integers in [0, num_classes).
        test_features: shape [M, D].
        test_labels: shape [M].
        num_classes: number of classes.
        weight_decay: L2 penalty on the weights.
        max_iter: maximum number of L-BFGS iterations.

    Returns:
        Fraction of test rows classified correctly, in [0, 1].
    """
    mean = train_features.float().mean(dim=0)
    # one train row has no spread: its std without correction, 0 (with Bessel's, NaN and a warning, on which L-BFGS
    # overflowed: eval.train_subset: 1), so its standardised features are 0 and the probe predicts its class
    std = train_features.float().std(dim=0, correction=int(len(train_features) > 1)).clamp_min(1e-6)
    train_x = (train_features.float() - mean) / std
    test_x = (test_features.float() - mean) / std
    train_y = train_labels.long()

    probe = zero_linear(train_x.shape[1], num_classes, device=train_x.device)
    optimizer = torch.optim.LBFGS(
        probe.parameters(), lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe"
    )

    def closure() -> Tensor:
        optimizer.zero_grad()
        penalty = weight_decay / 2 * probe.weight.square().sum()
        loss = F.cross_entropy(probe(train_x), train_y) + penalty
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        predictions = probe(test_x).argmax(dim=1)
    return (predictions == test_labels.long()).double().mean().item()


def label_subset(labels: Tensor, fraction: float, seed: int, draw: int) -> Tensor:
    """Rows of a class-stratified random ``fraction`` of a labelled set (the SimCLR / Orchestra
    1% and 10% protocol), as sorted int64 indices.

    The subset has ``floor(fraction * N + 0.5)`` rows, split over the classes in proportion to
    their counts (largest remainders first, ties to the lower class), and at least one row of every
    class present (which may add rows when the fraction is tiny). The quotas are computed in floating
    point, so an exact half or an exact tie of remainders may fall the other way (e.g. 0.29 * 850 is
    246.49999999999997): one row moves between classes, or the subset is one row shorter; kept so
    that the subsets of earlier runs stay the same. The rows are the first ones of
    each class in one random order that depends only on ``(seed, draw)``: a draw is reproducible,
    different draws differ, and for a larger fraction every class keeps the rows it had for a
    smaller one whenever its count does not shrink (with balanced classes the 1% subset lies
    inside the 10% one of the same draw).

    Args:
        labels: labels of the set, shape [N].
        fraction: in (0, 1].
        seed: the run's seed.
        draw: the index of the draw (0, 1, ...).
    """
    values = labels.cpu().numpy()
    order = np.random.default_rng(derive_seed(seed, "label-subset", draw)).permutation(len(values))
    classes, counts = np.unique(values, return_counts=True)
    quotas = fraction * counts
    take = np.floor(quotas).astype(np.int64)
    missing = math.floor(fraction * len(values) + 0.5) - int(take.sum())
    take[np.argsort(-(quotas - take), kind="stable")[:max(missing, 0)]] += 1
    take = np.maximum(take, 1)
    shuffled = values[order]
    rows = np.concatenate([order[shuffled == c][:k] for c, k in zip(classes, take)])
    return torch.from_numpy(np.sort(rows))


class Standardise(nn.Module):
    """``(x - mean) / std`` with fixed (buffer) statistics."""

    def __init__(self, mean: Tensor, std: Tensor):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def forward(self, x: Tensor) -> Tensor:
        return (x - self.mean) / self.std


def finetune(
    encoder: nn.Module,
    train_x: Tensor,
    train_y: Tensor,
    num_classes: int,
    steps: int,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    augment: Callable[[Tensor, torch.Generator], Tensor] | None = None,
    train_features: Tensor | None = None,
) -> nn.Sequential:
    """A copy of ``encoder`` with a linear head, the whole of it trained on the labelled samples
    (semi-supervised fine-tuning, as in SimCLR's protocol, Appendix B.5: there Nesterov SGD, crops and
    flips, 60 epochs at 1% and 30 at 10%; Orchestra's reference code's ``semisup_eval`` trains only
    the linear head, its backbone in train mode); ``encoder`` is unchanged.

    The head is ``Linear(Standardise(features))``: the features standardised with the mean and
    standard deviation of the *frozen* encoder's features of ``train_x`` (fixed, as the linear probe
    standardises; a feature whose deviation there is at most 1e-6 is only centred), then a linear
    layer initialised to zero, so that with ``steps = 0`` every prediction is class 0. Each of the
    ``steps`` Adam steps (learning rate ``lr``, no weight decay) takes the next ``batch_size`` rows of
    a seeded random order of ``train_x`` (a fresh order each epoch; the whole set when it is smaller),
    optionally ``augment``-ed with a generator seeded with ``seed``, and minimises the cross-entropy,
    with the copy in train mode. Deterministic in ``seed`` on a given device and thread count.

    Args:
        encoder: maps float images [B, C, H, W] in [0, 1] (or float features) to features [B, D].
        train_x: labelled images (uint8, converted with ``x / 255``) or float inputs, shape [N, ...].
        train_y: their labels, shape [N].
        num_classes: number of classes.
        steps: optimiser steps.
        batch_size: rows per step.
        lr: Adam learning rate of the encoder and the head.
        seed: seeds the batch order and the augmentations.
        augment: ``augment(float_images, generator)``, e.g. a light :class:`simulator.augment.BatchAugment`.
        train_features: ``extract_features(encoder, train_x)`` where already computed.

    Returns:
        ``nn.Sequential(encoder copy, Flatten, Standardise, Linear)`` in eval mode: images to logits.
    """
    device = next(encoder.parameters(), torch.empty(0)).device
    frozen = extract_features(encoder, train_x) if train_features is None else train_features.float()
    # a feature constant on the labelled samples (a border pixel, a unit dead on them) keeps its scale: the
    # augmented batches or the adapting encoder can make it vary, and a 1e-6 divisor would multiply that by 1e6
    std = frozen.std(dim=0, correction=int(len(frozen) > 1))  # one row: 0, kept as 1 below (Bessel's: NaN, a warning)
    standardise = Standardise(frozen.mean(dim=0), torch.where(std > 1e-6, std, torch.ones_like(std)))
    linear = zero_linear(frozen.shape[1], num_classes)
    model = nn.Sequential(copy.deepcopy(encoder), nn.Flatten(), standardise, linear).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    labels = train_y.long()
    batch_size = min(batch_size, len(labels))
    order = torch.empty(0, dtype=torch.long)
    model.train()
    for _ in range(steps):
        if len(order) < batch_size:
            order = torch.randperm(len(labels), generator=generator)
        rows, order = order[:batch_size], order[batch_size:]
        x = train_x[rows].to(device)
        x = x.float() / 255 if x.dtype == torch.uint8 else x
        if augment is not None:
            x = augment(x, generator)
        loss = F.cross_entropy(model(x), labels[rows].to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return model.eval()


def finetune_top1(encoder: nn.Module, train_x: Tensor, train_y: Tensor, test_x: Tensor, test_y: Tensor,
                  num_classes: int, steps: int, **options: Any) -> float:
    """Test top-1 accuracy of :func:`finetune` (same arguments; ``options`` are its keyword
    arguments) on ``test_x``, ``test_y`` (no augmentation).

    Returns:
        Fraction of test rows classified correctly, in [0, 1].
    """
    model = finetune(encoder, train_x, train_y, num_classes, steps, **options)
    predictions = extract_features(model, test_x).argmax(dim=1)
    return (predictions == test_y.long()).double().mean().item()
