"""Dataset loading: search order and layouts, download, real Fashion-MNIST (the file formats on tiny
files: test_formats.py)."""

import pickle
import re

import numpy as np
import pytest
import torch

from simulator.data import datasets
from simulator.data.datasets import DATASETS, DatasetUnavailable, ImageDataset, image_shape, load_dataset
from simulator.data.synthetic import make_synthetic

# every test: only files written by the test are found (tests/simulator/data/conftest.py)
pytestmark = pytest.mark.usefixtures("no_installed_data")


def assert_fashion_equal(dataset: ImageDataset, arrays: dict[str, np.ndarray]) -> None:
    assert dataset.name == "fashion_mnist" and dataset.num_classes == 10
    for split in ("train", "test"):
        x, y = getattr(dataset, f"{split}_x"), getattr(dataset, f"{split}_y")
        assert x.dtype == torch.uint8 and y.dtype == torch.int64
        np.testing.assert_array_equal(x.numpy(), arrays[f"{split}_x"][:, None])
        np.testing.assert_array_equal(y.numpy(), arrays[f"{split}_y"])


def test_fashion_mnist_reads_gzipped_idx_files(tmp_path, write_fashion):
    arrays = write_fashion(tmp_path / "root", ".gz", np.random.default_rng(0))
    dataset = load_dataset("fashion_mnist", root=str(tmp_path / "root"))
    assert_fashion_equal(dataset, arrays)
    assert (dataset.channels, dataset.image_size) == (1, 6)


def test_fashion_mnist_reads_uncompressed_files_in_torchvision_layout(tmp_path, write_fashion):
    arrays = write_fashion(tmp_path / "root" / "FashionMNIST" / "raw", "", np.random.default_rng(1))
    assert_fashion_equal(load_dataset("fashion_mnist", root=tmp_path / "root"), arrays)


def test_root_is_searched_before_system_copy_and_cache(tmp_path, write_fashion):
    system = write_fashion(datasets.SYSTEM_ROOT / "fashion-mnist", ".gz", np.random.default_rng(2))
    write_fashion(datasets.CACHE_ROOT / "fashion-mnist", ".gz", np.random.default_rng(3))
    assert_fashion_equal(load_dataset("fashion_mnist"), system)
    root = write_fashion(tmp_path / "root", ".gz", np.random.default_rng(4))
    assert_fashion_equal(load_dataset("fashion_mnist", root=tmp_path / "root"), root)


def test_cifar100_uses_fine_labels(tmp_path):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (5, 3, 32, 32), dtype=np.uint8)
    for name, rows in (("train", slice(0, 3)), ("test", slice(3, 5))):
        batch = {b"data": images[rows].reshape(-1, 3072), b"fine_labels": [97, 42, 3][: len(images[rows])],
                 b"coarse_labels": [1, 1, 1][: len(images[rows])]}
        (tmp_path / "cifar-100-python").mkdir(exist_ok=True)
        (tmp_path / "cifar-100-python" / name).write_bytes(pickle.dumps(batch))
    dataset = load_dataset("cifar100", root=tmp_path)
    assert dataset.train_y.tolist() == [97, 42, 3] and dataset.test_y.tolist() == [97, 42]
    np.testing.assert_array_equal(dataset.test_x.numpy(), images[3:])
    assert dataset.num_classes == 100
    assert image_shape("cifar100") == tuple(dataset.train_x.shape[1:]) == (3, 32, 32)


def test_missing_files_raise_dataset_unavailable_saying_where_and_how(tmp_path):
    (tmp_path / "mine").mkdir()
    with pytest.raises(DatasetUnavailable) as raised:
        load_dataset("fashion_mnist", root=tmp_path / "mine")
    message = str(raised.value)
    for expected in (str(tmp_path / "mine"), str(datasets.SYSTEM_ROOT / "fashion-mnist"),
                     str(datasets.CACHE_ROOT / "fashion-mnist" / "FashionMNIST" / "raw"),
                     "apt-get install dataset-fashion-mnist", "dataset.root", "dataset.download: true"):
        assert expected in message


