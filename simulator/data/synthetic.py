"""A small deterministic image dataset with class structure, for tests and smoke runs.

Each class has a smooth prototype (a Gaussian-windowed grating plus a blob, whose orientation,
frequency, phase, blob position and colour derive from the class index). A sample is its class's
prototype rendered with a random shift, scaled by a random brightness, plus pixel noise, so that
nearest-neighbour classification on raw pixels is well above chance but not perfect.
"""

from __future__ import annotations

import numpy as np
import torch

from simulator.data.image_dataset import ImageDataset

GOLDEN = (1 + 5**0.5) / 2
MAX_SHIFT = 0.35  # in units of half the image width
BRIGHTNESS = (0.5, 1.0)
NOISE_STD = 0.2  # relative to the full intensity range, times sqrt(channels) for equal difficulty


def _class_parameters(num_classes: int) -> dict[str, np.ndarray]:
    """Per-class prototype parameters, spread out by low-discrepancy sequences of the class index."""
    c = np.arange(num_classes)
    return {
        "angle": np.pi * ((c * GOLDEN) % 1),
        "frequency": 1.5 + 0.75 * (c % 4),
        "phase": 2 * np.pi * ((c * 2**0.5) % 1),
        "blob_angle": 2 * np.pi * ((c * GOLDEN**2) % 1),
        "hue": (c * 3**0.5) % 1,
    }


def _gaussian(coordinate: np.ndarray, centre, width: float) -> np.ndarray:
    """Unnormalised 1-D Gaussian (2-D bumps are products of these, which keeps the exps small)."""
    return np.exp(-((coordinate - centre) ** 2) / (2 * width**2))


def _render(labels: np.ndarray, shifts: np.ndarray, image_size: int, channels: int) -> np.ndarray:
    """Render the shifted prototypes of ``labels`` as float64 images [N, C, S, S] with values in [0, 1]."""
    class_params = _class_parameters(labels.max() + 1)
    params = {name: values[labels][:, None, None] for name, values in class_params.items()}
    grid = np.linspace(-1, 1, image_size)
    x = grid[None, None, :] - shifts[:, 0, None, None]
    y = grid[None, :, None] - shifts[:, 1, None, None]
    along = x * np.cos(params["angle"]) + y * np.sin(params["angle"])
    window = _gaussian(x, 0, 0.6) * _gaussian(y, 0, 0.6)
    grating = 0.5 + 0.5 * np.cos(np.pi * params["frequency"] * along + params["phase"]) * window
    blob_x, blob_y = 0.5 * np.cos(params["blob_angle"]), 0.5 * np.sin(params["blob_angle"])
    blob = _gaussian(x, blob_x, 0.25) * _gaussian(y, blob_y, 0.25)
    gray = 0.6 * grating + 0.4 * blob
    if channels == 1:
        return gray[:, None]
    colour = 0.6 + 0.4 * np.cos(2 * np.pi * (params["hue"][:, :, 0] + np.arange(channels) / channels))
    return gray[:, None] * colour[:, :, None, None]


def _draw_split(rng: np.random.Generator, num_classes: int, per_class: int, image_size: int, channels: int):
    """Draw ``per_class`` shuffled samples of every class: uint8 images [N, C, S, S] and int64 labels [N]."""
    labels = rng.permutation(np.repeat(np.arange(num_classes), per_class))
    shifts = rng.uniform(-MAX_SHIFT, MAX_SHIFT, size=(len(labels), 2))
    brightness = rng.uniform(*BRIGHTNESS, size=(len(labels), 1, 1, 1))
    noise = rng.standard_normal((len(labels), channels, image_size, image_size))
    images = _render(labels, shifts, image_size, channels) * brightness + NOISE_STD * channels**0.5 * noise
    images = np.clip(np.rint(images * 255), 0, 255).astype(np.uint8)
    return torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))


def make_synthetic(num_classes: int = 10, train_per_class: int = 200, test_per_class: int = 50,
                   image_size: int = 28, channels: int = 1, seed: int = 0) -> ImageDataset:
    """Make the synthetic dataset; identical (bit for bit) for equal arguments."""
    for name, value in (("num_classes", num_classes), ("train_per_class", train_per_class),
                        ("test_per_class", test_per_class), ("image_size", image_size), ("channels", channels)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    rng = np.random.default_rng(seed)
    train_x, train_y = _draw_split(rng, num_classes, train_per_class, image_size, channels)
    test_x, test_y = _draw_split(rng, num_classes, test_per_class, image_size, channels)
    return ImageDataset("synthetic", train_x, train_y, test_x, test_y, num_classes)
