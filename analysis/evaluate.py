"""Evaluation of a frozen encoder: feature extraction, weighted kNN monitor, linear probe."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@torch.no_grad()
def extract_features(encoder: nn.Module, inputs: Tensor, batch_size: int = 1024) -> Tensor:
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
    chunk: int = 1024,
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
    deterministic, no learning rate or seed to tune, and on 60k x 128 features it converges in a
    few seconds on two CPU cores — faster and closer to the optimum than epochs of minibatch SGD.

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
    std = train_features.float().std(dim=0).clamp_min(1e-6)
    train_x = (train_features.float() - mean) / std
    test_x = (test_features.float() - mean) / std
    train_y = train_labels.long()

    probe = nn.Linear(train_x.shape[1], num_classes, device=train_x.device)
    nn.init.zeros_(probe.weight)
    nn.init.zeros_(probe.bias)
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
