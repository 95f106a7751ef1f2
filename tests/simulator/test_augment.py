"""Tests for the batched augmentations in simulator.augment."""

import pytest
import torch

from simulator.augment import AugmentConfig, BatchAugment, rotate90, to_float

NO_CROP = AugmentConfig(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_prob=0.0, jitter_prob=0.0)


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_images(batch: int = 8, channels: int = 3, size: int = 32) -> torch.Tensor:
    return torch.rand(batch, channels, size, size, generator=seeded(123))


@pytest.mark.parametrize("channels", [1, 3])
def test_shape_dtype_and_range(channels):
    images = random_images(channels=channels)
    out = BatchAugment(AugmentConfig(grayscale_prob=0.5))(images, seeded(0))
    assert out.shape == images.shape and out.dtype == torch.float32 and out.device == images.device
    assert out.min() >= 0.0 and out.max() <= 1.0


def test_same_seed_is_bit_identical_and_seeds_differ():
    images = random_images()
    augment = BatchAugment(AugmentConfig(grayscale_prob=0.2))
    first, again = augment(images, seeded(7)), augment(images, seeded(7))
    assert torch.equal(first, again)
    assert not torch.allclose(first, augment(images, seeded(8)))


def test_full_crop_without_flip_or_jitter_is_identity():
    images = random_images()
    torch.testing.assert_close(BatchAugment(NO_CROP)(images, seeded(0)), images, atol=1e-5, rtol=0)


def test_full_crop_keeps_the_whole_image_for_any_aspect_ratio():
    images = random_images()
    config = AugmentConfig(crop_scale=(1.0, 1.0), flip_prob=0.0, jitter_prob=0.0)
    torch.testing.assert_close(BatchAugment(config)(images, seeded(0)), images, atol=1e-5, rtol=0)


def test_certain_flip_with_full_crop_equals_horizontal_flip():
    images = random_images()
    config = AugmentConfig(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_prob=1.0, jitter_prob=0.0)
    out = BatchAugment(config)(images, seeded(0))
    torch.testing.assert_close(out, torch.flip(images, dims=[3]), atol=1e-5, rtol=0)


def test_parameters_differ_between_samples_of_one_batch():
    same_image = random_images(batch=1).expand(16, -1, -1, -1)
    out = BatchAugment(AugmentConfig())(same_image, seeded(0))
    differences = (out[1:] - out[:1]).abs().flatten(1).amax(dim=1)
    assert (differences > 1e-3).all()


def test_grayscale_makes_channels_equal():
    images = random_images()
    gray = BatchAugment(
        AugmentConfig(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_prob=0.0, jitter_prob=1.0, grayscale_prob=1.0)
    )(images, seeded(0))
    assert torch.equal(gray[:, 0], gray[:, 1]) and torch.equal(gray[:, 1], gray[:, 2])


def test_processes_a_large_batch_in_one_call():
    images = torch.rand(512, 1, 28, 28)
    out = BatchAugment(AugmentConfig())(images, seeded(0))
    assert out.shape == images.shape


def test_to_float_scales_uint8_to_unit_range():
    images = torch.tensor([[0, 51, 255]], dtype=torch.uint8)
    out = to_float(images)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.2, 1.0]]))


def test_rotate90_matches_torch_rot90_per_sample():
    images = random_images(batch=8, size=5)
    turns = torch.tensor([0, 1, 2, 3, 3, 2, 1, 0])
    out = rotate90(images, turns)
    for image, turn, rotated in zip(images, turns, out):
        assert torch.equal(rotated, torch.rot90(image, int(turn), dims=(1, 2)))


def test_rotate90_rejects_non_square_images():
    with pytest.raises(ValueError, match="square"):
        rotate90(torch.rand(2, 1, 4, 5), torch.tensor([0, 1]))


