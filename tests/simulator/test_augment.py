"""Tests for the batched augmentations in simulator.augment."""

import math

import pytest
import torch

from simulator.augment import HSV_SECTOR_PLANES, AugmentConfig, BatchAugment, rotate90, sector_planes, solarize, to_float

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


def test_grayscale_is_torchvisions_luma_on_the_configured_fraction_of_images():
    """Each grayed image is the ITU-R 601-2 luma 0.299 R + 0.587 G + 0.114 B in all three channels
    (torchvision's ``rgb_to_grayscale`` within 1e-4: it rounds the first weight to 0.2989), and about
    ``grayscale_prob`` of the images are grayed (a plain channel mean, or every image grayed, passed
    the channels-equal test alone)."""
    import torchvision.transforms.functional as TF
    images = torch.rand(4000, 3, 4, 4, generator=seeded(5))
    config = AugmentConfig(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_prob=0.0, jitter_prob=0.0,
                           grayscale_prob=0.2)
    out = BatchAugment(config)(images, seeded(0))
    gray = (out[:, 0] == out[:, 1]).flatten(1).all(dim=1) & (out[:, 1] == out[:, 2]).flatten(1).all(dim=1)
    assert abs(gray.float().mean().item() - 0.2) < 0.03
    r, g, b = images[gray].unbind(dim=1)
    luma = (0.299 * r + 0.587 * g + 0.114 * b).unsqueeze(1).expand(-1, 3, -1, -1)
    torch.testing.assert_close(out[gray], luma, atol=1e-6, rtol=0)
    torch.testing.assert_close(out[gray], TF.rgb_to_grayscale(images[gray]).expand(-1, 3, -1, -1), atol=1.01e-4, rtol=0)
    torch.testing.assert_close(out[~gray], images[~gray], atol=1e-6, rtol=0)


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
    mean area 0.49 at (0.08, 1) against 0.54 here; ``uniform_area_boxes``; ``crop_sampler: torchvision``
    draws theirs.)"""
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
    # placed symmetrically (uniform in the room left on each side), not on one side of the image
    assert abs(centre_x.mean().item()) < 0.01 and abs(centre_y.mean().item()) < 0.01
    if height == width:  # log-uniform in (3/4, 4/3): as many tall crops as wide ones (a ratio drawn
        assert abs((aspect < 1).float().mean().item() - 0.5) < 0.02  # uniform and then logged: 0.43)


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


def torchvision_box_draws(config: AugmentConfig, count: int, height: int, width: int) -> torch.Tensor:
    """``[count, 4]`` boxes (top, left, box height, box width) of torchvision's own
    ``RandomResizedCrop.get_params``, from torch's global generator seeded here."""
    from torchvision.transforms import RandomResizedCrop
    torch.manual_seed(0)
    image = torch.zeros(1, height, width)
    return torch.tensor([RandomResizedCrop.get_params(image, list(config.crop_scale), list(config.crop_ratio))
                         for _ in range(count)])


def total_variation(a: torch.Tensor, b: torch.Tensor) -> float:
    """Half the l1 distance between the empirical distributions of two samples of integers."""
    size = int(max(a.max(), b.max())) + 1
    share_a, share_b = torch.bincount(a, minlength=size) / len(a), torch.bincount(b, minlength=size) / len(b)
    return 0.5 * (share_a - share_b).abs().sum().item()


@pytest.mark.parametrize("height, width, scale", [(28, 28, (0.35, 1.0)), (28, 28, (0.08, 1.0)), (24, 32, (0.6, 1.0))])
def test_the_torchvision_crop_sampler_draws_the_boxes_torchvision_draws(height, width, scale):
    """``crop_sampler: torchvision`` gives torchvision's ``RandomResizedCrop`` boxes: whole pixels
    inside the image, the same distribution of box heights, widths and areas and of their places
    (20,000 draws each; the uniform-area boxes, rounded, are 0.04-0.05 larger on average at
    (0.35, 1) and (0.08, 1), torchvision's ten redraws rejecting large crops of extreme ratios)."""
    from simulator.augment import torchvision_pixel_boxes
    config = AugmentConfig(crop_scale=scale, crop_sampler="torchvision")
    ours = torchvision_pixel_boxes(config, 20_000, height, width, seeded(0))
    theirs = torchvision_box_draws(config, 20_000, height, width)
    top, left, box_h, box_w = ours.unbind(1)
    assert ((box_h >= 1) & (top >= 0) & (top + box_h <= height) & (box_w >= 1) & (left >= 0)
            & (left + box_w <= width)).all()
    for column in range(4):  # top, left, height, width
        assert total_variation(ours[:, column], theirs[:, column]) < 0.03, column
    area = (box_h * box_w).double() / (height * width)
    their_area = (theirs[:, 2] * theirs[:, 3]).double() / (height * width)
    assert abs(area.mean() - their_area.mean()) < 0.012  # 5 standard errors of the difference
    assert abs((top + box_h / 2).double().mean() - (theirs[:, 0] + theirs[:, 2] / 2).double().mean()) < 0.1


