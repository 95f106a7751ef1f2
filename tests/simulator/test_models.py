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