@pytest.mark.parametrize("height, width", [(28, 28), (24, 32)])
def test_crops_sample_the_area_and_aspect_ratio_as_configured_and_stay_inside(height, width):
    """The area fraction is uniform in ``scale`` and the log aspect ratio (width / height, in pixels)
    uniform in log ``ratio``, as torchvision's RandomResizedCrop draws them; the crop lies in the image.
    (torchvision's crops are smaller on average, its redraws rejecting large crops of extreme ratios:
    mean area 0.49 at (0.08, 1) against 0.54 here; ``BatchAugment._crop_theta``.)"""
    config = AugmentConfig(crop_scale=(0.08, 1.0), flip_prob=0.0)
    images = torch.zeros(1, 1, height, width).expand(20_000, -1, -1, -1)
    theta = BatchAugment(config)._crop_theta(images, seeded(0))
    half_width, half_height = theta[:, 0, 0].abs(), theta[:, 1, 1]
    centre_x, centre_y = theta[:, 0, 2], theta[:, 1, 2]
    area = half_width * half_height  # of the image's area: the half-extents are fractions of [-1, 1]
    assert area.min() >= 0.08 - 1e-6 and area.max() <= 1 + 1e-6
    assert abs(area.mean().item() - 0.54) < 0.01  # U[0.08, 1]: the simulator's draw, not torchvision's
    aspect = half_width * width / (half_height * height)
    assert aspect.min() >= 3 / 4 - 1e-5 and aspect.max() <= 4 / 3 + 1e-5
    assert aspect.log().std() > 0.1  # not one aspect
    assert (centre_x.abs() + half_width <= 1 + 1e-6).all() and (centre_y.abs() + half_height <= 1 + 1e-6).all()
    assert centre_x.std() > 0.1 and centre_y.std() > 0.1  # not centred


def only(**strengths) -> AugmentConfig:
    """Colour jitter of every image, at the given strengths only, without crop or flip."""
    zero = {"brightness": 0.0, "contrast": 0.0, "saturation": 0.0}
    return AugmentConfig(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_prob=0.0, jitter_prob=1.0,
                         **{**zero, **strengths})


@pytest.mark.parametrize("operation", ["brightness", "contrast", "saturation"])
def test_each_colour_jitter_is_torchvision_s_adjustment_with_a_factor_in_range(operation):
    """Each image's factor, read back from one of its pixels, gives torchvision's
    ``adjust_brightness`` / ``adjust_contrast`` (the blend with the image's mean grayscale) /
    ``adjust_saturation`` (with its grayscale) of the image; factors cover [0.6, 1.4]."""
    import torchvision.transforms.functional as TF
    images = 0.1 + 0.5 * random_images(batch=64)  # in [0.1, 0.6]: brightness and contrast never clamp
    out = BatchAugment(only(**{operation: 0.4}))(images, seeded(0))
    adjust = {"brightness": TF.adjust_brightness, "contrast": TF.adjust_contrast,
              "saturation": TF.adjust_saturation}[operation]
    factors = []
    for image, augmented in zip(images, out):
        reference = {"brightness": torch.zeros_like(image), "contrast": TF.rgb_to_grayscale(image).mean().expand_as(image),
                     "saturation": TF.rgb_to_grayscale(image).expand_as(image)}[operation]
        unclamped = (augmented > 1e-6) & (augmented < 1 - 1e-6)
        pixel = ((image - reference).abs() * unclamped).argmax()  # out = f image + (1 - f) reference
        factor = ((augmented.flatten()[pixel] - reference.flatten()[pixel])
                  / (image.flatten()[pixel] - reference.flatten()[pixel])).item()
        factors.append(factor)
        torch.testing.assert_close(augmented, adjust(image, factor), atol=2e-4, rtol=0)
    assert 0.6 - 1e-4 <= min(factors) < 0.75 and 1.25 < max(factors) <= 1.4 + 1e-4


def test_colour_jitter_touches_the_configured_fraction_of_images():
    images = torch.full((4000, 1, 8, 8), 0.5)
    config = AugmentConfig(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_prob=0.0, jitter_prob=0.8,
                           contrast=0.0)
    changed = (BatchAugment(config)(images, seeded(0)) - 0.5).abs().flatten(1).amax(dim=1) > 1e-6
    assert abs(changed.float().mean().item() - 0.8) < 0.03


def test_rotate90_takes_quarter_turns_modulo_four():
    images = random_images(batch=4, size=5)
    out = rotate90(images, torch.tensor([4, 5, -1, 6]))
    for image, turn, rotated in zip(images, [0, 1, 3, 2], out):
        assert torch.equal(rotated, torch.rot90(image, turn, dims=(1, 2)))


def test_a_jitter_strength_above_one_draws_factors_from_zero_never_below():
    """torchvision's ColorJitter range: factors in [max(0, 1 - s), 1 + s]; at s = 1.5, [0, 2.5]. A pixel
    of 0.5 becomes 0.5 f (clamped at 1): never 0 (a negative factor would clamp a sixth of the images
    to black), and some factors come close to 0."""
    images = torch.full((3000, 1, 4, 4), 0.5)
    out = BatchAugment(only(brightness=1.5))(images, seeded(0))[:, 0, 0, 0]
    assert out.min() > 0 and out.min() < 0.01
    assert torch.equal(out.max(), torch.tensor(1.0))  # f above 2 clamps