def test_the_torchvision_crop_sampler_falls_back_to_torchvision_s_central_crop():
    """No draw fits (the whole area at ratios of 2 to 3 on a square image): every box is torchvision's
    fallback, the central crop at the nearest ratio, 14 x 28 from row 7; with a ratio of 1/3 to 1/2,
    28 x 14 from column 7; at ratios from 2.6, 28 / 2.6 = 10.77 rows rounded to 11, from row
    (28 - 11) // 2 = 8 (an odd margin: rounded down, as torchvision's)."""
    from simulator.augment import torchvision_pixel_boxes
    for ratio, expected in (((2.0, 3.0), [7, 0, 14, 28]), ((1 / 3, 1 / 2), [0, 7, 28, 14]),
                            ((2.6, 3.0), [8, 0, 11, 28]), ((1 / 3, 1 / 2.6), [0, 8, 28, 11])):
        config = AugmentConfig(crop_scale=(1.0, 1.0), crop_ratio=ratio, crop_sampler="torchvision")
        boxes = torchvision_pixel_boxes(config, 50, 28, 28, seeded(0))
        assert boxes.tolist() == [expected] * 50 == torchvision_box_draws(config, 50, 28, 28).tolist()


@pytest.mark.parametrize("flip_prob", [0.0, 0.5])
def test_a_torchvision_box_is_resampled_as_torchvision_s_resized_crop_where_it_samples_inside_the_box(flip_prob):
    """The augmentation with ``crop_sampler: torchvision`` crops the box it draws: away from the
    output's outer ceil(28 / 2h - 1/2) rows and columns of an h-pixel box (where the simulator samples
    beyond the box, torchvision clamps to it; two or more for boxes under a third of the image, among
    these) every pixel is torchvision's ``resized_crop`` of that box, flipped horizontally after the
    crop where the flip is drawn (the crop of the same box, not of its mirror image)."""
    import torchvision.transforms.functional as TF

    from simulator.augment import torchvision_pixel_boxes
    config = AugmentConfig(crop_scale=(0.04, 1.0), flip_prob=flip_prob, jitter_prob=0.0, crop_sampler="torchvision")
    images = random_images(batch=100, channels=3, size=28)
    out = BatchAugment(config)(images, seeded(4))
    generator = seeded(4)
    boxes = torchvision_pixel_boxes(config, 100, 28, 28, generator)  # the augmentation's first draws
    flips = torch.rand(100, generator=generator) < flip_prob  # then the flips
    assert len(set(map(tuple, boxes.tolist()))) > 90 and (boxes[:, 2:] * 3 < 28).any()
    assert flips.sum() == 0 if flip_prob == 0 else 30 < flips.sum() < 70
    for image, augmented, (top, left, box_h, box_w), flip in zip(images, out, boxes.tolist(), flips):
        reference = TF.resized_crop(image, top, left, box_h, box_w, [28, 28], antialias=True)
        reference = TF.hflip(reference) if flip else reference
        rows, columns = math.ceil(28 / (2 * box_h) - 0.5), math.ceil(28 / (2 * box_w) - 0.5)
        inside = (slice(None), slice(rows, 28 - rows), slice(columns, 28 - columns))
        torch.testing.assert_close(augmented[inside], reference[inside], atol=3e-6, rtol=0)


