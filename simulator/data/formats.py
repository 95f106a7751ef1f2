"""Parsers for the on-disk formats of the supported image datasets.

Every parser takes the located files (name -> path; a path may end in ``.gz``)
and returns ``(train_x, train_y, test_x, test_y)`` as numpy arrays: uint8
images ``[N, C, H, W]`` and int64 labels ``[N]``. A file that is not what its name says raises
``ValueError`` naming the file (a damaged gzip file too; ``OSError`` where it cannot be read at all).
"""

from __future__ import annotations

import gzip
import zlib
import pickle
from pathlib import Path
from typing import IO

import numpy as np

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]

IDX_UINT8 = 0x08


def open_maybe_gzip(path: Path) -> IO[bytes]:
    """Open ``path`` for binary reading, decompressing it if it ends in ``.gz``."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


# A damaged gzip file: a bad header (BadGzipFile, an OSError though the file was read), a stream cut
# short (EOFError), damaged compressed data (zlib.error).
DAMAGED_GZIP = (gzip.BadGzipFile, EOFError, zlib.error)


def damaged_gzip(path: Path, err: BaseException) -> ValueError:
    return ValueError(f"{path}: cannot be decompressed ({type(err).__name__}: {err}); expected a gzip file")


def read_idx(path: Path) -> np.ndarray:
    """Read an idx file of unsigned bytes (the MNIST format) into an array of its stated shape."""
    try:
        with open_maybe_gzip(path) as f:
            data = bytearray(f.read())
    except DAMAGED_GZIP as err:
        raise damaged_gzip(path, err) from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != IDX_UINT8:
        raise ValueError(f"{path}: not an idx file of unsigned bytes (bad magic number)")
    ndim = data[3]
    if len(data) < 4 + 4 * ndim:
        raise ValueError(f"{path}: idx header cut short ({ndim} dimensions need {4 + 4 * ndim} bytes, "
                         f"the file holds {len(data)})")
    shape = tuple(int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4))
    offset = 4 + 4 * ndim
    if len(data) - offset != int(np.prod(shape)):
        raise ValueError(f"{path}: idx header says shape {shape} but the file holds {len(data) - offset} values")
    return np.frombuffer(data, np.uint8, offset=offset).reshape(shape)


def _checked(path: Path, images: np.ndarray, labels: np.ndarray,
             labels_path: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Return images and int64 labels after checking that they describe the same number of samples
    (labels: one integer each; ``labels_path``: their own file, where not ``path``)."""
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{labels_path or path}: labels have shape {labels.shape} of {labels.dtype}; expected one "
                         f"integer an image")
    if len(images) != len(labels):
        raise ValueError(f"{path}: {len(images)} images but {len(labels)} labels")
    return images, labels.astype(np.int64)


def fashion_mnist_arrays(files: dict[str, Path]) -> Arrays:
    """Parse the four Fashion-MNIST idx files (28x28 greyscale)."""
    splits = []
    for prefix in ("train", "t10k"):
        images_path = files[f"{prefix}-images-idx3-ubyte"]
        images = read_idx(images_path)
        if images.ndim != 3 or images.shape[1] != images.shape[2]:
            raise ValueError(f"{images_path}: idx shape {images.shape}; expected square images [N, rows, rows]")
        labels_path = files[f"{prefix}-labels-idx1-ubyte"]
        splits += _checked(images_path, images[:, None], read_idx(labels_path), labels_path)
    return tuple(splits)


def _cifar_batch(path: Path, label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Parse one python-pickle CIFAR batch: rows of 3072 bytes (R, G, B planes of 32x32)."""
    expected = f"expected a python-pickle CIFAR batch (a dict with b'data' and {label_key!r})"
    try:
        with open_maybe_gzip(path) as f:
            batch = pickle.load(f, encoding="bytes")
    except DAMAGED_GZIP as err:
        raise damaged_gzip(path, err) from None
    except OSError:
        raise
    except Exception as err:  # a damaged pickle fails in many ways, all of them this one
        raise ValueError(f"{path}: cannot be unpickled ({type(err).__name__}: {err}); {expected}") from None
    if not isinstance(batch, dict) or b"data" not in batch or label_key not in batch:
        raise ValueError(f"{path}: {expected}, got {type(batch).__name__}"
                         f"{' with keys ' + str(sorted(batch)) if isinstance(batch, dict) else ''}")
    data = np.asarray(batch[b"data"], dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"{path}: b'data' has shape {data.shape}; expected rows of 3072 bytes (3 x 32 x 32)")
    return _checked(path, data.reshape(-1, 3, 32, 32), np.asarray(batch[label_key]))


def cifar_arrays(files: dict[str, Path], train_names: tuple[str, ...], test_name: str, label_key: bytes) -> Arrays:
    """Parse CIFAR-10 (``label_key=b"labels"``) or CIFAR-100 (``b"fine_labels"``) batches."""
    train = [_cifar_batch(files[name], label_key) for name in train_names]
    test_x, test_y = _cifar_batch(files[test_name], label_key)
    return np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train]), test_x, test_y


def _svhn_split(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Parse one SVHN ``*_32x32.mat`` file: X is [32, 32, 3, N], y is [N, 1] with 10 meaning digit 0."""
    from scipy.io import loadmat

    try:
        with open_maybe_gzip(path) as f:
            mat = loadmat(f)
    except DAMAGED_GZIP as err:
        raise damaged_gzip(path, err) from None
    except OSError:
        raise
    except Exception as err:
        raise ValueError(f"{path}: cannot be read as a MATLAB file ({type(err).__name__}: {err})") from None
    if "X" not in mat or "y" not in mat or mat["X"].ndim != 4:
        raise ValueError(f"{path}: expected the SVHN variables X [32, 32, 3, N] and y [N, 1]")
    images = np.ascontiguousarray(mat["X"].transpose(3, 2, 0, 1), dtype=np.uint8)
    return _checked(path, images, mat["y"].reshape(-1) % 10)


def svhn_arrays(files: dict[str, Path]) -> Arrays:
    """Parse the SVHN cropped-digits train and test files."""
    return _svhn_split(files["train_32x32.mat"]) + _svhn_split(files["test_32x32.mat"])
