"""Batched image augmentations that run on the images' device.

Every random parameter is drawn for the whole batch at once, on CPU, from a
caller-supplied ``torch.Generator`` and then moved to the images' device, so a
given generator seed reproduces the output bit for bit and no Python loop runs
per image.

The defaults differ from torchvision's pipeline (the papers' reference code: SimCLR's, EasyFL's,
FedSC's, Orchestra's) in ways each restored by a key: the crop's area stays uniform
(``crop_sampler: torchvision`` draws torchvision's ``RandomResizedCrop`` boxes) and is resampled
bilinearly (``interpolation: bicubic``: Pillow's bicubic resize, Orchestra's reference's), the colour jitter
runs in a fixed order (``jitter_order: random``: ``ColorJitter``'s random order per image) and has
no hue (``hue``: ``ColorJitter``'s hue jitter, RGB only), and nothing blurs or solarises
(``blur_prob``: torchvision's ``GaussianBlur``; ``solarize_prob``: Pillow's ``ImageOps.solarize``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

# ITU-R 601-2 luma weights (torchvision's rgb_to_grayscale rounds the first to 0.2989: a difference
# below 1e-4 of a pixel in [0, 1]).
LUMA_WEIGHTS = (0.299, 0.587, 0.114)


# The colour jitter's order: "fixed" (brightness, contrast, saturation, hue); "random": a random order
# per image, as torchvision's ColorJitter draws one per call.
JITTER_ORDERS = ("fixed", "random")
JITTER_OPERATIONS = ("brightness", "contrast", "saturation", "hue")
CROP_TRIES = 10  # torchvision's RandomResizedCrop draws before its central fallback
INTERPOLATIONS = ("bilinear", "bicubic")  # how a crop is resampled to the image's size
# Pillow's ImageOps.solarize inverts the pixels of 128 and above (of 255): the reference code's Solarization.
SOLARIZE_THRESHOLD = 128 / 255
# torchvision's _hsv2rgb: in hue sector i (0-5), red, green and blue take these of the planes
# (value, q, p, t) (rows: the channels; columns: the sectors)
HSV_SECTOR_PLANES = torch.tensor([[0, 1, 2, 2, 3, 0], [3, 0, 0, 1, 2, 2], [2, 2, 3, 0, 0, 1]])
BICUBIC_A = -0.5  # Keys' cubic of torchvision's antialiased bicubic resize (and Pillow's); grid_sample's is -0.75


@lru_cache(maxsize=None)
def sector_planes(device: torch.device) -> torch.Tensor:
    """:data:`HSV_SECTOR_PLANES` on ``device``, copied there once (the hue jitter indexes it every batch)."""
    return HSV_SECTOR_PLANES.to(device)


@dataclass(frozen=True)
class AugmentConfig:
    """Parameters of :class:`BatchAugment`: SimCLR's operations (no hue jitter, no blur), at milder defaults
    than SimCLR's (crops of 35-100% of the area, strength 0.4, no grayscale; the scenarios' ``augment:``)."""

    crop_scale: tuple[float, float] = (0.35, 1.0)  # random resized crop area fraction
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)  # crop aspect ratio (width / height)
    flip_prob: float = 0.5  # horizontal flip
    jitter_prob: float = 0.8  # apply colour jitter with this probability
    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.4  # ignored for 1-channel images
    grayscale_prob: float = 0.0  # ignored for 1-channel images
    hue: float = 0.0  # hue shift drawn in [-hue, hue] (at most 0.5), as ColorJitter's; ignored for 1-channel images
    crop_sampler: str = "uniform_area"  # one of CROP_SAMPLERS
    jitter_order: str = "fixed"  # one of JITTER_ORDERS
    interpolation: str = "bilinear"  # one of INTERPOLATIONS
    blur_prob: float = 0.0  # torchvision's GaussianBlur, applied with this probability
    blur_sigma: tuple[float, float] = (0.1, 2.0)  # its standard deviation, drawn uniformly per image
    blur_kernel: int = 3  # its odd kernel size
    solarize_prob: float = 0.0  # solarisation (pixels >= SOLARIZE_THRESHOLD inverted) with this probability

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
    """Random resized crop, horizontal flip, colour jitter, grayscale, Gaussian blur and solarisation
    for a batch, in that order (the reference code's).

    Crop and flip are one ``affine_grid`` + ``grid_sample`` over the batch (bilinear) or one product
    with each image's resampling matrices (bicubic); the colour operations are per-sample blends as in
    torchvision's ``ColorJitter``; the blur is one grouped convolution with each image's kernel.
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
        if self.config.blur_prob > 0:  # drawn only where configured: the defaults draw what they always drew
            images = self._blur(images, generator)
        if self.config.solarize_prob > 0:
            solarized = _bernoulli(self.config.solarize_prob, images.shape[0], generator).to(images.device)
            images = torch.where(solarized.view(-1, 1, 1, 1), solarize(images), images)
        return images.clamp(0.0, 1.0)

    def _crop_theta(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Per-sample affine matrices ``[B,2,3]`` mapping output to input coordinates in [-1, 1]: the
        crop's box and the flip (:meth:`_crop_draw`)."""
        (half_width, half_height, centre_x, centre_y), flip = self._crop_draw(images, generator)
        batch = images.shape[0]
        zero = torch.zeros(batch)
        theta = torch.stack(
            [
                torch.stack([torch.where(flip, -half_width, half_width), zero, centre_x], dim=1),
                torch.stack([zero, half_height, centre_y], dim=1),
            ],
            dim=1,
        )
        return theta.to(device=images.device, dtype=images.dtype)

    def _crop_draw(self, images: torch.Tensor, generator: torch.Generator):
        """Each image's box as (half width, half height, centre x, centre y), fractions of [-1, 1]
        (:func:`uniform_area_boxes` or :func:`torchvision_boxes`, by ``crop_sampler``), and its flip."""
        cfg = self.config
        batch, _, height, width = images.shape
        box = CROP_SAMPLERS[cfg.crop_sampler](cfg, batch, height, width, generator)
        return box, _bernoulli(cfg.flip_prob, batch, generator)

    def _crop_and_flip(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Resample every image through its own crop and flip: bilinear (below) or, with
        ``interpolation: bicubic``, :func:`bicubic_crop`. Bilinear: where an output
        pixel's sample point lies inside the box, it is torchvision's ``resized_crop`` of a box of whole
        pixels (to 3e-6); the outer ``ceil(H / 2h - 1/2)`` rows (and likewise columns) of an H-row output
        from an h-row box sample up to half a source pixel beyond the box, where torchvision clamps to
        its edge: one row where the box spans at least a third of the output, more for smaller boxes."""
        if self.config.interpolation == "bicubic":
            return bicubic_crop(images, *self._crop_draw(images, generator))
        theta = self._crop_theta(images, generator)
        grid = F.affine_grid(theta, list(images.shape), align_corners=False)
        return F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)

    def jitter_draw(self, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """The colour jitter's random parameters for ``batch`` images: each operation's factor (1, or
        a hue shift of 0, where an image is not jittered) and, with ``jitter_order: random``, ``order``
        (``[B, 4]``: each image's order of :data:`JITTER_OPERATIONS`, a uniform permutation). The hue
        and the order are drawn only where configured, so the defaults draw what they always drew."""
        cfg = self.config
        applied = _bernoulli(cfg.jitter_prob, batch, generator)

        def factors(low: float, high: float, neutral: float) -> torch.Tensor:
            return torch.where(applied, _uniform(low, high, batch, generator), torch.full((batch,), neutral))

        draw = {name: factors(max(0.0, 1 - strength), 1 + strength, 1.0)
                for name, strength in (("brightness", cfg.brightness), ("contrast", cfg.contrast),
                                       ("saturation", cfg.saturation))}
        draw["applied"] = applied
        if cfg.hue > 0:
            draw["hue"] = factors(-cfg.hue, cfg.hue, 0.0)
        if cfg.jitter_order == "random":
            draw["order"] = torch.rand(batch, len(JITTER_OPERATIONS), generator=generator).argsort(dim=1)
        return draw

    def _jitter(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Brightness, contrast and (RGB only) saturation and hue jitter, as torchvision's adjustments,
        in the fixed order or each image's own (:meth:`jitter_draw`). An image not jittered is left as it
        is by its neutral factors; where the hue's costly HSV round trip is among the operations, only
        the jittered images are computed (elsewhere gathering them would cost more than it saves)."""
        draw = self.jitter_draw(images.shape[0], generator)
        applied = draw["applied"]
        if not applied.any():
            return images
        operations = [name for name in JITTER_OPERATIONS
                      if name in draw and (images.shape[1] == 3 or name in ("brightness", "contrast"))]
        subset = "hue" in operations and not applied.all()
        rows = applied.nonzero().squeeze(1) if subset else slice(None)  # on the CPU, as the draws
        factor = {name: draw[name][rows].to(device=images.device, dtype=images.dtype) for name in operations}
        jittered = images[rows.to(images.device)] if subset else images
        if "order" not in draw:
            for name in operations:
                jittered = ADJUSTMENTS[name](jittered, factor[name])
        else:
            order = draw["order"][rows]  # on the CPU: the indices are found there, no device sync per step
            for step in range(len(JITTER_OPERATIONS)):  # each operation on the images that take it at this step
                stepped = jittered.clone()  # written in place: the step's operations take disjoint images
                for name in operations:
                    chosen = (order[:, step] == JITTER_OPERATIONS.index(name)).nonzero().squeeze(1)
                    chosen = chosen.to(images.device)
                    stepped.index_copy_(0, chosen, ADJUSTMENTS[name](jittered[chosen], factor[name][chosen]))
                jittered = stepped
        return images.index_copy(0, rows.to(images.device), jittered) if subset else jittered

    def _blur(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """torchvision's ``GaussianBlur`` on the images drawn (``blur_prob``), each with its own sigma."""
        cfg = self.config
        blurred = _bernoulli(cfg.blur_prob, images.shape[0], generator)
        sigma = _uniform(*cfg.blur_sigma, images.shape[0], generator)
        chosen = blurred.nonzero().squeeze(1)  # on the CPU, as the draws
        if len(chosen) == 0:
            return images
        smoothed = gaussian_blur(images[chosen.to(images.device)], sigma[chosen], cfg.blur_kernel)
        return images.index_copy(0, chosen.to(images.device), smoothed)


def gaussian_blur(images: torch.Tensor, sigma: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """torchvision's ``gaussian_blur`` of each image ``[B,C,H,W]`` with its own ``sigma`` ``[B]``: the
    normalised Gaussian on ``kernel_size`` points spaced one pixel apart, in both directions, reflect
    padding; one grouped convolution for the batch."""
    batch, channels, height, width = images.shape
    offsets = torch.linspace(-(kernel_size - 1) / 2, (kernel_size - 1) / 2, kernel_size, dtype=images.dtype)
    profile = torch.exp(-0.5 * (offsets / sigma.to(images.dtype).view(-1, 1)) ** 2)
    profile = profile / profile.sum(dim=1, keepdim=True)  # [B, k]
    kernels = (profile.unsqueeze(2) * profile.unsqueeze(1)).to(images.device)  # [B, k, k]: vertical x horizontal
    weight = kernels.repeat_interleave(channels, dim=0).unsqueeze(1)  # [B*C, 1, k, k]
    pad = kernel_size // 2
    padded = F.pad(images.reshape(1, batch * channels, height, width), [pad] * 4, mode="reflect")
    return F.conv2d(padded, weight, groups=batch * channels).view(batch, channels, height, width)


def solarize(images: torch.Tensor) -> torch.Tensor:
    """Pillow's ``ImageOps.solarize`` of float images: each pixel of :data:`SOLARIZE_THRESHOLD` or
    above inverted."""
    return torch.where(images >= SOLARIZE_THRESHOLD, 1 - images, images)


def _keys_cubic(distance: torch.Tensor) -> torch.Tensor:
    """Keys' cubic convolution kernel with ``a`` = :data:`BICUBIC_A`, zero from distance 2."""
    a, x = BICUBIC_A, distance.abs()
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return torch.where(x < 1, near, torch.where(x < 2, far, torch.zeros_like(x)))


def bicubic_weights(start: torch.Tensor, length: torch.Tensor, size: int) -> torch.Tensor:
    """``[B, size, size]`` matrices resampling, along one axis of ``size`` pixels, each image's box
    ``[start, start + length)`` (pixels, float64) to ``size`` pixels as torch's antialiased bicubic
    ``interpolate`` of the cropped box does: output pixel i centred at ``start + (i + 1/2) length /
    size``, the weights of the pixels whose centres lie in the box normalised to sum to 1 (the pixel
    under the box's centre always counts). A box never exceeds the image, so the resize only enlarges,
    where antialiasing (a kernel stretched by the scale) changes nothing."""
    scale = (length / size).view(-1, 1, 1)
    centres = start.view(-1, 1, 1) + scale * (torch.arange(size, dtype=torch.float64).view(1, -1, 1) + 0.5)
    pixels = torch.arange(size, dtype=torch.float64).view(1, 1, -1) + 0.5
    start, end = start.view(-1, 1, 1), (start + length).view(-1, 1, 1)
    middle = ((start + end) / 2).floor().clamp(0, size - 1)
    inside = ((pixels > start) & (pixels < end)) | (pixels.floor() == middle)
    weights = _keys_cubic(pixels - centres) * inside
    return weights / weights.sum(dim=2, keepdim=True)


def bicubic_crop(images: torch.Tensor, box, flip: torch.Tensor) -> torch.Tensor:
    """Each image's box (half width, half height, centre x, centre y; fractions of [-1, 1]) resized to
    the image's size by :func:`bicubic_weights`, across then down, each pass clipped to [0, 1], then
    flipped horizontally where ``flip``. For a box of whole pixels this is Pillow's bicubic resize of
    the box (``RandomResizedCrop(..., interpolation=BICUBIC)`` on the reference code's Pillow images),
    which clips each pass to 0-255 (and rounds it to whole levels: within 1.1 of 255 levels of it);
    where no pass leaves [0, 1], it is torchvision's ``resized_crop`` of float tensors (``BICUBIC``,
    ``antialias=True``), which does not clip (up to 0.12 apart on black-and-white images)."""
    half_width, half_height, centre_x, centre_y = (part.double() for part in box)
    height, width = images.shape[-2:]
    rows = bicubic_weights((centre_y - half_height + 1) * height / 2, half_height * height, height)
    columns = bicubic_weights((centre_x - half_width + 1) * width / 2, half_width * width, width)
    columns = torch.where(flip.view(-1, 1, 1), columns.flip(1), columns)
    rows, columns = (m.to(device=images.device, dtype=images.dtype) for m in (rows, columns))
    across = torch.einsum("bchw,bpw->bchp", images, columns).clamp(0.0, 1.0)
    return torch.einsum("boh,bchp->bcop", rows, across).clamp(0.0, 1.0)


def uniform_area_boxes(cfg: AugmentConfig, batch: int, height: int, width: int, generator: torch.Generator):
    """Crop boxes as (half width, half height, centre x, centre y), fractions of [-1, 1].

    Area fraction and log aspect ratio are drawn as in torchvision's ``RandomResizedCrop``; the
    ratio is then clamped to the range in which a crop of that area fits inside the image, instead
    of resampling. So the area stays uniform in ``crop_scale``, where torchvision's up to ten redraws
    reject large crops of extreme ratios: mean area 0.675 at (0.35, 1) against torchvision's 0.627
    (0.54 against 0.49 at (0.08, 1); 28 x 28), a milder crop (:func:`torchvision_boxes` draws
    torchvision's). The box is continuous; torchvision rounds it to whole pixels.
    """
    area = _uniform(*cfg.crop_scale, batch, generator)
    log_ratio = _uniform(math.log(cfg.crop_ratio[0]), math.log(cfg.crop_ratio[1]), batch, generator)
    # Aspect ratio of the crop relative to that of the image, so that
    # half-extents below are fractions of the image width and height.
    relative_ratio = (log_ratio.exp() * height / width).clamp(area, 1 / area)
    half_width = (area * relative_ratio).sqrt().clamp(max=1.0)
    half_height = (area / relative_ratio).sqrt().clamp(max=1.0)
    centre_x = (1 - half_width) * _uniform(-1.0, 1.0, batch, generator)
    centre_y = (1 - half_height) * _uniform(-1.0, 1.0, batch, generator)
    return half_width, half_height, centre_x, centre_y


def torchvision_pixel_boxes(cfg: AugmentConfig, batch: int, height: int, width: int,
                            generator: torch.Generator) -> torch.Tensor:
    """``[B, 4]`` boxes (top, left, box height, box width) in whole pixels, drawn as torchvision's
    ``RandomResizedCrop.get_params`` draws one: up to :data:`CROP_TRIES` draws of area and log
    aspect ratio, the first whose rounded box fits, placed uniformly; where none fits, the central
    crop of the image with its ratio clamped to ``crop_ratio``. All draws are made for every image."""
    area = height * width * _uniform(*cfg.crop_scale, batch * CROP_TRIES, generator).double().view(batch, -1)
    low, high = math.log(cfg.crop_ratio[0]), math.log(cfg.crop_ratio[1])
    ratio = _uniform(low, high, batch * CROP_TRIES, generator).double().view(batch, -1).exp()
    box_w, box_h = (area * ratio).sqrt().round(), (area / ratio).sqrt().round()  # Python's round: half to even
    fits = (box_w > 0) & (box_w <= width) & (box_h > 0) & (box_h <= height)
    first = fits.long().argmax(dim=1, keepdim=True)
    box_w, box_h = box_w.gather(1, first).squeeze(1), box_h.gather(1, first).squeeze(1)
    image_ratio = width / height
    if image_ratio < min(cfg.crop_ratio):
        central = (width, round(width / min(cfg.crop_ratio)))
    elif image_ratio > max(cfg.crop_ratio):
        central = (round(height * max(cfg.crop_ratio)), height)
    else:
        central = (width, height)
    fitted = fits.any(dim=1)
    box_w = torch.where(fitted, box_w, float(central[0])).long()
    box_h = torch.where(fitted, box_h, float(central[1])).long()
    position = torch.rand(batch, 2, generator=generator).double()
    top = torch.where(fitted, (position[:, 0] * (height - box_h + 1)).floor().long(), (height - box_h) // 2)
    left = torch.where(fitted, (position[:, 1] * (width - box_w + 1)).floor().long(), (width - box_w) // 2)
    return torch.stack([top, left, box_h, box_w], dim=1)


def torchvision_boxes(cfg: AugmentConfig, batch: int, height: int, width: int, generator: torch.Generator):
    """:func:`torchvision_pixel_boxes` as :func:`uniform_area_boxes` gives its boxes."""
    top, left, box_h, box_w = torchvision_pixel_boxes(cfg, batch, height, width, generator).double().unbind(1)
    return (box_w / width).float(), (box_h / height).float(), \
        (-1 + (2 * left + box_w) / width).float(), (-1 + (2 * top + box_h) / height).float()


def _brightness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """torchvision's ``adjust_brightness``, a factor per image."""
    return _blend(images, 0.0, factor)


def _contrast(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """torchvision's ``adjust_contrast``: the blend with the image's mean grayscale."""
    return _blend(images, _luma(images).mean(dim=(1, 2, 3), keepdim=True), factor)


def _saturation(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """torchvision's ``adjust_saturation`` (RGB): the blend with the image's grayscale."""
    return _blend(images, _luma(images), factor)


def _hue(images: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """torchvision's ``adjust_hue`` (RGB), a shift in [-0.5, 0.5] per image: the hue of HSV turned by
    the shift, computed as torchvision computes it (its ``_rgb2hsv`` / ``_hsv2rgb``, after Pillow). An
    image shifted by 0 (one not jittered) is returned as it is: the HSV round trip alone moves pixels."""
    red, green, blue = images.unbind(dim=1)
    value, low = images.amax(dim=1), images.amin(dim=1)
    grey = value == low
    chroma = value - low
    saturation = chroma / torch.where(grey, torch.ones_like(value), value)
    divisor = torch.where(grey, torch.ones_like(chroma), chroma)
    rc, gc, bc = (value - red) / divisor, (value - green) / divisor, (value - blue) / divisor
    hue = ((value == red) * (bc - gc) + ((value == green) & (value != red)) * (2.0 + rc - bc)
           + ((value != green) & (value != red)) * (4.0 + gc - rc))
    hue = torch.fmod(hue / 6.0 + 1.0, 1.0)
    hue = (hue + shift.view(-1, 1, 1)) % 1.0
    sector = torch.floor(hue * 6.0)
    within = hue * 6.0 - sector
    p = (value * (1.0 - saturation)).clamp(0.0, 1.0)
    q = (value * (1.0 - saturation * within)).clamp(0.0, 1.0)
    t = (value * (1.0 - saturation * (1.0 - within))).clamp(0.0, 1.0)
    planes = torch.stack((value, q, p, t), dim=1)
    sector = sector.to(torch.int64) % 6
    shifted = planes.gather(1, sector_planes(images.device)[:, sector].transpose(0, 1))
    return torch.where(shift.view(-1, 1, 1, 1) == 0, images, shifted)


# How a crop's box is drawn: "uniform_area" (the default): area and aspect ratio drawn once, the ratio
# clamped to where that area fits; "torchvision": RandomResizedCrop.get_params' whole-pixel boxes, ten
# draws and its central fallback.
CROP_SAMPLERS = {"uniform_area": uniform_area_boxes, "torchvision": torchvision_boxes}
ADJUSTMENTS = {"brightness": _brightness, "contrast": _contrast, "saturation": _saturation, "hue": _hue}