def test_the_hue_s_sector_table_is_copied_to_a_device_once():
    """The hue jitter's index table is moved to the images' device once, not on every batch (``meta``:
    a device on which every ``.to`` makes a new tensor, as a GPU's does)."""
    meta = torch.device("meta")
    assert sector_planes(meta) is sector_planes(meta)
    assert sector_planes(meta).device == meta and sector_planes(meta).shape == HSV_SECTOR_PLANES.shape
    assert torch.equal(sector_planes(torch.device("cpu")), HSV_SECTOR_PLANES)


def test_hue_jitter_is_torchvision_s_adjust_hue_with_a_shift_in_range():
    """``hue: 0.1``: each jittered image is torchvision's ``adjust_hue`` of it by its drawn shift, the
    shifts spread over [-0.1, 0.1]; an image not jittered is left exactly as it was; a grayscale
    image has no hue."""
    import torchvision.transforms.functional as TF
    config = AugmentConfig(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_prob=0.0, jitter_prob=0.7,
                           brightness=0.0, contrast=0.0, saturation=0.0, hue=0.1)
    images = random_images(batch=64)
    augment = BatchAugment(config)
    out = augment._jitter(images, seeded(0))
    shifts = augment.jitter_draw(64, seeded(0))["hue"]
    assert (shifts == 0).sum() == (~augment.jitter_draw(64, seeded(0))["applied"]).sum() > 5
    assert -0.1 <= shifts.min() < -0.07 and 0.07 < shifts.max() <= 0.1
    for image, augmented, shift in zip(images, out, shifts.tolist()):
        if shift == 0:
            assert torch.equal(augmented, image)
        else:
            torch.testing.assert_close(augmented, TF.adjust_hue(image, shift), atol=1e-6, rtol=0)
            assert (augmented - image).abs().max() > 1e-3
    gray = random_images(batch=8, channels=1)
    assert torch.equal(augment._jitter(gray, seeded(0)), gray)


@pytest.mark.parametrize("jitter_prob, hue, channels", [(1.0, 0.0, 1), (0.8, 0.0, 3), (1.0, 0.2, 3), (0.8, 0.2, 3)])
def test_the_jitter_leaves_its_input_images_as_they_were(jitter_prob, hue, channels):
    """Both orders, with and without hue (where the jittered images are gathered) and with every
    image jittered (where they are not): the caller's images are not written to."""
    images = random_images(batch=64, channels=channels)
    before = images.clone()
    for order in ("fixed", "random"):
        config = AugmentConfig(jitter_prob=jitter_prob, hue=hue, jitter_order=order, grayscale_prob=0.2)
        out = BatchAugment(config)._jitter(images, seeded(0))
        assert torch.equal(images, before) and not torch.equal(out, images)


def test_random_jitter_order_applies_each_image_s_operations_in_its_own_drawn_order():
    """``jitter_order: random``: each jittered image gets torchvision's four adjustments in its own order
    (all 24 orders drawn), which changes the result where the adjustments clamp; ``fixed`` keeps one
    order; an image not jittered is left exactly as it was."""
    import torchvision.transforms.functional as TF
    strengths = {"brightness": 0.8, "contrast": 0.8, "saturation": 0.8, "hue": 0.2}
    config = AugmentConfig(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_prob=0.0, jitter_prob=0.8,
                           jitter_order="random", **strengths)
    images = random_images(batch=200)  # in [0, 1]: strong brightness and contrast clamp
    augment = BatchAugment(config)
    out = augment._jitter(images, seeded(0))
    draw = augment.jitter_draw(200, seeded(0))
    adjust = {"brightness": TF.adjust_brightness, "contrast": TF.adjust_contrast,
              "saturation": TF.adjust_saturation, "hue": TF.adjust_hue}
    names = ("brightness", "contrast", "saturation", "hue")
    assert len(set(map(tuple, draw["order"].tolist()))) == 24
    assert 20 < (~draw["applied"]).sum() < 60
    for index, (image, augmented) in enumerate(zip(images, out)):
        if not draw["applied"][index]:
            assert torch.equal(augmented, image)
            continue
        reference = image
        for operation in draw["order"][index].tolist():
            reference = adjust[names[operation]](reference, draw[names[operation]][index].item())
        torch.testing.assert_close(augmented, reference, atol=5e-4, rtol=0)  # luma 0.299 against 0.2989, compounded
    fixed = BatchAugment(AugmentConfig(**{**config.__dict__, "jitter_order": "fixed"}))._jitter(images, seeded(0))
    assert (fixed - out).flatten(1).abs().amax(dim=1).gt(1e-3).float().mean() > 0.5


