"""The datasets' file formats (``simulator.data.formats``) on tiny files written here: idx (Fashion-MNIST),
CIFAR's pickled batches, SVHN's .mat files; through the loader and directly."""

import gzip
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.io import savemat

from simulator.data import formats
from simulator.data.datasets import DatasetUnavailable, load_dataset

# every test: only files written by the test are found (tests/simulator/data/conftest.py)
pytestmark = pytest.mark.usefixtures("no_installed_data")


@pytest.mark.parametrize("corrupt, message", [
    (lambda data: b"\x00\x00\x0d" + data[3:], r"not an idx file of unsigned bytes \(bad magic number\)"),
    (lambda data: data[:-1], r"idx header says shape \(.*\) but the file holds"),
])
def test_malformed_idx_file_raises(tmp_path, corrupt, message, write_fashion):
    """The loader says which file is wrong, as the data set's one error (DatasetUnavailable)."""
    write_fashion(tmp_path, "", np.random.default_rng(0))
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(corrupt(path.read_bytes()))
    with pytest.raises(DatasetUnavailable, match=f"^fashion_mnist: {re.escape(str(path))}: {message}"):
        load_dataset("fashion_mnist", root=tmp_path)


def test_image_and_label_counts_must_match(tmp_path, write_fashion, write_idx):
    write_fashion(tmp_path, "", np.random.default_rng(0))
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.zeros(2, np.uint8))
    with pytest.raises(DatasetUnavailable, match="t10k-images-idx3-ubyte: 3 images but 2 labels; replace the file"):
        load_dataset("fashion_mnist", root=tmp_path)


