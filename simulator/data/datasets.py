"""Image datasets as uint8 tensors, loaded from local files (or downloaded on request)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from simulator.data import formats
from simulator.data.image_dataset import ImageDataset

SYSTEM_ROOT = Path("/usr/share/datasets")
CACHE_ROOT = Path("~/.cache/fedssl").expanduser()

DATASETS = ("fashion_mnist", "cifar10", "cifar100", "svhn", "synthetic", "synthetic_cifar10")
# synthetic data sets by name: make_synthetic arguments (synthetic_cifar10 has CIFAR-10's shape, for
# machines without data files, e.g. a GPU box: 3 x 32 x 32, 10 classes, 5,000 + 1,000 images)
SYNTHETIC_SHAPES = {"synthetic": {"image_size": 28, "channels": 1},
                    "synthetic_cifar10": {"image_size": 32, "channels": 3, "train_per_class": 500,
                                          "test_per_class": 100}}


class DatasetUnavailable(Exception):
    """The dataset's files were not found, could not be downloaded, or are not what their names say;
    the message says where we looked, or which file is wrong."""


@dataclass(frozen=True)
class _Source:
    """Where a file-based dataset lives on disk and how to parse and download it."""

    dirname: str  # directory under SYSTEM_ROOT and CACHE_ROOT
    layouts: tuple[str, ...]  # subdirectories of a search directory that may hold the files
    files: tuple[str, ...]  # each may also be present gzip-compressed, with a .gz suffix
    parse: Callable[[dict[str, Path]], formats.Arrays]
    torchvision_class: str
    torchvision_variants: tuple[dict, ...]  # constructor arguments, one download per entry
    num_classes: int
    image_shape: tuple[int, int, int]  # [C, H, W] of its images
    install_hint: str = ""


_CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
_SOURCES = {
    "fashion_mnist": _Source(
        dirname="fashion-mnist", layouts=("", "FashionMNIST/raw"),
        files=("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
        parse=formats.fashion_mnist_arrays, torchvision_class="FashionMNIST", torchvision_variants=({},),
        num_classes=10, image_shape=(1, 28, 28),
        install_hint="install them with `apt-get install dataset-fashion-mnist`, "),
    "cifar10": _Source(
        dirname="cifar10", layouts=("cifar-10-batches-py",), files=_CIFAR10_TRAIN + ("test_batch",),
        parse=partial(formats.cifar_arrays, train_names=_CIFAR10_TRAIN, test_name="test_batch", label_key=b"labels"),
        torchvision_class="CIFAR10", torchvision_variants=({},), num_classes=10, image_shape=(3, 32, 32)),
    "cifar100": _Source(
        dirname="cifar100", layouts=("cifar-100-python",), files=("train", "test"),
        parse=partial(formats.cifar_arrays, train_names=("train",), test_name="test", label_key=b"fine_labels"),
        torchvision_class="CIFAR100", torchvision_variants=({},), num_classes=100,
        image_shape=(3, 32, 32)),
    "svhn": _Source(
        dirname="svhn", layouts=("",), files=("train_32x32.mat", "test_32x32.mat"), parse=formats.svhn_arrays,
        torchvision_class="SVHN", torchvision_variants=({"split": "train"}, {"split": "test"}), num_classes=10,
        image_shape=(3, 32, 32)),
}


def _search_dirs(source: _Source, root: str | Path | None) -> list[Path]:
    """Directories that may hold the files, in search order: root, the system copy, the download cache."""
    bases = [Path(root).expanduser()] if root is not None else []
    bases += [SYSTEM_ROOT / source.dirname, CACHE_ROOT / source.dirname]
    return [base / layout for base in bases for layout in source.layouts]


def _locate(source: _Source, directory: Path) -> dict[str, Path] | None:
    """Map each of the source's file names to its path in ``directory`` (plain or .gz), or None if any is missing."""
    found = {}
    for name in source.files:
        candidates = [p for p in (directory / name, directory / f"{name}.gz") if p.is_file()]
        if not candidates:
            return None
        found[name] = candidates[0]
    return found


def _download(source: _Source, directory: Path) -> None:
    """Download the dataset into ``directory`` with torchvision."""
    import torchvision

    dataset_class = getattr(torchvision.datasets, source.torchvision_class)
    for variant in source.torchvision_variants:
        dataset_class(str(directory), download=True, **variant)


