"""End to end on the real Fashion-MNIST (installed by scripts/setup.sh): a short federated run."""
import json

import pyarrow.parquet as pq

from simulator.data.store import PartitionReader
from simulator.run import prepare_partition
from simulator.scenario import resolve


def scenario(tmp_path):
    return resolve({
        "name": "fmnist-e2e", "seed": 1,
        "dataset": {"name": "fashion_mnist", "cache_dir": str(tmp_path / "cache")},
        "partition": {"kind": "dirichlet", "alpha": 0.1, "scale_by_prior": True},
        "population": {"num_clients": 100, "clients_per_round": 4},
        "method": {"name": "fedavg", "objective": "simclr", "temperature": 0.2},
        "training": {"rounds": 2, "batch_size": 64},
        "eval": {"every": 2, "train_subset": 5000, "test_subset": 1000},
        "output": {"dir": str(tmp_path / "runs")},
    })


def test_partition_of_the_real_data_covers_all_60000_images(tmp_path):
    reader = PartitionReader(prepare_partition(scenario(tmp_path)))
    assert reader.sizes.sum() == 60000 and reader.num_clients == 100
    assert (reader.channels, reader.image_size, reader.num_classes) == (1, 28, 10)
    _, labels = reader.client(0)
    assert 1 <= len(labels.unique()) <= 10


def test_short_federated_simclr_run_on_fashion_mnist(ray_session, tmp_path):
    from simulator.run import run_scenario
    run_dir, summary = run_scenario(scenario(tmp_path), str(tmp_path / "run"), progress=False)
    assert json.loads((run_dir / "summary.json").read_text())["rounds_completed"] == 2
    # random-init features of a CNN on Fashion-MNIST are far above chance (10%): real data went through
    assert summary["initial"]["knn_top1"] > 0.6 and summary["final"]["knn_top1"] > 0.6
    assert summary["initial"]["linear_top1"] > 0.6
    rows = pq.read_table(run_dir / "metrics.parquet").to_pylist()
    completed = [r["value"] for r in rows if r["name"] == "clients/completed"]
    assert completed == [4.0, 4.0]