def test_download_fetches_into_cache_then_loads(tmp_path, monkeypatch, write_fashion):
    fetched = []

    def fake_download(source, directory):
        fetched.append(directory)
        write_fashion(directory / "FashionMNIST" / "raw", ".gz", np.random.default_rng(5))

    monkeypatch.setattr(datasets, "_download", fake_download)
    dataset = load_dataset("fashion_mnist", download=True)
    assert fetched == [datasets.CACHE_ROOT / "fashion-mnist"]
    assert dataset.train_x.shape == (5, 1, 6, 6)
    load_dataset("fashion_mnist", download=True)
    assert len(fetched) == 1  # found in the cache the second time


@pytest.mark.parametrize("error, name", [
    (OSError("network unreachable"), "svhn"),
    (RuntimeError("File not found or corrupted."), "cifar10"),  # torchvision's checksum does not match
], ids=["offline", "failed-torchvision-check"])
def test_a_failed_download_raises_dataset_unavailable(monkeypatch, error, name):
    def failing(source, directory):
        raise error

    monkeypatch.setattr(datasets, "_download", failing)
    with pytest.raises(DatasetUnavailable, match=f"download into .* failed: {re.escape(str(error))}"):
        load_dataset(name, download=True)


def test_unknown_name_raises_value_error():
    with pytest.raises(ValueError, match="name must be one of fashion_mnist, .*, got 'mnist'"):
        load_dataset("mnist")
    with pytest.raises(ValueError, match="name must be one of fashion_mnist, .*, got 'mnist'"):
        image_shape("mnist")


@pytest.mark.parametrize("name", ["synthetic", "synthetic_cifar10"])
def test_image_shape_is_the_shape_of_the_loaded_images(name):
    dataset = load_dataset(name, seed=0)
    assert image_shape(name) == tuple(dataset.train_x.shape[1:]) == tuple(dataset.test_x.shape[1:])


def test_synthetic_is_available_under_its_name_with_seed():
    assert "synthetic" in DATASETS
    dataset = load_dataset("synthetic", seed=3)
    assert torch.equal(dataset.train_x, make_synthetic(seed=3).train_x)


def test_synthetic_cifar10_has_cifar10s_shape():
    dataset = load_dataset("synthetic_cifar10", seed=1)
    assert dataset.train_x.shape == (5000, 3, 32, 32) and dataset.test_x.shape == (1000, 3, 32, 32)
    assert dataset.num_classes == 10 and torch.bincount(dataset.train_y).tolist() == [500] * 10


def test_real_fashion_mnist(monkeypatch):
    monkeypatch.undo()  # search the real system location
    dataset = load_dataset("fashion_mnist")
    assert dataset.train_x.shape == (60000, 1, 28, 28) and dataset.test_x.shape == (10000, 1, 28, 28)
    assert dataset.train_x.dtype == torch.uint8 and dataset.train_y.dtype == torch.int64
    assert dataset.num_classes == 10 and (dataset.channels, dataset.image_size) == (1, 28)
    assert image_shape("fashion_mnist") == tuple(dataset.train_x.shape[1:])
    assert torch.bincount(dataset.train_y).tolist() == [6000] * 10
    assert torch.bincount(dataset.test_y).tolist() == [1000] * 10
    assert 70 < dataset.train_x.numpy().mean() < 75  # Fashion-MNIST's mean pixel is 72.94


def test_a_root_that_does_not_exist_is_an_error_not_the_system_copy(tmp_path, monkeypatch, write_fashion):
    """A mistyped ``dataset.root`` must not silently train on another copy of the data."""
    write_fashion(tmp_path / "system" / "fashion-mnist", ".gz", np.random.default_rng(6))
    monkeypatch.setattr(datasets, "SYSTEM_ROOT", tmp_path / "system")
    assert len(load_dataset("fashion_mnist").train_y) > 0  # the system copy is there
    with pytest.raises(DatasetUnavailable) as raised:
        load_dataset("fashion_mnist", root=tmp_path / "typo")
    message = str(raised.value)
    assert f"dataset.root {tmp_path / 'typo'} is not a directory" in message
    assert str(tmp_path / "system" / "fashion-mnist") in message