def write_cifar_batch(path: Path, images: np.ndarray, labels: np.ndarray, label_key: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    batch = {b"data": images.reshape(len(images), -1), label_key: labels.tolist(), b"batch_label": b"x"}
    path.write_bytes(pickle.dumps(batch))


def test_cifar10_concatenates_batches_in_order_and_keeps_channel_planes(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (12, 3, 32, 32), dtype=np.uint8)
    labels = rng.integers(0, 10, 12)
    directory = tmp_path / "cifar-10-batches-py"
    for i in range(5):
        write_cifar_batch(directory / f"data_batch_{i + 1}", images[2 * i:2 * i + 2], labels[2 * i:2 * i + 2],
                          b"labels")
    write_cifar_batch(directory / "test_batch", images[10:], labels[10:], b"labels")
    dataset = load_dataset("cifar10", root=tmp_path)
    np.testing.assert_array_equal(dataset.train_x.numpy(), images[:10])
    np.testing.assert_array_equal(dataset.train_y.numpy(), labels[:10])
    np.testing.assert_array_equal(dataset.test_x.numpy(), images[10:])
    assert dataset.train_y.dtype == torch.int64 and dataset.num_classes == 10


def test_svhn_transposes_images_and_maps_label_10_to_0(tmp_path):
    rng = np.random.default_rng(2)
    written = {}
    for split, count in (("train", 4), ("test", 2)):
        written[split] = rng.integers(0, 256, (32, 32, 3, count), dtype=np.uint8)  # [row, column, channel, sample]
        savemat(tmp_path / f"{split}_32x32.mat", {"X": written[split], "y": np.array([[10], [1], [9], [10]][:count])})
    dataset = load_dataset("svhn", root=tmp_path)
    assert dataset.train_x.shape == (4, 3, 32, 32) and dataset.test_x.shape == (2, 3, 32, 32)
    assert dataset.train_x[3, 2, 5, 7] == written["train"][5, 7, 2, 3]
    np.testing.assert_array_equal(dataset.test_x.numpy(), written["test"].transpose(3, 2, 0, 1))
    assert dataset.train_y.tolist() == [0, 1, 9, 0] and dataset.test_y.tolist() == [0, 1]


@pytest.mark.parametrize("name", ["wide-idx1-ubyte", "wide-idx1-ubyte.gz"])
def test_read_idx_gives_the_headers_shape_with_dimensions_past_255(tmp_path, write_idx, name):
    """Each dimension is a big-endian 4-byte count (the loader's tiny files have only one-byte ones)."""
    array = np.random.default_rng(0).integers(0, 256, (2, 300, 1), dtype=np.uint8)
    write_idx(tmp_path / name, array)
    read = formats.read_idx(tmp_path / name)
    assert read.dtype == np.uint8
    np.testing.assert_array_equal(read, array)


@pytest.mark.parametrize("content, message", [
    (b"\x00\x00", "not an idx file of unsigned bytes (bad magic number)"),
    (b"\x01\x00\x08\x01\x00\x00\x00\x02ab", "not an idx file of unsigned bytes (bad magic number)"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x02abc", "idx header says shape (2,) but the file holds 3 values"),
    (b"\x00\x00\x08\x03\x00\x00\x00\x02", "idx header cut short (3 dimensions need 16 bytes, the file holds 8)"),
], ids=["shorter-than-a-magic-number", "first-byte-not-0", "extra-value", "header-cut-short"])
def test_read_idx_refuses_a_bad_magic_number_or_extra_values_naming_the_file(tmp_path, content, message):
    path = tmp_path / "labels-idx1-ubyte"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(f"{path}: {message}")):
        formats.read_idx(path)


@pytest.mark.parametrize("damage, reason", [
    (lambda blob: blob[:len(blob) // 2], "EOFError: Compressed file ended before the end-of-stream marker was reached"),
    (lambda blob: b"\x1f\x8b\x09" + blob[3:], "BadGzipFile: Unknown compression method"),
    (lambda blob: blob[:12] + bytes(b ^ 0xFF for b in blob[12:40]) + blob[40:], "error: Error -3 while decompressing"),
], ids=["cut-short", "bad-header", "damaged-stream"])
def test_a_damaged_gzip_file_is_refused_naming_it(tmp_path, write_fashion, damage, reason):
    """A damaged ``.gz`` was an OSError or EOFError escaping as a traceback (BadGzipFile is an OSError,
    which the readers pass on as a file that cannot be opened)."""
    import gzip
    write_fashion(tmp_path, "", np.random.default_rng(0))
    plain = tmp_path / "train-images-idx3-ubyte"
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(damage(gzip.compress(plain.read_bytes(), mtime=0)))
    plain.unlink()
    with pytest.raises(DatasetUnavailable) as err:
        load_dataset("fashion_mnist", root=tmp_path)
    assert str(err.value).startswith(f"fashion_mnist: {path}: cannot be decompressed ({reason}"), str(err.value)
    assert str(err.value).endswith("; expected a gzip file; replace the file with the published one")
    batch = tmp_path / "data_batch_1.gz"  # the CIFAR and SVHN readers too
    batch.write_bytes(b"\x1f\x8b\x09garbage")
    with pytest.raises(ValueError, match=re.escape(f"{batch}: cannot be decompressed (BadGzipFile")):
        formats.cifar_arrays({"data_batch_1": batch, "test_batch": batch}, ("data_batch_1",), "test_batch", b"labels")
    with pytest.raises(ValueError, match=re.escape(f"{batch}: cannot be decompressed (BadGzipFile")):
        formats.svhn_arrays({"train_32x32.mat": batch, "test_32x32.mat": batch})


def test_cifar_arrays_reads_gzipped_batches_in_the_order_of_train_names_with_the_given_label_key(tmp_path):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (5, 3, 32, 32), dtype=np.uint8)
    files = {}
    for name, rows, suffix in (("first", slice(0, 2), ".gz"), ("second", slice(2, 4), ""), ("test", slice(4, 5), "")):
        batch = {b"data": images[rows].reshape(-1, 3072), b"fine_labels": list(range(rows.start, rows.stop)),
                 b"coarse_labels": [9] * (rows.stop - rows.start)}
        files[name] = tmp_path / f"{name}{suffix}"
        with (gzip.open if suffix else open)(files[name], "wb") as f:
            f.write(pickle.dumps(batch))
    train_x, train_y, test_x, test_y = formats.cifar_arrays(files, ("second", "first"), "test", b"fine_labels")
    np.testing.assert_array_equal(train_x, np.concatenate([images[2:4], images[:2]]))
    assert train_y.dtype == np.int64 and train_y.tolist() == [2, 3, 0, 1] and test_y.tolist() == [4]
    np.testing.assert_array_equal(test_x, images[4:])


def test_a_cifar_batch_with_more_labels_than_images_is_refused_naming_it(tmp_path):
    images = np.zeros((2, 3, 32, 32), np.uint8)
    write_cifar_batch(tmp_path / "data_batch_1", images, np.arange(2), b"labels")
    write_cifar_batch(tmp_path / "test_batch", images, np.arange(3), b"labels")
    files = {"data_batch_1": tmp_path / "data_batch_1", "test_batch": tmp_path / "test_batch"}
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'test_batch'}: 2 images but 3 labels")):
        formats.cifar_arrays(files, ("data_batch_1",), "test_batch", b"labels")


@pytest.mark.parametrize("content, message", [
    (b"not a pickle", "cannot be unpickled (UnpicklingError: "),
    (pickle.dumps([1, 2]), "expected a python-pickle CIFAR batch (a dict with b'data' and b'labels'), got list"),
    (pickle.dumps({b"data": np.zeros((1, 3072), np.uint8)}),
     "expected a python-pickle CIFAR batch (a dict with b'data' and b'labels'), got dict with keys [b'data']"),
    (pickle.dumps({b"data": np.zeros((2, 3000), np.uint8), b"labels": [0, 1]}),
     "b'data' has shape (2, 3000); expected rows of 3072 bytes (3 x 32 x 32)"),
    (pickle.dumps({b"labels": [0]}),
     "expected a python-pickle CIFAR batch (a dict with b'data' and b'labels'), got dict with keys [b'labels']"),
    (pickle.dumps({b"data": np.zeros(3072, np.uint8), b"labels": [0]}),
     "b'data' has shape (3072,); expected rows of 3072 bytes (3 x 32 x 32)"),
], ids=["not-a-pickle", "not-a-dict", "no-labels", "rows-not-3072", "no-data", "data-not-rows"])
def test_a_damaged_cifar_batch_is_refused_naming_it(tmp_path, content, message):
    path = tmp_path / "test_batch"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(f"{path}: {message}")):
        formats.cifar_arrays({"test_batch": path}, (), "test_batch", b"labels")