def test_fixed_jitter_order_is_brightness_contrast_saturation_hue_and_grayscale_comes_after_it():
    """``jitter_order: fixed``: torchvision's ``ColorJitter`` order with fixed parameters, brightness,
    contrast, saturation, hue (the adjustments clamp, so another order gives other images); then the
    grayscale, on the jittered image (an RGB-only order the single-channel baselines cannot see)."""
    import torchvision.transforms.functional as TF
    config = AugmentConfig(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_prob=0.0, jitter_prob=0.8,
                           brightness=0.8, contrast=0.8, saturation=0.8, hue=0.2, grayscale_prob=0.5)
    images = random_images(batch=100)
    augment = BatchAugment(config)
    jittered = augment._jitter(images, seeded(0))
    draw = augment.jitter_draw(100, seeded(0))
    for index, (image, augmented) in enumerate(zip(images, jittered)):
        reference = TF.adjust_brightness(image, draw["brightness"][index].item())
        reference = TF.adjust_contrast(reference, draw["contrast"][index].item())
        reference = TF.adjust_saturation(reference, draw["saturation"][index].item())
        reference = TF.adjust_hue(reference, draw["hue"][index].item())
        torch.testing.assert_close(augmented, reference, atol=5e-4, rtol=0)  # luma 0.299 against 0.2989, compounded
    generator = seeded(1)
    expected = augment._jitter(augment._crop_and_flip(images, generator), generator)
    gray = torch.rand(100, generator=generator) < 0.5
    out = augment(images, seeded(1))
    assert 20 < gray.sum() < 80
    r, g, b = expected[gray].unbind(dim=1)
    torch.testing.assert_close(out[gray], (0.299 * r + 0.587 * g + 0.114 * b).unsqueeze(1).expand(-1, 3, -1, -1),
                               atol=1e-6, rtol=0)
    torch.testing.assert_close(out[~gray], expected[~gray].clamp(0, 1), atol=1e-6, rtol=0)


def replayed_bicubic_boxes(config, batch, height, width, seed):
    """The whole-pixel boxes and flips ``BatchAugment(config)`` draws from ``seeded(seed)``."""
    from simulator.augment import torchvision_pixel_boxes
    generator = seeded(seed)
    boxes = torchvision_pixel_boxes(config, batch, height, width, generator)
    flips = torch.rand(batch, generator=generator) < config.flip_prob
    assert batch // 6 < flips.sum() < batch - batch // 6 and len(set(boxes[:, 2].tolist())) > 5
    return boxes.tolist(), flips.tolist()


BICUBIC = AugmentConfig(crop_scale=(0.08, 1.0), crop_sampler="torchvision", interpolation="bicubic", jitter_prob=0.0)


@pytest.mark.parametrize("height, width", [(28, 28), (24, 32)])
def test_bicubic_crop_is_pillow_s_bicubic_resize_of_the_box(height, width):
    """``interpolation: bicubic`` with torchvision's boxes: each image is Pillow's ``resized_crop`` of
    its box (``RandomResizedCrop(..., interpolation=BICUBIC)`` on the reference code's Pillow images),
    flipped where drawn, within Pillow's rounding to whole levels; black-and-white images make the
    passes overshoot, which Pillow clips after each."""
    import torchvision.transforms.functional as TF
    pixels = (torch.rand(64, 3, height, width, generator=seeded(1)) < 0.5).to(torch.uint8) * 255
    pixels[32:] = torch.randint(0, 256, (32, 3, height, width), dtype=torch.uint8, generator=seeded(2))
    out = BatchAugment(BICUBIC)(to_float(pixels), seeded(5))
    for image, augmented, box, flip in zip(pixels, out, *replayed_bicubic_boxes(BICUBIC, 64, height, width, 5)):
        reference = TF.pil_to_tensor(TF.resized_crop(TF.to_pil_image(image), *box, [height, width],
                                                     interpolation=TF.InterpolationMode.BICUBIC))
        reference = reference.flip(-1) if flip else reference
        assert (augmented * 255 - reference.float()).abs().max() < 1.1