def test_train_subset_is_a_seeded_draw_of_the_train_split_only():
    config = {"name": "synthetic", "root": None, "download": False, "train_subset": 300}
    full = load_dataset("synthetic", seed=5)
    small = datasets.scenario_dataset(config, 5)
    assert len(small.train_y) == 300 and len(full.train_y) > 300
    # each kept image is a row of the full train split, in the split's order, with its label
    flat_full = full.train_x.reshape(len(full.train_x), -1)
    rows = [int(torch.nonzero((flat_full == image.reshape(-1)).all(1))[0]) for image in small.train_x[:20]]
    assert rows == sorted(rows) and torch.equal(full.train_y[rows], small.train_y[:20])
    assert torch.equal(small.test_x, full.test_x) and torch.equal(small.test_y, full.test_y)
    again = datasets.scenario_dataset(config, 5)
    assert torch.equal(again.train_x, small.train_x)
    other_seed = datasets.scenario_dataset(config, 6)
    assert not torch.equal(other_seed.train_y, small.train_y)
    assert datasets.scenario_dataset({**config, "train_subset": None}, 5).train_x.shape == full.train_x.shape


def test_every_layout_of_the_root_is_searched_before_the_system_copy(tmp_path, write_fashion):
    """The root's torchvision layout (FashionMNIST/raw) wins over a system copy in the plain layout."""
    write_fashion(datasets.SYSTEM_ROOT / "fashion-mnist", ".gz", np.random.default_rng(7))
    root = write_fashion(tmp_path / "root" / "FashionMNIST" / "raw", "", np.random.default_rng(8))
    assert_fashion_equal(load_dataset("fashion_mnist", root=tmp_path / "root"), root)


def test_a_plain_file_is_read_before_its_gzipped_copy(tmp_path, write_fashion):
    write_fashion(tmp_path / "root", ".gz", np.random.default_rng(9))
    plain = write_fashion(tmp_path / "root", "", np.random.default_rng(10))
    assert_fashion_equal(load_dataset("fashion_mnist", root=tmp_path / "root"), plain)


def test_a_train_subset_keeps_the_data_sets_name_classes_and_test_split(tmp_path):
    images = np.random.default_rng(11).integers(0, 256, (5, 3, 32, 32), dtype=np.uint8)
    (tmp_path / "cifar-100-python").mkdir()
    for name, rows, labels in (("train", slice(0, 3), [97, 42, 3]), ("test", slice(3, 5), [7, 8])):
        batch = {b"data": images[rows].reshape(-1, 3072), b"fine_labels": labels}
        (tmp_path / "cifar-100-python" / name).write_bytes(pickle.dumps(batch))
    config = {"name": "cifar100", "root": str(tmp_path), "download": False, "train_subset": 2}
    small = datasets.scenario_dataset(config, 0)
    assert (small.name, small.num_classes, len(small.train_y)) == ("cifar100", 100, 2)
    assert set(small.train_y.tolist()) < {97, 42, 3} and small.test_y.tolist() == [7, 8]


def test_a_train_subset_of_files_is_drawn_by_the_run_seed(tmp_path):
    """Files do not change with the seed (unlike the synthetic set), so another run seed draws another
    subset of the same images, and the same seed the same one."""
    images = np.random.default_rng(12).integers(0, 256, (22, 3, 32, 32), dtype=np.uint8)
    (tmp_path / "cifar-100-python").mkdir()
    for name, rows in (("train", slice(0, 20)), ("test", slice(20, 22))):
        batch = {b"data": images[rows].reshape(-1, 3072), b"fine_labels": list(range(len(images[rows])))}
        (tmp_path / "cifar-100-python" / name).write_bytes(pickle.dumps(batch))
    config = {"name": "cifar100", "root": str(tmp_path), "download": False, "train_subset": 10}
    drawn = {seed: datasets.scenario_dataset(config, seed).train_y.tolist() for seed in (0, 1)}
    assert drawn[0] == datasets.scenario_dataset(config, 0).train_y.tolist() and drawn[0] != drawn[1]
    for seed, labels in drawn.items():  # each label is its image's row: images and labels stay together
        small = datasets.scenario_dataset(config, seed)
        assert torch.equal(small.train_x, torch.from_numpy(images[labels]))
