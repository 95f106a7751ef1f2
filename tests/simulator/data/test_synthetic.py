"""The synthetic dataset: shapes, determinism, speed, and learnable-but-not-trivial class structure."""


import pytest
import torch

from simulator.data.synthetic import make_synthetic


def nearest_neighbour_accuracy(dataset) -> float:
    """Test accuracy of 1-nearest-neighbour on raw pixels."""
    distances = torch.cdist(dataset.test_x.flatten(1).float(), dataset.train_x.flatten(1).float())
    return (dataset.train_y[distances.argmin(1)] == dataset.test_y).float().mean().item()


def test_default_shapes_and_balanced_classes():
    dataset = make_synthetic()
    assert dataset.train_x.shape == (2000, 1, 28, 28) and dataset.test_x.shape == (500, 1, 28, 28)
    assert dataset.train_x.dtype == torch.uint8 and dataset.train_y.dtype == torch.int64
    assert torch.bincount(dataset.train_y).tolist() == [200] * 10
    assert torch.bincount(dataset.test_y).tolist() == [50] * 10
    assert dataset.num_classes == 10 and dataset.name == "synthetic"


def test_custom_size_and_channels():
    dataset = make_synthetic(num_classes=4, train_per_class=3, test_per_class=2, image_size=16, channels=3)
    assert dataset.train_x.shape == (12, 3, 16, 16) and dataset.test_x.shape == (8, 3, 16, 16)
    assert not torch.equal(dataset.train_x[:, 0], dataset.train_x[:, 1])  # colour differs between channels


def test_same_seed_is_bit_identical_and_other_seed_differs():
    first, again, other = make_synthetic(seed=7), make_synthetic(seed=7), make_synthetic(seed=8)
    for field in ("train_x", "train_y", "test_x", "test_y"):
        assert torch.equal(getattr(first, field), getattr(again, field))
    assert not torch.equal(first.train_x, other.train_x)


@pytest.mark.parametrize("channels", [1, 3])
def test_nearest_neighbour_on_pixels_is_well_above_chance_but_imperfect(channels):
    accuracy = nearest_neighbour_accuracy(make_synthetic(channels=channels, seed=1))
    assert 0.5 < accuracy < 0.99


def test_labels_are_shuffled_not_grouped_by_class():
    labels = make_synthetic().train_y
    assert (labels[1:] != labels[:-1]).float().mean() > 0.5


@pytest.mark.parametrize("argument", ["num_classes", "train_per_class", "test_per_class", "image_size", "channels"])
def test_non_positive_sizes_raise(argument):
    with pytest.raises(ValueError, match=f"{argument} must be a positive integer, got 0"):
        make_synthetic(**{argument: 0})