@pytest.mark.parametrize("height, width", [(28, 28), (24, 32)])
def test_bicubic_crop_is_torchvision_s_antialiased_bicubic_resized_crop_where_nothing_clips(height, width):
    """On images in [0.25, 0.75] no pass leaves [0, 1]: each image is torchvision's float ``resized_crop``
    of its box with ``BICUBIC`` and ``antialias=True`` (Keys' a = -0.5), flipped where drawn; bilinear
    resampling differs from it."""
    import torchvision.transforms.functional as TF
    images = 0.25 + 0.5 * torch.rand(64, 3, height, width, generator=seeded(1))
    out = BatchAugment(BICUBIC)(images, seeded(5))
    for image, augmented, box, flip in zip(images, out, *replayed_bicubic_boxes(BICUBIC, 64, height, width, 5)):
        reference = TF.resized_crop(image, *box, [height, width], interpolation=TF.InterpolationMode.BICUBIC,
                                    antialias=True)
        torch.testing.assert_close(augmented, reference.flip(-1) if flip else reference, atol=1e-5, rtol=0)
    bilinear = BatchAugment(AugmentConfig(**{**BICUBIC.__dict__, "interpolation": "bilinear"}))(images, seeded(5))
    assert (bilinear - out).abs().max() > 0.02


def test_bicubic_crop_keeps_a_whole_image_and_a_box_narrower_than_a_pixel_stays_finite():
    images = random_images()
    whole = AugmentConfig(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_prob=0.0, jitter_prob=0.0,
                          interpolation="bicubic")
    torch.testing.assert_close(BatchAugment(whole)(images, seeded(0)), images, atol=1e-6, rtol=0)
    tiny = AugmentConfig(**{**whole.__dict__, "crop_scale": (1e-4, 1e-4)})  # a box of 0.3 pixels a side
    out = BatchAugment(tiny)(images, seeded(0))
    assert out.isfinite().all() and out.std(dim=(2, 3)).max() < 1e-6  # one source pixel everywhere


@pytest.mark.parametrize("kernel", [3, 5])
def test_blur_is_torchvision_s_gaussian_blur_with_each_image_s_sigma(kernel):
    """``blur_prob: 0.5``: a drawn half of the images is torchvision's ``gaussian_blur`` with its own
    sigma from ``blur_sigma`` and the ``blur_kernel``; the others are unchanged."""
    import torchvision.transforms.functional as TF
    augment = BatchAugment(AugmentConfig(blur_prob=0.5, blur_sigma=(0.1, 2.0), blur_kernel=kernel))
    images = random_images(batch=48)
    out = augment._blur(images, seeded(3))
    generator = seeded(3)
    blurred = torch.rand(48, generator=generator) < 0.5
    sigma = 0.1 + 1.9 * torch.rand(48, generator=generator)
    assert 10 < blurred.sum() < 38 and sigma.min() < 0.5 and sigma.max() > 1.5
    for image, augmented, chosen, deviation in zip(images, out, blurred, sigma.tolist()):
        if chosen:
            reference = TF.gaussian_blur(image, [kernel, kernel], [deviation, deviation])
            torch.testing.assert_close(augmented, reference, atol=1e-6, rtol=0)
            assert deviation < 0.5 or (augmented - image).abs().max() > 1e-2
        else:
            assert torch.equal(augmented, image)


def test_solarize_is_pillow_s_and_the_pipeline_blurs_then_solarises_the_images_drawn():
    """:func:`solarize` is Pillow's ``ImageOps.solarize`` (the reference code's, threshold 128 of 255);
    ``solarize_prob`` solarises the images drawn, after the blur (the reference's order)."""
    from PIL import ImageOps
    import torchvision.transforms.functional as TF
    pixels = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8, generator=seeded(2))
    for image, solarized in zip(pixels, solarize(to_float(pixels))):
        reference = TF.pil_to_tensor(ImageOps.solarize(TF.to_pil_image(image)))
        torch.testing.assert_close(solarized, to_float(reference), atol=1e-6, rtol=0)
    images = random_images(batch=32)
    config = AugmentConfig(**{**NO_CROP.__dict__, "blur_prob": 0.5, "solarize_prob": 0.5})
    out = BatchAugment(config)(images, seeded(0))
    generator = seeded(0)
    plain = BatchAugment(NO_CROP)
    cropped = plain._jitter(plain._crop_and_flip(images, generator), generator)  # the same draws, no change
    blurred = BatchAugment(config)._blur(cropped, generator)
    solarized = torch.rand(32, generator=generator) < 0.5
    assert 5 < solarized.sum() < 27
    expected = torch.where(solarized.view(-1, 1, 1, 1), solarize(blurred), blurred)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    assert not torch.allclose(out, torch.where(solarized.view(-1, 1, 1, 1), blurred, solarize(blurred)))


