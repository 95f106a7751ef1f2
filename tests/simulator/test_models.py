"""Tests for the encoders and MLP heads in simulator.models."""

import pytest
import torch

from simulator.models import ENCODERS, build_encoder, mlp

SHAPES = [(1, 28), (3, 32)]


def parameter_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("channels,size", SHAPES)
@pytest.mark.parametrize("name", ENCODERS)
def test_encoder_output_shape(name, channels, size):
    encoder = build_encoder(name, channels, size)
    with torch.no_grad():
        features = encoder(torch.rand(2, channels, size, size))
    assert features.shape == (2, encoder.out_dim)


def test_feature_widths():
    assert build_encoder("narrow_cnn", 1, 28).out_dim == 64
    assert build_encoder("small_cnn", 1, 28).out_dim == 128
    assert build_encoder("large_cnn", 1, 28).out_dim == 256
    assert build_encoder("resnet18", 3, 32).out_dim == 512


def test_large_cnn_has_more_than_twice_the_parameters_of_small_cnn():
    assert parameter_count(build_encoder("large_cnn", 3, 32)) > 2 * parameter_count(build_encoder("small_cnn", 3, 32))


def test_narrow_cnn_is_the_small_cnn_at_half_width():
    def convs(name):
        encoder = build_encoder(name, 1, 28)
        return [(c.out_channels, c.stride) for c in encoder.modules() if isinstance(c, torch.nn.Conv2d)]

    assert convs("narrow_cnn") == [(width // 2, stride) for width, stride in convs("small_cnn")]


def test_resnet34_is_deeper_than_resnet18():
    assert parameter_count(build_encoder("resnet34", 3, 32)) > parameter_count(build_encoder("resnet18", 3, 32))


@pytest.mark.parametrize("norm,norm_type", [("group", torch.nn.GroupNorm), ("batch", torch.nn.BatchNorm2d)])
def test_norm_choice(norm, norm_type):
    encoder = build_encoder("small_cnn", 3, 32, norm=norm)
    assert any(isinstance(m, norm_type) for m in encoder.modules())


@pytest.mark.parametrize("stride, out_channels", [(1, 8), (2, 16)])
def test_a_basic_block_is_the_relu_of_its_residual_branch_plus_its_shortcut(stride, out_channels):
    """He et al. 2016, eq. (1)-(2): y = relu(F(x) + x), with a projection W_s x (1x1 conv and its norm)
    where the shape changes. With the residual branch's last norm zeroed, y = relu(shortcut(x)); with
    the shortcut zeroed too, y = 0; otherwise the sum, checked against the two branches called apart."""
    from simulator.models import BasicBlock
    block = BasicBlock(8, out_channels, stride, "batch").eval()
    torch.nn.init.normal_(block.residual[2].weight)  # a non-trivial branch (BatchNorm's weight starts at 1)
    x = torch.randn(2, 8, 6, 6, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        residual, shortcut = block.residual(x), block.shortcut(x)
        assert residual.abs().amax() > 0.1 and shortcut.abs().amax() > 0.1
        torch.testing.assert_close(block(x.clone()), torch.relu(residual + shortcut))
        if stride == 1 and out_channels == 8:
            torch.testing.assert_close(shortcut, x)  # the identity, no projection
        block.residual[2].weight.zero_()
        block.residual[2].bias.zero_()
        torch.testing.assert_close(block(x.clone()), torch.relu(shortcut))


@pytest.mark.parametrize("name", ["small_cnn", "resnet18"])
def test_an_encoder_standardises_its_input_pixels_before_its_first_layer(name):
    """The encoder sees (x - 0.5) / 0.25 of pixels in [0, 1]: its output equals its feature stack's
    on the standardised images, the average over the spatial positions taken after."""
    encoder = build_encoder(name, 3, 32).eval()
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(encoder(x), encoder.features((x - 0.5) / 0.25).mean(dim=(2, 3)))
        assert not torch.allclose(encoder(x), encoder.features(x).mean(dim=(2, 3)), atol=1e-3)


@pytest.mark.parametrize("name", ["small_cnn", "large_cnn"])
def test_gradients_reach_every_parameter(name):
    encoder = build_encoder(name, 3, 32)
    encoder(torch.rand(4, 3, 32, 32)).square().mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.parameters())


@pytest.mark.parametrize("num_layers,linear_count", [(1, 1), (2, 2), (3, 3)])
def test_mlp_shapes(num_layers, linear_count):
    head = mlp(128, 64, 32, num_layers=num_layers)
    assert head(torch.rand(5, 128)).shape == (5, 32)
    assert sum(isinstance(m, torch.nn.Linear) for m in head) == linear_count


def test_unknown_names_raise_value_error():
    with pytest.raises(ValueError, match="small_cnn"):
        build_encoder("vgg", 3, 32)
    with pytest.raises(ValueError, match="group"):
        build_encoder("small_cnn", 3, 32, norm="layer")
    with pytest.raises(ValueError):
        mlp(4, 4, 4, num_layers=0)
    with pytest.raises(ValueError, match="'none', 'batch', 'group'"):
        mlp(4, 4, 4, hidden_norm="layer")


@pytest.mark.parametrize("channels, groups", [(2, 1), (4, 1), (8, 2), (64, 16), (128, 32), (512, 32)])
def test_group_norm_takes_at_most_32_groups_of_at_least_4_channels_each(channels, groups):
    """The docstring's rule, by hand: channels // 4 groups, capped at 32, at least one; learnable
    per-channel scale and shift (affine, as torch's GroupNorm default)."""
    from simulator.models import group_norm
    norm = group_norm(channels)
    assert (norm.num_groups, norm.num_channels, norm.affine) == (groups, channels, True)


@pytest.mark.parametrize("name, layers", [
    ("narrow_cnn", [(16, 2), (32, 2), (64, 2)]),
    ("small_cnn", [(32, 2), (64, 2), (128, 2)]),
    ("large_cnn", [(64, 2), (128, 1), (256, 2), (256, 2)]),
])
@pytest.mark.parametrize("norm", ["group", "batch"])
def test_a_plain_cnn_is_its_table_of_3x3_conv_norm_relu_layers(name, layers, norm):
    """Each layer: a 3x3 convolution, padding 1 and no bias (the norm that follows has the shift), of
    the table's width and stride, then its norm over that width and a ReLU, in that order."""
    from simulator.models import group_norm
    encoder = build_encoder(name, 3, 32, norm=norm)
    assert len(encoder.features) == len(layers)
    for (width, stride), layer in zip(layers, encoder.features):
        conv, norm_module, relu = layer
        assert isinstance(conv, torch.nn.Conv2d) and isinstance(relu, torch.nn.ReLU)
        assert (conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.bias) == (
            width, (3, 3), (stride, stride), (1, 1), None)
        if norm == "group":
            assert isinstance(norm_module, torch.nn.GroupNorm)
            assert norm_module.num_groups == group_norm(width).num_groups and norm_module.affine
        else:
            assert type(norm_module) is torch.nn.BatchNorm2d and norm_module.num_features == width
            assert norm_module.affine and norm_module.track_running_stats


@pytest.mark.parametrize("name", ENCODERS)
@pytest.mark.parametrize("size, side", [(32, 4), (28, 4), (8, 1)])
def test_every_encoder_halves_the_resolution_three_times_and_ends_in_a_relu(name, size, side):
    """32 -> 4 and 28 -> 4 (padding 1: ceil halving), 8 -> 1 (MIN_IMAGE_SIZE, the least taken); the
    feature map is post-ReLU, so the pooled features are non-negative."""
    encoder = build_encoder(name, 3, size).eval()
    with torch.no_grad():
        x = torch.rand(2, 3, size, size, generator=torch.Generator().manual_seed(2))
        maps = encoder.features((x - 0.5) / 0.25)
    assert maps.shape == (2, encoder.out_dim, side, side)
    assert maps.amin() >= 0 and maps.amax() > 0


def test_the_least_image_size_is_8():
    from simulator.models import MIN_IMAGE_SIZE
    assert MIN_IMAGE_SIZE == 8
    build_encoder("small_cnn", 1, 8)
    with pytest.raises(ValueError, match="image_size must be at least 8, got 7"):
        build_encoder("small_cnn", 1, 7)


def test_the_default_norm_is_group_norm():
    modules = list(build_encoder("small_cnn", 3, 32).modules())
    assert any(isinstance(m, torch.nn.GroupNorm) for m in modules)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in modules)


# The CIFAR ResNets of He et al. 2016 as in the usual CIFAR code (kuangliu/pytorch-cifar): 3x3
# stride-1 stem of 64 channels, no max-pool, basic blocks with the stride on their first conv,
# projection shortcuts (1x1 conv + norm) where the shape changes. Parameter counts by hand, for RGB
# input without the classifier: stem 3*64*9 + 128; per stage of width w after width v, first block
# v*w*9 + w*w*9 + v*w (shortcut) + 3 norms of 2w, each further block 2*w*w*9 + 2 norms of 2w.
# ResNet-18: 1,856 + 147,968 + 525,568 + 2,099,712 + 8,393,728 = 11,168,832 (kuangliu's 11,173,962
# less its 5,130-parameter classifier).
def cifar_resnet_parameters(blocks):
    total, previous = 3 * 64 * 9 + 2 * 64, 64
    for stage, count in enumerate(blocks):
        width = 64 * 2 ** stage
        first = previous * width * 9 + width * width * 9 + 2 * 2 * width
        if stage > 0:
            first += previous * width + 2 * width
        total += first + (count - 1) * (2 * width * width * 9 + 2 * 2 * width)
        previous = width
    return total


@pytest.mark.parametrize("norm", ["group", "batch"])
def test_resnet_parameter_counts_are_the_cifar_resnets(norm):
    assert cifar_resnet_parameters((2, 2, 2, 2)) == 11_168_832
    assert parameter_count(build_encoder("resnet18", 3, 32, norm=norm)) == 11_168_832
    assert parameter_count(build_encoder("resnet34", 3, 32, norm=norm)) == cifar_resnet_parameters((3, 4, 6, 3))


@pytest.mark.parametrize("name, blocks", [("resnet18", (2, 2, 2, 2)), ("resnet34", (3, 4, 6, 3))])
def test_a_resnet_is_a_stride_1_stem_then_stages_whose_first_block_strides(name, blocks):
    from simulator.models import BasicBlock
    encoder = build_encoder(name, 3, 32)
    stem, *rest = encoder.features
    assert (stem[0].kernel_size, stem[0].stride, stem[0].out_channels) == ((3, 3), (1, 1), 64)
    assert all(isinstance(block, BasicBlock) for block in rest) and len(rest) == sum(blocks)
    expected = [(64 * 2 ** stage, 2 if stage > 0 and i == 0 else 1)
                for stage, count in enumerate(blocks) for i in range(count)]
    assert [(b.residual[1].out_channels, b.residual[0][0].stride[0]) for b in rest] == expected
    assert all(b.residual[1].stride == (1, 1) for b in rest)  # the stride is the first conv's
    for block, (width, stride) in zip(rest, expected):
        if stride == 2:
            conv, norm = block.shortcut
            assert (conv.kernel_size, conv.stride, conv.out_channels) == ((1, 1), (2, 2), width)
            assert isinstance(norm, torch.nn.GroupNorm) and norm.num_channels == width
        else:
            assert isinstance(block.shortcut, torch.nn.Identity)


@pytest.mark.parametrize("hidden_norm", ["none", "batch", "group"])
def test_an_mlp_s_hidden_layer_is_linear_norm_relu(hidden_norm):
    """BYOL's heads (Grill et al. 2020, 3.3): Linear, BatchNorm1d, ReLU, Linear; without a norm
    Linear, ReLU, Linear; with ``group`` a GroupNorm of 512 // 4 -> 32 groups in the norm's place."""
    head = mlp(64, 512, 32, num_layers=3, hidden_norm=hidden_norm)
    norm = {"none": [], "batch": [torch.nn.BatchNorm1d], "group": [torch.nn.GroupNorm]}[hidden_norm]
    layer = [torch.nn.Linear, *norm, torch.nn.ReLU]
    assert [type(m) for m in head] == [*layer, *layer, torch.nn.Linear]
    linears = [m for m in head if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features, m.bias is not None) for m in linears] == [
        (64, 512, True), (512, 512, True), (512, 32, True)]
    for m in head:
        if isinstance(m, torch.nn.BatchNorm1d):
            assert m.num_features == 512 and m.affine
        if isinstance(m, torch.nn.GroupNorm):
            assert (m.num_groups, m.num_channels) == (32, 512)
