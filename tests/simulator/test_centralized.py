"""The centralized upper bound (``training.centralized``): one client with the union of the
clients' data, the federated run's sample budget round by round, and on the real Fashion-MNIST at
least as accurate as FedAvg with the same objective and budget (3 seeds)."""
from collections.abc import Mapping

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


def metric_per_round(run_dir, name):
    return {row["round"]: row["value"] for row in pq.read_table(run_dir / "metrics.parquet").to_pylist()
            if row["name"] == name}


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
    # the downlink: the federated broadcast reaches the cohort and the clients that dropped out; the one
    # client of the centralized run receives it alone (the federated dropouts are not its receivers)
    fed_down, central_down = (metric_per_round(d, "bytes_down/weights") for d in (federated, central))
    sampled, dropped = (metric_per_round(federated, f"clients/{name}") for name in ("sampled", "dropped"))
    model_bytes = {fed_down[r] / sampled[r] for r in fed_down}
    assert len(model_bytes) == 1 and any(dropped.values())
    assert central_down == {r: next(iter(model_bytes)) for r in range(1, 5)}


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


def test_a_draw_depends_on_the_seed_and_a_whole_draw_takes_every_sample_once(synthetic_raw):
    union = UnionReader(PartitionReader(prepare_partition(resolve(synthetic_raw))))
    union.draw(17, seed=3, round_index=2)
    first = union.rows.clone()
    union.draw(17, seed=4, round_index=2)
    assert not torch.equal(union.rows, first)  # seeds are independent replicates
    union.draw(len(union.labels), seed=3, round_index=2)
    assert sorted(union.rows.tolist()) == list(range(len(union.labels)))


def plain(mapping):
    return {key: plain(value) if isinstance(value, Mapping) else value for key, value in mapping.items()}


def test_each_centralized_round_trains_the_federated_rounds_draw_with_its_hyper_parameters(synthetic_raw, tmp_path,
                                                                                         monkeypatch):
    """Round by round (dropout varying the budget, a cosine lr): the one client (id 0) gets the union's
    draw of (seed, round) of the size of the federated round's completing clients' data, at the same
    round of the same run, so at the same lr, with the same hyper-parameters (augmentation included)."""
    from simulator import inprocess
    from methods.local_training import local_lr
    calls, real = [], inprocess.simulate_clients

    def recording(method, workspace, load_client, broadcast, extras, client_ids, ctx, client_states=None):
        hparams = plain(ctx.hparams)
        hparams["training"].pop("centralized")
        calls.append({"round": ctx.round, "num_rounds": ctx.num_rounds, "lr": local_lr(ctx), "hparams": hparams,
                      "clients": list(client_ids), "data": [load_client(cid) for cid in client_ids]})
        return real(method, workspace, load_client, broadcast, extras, client_ids, ctx, client_states)

    monkeypatch.setattr(inprocess, "simulate_clients", recording)
    # 1,997 images: clients of 250 and of 249, so that a budget over the wrong clients is another size
    raw = {**synthetic_raw, "executor": "in_process", "population": {**synthetic_raw["population"], "dropout": 0.3},
           "dataset": {**synthetic_raw["dataset"], "train_subset": 1997},
           "training": {**synthetic_raw["training"], "rounds": 3, "lr_schedule": "cosine"},
           "eval": {**synthetic_raw["eval"], "enabled": False}}
    run_scenario(resolve(raw), str(tmp_path / "fed"), progress=False)
    federated, calls[:] = list(calls), []
    scenario = resolve({**raw, "training": {**raw["training"], "centralized": True}})
    run_scenario(scenario, str(tmp_path / "central"), progress=False)
    union = UnionReader(PartitionReader(prepare_partition(scenario)))
    assert [c["round"] for c in calls] == [1, 2, 3] and len({c["lr"] for c in calls}) == 3
    for central in calls:
        fed = [c for c in federated if c["round"] == central["round"]]
        budget = sum(len(labels) for c in fed for _, labels in c["data"])
        union.draw(budget, scenario["seed"], central["round"])
        (images, labels), = central["data"]
        assert central["clients"] == [0] and torch.equal(images, union.images[union.rows])
        assert torch.equal(labels, union.labels[union.rows])
        assert all((c["num_rounds"], c["lr"], c["hparams"]) == (central["num_rounds"], central["lr"], central["hparams"])
                   for c in fed)


def test_a_round_nobody_completes_trains_nobody_as_in_the_federated_run(synthetic_raw):
    """Every sampled client dropped out: the one client takes no step (no samples, no completed client)
    and the round's metrics are the federated run's, but for the downlink: the federated broadcast
    still reached the dropped clients, the one client receives nothing in a round it does not train."""
    import copy
    from simulator.context import RoundContext, freeze
    from simulator.centralized import CentralizedFederation
    from simulator.inprocess import InProcessFederation
    from simulator.run import data_spec
    raw = {**synthetic_raw, "executor": "in_process", "eval": {**synthetic_raw["eval"], "enabled": False}}
    metrics = []
    for kind, centralized in ((InProcessFederation, False), (CentralizedFederation, True)):
        scenario = resolve({**raw, "training": {**raw["training"], "centralized": centralized}})
        partition_dir = prepare_partition(scenario)
        federation = kind(scenario)
        federation.setup(data_spec(partition_dir, scenario), partition_dir, None)
        before = copy.deepcopy(federation.state())
        metrics.append(federation.run_round(RoundContext(1, 2, (), scenario["seed"], freeze(scenario), unreported=(1, 5))))
        assert torch.equal(torch.cat([t.flatten() for t in tensors(federation.state())]),
                           torch.cat([t.flatten() for t in tensors(before)]))
    assert metrics[0]["bytes_down/weights"] > 0 and metrics[1]["bytes_down/weights"] == 0
    assert {**metrics[1], "bytes_down/weights": None} == {**metrics[0], "bytes_down/weights": None}
    assert metrics[1]["clients/completed"] == 0.0 and "train/samples" not in metrics[1]


def tensors(value):
    """Every tensor in a nested state (dicts, lists, modules), in order."""
    if isinstance(value, torch.Tensor):
        return [value.float()]
    if isinstance(value, torch.nn.Module):
        return [t.float() for t in value.state_dict().values()]
    if isinstance(value, Mapping):
        return [t for key in sorted(value, key=str) for t in tensors(value[key])]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors(item)]
    return []