def test_the_jitter_draws_are_one_stream_in_the_documented_order():
    """:meth:`BatchAugment.jitter_draw` from the generator, in turn: whether each image is jittered
    (``jitter_prob``), then brightness, contrast and saturation factors in [max(0, 1 - s), 1 + s], the
    hue shift in [-hue, hue] (1 and 0 where not jittered) and the order, a permutation per image from
    the argsort of four uniforms; nothing else is drawn. (The other tests replay the draws through
    ``jitter_draw`` itself, so another order of these draws, a negated shift or another permutation
    passed them.)"""
    config = AugmentConfig(jitter_prob=0.6, brightness=0.5, contrast=0.3, saturation=1.5, hue=0.2,
                           jitter_order="random")
    generator = seeded(4)
    draw = BatchAugment(config).jitter_draw(50, generator)
    replay = seeded(4)
    applied = torch.rand(50, generator=replay) < 0.6
    expected = {"applied": applied}
    for name, low, high, neutral in (("brightness", 0.5, 1.5, 1.0), ("contrast", 0.7, 1.3, 1.0),
                                     ("saturation", 0.0, 2.5, 1.0), ("hue", -0.2, 0.2, 0.0)):
        uniform = low + (high - low) * torch.rand(50, generator=replay)
        expected[name] = torch.where(applied, uniform, torch.tensor(neutral))
    expected["order"] = torch.rand(50, 4, generator=replay).argsort(dim=1)
    assert 10 < applied.sum() < 40 and set(draw) == set(expected)
    assert torch.equal(draw["applied"], applied) and torch.equal(draw["order"], expected["order"])
    for name in ("brightness", "contrast", "saturation", "hue"):
        torch.testing.assert_close(draw[name], expected[name], atol=1e-6, rtol=0)
    assert torch.equal(generator.get_state(), replay.get_state())


@pytest.mark.parametrize("channels", [1, 3])
def test_the_defaults_draw_the_crop_the_flip_and_the_jitter_only(channels):
    """``AugmentConfig()`` (the scenarios' defaults) draws from the generator exactly nine uniforms
    per image, as kept runs drew them: the crop's area, log ratio and two places, the flip, whether
    jittered and three jitter factors; no grayscale, hue, order, blur or solarisation draw (each drawn
    only where configured), so the next batch from the same generator is what it always was."""
    images = random_images(batch=16, channels=channels)
    generator = seeded(9)
    BatchAugment(AugmentConfig())(images, generator)
    replay = seeded(9)
    for _ in range(9):
        torch.rand(16, generator=replay)
    assert torch.equal(generator.get_state(), replay.get_state())


def test_single_channel_images_take_brightness_and_contrast_as_torchvision_adjusts_them():
    """1-channel images (Fashion-MNIST's): brightness, then contrast (the blend with the image's mean),
    each torchvision's adjustment with the image's drawn factors; saturation and hue are ignored
    (the factor test above runs on RGB images only, so a jitter that skipped contrast here passed)."""
    import torchvision.transforms.functional as TF
    config = AugmentConfig(**{**only(brightness=0.4, contrast=0.6, saturation=0.4).__dict__, "hue": 0.2})
    images = 0.1 + 0.5 * random_images(batch=16, channels=1)
    augment = BatchAugment(config)
    out = augment._jitter(images, seeded(2))
    draw = augment.jitter_draw(16, seeded(2))
    assert (draw["contrast"] - 1).abs().max() > 0.3
    for index, (image, augmented) in enumerate(zip(images, out)):
        reference = TF.adjust_contrast(TF.adjust_brightness(image, draw["brightness"][index].item()),
                                       draw["contrast"][index].item())
        torch.testing.assert_close(augmented, reference, atol=1e-6, rtol=0)


