"""Partition files: round trip, per-client reads, rotation at write time, atomic writes, cache names."""

import json

import numpy as np
import pyarrow as pa
import pytest
import torch

from simulator.data import store
from simulator.data.partition import Partition, make_partition
from simulator.data.store import PartitionReader, cached_partition_dir, rotate, write_partition
from simulator.data.synthetic import make_synthetic


@pytest.fixture(scope="module")
def dataset():
    return make_synthetic(num_classes=5, train_per_class=20, test_per_class=2, image_size=8, channels=3, seed=0)


def test_round_trip_returns_the_dataset_rows_in_index_order(dataset, tmp_path):
    partition = make_partition("dirichlet", dataset.train_y.numpy(), 4, seed=0, alpha=0.3)
    write_partition(dataset, partition, tmp_path / "part")
    reader = PartitionReader(tmp_path / "part")
    assert reader.num_clients == 4 and reader.sizes.tolist() == partition.sizes().tolist()
    assert (reader.channels, reader.image_size, reader.num_classes) == (3, 8, 5)
    for cid, indices in enumerate(partition.indices):
        images, labels = reader.client(cid)
        assert images.dtype == torch.uint8 and labels.dtype == torch.int64
        assert torch.equal(images, dataset.train_x[indices]) and torch.equal(labels, dataset.train_y[indices])


def test_files_have_the_documented_layout(dataset, tmp_path):
    write_partition(dataset, make_partition("iid", dataset.train_y.numpy(), 2, seed=0), tmp_path / "part")
    assert sorted(p.name for p in (tmp_path / "part").iterdir()) == [
        "client_000000.arrow", "client_000001.arrow", "meta.json"]
    meta = json.loads((tmp_path / "part" / "meta.json").read_text())
    heterogeneity = meta.pop("heterogeneity")
    assert meta == {"num_clients": 2, "sizes": [50, 50], "channels": 3, "image_size": 8, "num_classes": 5}
    assert heterogeneity == PartitionReader(tmp_path / "part").heterogeneity
    assert heterogeneity["client_size_min"] == heterogeneity["client_size_max"] == 50
    schema = pa.ipc.open_file(pa.memory_map(str(tmp_path / "part" / "client_000001.arrow"))).schema
    assert schema.field("image").type == pa.binary(3 * 8 * 8) and schema.field("label").type == pa.int16()


def test_reader_opens_only_the_requested_client_file(dataset, tmp_path, monkeypatch):
    write_partition(dataset, make_partition("iid", dataset.train_y.numpy(), 3, seed=0), tmp_path / "part")
    opened = []
    memory_map = pa.memory_map
    monkeypatch.setattr(pa, "memory_map", lambda path, *args: opened.append(path) or memory_map(path, *args))
    reader = PartitionReader(tmp_path / "part")
    (tmp_path / "part" / "client_000000.arrow").unlink()
    images, _ = reader.client(1)
    assert opened == [str(tmp_path / "part" / "client_000001.arrow")] and len(images) == reader.sizes[1]


def test_returned_tensors_are_writable_copies(dataset, tmp_path):
    write_partition(dataset, make_partition("iid", dataset.train_y.numpy(), 1, seed=0), tmp_path / "part")
    reader = PartitionReader(tmp_path / "part")
    images, _ = reader.client(0)
    images.zero_()
    assert torch.equal(reader.client(0)[0], dataset.train_x)


def rotated_partition(dataset, angle: float) -> Partition:
    indices = np.arange(len(dataset.train_y))
    return Partition((indices[:40], indices[40:]), (np.full(40, angle, np.float32), np.full(60, angle, np.float32)), 4)


def test_zero_rotation_leaves_images_intact(dataset, tmp_path):
    write_partition(dataset, rotated_partition(dataset, 0.0), tmp_path / "part")
    assert torch.equal(PartitionReader(tmp_path / "part").client(1)[0], dataset.train_x[40:])


