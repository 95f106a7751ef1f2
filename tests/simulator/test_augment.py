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
