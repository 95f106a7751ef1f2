"""Every shipped Fashion-MNIST scenario, run for 3 rounds at a small size, gives bitwise the metrics
and the final global state recorded in ``tests/scenarios_baseline.json`` (issue 16: a refactor of
``methods/`` must not change what any scenario computes, except where a fix deliberately does;
such a change re-records the affected entries and says why in its commit).

Small size: the scenario as shipped (method, objective, model, training, augmentation, partition
kind, population behaviour) on a seeded 600-image subset of the training split (``dataset.train_subset``)
split among 10 clients, at most 4 a round, 3 rounds, in-process (``executor: in_process``, one
thread per worker pool), without evaluation (the evaluation code is not the methods'; it was
recorded at first, with the same training metrics, and dropped from the record for time;
``eval.test_subset`` stays set: Hetero-SSFL's RAD is drawn from the test images it leaves out).

Re-record (only on purpose): ``.venv/bin/python tests/test_scenarios.py --record [NAME ...]``.

The recorded values come from this project's machines (the CPU capability is stored with them).
Floating-point kernels differ between CPU instruction sets, so on a machine with another
capability the comparison is to 1e-4 relative instead of bitwise (the assertion message says which).
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
if __name__ == "__main__":
    sys.path.insert(0, str(REPO))

from simulator.run import run_scenario  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

BASELINE = Path(__file__).with_name("scenarios_baseline.json")
MACHINE_DEPENDENT = ("time/", "memory/")
SMALL = [
    "executor=in_process", "dataset.train_subset=600", "population.num_clients=10", "training.rounds=3",
    "eval.enabled=false", "eval.test_subset=200", "output.checkpoint_every=3",
]


def shipped_fashion_mnist() -> list[str]:
    """The shipped scenarios on Fashion-MNIST, as paths relative to the repository."""
    names = []
    for path in sorted((REPO / "scenarios").rglob("*.yaml")):
        if load_scenario(path)["dataset"]["name"] == "fashion_mnist":
            names.append(str(path.relative_to(REPO)))
    return names


def small_scenario(name: str, work: Path) -> dict:
    shipped = load_scenario(REPO / name)
    per_round = min(4, shipped["population"]["clients_per_round"])
    return load_scenario(REPO / name, [*SMALL, f"population.clients_per_round={per_round}",
                                       f"dataset.cache_dir={work / 'cache'}", f"output.dir={work / 'runs'}"])


def fingerprint(name: str, work: Path) -> dict:
    """The run's metrics (float.hex, machine-dependent ones left out) and a digest of its final state."""
    import pyarrow.parquet as pq
    run_dir, _ = run_scenario(small_scenario(name, work), str(work / "runs" / name.replace("/", "_")), progress=False)
    metrics = {f"{row['round']}/{row['name']}": float(row["value"]).hex()
               for row in pq.read_table(run_dir / "metrics.parquet").to_pylist()
               if not row["name"].startswith(MACHINE_DEPENDENT)}
    checkpoint = sorted((run_dir / "checkpoints").iterdir())[-1]
    state = torch.load(checkpoint / "state.pt", weights_only=False)["state"]
    return {"metrics": metrics, "state": state_digest(state)}


def state_digest(node, prefix: str = "", digest=None) -> str:
    """sha256 of every tensor of a nested state (names, dtypes, shapes, bytes), in name order."""
    top = digest is None
    digest = digest or hashlib.sha256()
    if isinstance(node, torch.Tensor):
        tensor = node.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{prefix}:{node.dtype}:{tuple(node.shape)}".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    elif isinstance(node, dict):
        for key in sorted(node, key=str):
            state_digest(node[key], f"{prefix}/{key}", digest)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            state_digest(value, f"{prefix}/{i}", digest)
    elif isinstance(node, (int, float, str, bool)) or node is None:
        digest.update(f"{prefix}={node!r}".encode())
    return digest.hexdigest() if top else ""


def capability() -> str:
    return torch.backends.cpu.get_cpu_capability()


def load_baseline() -> dict:
    return json.loads(BASELINE.read_text())


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("shipped")


def test_every_shipped_fashion_mnist_scenario_has_a_recorded_baseline():
    assert sorted(load_baseline()["scenarios"]) == shipped_fashion_mnist()


@pytest.mark.parametrize("name", sorted(load_baseline()["scenarios"]))
def test_shipped_scenario_matches_its_recorded_baseline(name, work, one_thread):
    baseline = load_baseline()
    recorded = baseline["scenarios"][name]
    got = fingerprint(name, work)
    assert got["metrics"].keys() == recorded["metrics"].keys()
    if baseline["cpu_capability"] == capability():
        assert got["metrics"] == recorded["metrics"], "bitwise metrics differ from the recorded baseline"
        assert got["state"] == recorded["state"], "the final state differs bitwise from the recorded baseline"
        return
    for key, value in recorded["metrics"].items():  # another instruction set: close, not bitwise
        assert float.fromhex(got["metrics"][key]) == pytest.approx(float.fromhex(value), rel=1e-4, abs=1e-6), (
            f"{key} (CPU capability {capability()}, recorded on {baseline['cpu_capability']}: compared to 1e-4)")


def record(names: list[str]) -> None:
    import tempfile
    torch.set_num_threads(1)
    baseline = load_baseline() if BASELINE.exists() else {"scenarios": {}}
    if baseline.get("cpu_capability", capability()) != capability():
        raise SystemExit(f"the baseline was recorded on {baseline['cpu_capability']}, this CPU is {capability()}")
    baseline["cpu_capability"] = capability()
    shipped = shipped_fashion_mnist()
    baseline["scenarios"] = {k: v for k, v in baseline["scenarios"].items() if k in shipped}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names or shipped:
            baseline["scenarios"][name] = fingerprint(name, Path(tmp))
            print(f"recorded {name}", flush=True)
            BASELINE.write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] != ["--record"]:
        raise SystemExit("usage: python tests/test_scenarios.py --record [scenarios/....yaml ...]")
    record(sys.argv[2:])