def test_rotation_is_applied_per_sample_at_write_time(dataset, tmp_path):
    write_partition(dataset, rotated_partition(dataset, 90.0), tmp_path / "part")
    images, labels = PartitionReader(tmp_path / "part").client(0)
    assert torch.equal(images, torch.rot90(dataset.train_x[:40], 1, dims=(2, 3)))  # counter-clockwise
    assert torch.equal(labels, dataset.train_y[:40])


def test_rotate_uses_each_images_own_angle():
    images = torch.randint(0, 256, (3, 1, 6, 6), dtype=torch.uint8)
    rotated = rotate(images, torch.tensor([0.0, 180.0, 33.0]))
    assert torch.equal(rotated[0], images[0]) and torch.equal(rotated[1], images[1].flip(1, 2))
    assert not torch.equal(rotated[2], images[2])


def test_failed_write_leaves_no_directory_behind(dataset, tmp_path, monkeypatch):
    write_client = store._write_client

    def fail_on_second_client(path, images, labels):
        if path.name == "client_000001.arrow":
            raise OSError("disk full")
        write_client(path, images, labels)

    monkeypatch.setattr(store, "_write_client", fail_on_second_client)
    with pytest.raises(OSError, match="disk full"):
        write_partition(dataset, make_partition("iid", dataset.train_y.numpy(), 3, seed=0), tmp_path / "part")
    assert list(tmp_path.iterdir()) == []


def test_existing_complete_directory_is_left_as_is(dataset, tmp_path):
    labels = dataset.train_y.numpy()
    write_partition(dataset, make_partition("iid", labels, 2, seed=0), tmp_path / "part")
    write_partition(dataset, make_partition("iid", labels, 5, seed=0), tmp_path / "part")
    assert PartitionReader(tmp_path / "part").num_clients == 2
    assert len(list(tmp_path.iterdir())) == 1  # no staging directory left either


def test_reader_rejects_missing_directory_and_bad_client_id(dataset, tmp_path):
    with pytest.raises(ValueError, match="directory must hold a partition written by write_partition"):
        PartitionReader(tmp_path / "nothing")
    write_partition(dataset, make_partition("iid", dataset.train_y.numpy(), 2, seed=0), tmp_path / "part")
    with pytest.raises(ValueError, match="cid must be between 0 and 1, got 2"):
        PartitionReader(tmp_path / "part").client(2)


def test_cached_partition_dir_is_stable_for_equal_keys_and_distinct_for_others(tmp_path):
    key = {"dataset": "cifar10", "kind": "dirichlet", "alpha": 0.1, "num_clients": 100, "seed": 0}
    same = cached_partition_dir(tmp_path, key)
    assert same.parent == tmp_path
    assert cached_partition_dir(tmp_path, dict(reversed(list(key.items())))) == same
    assert cached_partition_dir(tmp_path, {**key, "alpha": 0.2}) != same
    assert cached_partition_dir(tmp_path, {**key, "seed": 1}) != same
    assert same.name == "partition-3b71c6d86ebb6589527052e2"  # the name must not change between runs or versions


def test_cached_partition_dir_rejects_non_json_keys(tmp_path):
    with pytest.raises(ValueError, match="key must be JSON-serialisable"):
        cached_partition_dir(tmp_path, {"labels": np.arange(3)})


def test_train_subset_partitions_only_the_subset_in_its_own_cache_entry(synthetic_raw):
    from simulator.data.store import prepare_partition
    from simulator.scenario import resolve
    full_dir = prepare_partition(resolve(synthetic_raw))
    small = resolve({**synthetic_raw, "dataset": {**synthetic_raw["dataset"], "train_subset": 240}})
    small_dir = prepare_partition(small)
    assert small_dir != full_dir
    assert PartitionReader(small_dir).sizes.sum() == 240
    assert PartitionReader(full_dir).sizes.sum() > 240


