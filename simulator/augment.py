"""Batched image augmentations that run on the images' device.

Every random parameter is drawn for the whole batch at once, on CPU, from a
caller-supplied ``torch.Generator`` and then moved to the images' device, so a
given generator seed reproduces the output bit for bit and no Python loop runs
per image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# ITU-R 601-2 luma weights (torchvision's rgb_to_grayscale rounds the first to 0.2989: a difference
# below 1e-4 of a pixel in [0, 1]).
LUMA_WEIGHTS = (0.299, 0.587, 0.114)


@dataclass(frozen=True)
class AugmentConfig:
    """Parameters of :class:`BatchAugment`: SimCLR's operations (no hue jitter), at milder defaults than
    SimCLR's (crops of 35-100% of the area, strength 0.4, no grayscale; the scenarios' ``augment:``)."""

    crop_scale: tuple[float, float] = (0.35, 1.0)  # random resized crop area fraction
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)  # crop aspect ratio (width / height)
    flip_prob: float = 0.5  # horizontal flip
    jitter_prob: float = 0.8  # apply colour jitter with this probability
    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.4  # ignored for 1-channel images
    grayscale_prob: float = 0.0  # ignored for 1-channel images

    @classmethod
    def from_scenario(cls, section: dict) -> "AugmentConfig":
        """From a scenario's ``augment`` section (lists become tuples)."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in section.items()})


def to_float(images_uint8: torch.Tensor) -> torch.Tensor:
    """Convert uint8 images in [0, 255] to float32 in [0, 1]."""
    return images_uint8.to(torch.float32) / 255.0


def rotate90(images: torch.Tensor, quarter_turns: torch.Tensor) -> torch.Tensor:
    """Rotate each square image ``[B,C,H,H]`` counter-clockwise by its own ``quarter_turns`` (0-3).

    Computes the four rotations of the batch with ``torch.rot90`` and gathers
    the requested one per sample, so the result is exact.
    """
    if images.shape[-1] != images.shape[-2]:
        raise ValueError(f"rotate90 needs square images, got {tuple(images.shape[-2:])}")
    rotations = torch.stack([torch.rot90(images, k, dims=(2, 3)) for k in range(4)])
    turns = quarter_turns.to(device=images.device, dtype=torch.long) % 4
    return rotations[turns, torch.arange(images.shape[0], device=images.device)]


def _uniform(low: float, high: float, size: int, generator: torch.Generator) -> torch.Tensor:
    """``size`` CPU samples from U[low, high)."""
    return low + (high - low) * torch.rand(size, generator=generator)


def _bernoulli(prob: float, size: int, generator: torch.Generator) -> torch.Tensor:
    """``size`` CPU boolean samples that are True with probability ``prob``."""
    return torch.rand(size, generator=generator) < prob


def _luma(images: torch.Tensor) -> torch.Tensor:
    """Grayscale ``[B,1,H,W]`` of RGB images (or the channel mean for other channel counts)."""
    if images.shape[1] == 3:
        weights = images.new_tensor(LUMA_WEIGHTS).view(1, 3, 1, 1)
        return (images * weights).sum(dim=1, keepdim=True)
    return images.mean(dim=1, keepdim=True)


def _blend(images: torch.Tensor, other: torch.Tensor | float, factor: torch.Tensor) -> torch.Tensor:
    """``factor * images + (1 - factor) * other`` clamped to [0, 1]; ``factor`` is per sample."""
    factor = factor.view(-1, 1, 1, 1)
    return (factor * images + (1 - factor) * other).clamp(0.0, 1.0)


class BatchAugment:
    """Random resized crop, horizontal flip, colour jitter and grayscale for a batch.

    Crop and flip are one ``affine_grid`` + ``grid_sample`` over the batch; the
    colour operations are per-sample blends as in torchvision's ``ColorJitter``
    (applied in the fixed order brightness, contrast, saturation).
    """

    def __init__(self, config: AugmentConfig):
        self.config = config

    def __call__(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Augment float images ``[B,C,H,W]`` in [0, 1] using the CPU ``generator`` for all randomness."""
        images = self._crop_and_flip(images, generator)
        images = self._jitter(images, generator)
        if images.shape[1] == 3 and self.config.grayscale_prob > 0:
            gray = _bernoulli(self.config.grayscale_prob, images.shape[0], generator)
            gray = gray.to(images.device).view(-1, 1, 1, 1)
            images = torch.where(gray, _luma(images).expand_as(images), images)
        return images.clamp(0.0, 1.0)

    def _crop_theta(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Per-sample affine matrices ``[B,2,3]`` mapping output to input coordinates in [-1, 1].

        Area fraction and log aspect ratio are drawn as in torchvision's
        ``RandomResizedCrop``; the ratio is then clamped to the range in which
        a crop of that area fits inside the image, instead of resampling. So the
        area stays uniform in ``crop_scale``, where torchvision's up to ten redraws
        reject large crops of extreme ratios: mean area 0.675 at (0.35, 1) against
        torchvision's 0.627 (0.54 against 0.49 at (0.08, 1); 28 x 28), a milder crop. The
        box is continuous; torchvision rounds it to whole pixels.
        """
        cfg = self.config
        batch, _, height, width = images.shape
        area = _uniform(*cfg.crop_scale, batch, generator)
        log_ratio = _uniform(math.log(cfg.crop_ratio[0]), math.log(cfg.crop_ratio[1]), batch, generator)
        # Aspect ratio of the crop relative to that of the image, so that
        # half-extents below are fractions of the image width and height.
        relative_ratio = (log_ratio.exp() * height / width).clamp(area, 1 / area)
        half_width = (area * relative_ratio).sqrt().clamp(max=1.0)
        half_height = (area / relative_ratio).sqrt().clamp(max=1.0)
        centre_x = (1 - half_width) * _uniform(-1.0, 1.0, batch, generator)
        centre_y = (1 - half_height) * _uniform(-1.0, 1.0, batch, generator)
        flip = _bernoulli(cfg.flip_prob, batch, generator)
        zero = torch.zeros(batch)
        theta = torch.stack(
            [
                torch.stack([torch.where(flip, -half_width, half_width), zero, centre_x], dim=1),
                torch.stack([zero, half_height, centre_y], dim=1),
            ],
            dim=1,
        )
        return theta.to(device=images.device, dtype=images.dtype)

    def _crop_and_flip(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Resample every image through its own crop/flip affine transform (bilinear). The output's
        outermost rows and columns sample up to half a source pixel beyond the box, where torchvision
        crops, then resizes the crop alone (their interiors agree to 2e-6 on a box of whole pixels)."""
        theta = self._crop_theta(images, generator)
        grid = F.affine_grid(theta, list(images.shape), align_corners=False)
        return F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)

    def _jitter(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Brightness, contrast and (RGB only) saturation jitter; factor 1 for samples not jittered."""
        cfg = self.config
        batch = images.shape[0]
        applied = _bernoulli(cfg.jitter_prob, batch, generator)

        def factors(strength: float) -> torch.Tensor:
            drawn = _uniform(max(0.0, 1 - strength), 1 + strength, batch, generator)
            return torch.where(applied, drawn, torch.ones(batch)).to(device=images.device, dtype=images.dtype)

        brightness, contrast, saturation = factors(cfg.brightness), factors(cfg.contrast), factors(cfg.saturation)
        if not applied.any():
            return images
        images = _blend(images, 0.0, brightness)
        images = _blend(images, _luma(images).mean(dim=(1, 2, 3), keepdim=True), contrast)
        if images.shape[1] == 3:
            images = _blend(images, _luma(images), saturation)
        return images