def test_a_damaged_svhn_file_is_refused_naming_it(tmp_path):
    garbage, wrong = tmp_path / "train_32x32.mat", tmp_path / "test_32x32.mat"
    garbage.write_bytes(b"not a MATLAB file at all")
    savemat(wrong, {"images": np.zeros((2, 2))})
    with pytest.raises(ValueError, match=re.escape(f"{garbage}: cannot be read as a MATLAB file (")):
        formats.svhn_arrays({"train_32x32.mat": garbage, "test_32x32.mat": wrong})
    with pytest.raises(ValueError, match=re.escape(f"{wrong}: expected the SVHN variables X [32, 32, 3, N] and y")):
        formats.svhn_arrays({"train_32x32.mat": wrong, "test_32x32.mat": wrong})
    flat = tmp_path / "flat_32x32.mat"
    savemat(flat, {"X": np.zeros((2, 2), np.uint8), "y": np.array([[1], [2]])})
    with pytest.raises(ValueError, match=re.escape(f"{flat}: expected the SVHN variables X [32, 32, 3, N] and y")):
        formats.svhn_arrays({"train_32x32.mat": flat, "test_32x32.mat": flat})


def test_read_idx_reads_an_empty_file_whose_header_is_all_it_holds(tmp_path):
    path = tmp_path / "labels-idx1-ubyte"
    path.write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x00")  # one dimension of size 0, no values
    read = formats.read_idx(path)
    assert read.dtype == np.uint8 and read.shape == (0,)


def test_a_file_that_cannot_be_opened_is_an_os_error_not_a_damaged_file(tmp_path):
    """A missing or unreadable file is ``OSError`` (the file is not wrong, it is not there)."""
    with pytest.raises(FileNotFoundError):
        formats.cifar_arrays({"test_batch": tmp_path / "absent"}, (), "test_batch", b"labels")
    with pytest.raises(FileNotFoundError):
        formats.svhn_arrays({"train_32x32.mat": tmp_path / "absent.mat", "test_32x32.mat": tmp_path / "absent.mat"})


@pytest.mark.parametrize("name, array, message", [
    ("train-images-idx3-ubyte", np.zeros((5, 36), np.uint8), r"idx shape \(5, 36\); expected square images"),
    ("train-images-idx3-ubyte", np.zeros((5, 6, 5), np.uint8), r"idx shape \(5, 6, 5\); expected square images"),
    ("t10k-labels-idx1-ubyte", np.zeros((3, 1), np.uint8), r"labels have shape \(3, 1\) of uint8; expected one"),
])
def test_an_idx_file_of_the_wrong_shape_is_refused_naming_it(tmp_path, write_fashion, write_idx, name, array, message):
    """Not ImageDataset's complaint about a tensor (a ValueError naming no file): the loader's one line."""
    write_fashion(tmp_path, "", np.random.default_rng(0))
    write_idx(tmp_path / name, array)
    with pytest.raises(DatasetUnavailable, match=f"^fashion_mnist: {re.escape(str(tmp_path / name))}: {message}"):
        load_dataset("fashion_mnist", root=tmp_path)


def test_labels_outside_the_data_sets_classes_are_refused(tmp_path, write_fashion, write_idx):
    """A label 10 in Fashion-MNIST's files would be an eleventh class no model head has."""
    write_fashion(tmp_path, "", np.random.default_rng(0))
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([0, 9, 10], np.uint8))
    with pytest.raises(DatasetUnavailable, match=f"^fashion_mnist: the test labels in {re.escape(str(tmp_path))} "
                                                 r"must be between 0 and 9, got 0 to 10; replace the files"):
        load_dataset("fashion_mnist", root=tmp_path)


def test_a_cifar_batch_whose_labels_are_not_integers_is_refused_naming_it(tmp_path):
    directory = tmp_path / "cifar-10-batches-py"
    images = np.zeros((2, 3, 32, 32), np.uint8)
    for i in range(5):
        write_cifar_batch(directory / f"data_batch_{i + 1}", images, np.array([1, 2]), b"labels")
    write_cifar_batch(directory / "test_batch", images, np.array([0.5, 2.0]), b"labels")
    with pytest.raises(DatasetUnavailable, match=f"^cifar10: {re.escape(str(directory / 'test_batch'))}: labels have "
                                                 r"shape \(2,\) of float64; expected one integer an image"):
        load_dataset("cifar10", root=tmp_path)