@pytest.mark.parametrize("sampler, interpolation", [("uniform_area", "bilinear"), ("torchvision", "bilinear"),
                                                    ("uniform_area", "bicubic")])
def test_any_crop_of_a_uniform_image_is_that_image(sampler, interpolation):
    """A crop of a one-colour image is that colour everywhere, the outer rows and columns of a box
    on the image's edge included (where the bilinear resampling reads half a pixel beyond the image,
    torchvision clamps to its edge: a zero padding there darkens them)."""
    config = AugmentConfig(crop_scale=(0.08, 1.0), jitter_prob=0.0, crop_sampler=sampler, interpolation=interpolation)
    images = torch.tensor([0.3, 0.7, 1.0]).view(1, 3, 1, 1).expand(200, 3, 24, 32)
    out = BatchAugment(config)(images, seeded(6))
    torch.testing.assert_close(out, images, atol=1e-6, rtol=0)


def test_uniform_area_boxes_are_the_drawn_area_and_ratio_placed_by_the_drawn_uniforms():
    """Each box from :func:`uniform_area_boxes`'s draws, in turn per batch: the area fraction a in
    ``crop_scale``, the log aspect ratio (width / height in pixels) in log ``crop_ratio``, then
    u, v in [-1, 1) placing it, then the flip. The box is sqrt(a H W r) x sqrt(a H W / r) pixels;
    where that is wider (taller) than the image, the whole width (height) and a of the height (width).
    Its centre is u (v) of the room left on either side, and a flipped image's x axis is mirrored
    (the distributions alone are tested above: drawing the ratio first passed them)."""
    height, width = 24, 32
    config = AugmentConfig(crop_scale=(0.3, 1.0), crop_ratio=(0.5, 2.0), flip_prob=0.5)
    theta = BatchAugment(config)._crop_theta(torch.zeros(300, 1, height, width), seeded(8))
    replay = seeded(8)
    area = 0.3 + 0.7 * torch.rand(300, generator=replay).double()
    ratio = (math.log(0.5) + (math.log(2.0) - math.log(0.5)) * torch.rand(300, generator=replay).double()).exp()
    u, v = (2 * torch.rand(300, generator=replay).double() - 1 for _ in range(2))
    flip = torch.rand(300, generator=replay) < 0.5
    box_w, box_h = (area * height * width * ratio).sqrt(), (area * height * width / ratio).sqrt()
    wide, tall = box_w > width, box_h > height
    assert 10 < wide.sum() < 150 and 10 < tall.sum() < 150 and 50 < flip.sum() < 250
    half_width = torch.where(wide, 1.0, torch.where(tall, area, box_w / width))
    half_height = torch.where(tall, 1.0, torch.where(wide, area, box_h / height))
    expected = torch.zeros(300, 2, 3, dtype=torch.float64)
    expected[:, 0, 0] = torch.where(flip, -half_width, half_width)
    expected[:, 0, 2] = (1 - half_width) * u
    expected[:, 1, 1] = half_height
    expected[:, 1, 2] = (1 - half_height) * v
    torch.testing.assert_close(theta.double(), expected, atol=1e-5, rtol=0)


def test_torchvision_boxes_are_the_first_fitting_of_ten_drawn_boxes_placed_by_two_uniforms():
    """:func:`torchvision_pixel_boxes` from its draws, computed per image here: ten area fractions for
    every image, then ten log aspect ratios, then two uniforms per image (the top's, then the left's);
    the first of the ten boxes round(sqrt(A r)) x round(sqrt(A / r)) that fits, at row
    floor(t (H - h + 1)) and column floor(l (W - w + 1)), as ``RandomResizedCrop.get_params`` places
    it; where none fits, the central crop (the distribution test above passed the top's and left's
    uniforms swapped)."""
    from simulator.augment import torchvision_pixel_boxes
    height, width, batch = 24, 32, 200
    config = AugmentConfig(crop_scale=(0.5, 1.0), crop_ratio=(0.5, 2.0), crop_sampler="torchvision")
    boxes = torchvision_pixel_boxes(config, batch, height, width, seeded(3))
    replay = seeded(3)
    scales = torch.rand(batch, 10, generator=replay).tolist()
    log_ratios = torch.rand(batch, 10, generator=replay).tolist()
    places = torch.rand(batch, 2, generator=replay).tolist()
    expected, tries = [], []
    for scale, log_ratio, (t, l) in zip(scales, log_ratios, places):
        for attempt in range(10):
            area = height * width * (0.5 + 0.5 * scale[attempt])
            ratio = math.exp(math.log(0.5) + (math.log(2.0) - math.log(0.5)) * log_ratio[attempt])
            w, h = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
            if 0 < w <= width and 0 < h <= height:
                tries.append(attempt)
                expected.append([math.floor(t * (height - h + 1)), math.floor(l * (width - w + 1)), h, w])
                break
        else:  # none fits: the central crop, here the whole image (its ratio 4/3 lies in crop_ratio)
            expected.append([0, 0, height, width])
    assert boxes.tolist() == expected
    assert max(tries) >= 2 and len(tries) < batch and sum(h < height - 2 and w < width - 2
                                                          for _, _, h, w in expected) > 50