def _find_files(name: str, root: str | Path | None, download: bool) -> tuple[Path, dict[str, Path]]:
    """The directory holding data set ``name``'s files and each file's path there (first in search
    order; downloaded into the cache first when ``download`` and none holds them)."""
    source = _SOURCES[name]
    directories = _search_dirs(source, root)
    if root is not None and not Path(root).expanduser().is_dir():
        raise DatasetUnavailable(
            f"{name}: dataset.root {root} is not a directory; give the directory that holds the files, or leave "
            f"dataset.root unset to look in {SYSTEM_ROOT / source.dirname} and {CACHE_ROOT / source.dirname}")
    if download and not any(_locate(source, d) for d in directories):
        try:
            _download(source, CACHE_ROOT / source.dirname)
        except (OSError, RuntimeError) as error:
            raise DatasetUnavailable(f"{name}: download into {CACHE_ROOT / source.dirname} failed: {error}") from error
    for directory in directories:
        files = _locate(source, directory)
        if files is not None:
            return directory, files
    raise DatasetUnavailable(
        f"{name}: files {', '.join(source.files)} (optionally .gz) not found in any of "
        f"{', '.join(map(str, directories))}; {source.install_hint}put them in one of those directories, "
        f"set dataset.root, or set dataset.download: true")


def _load_files(name: str, root: str | Path | None, download: bool) -> ImageDataset:
    """Find (or download) a file-based dataset and parse it."""
    source = _SOURCES[name]
    directory, files = _find_files(name, root, download)
    try:
        arrays = [torch.from_numpy(a) for a in source.parse(files)]
    except ValueError as error:  # a damaged or wrong file: the parser names it
        raise DatasetUnavailable(f"{name}: {error}; replace the file with the published one") from None
    for split, labels in (("train", arrays[1]), ("test", arrays[3])):
        if len(labels) and not 0 <= int(labels.min()) <= int(labels.max()) < source.num_classes:
            raise DatasetUnavailable(
                f"{name}: the {split} labels in {directory} must be between 0 and {source.num_classes - 1}, "
                f"got {int(labels.min())} to {int(labels.max())}; replace the files with the published ones")
    return ImageDataset(name, *arrays, num_classes=source.num_classes)


def files_digest(name: str, root: str | Path | None = None, download: bool = False) -> str | None:
    """SHA-256 over the names and bytes of the files :func:`load_dataset` reads for data set ``name``
    (None for a synthetic set, which the seed determines): what a cached partition was cut from."""
    if name in SYNTHETIC_SHAPES:
        return None
    if name not in _SOURCES:
        raise ValueError(f"name must be one of {', '.join(DATASETS)}, got {name!r}")
    digest = hashlib.sha256()
    for path in sorted(_find_files(name, root, download)[1].values()):
        content = path.read_bytes()
        digest.update(f"{path.name}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


def load_dataset(name: str, root: str | Path | None = None, download: bool = False, seed: int = 0) -> ImageDataset:
    """Load dataset ``name`` (one of DATASETS); ``seed`` only affects the synthetic data sets.

    Files are searched in ``root`` (if given), then ``SYSTEM_ROOT/<dir>``, then ``CACHE_ROOT/<dir>``;
    with ``download=True`` missing data is fetched with torchvision into the cache directory.
    """
    if name in SYNTHETIC_SHAPES:
        from simulator.data.synthetic import make_synthetic

        return make_synthetic(seed=seed, **SYNTHETIC_SHAPES[name])
    if name not in _SOURCES:
        raise ValueError(f"name must be one of {', '.join(DATASETS)}, got {name!r}")
    return _load_files(name, root, download)


def image_shape(name: str) -> tuple[int, int, int]:
    """The shape [C, H, W] of data set ``name``'s images (one of DATASETS), without loading it."""
    if name in SYNTHETIC_SHAPES:
        side = SYNTHETIC_SHAPES[name]["image_size"]
        return SYNTHETIC_SHAPES[name]["channels"], side, side
    if name not in _SOURCES:
        raise ValueError(f"name must be one of {', '.join(DATASETS)}, got {name!r}")
    return _SOURCES[name].image_shape


TRAIN_SUBSET_STREAM = 0x74726169  # mixed into the run seed for ``dataset.train_subset``'s draw


def scenario_dataset(dataset_cfg: dict, seed: int) -> ImageDataset:
    """The data set of a scenario's ``dataset`` section: :func:`load_dataset`, its train split cut to
    a seeded random ``train_subset`` images when that is set (a small pilot federation: every
    partition, evaluation bank and RAD then refers to the subset). The draw depends only on the
    run seed."""
    data = load_dataset(dataset_cfg["name"], dataset_cfg["root"], dataset_cfg["download"], seed=seed)
    size = dataset_cfg.get("train_subset")
    if size is None or size >= len(data.train_y):
        return data
    train_x, train_y = seeded_subset(data.train_x, data.train_y, size, np.random.SeedSequence([seed, TRAIN_SUBSET_STREAM]))
    return ImageDataset(data.name, train_x, train_y, data.test_x, data.test_y, data.num_classes)


def seeded_subset(x: torch.Tensor, y: torch.Tensor, size: int | None, seed: int | np.random.SeedSequence
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded random subset of ``size`` rows (all rows when ``size`` is None or too large)."""
    if size is None or size >= len(y):
        return x, y
    rows = torch.from_numpy(np.sort(np.random.default_rng(seed).permutation(len(y))[:size]))
    return x[rows], y[rows]
