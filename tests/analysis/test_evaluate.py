import pytest
import torch
from torch import nn

from analysis.evaluate import extract_features, knn_top1, linear_probe_top1


def tiny_encoder() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Dropout(p=0.5), nn.Linear(12, 5))


def test_extract_features_shape_scaling_and_eval_mode():
    encoder = tiny_encoder()
    images = torch.randint(0, 256, (7, 3, 2, 2), dtype=torch.uint8)

    features = extract_features(encoder, images, batch_size=3)

    assert features.shape == (7, 5) and features.dtype == torch.float32
    assert features.device.type == "cpu"
    # Dropout is inactive (eval mode) and the input is x / 255.
    expected = encoder[2](images.flatten(1).float() / 255)
    torch.testing.assert_close(features, expected.detach())
    assert not features.requires_grad


def test_extract_features_restores_previous_mode():
    encoder = tiny_encoder()
    images = torch.zeros(2, 3, 2, 2, dtype=torch.uint8)
    encoder.train()
    extract_features(encoder, images)
    assert encoder.training and encoder[1].training
    encoder.eval()
    extract_features(encoder, images)
    assert not encoder.training


def test_knn_two_clusters_is_perfect():
    generator = torch.Generator().manual_seed(0)
    centres = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    train_labels = torch.arange(2).repeat(20)
    test_labels = torch.arange(2).repeat(10)
    train = centres[train_labels] + 0.05 * torch.randn(40, 2, generator=generator)
    test = centres[test_labels] + 0.05 * torch.randn(20, 2, generator=generator)
    assert knn_top1(train, train_labels, test, test_labels, num_classes=2, k=5) == 1.0


def test_knn_weighting_decides_the_vote():
    # Query (1, 0). Class 0: one neighbour at cos 1. Class 1: two neighbours at cos 0.8.
    # T = 0.1: votes e^10 vs 2 e^8 -> class 0 (e^2 > 2), although class 1 has the majority.
    # T = 10: votes e^0.1 = 1.11 vs 2 e^0.08 = 2.17 -> class 1.
    bank = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.8, -0.6]])
    bank_labels = torch.tensor([0, 1, 1])
    query = torch.tensor([[1.0, 0.0]])
    assert knn_top1(bank, bank_labels, query, torch.tensor([0]), 2, k=3, temperature=0.1) == 1.0
    assert knn_top1(bank, bank_labels, query, torch.tensor([1]), 2, k=3, temperature=10.0) == 1.0


def test_knn_clips_k_to_bank_size_and_ignores_chunking():
    generator = torch.Generator().manual_seed(1)
    bank = torch.randn(6, 3, generator=generator)
    bank_labels = torch.tensor([0, 1, 2, 0, 1, 2])
    queries = torch.randn(9, 3, generator=generator)
    query_labels = torch.randint(0, 3, (9,), generator=generator)
    clipped = knn_top1(bank, bank_labels, queries, query_labels, 3, k=200)
    assert clipped == knn_top1(bank, bank_labels, queries, query_labels, 3, k=6)
    assert clipped == knn_top1(bank, bank_labels, queries, query_labels, 3, k=200, chunk=2)


def gaussian_blobs(n_per_class: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    centres = 4.0 * torch.eye(3, 8)
    labels = torch.arange(3).repeat(n_per_class)
    return centres[labels] + 0.5 * torch.randn(len(labels), 8, generator=generator), labels


def test_linear_probe_separates_gaussian_blobs():
    generator = torch.Generator().manual_seed(0)
    train, train_labels = gaussian_blobs(100, generator)
    test, test_labels = gaussian_blobs(100, generator)
    assert linear_probe_top1(train, train_labels, test, test_labels, num_classes=3) == 1.0
    # Standardisation makes the probe indifferent to the scale of the features.
    assert linear_probe_top1(1e3 * train, train_labels, 1e3 * test, test_labels, 3) == 1.0


def test_linear_probe_is_at_chance_on_random_labels():
    generator = torch.Generator().manual_seed(0)
    train = torch.randn(2000, 16, generator=generator)
    test = torch.randn(2000, 16, generator=generator)
    train_labels = torch.randint(0, 4, (2000,), generator=generator)
    test_labels = torch.randint(0, 4, (2000,), generator=generator)
    accuracy = linear_probe_top1(train, train_labels, test, test_labels, num_classes=4)
    assert accuracy == pytest.approx(0.25, abs=0.05)


def test_float_inputs_pass_unscaled():
    head = torch.nn.Linear(4, 3)
    features = torch.randn(10, 4)
    with torch.no_grad():
        expected = head(features)
    assert torch.allclose(extract_features(head, features, batch_size=3), expected)
