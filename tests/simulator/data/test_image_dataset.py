"""The labelled image dataset every loader returns (``simulator.data.image_dataset.ImageDataset``)."""
import pytest
import torch

from simulator.data.image_dataset import ImageDataset


@pytest.mark.parametrize("field, value, message", [
    ("train_x", torch.zeros(2, 1, 4, 4, dtype=torch.float32), "train_x must be a uint8 tensor"),
    ("train_x", torch.zeros(2, 1, 4, 5, dtype=torch.uint8), "train_x must be a uint8 tensor"),
    ("test_y", torch.zeros(3, dtype=torch.int64), r"test_y must be an int64 tensor \[1\]"),
    ("test_x", torch.zeros(1, 3, 4, 4, dtype=torch.uint8), "train_x and test_x must have equal"),
    ("test_x", torch.zeros(1, 4, 4, dtype=torch.uint8), r"test_x must be a uint8 tensor \[N, C, H, H\], got "
                                                         r"torch.uint8 \(1, 4, 4\)"),
    ("train_y", torch.zeros(2, dtype=torch.int32), r"train_y must be an int64 tensor \[2\], got torch.int32"),
], ids=["float-images", "not-square", "labels-not-matching", "channels-not-matching", "no-channel-axis",
        "int32-labels"])
def test_image_dataset_rejects_inconsistent_tensors(field, value, message):
    fields = dict(name="x", train_x=torch.zeros(2, 1, 4, 4, dtype=torch.uint8),
                  train_y=torch.zeros(2, dtype=torch.int64), test_x=torch.zeros(1, 1, 4, 4, dtype=torch.uint8),
                  test_y=torch.zeros(1, dtype=torch.int64), num_classes=2)
    with pytest.raises(ValueError, match=message):
        ImageDataset(**{**fields, field: value})


def test_splits_of_different_sizes_are_one_dataset_with_their_channels_and_image_size():
    dataset = ImageDataset("rgb", torch.zeros(3, 3, 5, 5, dtype=torch.uint8), torch.arange(3),
                           torch.zeros(2, 3, 5, 5, dtype=torch.uint8), torch.arange(2), num_classes=3)
    assert (dataset.channels, dataset.image_size) == (3, 5)
