"""Encoders and MLP heads.

Encoders take float images in [0, 1] and normalise them internally, so callers
never normalise. Every encoder ends in global average pooling and exposes its
feature width as ``out_dim``.
"""

from __future__ import annotations

from torch import nn

ENCODERS = ("narrow_cnn", "small_cnn", "large_cnn", "resnet18", "resnet34")
NORMS = ("group", "batch")
HEAD_NORMS = ("none", "batch", "group")  # the hidden-layer normalisations of :func:`mlp`
RESNET_BLOCKS = {"resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}
# Channel widths and strides of the plain conv encoders (all end at 1/8 resolution).
NARROW_CNN_LAYERS = {"widths": (16, 32, 64), "strides": (2, 2, 2)}  # the small CNN at half width
SMALL_CNN_LAYERS = {"widths": (32, 64, 128), "strides": (2, 2, 2)}
LARGE_CNN_LAYERS = {"widths": (64, 128, 256, 256), "strides": (2, 1, 2, 2)}
# Every encoder halves the resolution three times.
MIN_IMAGE_SIZE = 8


def group_norm(channels: int) -> nn.GroupNorm:
    """GroupNorm over ``channels`` in at most 32 groups of at least 4 channels each."""
    return nn.GroupNorm(max(1, min(32, channels // 4)), channels)


def norm_layer(norm: str, channels: int) -> nn.Module:
    """:func:`group_norm` or BatchNorm over ``channels``."""
    if norm == "group":
        return group_norm(channels)
    if norm == "batch":
        return nn.BatchNorm2d(channels)
    raise ValueError(f"unknown norm {norm!r}; expected one of {NORMS}")


def conv_norm_relu(in_channels: int, out_channels: int, stride: int, norm: str) -> nn.Sequential:
    """3x3 convolution, normalisation and ReLU."""
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False),
        norm_layer(norm, out_channels),
        nn.ReLU(inplace=True),
    )


class Encoder(nn.Module):
    """Normalises [0, 1] images to roughly zero mean, applies ``features`` and pools globally."""

    def __init__(self, features: nn.Module, out_dim: int):
        super().__init__()
        self.features = features
        self.out_dim = out_dim

    def forward(self, images):
        return self.features((images - 0.5) / 0.25).mean(dim=(2, 3))


def plain_cnn(in_channels: int, widths: tuple[int, ...], strides: tuple[int, ...], norm: str) -> Encoder:
    """Stack of conv-norm-ReLU layers with the given output widths and strides."""
    layers = []
    for width, stride in zip(widths, strides, strict=True):
        layers.append(conv_norm_relu(in_channels, width, stride, norm))
        in_channels = width
    return Encoder(nn.Sequential(*layers), widths[-1])


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convs with a (projected when needed) identity shortcut."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, norm: str):
        super().__init__()
        self.residual = nn.Sequential(
            conv_norm_relu(in_channels, out_channels, stride, norm),
            nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
            norm_layer(norm, out_channels),
        )
        self.shortcut = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                norm_layer(norm, out_channels),
            )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.residual(x) + self.shortcut(x))


def cifar_resnet(in_channels: int, blocks_per_stage: tuple[int, ...], norm: str) -> Encoder:
    """CIFAR ResNet: 3x3 stride-1 stem, no max-pool, stages of 64-128-256-512 channels."""
    layers = [conv_norm_relu(in_channels, 64, 1, norm)]
    channels = 64
    for stage, num_blocks in enumerate(blocks_per_stage):
        width = 64 * 2**stage
        for block in range(num_blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            layers.append(BasicBlock(channels, width, stride, norm))
            channels = width
    return Encoder(nn.Sequential(*layers), channels)


def build_encoder(name: str, in_channels: int, image_size: int, norm: str = "group") -> Encoder:
    """Encoder ``name`` (one of ``ENCODERS``) mapping ``[B,in_channels,image_size,image_size]`` to ``[B,out_dim]``."""
    if image_size < MIN_IMAGE_SIZE:
        raise ValueError(f"image_size must be at least {MIN_IMAGE_SIZE}, got {image_size}")
    if name == "narrow_cnn":
        return plain_cnn(in_channels, norm=norm, **NARROW_CNN_LAYERS)
    if name == "small_cnn":
        return plain_cnn(in_channels, norm=norm, **SMALL_CNN_LAYERS)
    if name == "large_cnn":
        return plain_cnn(in_channels, norm=norm, **LARGE_CNN_LAYERS)
    if name in RESNET_BLOCKS:
        return cifar_resnet(in_channels, RESNET_BLOCKS[name], norm)
    raise ValueError(f"unknown encoder {name!r}; expected one of {ENCODERS}")


def mlp(in_dim: int, hidden_dim: int, out_dim: int, num_layers: int = 2, hidden_norm: str = "none") -> nn.Sequential:
    """``num_layers`` Linear layers with ReLU between them (1 = a single Linear). ``hidden_norm`` (one of
    :data:`HEAD_NORMS`) puts a normalisation before each ReLU: ``batch`` a BatchNorm1d, as BYOL's projector
    and predictor (Grill et al. 2020, section 3.3); ``group`` a :func:`group_norm`,
    as the SimSiam heads of Louizos et al. 2024 (Appendix A); ``none`` nothing."""
    if num_layers < 1:
        raise ValueError(f"num_layers must be at least 1, got {num_layers}")
    if hidden_norm not in HEAD_NORMS:
        raise ValueError(f"unknown head norm {hidden_norm!r}; expected one of {HEAD_NORMS}")
    layers = []
    for _ in range(num_layers - 1):
        norm = [] if hidden_norm == "none" else [
            nn.BatchNorm1d(hidden_dim) if hidden_norm == "batch" else group_norm(hidden_dim)]
        layers += [nn.Linear(in_dim, hidden_dim), *norm, nn.ReLU(inplace=True)]
        in_dim = hidden_dim
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)