def test_solarize_inverts_float_pixels_from_128_of_255():
    """Between Pillow's levels (a jittered or blurred image's pixels): a pixel is inverted from
    128 / 255 = 0.50196 up (any threshold between 127 and 128 levels passed the level-only test)."""
    pixels = torch.tensor([0.4, 0.5, 0.5019, 128 / 255, 0.5021, 1.0])
    torch.testing.assert_close(solarize(pixels), torch.tensor([0.4, 0.5, 0.5019, 127 / 255, 0.4979, 0.0]),
                               atol=1e-6, rtol=0)


def test_blurred_white_images_stay_in_the_unit_range():
    """The blur's normalised kernel sums to 1 only up to rounding (a white image blurs to 1 + 2e-7):
    the augmentation's output is clamped to [0, 1] as its input was."""
    images = torch.ones(16, 3, 8, 8)
    out = BatchAugment(AugmentConfig(**{**NO_CROP.__dict__, "blur_prob": 1.0, "blur_kernel": 5}))(images, seeded(0))
    assert out.max() == 1.0 and out.min() > 1 - 1e-6


def test_a_hue_shift_of_zero_returns_the_image_as_it_is():
    """``_hue`` with a zero shift for some images: those are returned bit for bit (the HSV round trip
    alone moves pixels, as torchvision's ``adjust_hue(image, 0)`` does); the others are shifted. (In
    the pipeline the images not jittered never reach it, so only this call sees the zero.)"""
    import torchvision.transforms.functional as TF

    from simulator.augment import ADJUSTMENTS
    images = random_images(batch=4)
    shift = torch.tensor([0.0, 0.1, 0.0, -0.2])
    out = ADJUSTMENTS["hue"](images, shift)
    assert torch.equal(out[0], images[0]) and torch.equal(out[2], images[2])
    assert not torch.equal(TF.adjust_hue(images[0], 0.0), images[0])
    for index in (1, 3):
        torch.testing.assert_close(out[index], TF.adjust_hue(images[index], shift[index].item()), atol=1e-6, rtol=0)


def test_a_scenario_s_augment_section_becomes_a_config_of_tuples():
    """``from_scenario``: the YAML lists become tuples, so the config equals (and hashes as) the one
    written with tuples."""
    section = {"crop_scale": [0.5, 1.0], "crop_ratio": [0.5, 2.0], "blur_sigma": [0.2, 1.0], "flip_prob": 0.25}
    config = AugmentConfig.from_scenario(section)
    expected = AugmentConfig(crop_scale=(0.5, 1.0), crop_ratio=(0.5, 2.0), blur_sigma=(0.2, 1.0), flip_prob=0.25)
    assert config == expected and hash(config) == hash(expected)


def test_the_config_s_defaults_are_the_scenarios_and_torchvision_s_ratio():
    """``AugmentConfig()`` is the resolved scenario's ``augment:`` section (a scenario without one), and
    the aspect ratios, which no scenario sets, are torchvision's ``RandomResizedCrop`` default 3/4 to 4/3."""
    import inspect

    from torchvision.transforms import RandomResizedCrop

    from simulator.scenario import resolve
    assert AugmentConfig.from_scenario(resolve({"seed": 0})["augment"]) == AugmentConfig()
    ratio = inspect.signature(RandomResizedCrop).parameters["ratio"].default
    assert AugmentConfig().crop_ratio == ratio == (3 / 4, 4 / 3)
