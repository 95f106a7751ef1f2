"""Partitioned datasets on disk: one Arrow IPC file per client, so a worker reads only its clients.

Layout of a partition directory::

    meta.json            {"num_clients", "sizes", "channels", "image_size", "num_classes"}
    client_000000.arrow  columns image: fixed_size_binary(C*H*W) (uint8 pixels), label: int16
    ...
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F

from simulator.data.datasets import files_digest, scenario_dataset
from simulator.data.image_dataset import ImageDataset
from simulator.data.partition import Partition, build_partition

META_FILE = "meta.json"
ROTATION_CHUNK = 4096  # images rotated per grid_sample call, to bound memory


def client_file(cid: int) -> str:
    """File name of client ``cid``'s data."""
    return f"client_{cid:06d}.arrow"


def rotate(images: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate uint8 images [N, C, H, W] counter-clockwise by per-image ``angles`` in degrees.

    Bilinear with zero fill, equal to ``torchvision.transforms.functional.rotate`` with bilinear interpolation.
    """
    rotated = []
    for image_chunk, angle_chunk in zip(images.split(ROTATION_CHUNK), angles.split(ROTATION_CHUNK)):
        radians = torch.deg2rad(angle_chunk.to(torch.float32))
        cos, sin, zero = radians.cos(), radians.sin(), torch.zeros_like(radians)
        # affine_grid maps output to input coordinates (x right, y down), so this is the inverse rotation.
        theta = torch.stack([torch.stack([cos, -sin, zero], 1), torch.stack([sin, cos, zero], 1)], 1)
        grid = F.affine_grid(theta, list(image_chunk.shape), align_corners=False)
        sampled = F.grid_sample(image_chunk.to(torch.float32), grid, mode="bilinear", align_corners=False)
        rotated.append(sampled.round_().clamp_(0, 255).to(torch.uint8))
    return torch.cat(rotated)


def _write_client(path: Path, images: torch.Tensor, labels: torch.Tensor) -> None:
    """Write one client's images and labels as an Arrow IPC file with a single record batch."""
    pixels = np.ascontiguousarray(images.numpy()).reshape(len(images), -1)
    image_column = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(pixels.shape[1]), len(pixels), [None, pa.py_buffer(pixels)])
    batch = pa.record_batch([image_column, pa.array(labels.numpy().astype(np.int16))], names=["image", "label"])
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)


def _write_contents(dataset: ImageDataset, partition: Partition, directory: Path) -> None:
    """Write every client's file into ``directory``, then meta.json."""
    for cid, indices in enumerate(partition.indices):
        index = torch.from_numpy(np.asarray(indices, dtype=np.int64))
        images = dataset.train_x[index]
        if partition.rotations is not None:
            images = rotate(images, torch.from_numpy(np.asarray(partition.rotations[cid])))
        _write_client(directory / client_file(cid), images, dataset.train_y[index])
    meta = {"num_clients": len(partition.indices), "sizes": partition.sizes().tolist(),
            "channels": dataset.channels, "image_size": dataset.image_size, "num_classes": dataset.num_classes,
            "heterogeneity": partition.heterogeneity(dataset.train_y.numpy())}
    (directory / META_FILE).write_text(json.dumps(meta))


def write_partition(dataset: ImageDataset, partition: Partition, directory: Path) -> None:
    """Write the clients' training data (rotated if the partition has angles) to ``directory``, atomically.

    The files go into a temporary sibling directory that is renamed into place when complete, so
    ``directory`` either does not exist or is complete. An existing complete directory is left as is.
    """
    directory = Path(directory)
    if (directory / META_FILE).is_file():
        return
    if dataset.num_classes > np.iinfo(np.int16).max + 1:
        raise ValueError(f"dataset.num_classes must fit the int16 label column, got {dataset.num_classes}")
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.partial-", dir=directory.parent))
    try:
        _write_contents(dataset, partition, staging)
        try:
            os.rename(staging, directory)
        except OSError:
            if not (directory / META_FILE).is_file():  # not a concurrent writer that finished first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class PartitionReader:
    """Reads single clients of a partition directory written by :func:`write_partition`."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        meta_path = self.directory / META_FILE
        if not meta_path.is_file():
            raise ValueError(f"directory must hold a partition written by write_partition, {meta_path} is missing")
        meta = json.loads(meta_path.read_text())
        self.num_clients: int = meta["num_clients"]
        self.sizes = np.asarray(meta["sizes"], dtype=np.int64)
        self.channels: int = meta["channels"]
        self.image_size: int = meta["image_size"]
        self.num_classes: int = meta["num_classes"]
        # Partition.heterogeneity; None for a partition written before it was recorded (format 1)
        self.heterogeneity: dict[str, float] | None = meta.get("heterogeneity")

    def client(self, cid: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``cid``'s images (uint8 [n, C, H, W]) and labels (int64 [n]).

        The file is memory-mapped and viewed without copies; the returned tensors are one copy of
        those views, so they own writable memory (a view of the read-only map would crash on writes).
        """
        if not 0 <= cid < self.num_clients:
            raise ValueError(f"cid must be between 0 and {self.num_clients - 1}, got {cid}")
        batch = pa.ipc.open_file(pa.memory_map(str(self.directory / client_file(cid)))).get_batch(0)
        image_column, label_column = batch.column("image"), batch.column("label")
        width = image_column.type.byte_width
        pixels = np.frombuffer(image_column.buffers()[1], np.uint8, count=len(batch) * width,
                               offset=image_column.offset * width)
        images = pixels.reshape(len(batch), self.channels, self.image_size, self.image_size)
        labels = label_column.to_numpy(zero_copy_only=True)
        return torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64))


def cached_partition_dir(cache_root: Path, key: dict) -> Path:
    """Directory under ``cache_root`` named by a hash of ``key`` (JSON-serialisable; key order does not matter)."""
    try:
        canonical = json.dumps(key, sort_keys=True, separators=(",", ":"))
    except TypeError as error:
        raise ValueError(f"key must be JSON-serialisable, got {key!r}: {error}") from error
    return Path(cache_root) / f"partition-{hashlib.sha256(canonical.encode()).hexdigest()[:24]}"


def prepare_partition(scenario: Mapping[str, Any]) -> Path:
    """The client partition on disk (Arrow files, cached by dataset and its files' contents, partition,
    population, seed)."""
    data_cfg = scenario["dataset"]
    key = {"dataset": data_cfg["name"], "root": data_cfg["root"], "partition": scenario["partition"],
           "num_clients": scenario["population"]["num_clients"], "seed": scenario["seed"], "format": 2}
    if data_cfg.get("train_subset") is not None:
        key["train_subset"] = data_cfg["train_subset"]
    files = files_digest(data_cfg["name"], data_cfg["root"], data_cfg["download"])
    if files is not None:  # other file contents under the same root are another entry
        key["files_sha256"] = files
    directory = cached_partition_dir(Path(data_cfg["cache_dir"]).expanduser() / "partitions", key)
    if not (directory / "meta.json").exists():
        dataset = scenario_dataset(data_cfg, scenario["seed"])
        write_partition(dataset, build_partition(scenario, dataset.train_y.numpy()), directory)
    return directory
