"""The centralized upper bound (``training.centralized``): one client with the union of the
clients' data, the federated run's sample budget round by round, and on the real Fashion-MNIST at
least as accurate as FedAvg with the same objective and budget (3 seeds)."""
import pyarrow.parquet as pq
import pytest
import torch

from simulator.centralized import UnionReader
from simulator.data.store import PartitionReader, prepare_partition
from simulator.run import run_scenario
from simulator.scenario import ScenarioError, resolve


def samples_per_round(run_dir):
    return {row["round"]: row["value"] for row in pq.read_table(run_dir / "metrics.parquet").to_pylist()
            if row["name"] == "train/samples"}


def test_union_holds_every_clients_data_and_draws_the_rounds_budget(synthetic_raw):
    reader = PartitionReader(prepare_partition(resolve(synthetic_raw)))
    union = UnionReader(reader)
    assert len(union.labels) == reader.sizes.sum()
    images, labels = reader.client(3)
    start = int(reader.sizes[:3].sum())
    assert torch.equal(union.images[start:start + len(labels)], images)
    union.draw(17, seed=3, round_index=2)
    drawn_images, drawn_labels = union.client(0)
    assert len(drawn_labels) == 17 and len(set(union.rows.tolist())) == 17
    assert torch.equal(drawn_images, union.images[union.rows]) and torch.equal(drawn_labels, union.labels[union.rows])
    again = UnionReader(reader)
    again.draw(17, seed=3, round_index=2)
    assert torch.equal(again.rows, union.rows)
    again.draw(17, seed=3, round_index=3)
    assert not torch.equal(again.rows, union.rows)


def test_centralized_run_makes_the_federated_runs_sample_passes(synthetic_raw, tmp_path):
    raw = {**synthetic_raw, "executor": "in_process",
           "population": {**synthetic_raw["population"], "dropout": 0.3},
           "training": {**synthetic_raw["training"], "rounds": 4, "local_epochs": 2},
           "eval": {**synthetic_raw["eval"], "enabled": False}}
    federated, _ = run_scenario(resolve(raw), str(tmp_path / "fed"), progress=False)
    central, summary = run_scenario(resolve({**raw, "training": {**raw["training"], "centralized": True}}),
                                    str(tmp_path / "central"), progress=False)
    fed_samples, central_samples = samples_per_round(federated), samples_per_round(central)
    assert fed_samples == central_samples and len(fed_samples) == 4
    assert len(set(fed_samples.values())) > 1  # dropout varies the budget from round to round
    assert summary["rounds_completed"] == 4


def test_centralized_is_refused_where_one_client_cannot_stand_for_the_union(synthetic_raw):
    for method, key in (({"name": "orchestra"}, "training.centralized"), ({"name": "fedu"}, "training.centralized"),
                        ({"name": "fedavg", "uv": True}, "method.uv"),
                        ({"name": "fedavg", "labelled_fraction": 0.1}, "method.labelled_fraction")):
        with pytest.raises(ScenarioError, match=rf"{key}: expected"):
            resolve({**synthetic_raw, "method": method, "training": {"centralized": True}})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_centralized_bound_is_at_least_as_accurate_as_fedavg_on_fashion_mnist(tmp_path, seed):
    """One class per client (FedAvg's hard case), supervised cross-entropy as the shared objective:
    10 clients of 300 real Fashion-MNIST images, 5 a round, 4 rounds; linear probe on the backbone."""
    raw = {"name": "bound", "seed": seed, "executor": "in_process",
           "dataset": {"name": "fashion_mnist", "train_subset": 3000, "cache_dir": str(tmp_path / "cache")},
           "partition": {"kind": "classes_per_client", "k": 1},
           "population": {"num_clients": 10, "clients_per_round": 5},
           "method": {"name": "fedavg", "objective": "supervised"},
           "training": {"rounds": 4, "batch_size": 64, "lr": 0.05},
           "eval": {"every": 4, "train_subset": 2000, "test_subset": 1000, "label_fractions": []},
           "output": {"dir": str(tmp_path / "runs")}}
    _, federated = run_scenario(resolve(raw), str(tmp_path / "fed"), progress=False)
    _, central = run_scenario(resolve({**raw, "training": {**raw["training"], "centralized": True}}),
                              str(tmp_path / "central"), progress=False)
    print(f"seed {seed}: linear probe FedAvg {100 * federated['final']['linear_top1']:.1f}%, centralized "
          f"{100 * central['final']['linear_top1']:.1f}% (round 0: {100 * central['initial']['linear_top1']:.1f}%)")
    assert central["final"]["linear_top1"] >= federated["final"]["linear_top1"]