def test_the_partition_cache_entry_depends_on_each_input_of_the_partition(synthetic_raw, tmp_path):
    """Seed, client count, data set, dataset root and partition settings each name their own entry: a
    cached partition is never reused for a run that would draw another one (or hold other images)."""
    from simulator.data.store import prepare_partition
    from simulator.scenario import resolve
    base = prepare_partition(resolve(synthetic_raw))
    variants = [{**synthetic_raw, "seed": 4},
                {**synthetic_raw, "population": {**synthetic_raw["population"], "num_clients": 6}},
                {**synthetic_raw, "dataset": {**synthetic_raw["dataset"], "root": str(tmp_path)}},
                {**synthetic_raw, "partition": {**synthetic_raw["partition"], "alpha": 0.7}},
                {**synthetic_raw, "dataset": {**synthetic_raw["dataset"], "name": "synthetic_cifar10"}}]
    directories = [prepare_partition(resolve(raw)) for raw in variants]
    assert len({base, *directories}) == 6 and all(d.parent == base.parent for d in directories)
    assert PartitionReader(directories[1]).num_clients == 6
    assert PartitionReader(directories[4]).channels == 3 and PartitionReader(base).channels == 1


def test_files_replaced_under_the_same_root_are_another_cache_entry(synthetic_raw, tmp_path, no_installed_data):
    """A cached partition is cut from the files' contents, not their location: new files under the same
    dataset.root (a regenerated or corrected data set) are split afresh, never served the old split."""
    from simulator.data.store import prepare_partition
    from simulator.scenario import resolve
    from tests.simulator.data.conftest import write_fashion_28
    root = tmp_path / "files"

    scenario = resolve({**synthetic_raw, "dataset": {**synthetic_raw["dataset"], "name": "fashion_mnist",
                                                      "root": str(root)},
                        "population": {"num_clients": 4, "clients_per_round": 2}})
    write_fashion_28(root, np.repeat(np.arange(2, dtype=np.uint8), 20))
    first = prepare_partition(scenario)
    assert prepare_partition(scenario) == first  # the same files: the cached entry
    write_fashion_28(root, np.repeat(np.arange(8, 10, dtype=np.uint8), 20))
    second = prepare_partition(scenario)
    assert second != first
    labels = {int(label) for cid in range(4) for label in PartitionReader(second).client(cid)[1]}
    assert labels == {8, 9}


def test_rotate_is_torchvision_s_bilinear_rotation():
    """Bilinear with zero fill at any angle (not only the exact quarter turns), rounded to uint8."""
    import torchvision.transforms.functional as TF
    from torchvision.transforms import InterpolationMode
    images = torch.randint(0, 256, (4, 3, 9, 9), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    angles = torch.tensor([33.0, -71.5, 200.0, 10.0])
    expected = torch.stack([TF.rotate(image, float(angle), interpolation=InterpolationMode.BILINEAR)
                            for image, angle in zip(images, angles)])
    assert torch.equal(rotate(images, angles), expected)


@pytest.mark.parametrize("num_classes, fits", [(2**15, True), (2**15 + 1, False)])
def test_labels_must_fit_the_int16_column(tmp_path, num_classes, fits):
    """Labels 0..32767 fit int16: 32768 classes are written and read back, 32769 are refused."""
    from simulator.data.image_dataset import ImageDataset
    images = torch.zeros(2, 1, 2, 2, dtype=torch.uint8)
    dataset = ImageDataset("big", images, torch.tensor([0, num_classes - 1]), images, torch.tensor([0, 1]),
                           num_classes)
    partition = Partition((np.array([0, 1]),))
    if not fits:
        with pytest.raises(ValueError, match=f"dataset.num_classes must fit the int16 label column, got {num_classes}"):
            write_partition(dataset, partition, tmp_path / "part")
        return
    write_partition(dataset, partition, tmp_path / "part")
    assert PartitionReader(tmp_path / "part").client(0)[1].tolist() == [0, 32767]
