"""A labelled image dataset held as uint8 tensors (the type every loader returns)."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, eq=False)
class ImageDataset:
    """A labelled image dataset with a train and a test split (images are square)."""

    name: str
    train_x: torch.Tensor  # uint8 [N, C, H, W]
    train_y: torch.Tensor  # int64 [N]
    test_x: torch.Tensor  # uint8 [M, C, H, W]
    test_y: torch.Tensor  # int64 [M]
    num_classes: int

    def __post_init__(self):
        for split, x, y in (("train", self.train_x, self.train_y), ("test", self.test_x, self.test_y)):
            if x.dtype != torch.uint8 or x.ndim != 4 or x.shape[2] != x.shape[3]:
                raise ValueError(f"{split}_x must be a uint8 tensor [N, C, H, H], got {x.dtype} {tuple(x.shape)}")
            if y.dtype != torch.int64 or tuple(y.shape) != (len(x),):
                raise ValueError(f"{split}_y must be an int64 tensor [{len(x)}], got {y.dtype} {tuple(y.shape)}")
        if self.train_x.shape[1:] != self.test_x.shape[1:]:
            raise ValueError(f"train_x and test_x must have equal [C, H, W], got {tuple(self.train_x.shape[1:])} "
                             f"and {tuple(self.test_x.shape[1:])}")

    @property
    def channels(self) -> int:
        return self.train_x.shape[1]

    @property
    def image_size(self) -> int:
        return self.train_x.shape[2]
