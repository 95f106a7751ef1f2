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
Add this machine's capability to scenarios recorded on the other one only, keeping their records
(for an unchanged scenario whose round 1 agrees with them; refused otherwise):
``.venv/bin/python tests/test_scenarios.py --add NAME ...``.

Floating-point kernels differ between CPU instruction sets (``torch.backends.cpu.get_cpu_capability()``,
and oneDNN's where only one of the two is capped) and between kinds of CPU of one instruction set,
so each scenario holds one record per numerics of this project's machines, keyed as
``summary.json``'s ``numerics`` names them after the torch version
(``simulator.resources.process_cpu_numerics``: ``AVX512, GenuineIntel 6/167``). A run is compared
bitwise with the record of its own numerics, and its round 1 to 1e-4 relative (1e-3 for
``train/divergence``, below) with every other record. The records keyed by the instruction set
alone (``AVX2``, ``AVX512``) were made before the numerics named the CPU, on AMD EPYC machines
(``results/regime.md``), so an AMD CPU of that instruction set is held to them bitwise; an Intel
AVX-512 machine (``GenuineIntel 6/167``, AMX) differs from the ``AVX512`` record in the last bits
from round 2 on, whatever oneDNN and MKL are capped to (``ONEDNN_MAX_CPU_ISA`` AVX512_CORE to
AVX512_CORE_AMX, ``MKL_ENABLE_INSTRUCTIONS``, ``MKL_CBWR``), and capped to AVX2 it does not give
the ``AVX2`` record either, so it has records of its own (2026-12-02). Between the AVX2 and AVX512
records the metrics drift by at most 9e-6 relative in round 1 (FedEMA's ``train/divergence``, the
distance between two nearby networks, by 8e-5; 2.7e-4 from the Intel machine) and by up to 1.2e-2
in round 3 (Orchestra's clustering amplifies kernel rounding), measured on every shipped scenario
on 2026-11-25, so later rounds cannot be compared across machines.
On numerics without a record (another instruction set or CPU, or a scenario re-recorded on one
machine only, which drops the other machines' stale records) only that round-1 comparison runs,
and it is the weaker check: round 1's loss moves with the data, partition, model, initialisation,
augmentation, batch and loss (checked: a changed crop or batch size fails it), not with the
optimiser's settings, which act only from a client's second step on (a client lr of 0.07 instead of
0.05 passes it). So a scenario changed on purpose is re-recorded on every kind of machine that can
be had, and the commit says which numerics it was recorded on.
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

from analysis.run_diff import logged_values  # noqa: E402
from simulator.resources import process_cpu_numerics  # noqa: E402
from simulator.run import run_scenario  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

BASELINE = Path(__file__).with_name("scenarios_baseline.json")
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
    run_dir, _ = run_scenario(small_scenario(name, work), str(work / "runs" / name.replace("/", "_")), progress=False)
    metrics = {f"{round_}/{metric}": float(value).hex() for (round_, metric), value in logged_values(run_dir).items()}
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
    """This process's numerics: torch's CPU capability, oneDNN's instruction set where that differs,
    and the CPU's model (``simulator.resources.process_cpu_numerics``)."""
    return process_cpu_numerics()


# the records keyed by the instruction set alone were made on AMD EPYC machines (module docstring)
INSTRUCTION_SET_RECORDS_VENDOR = "AuthenticAMD"


def own_record(records: dict, numerics: str) -> str | None:
    """The key of the record in ``records`` that a run with ``numerics`` must equal bitwise: its own
    numerics' or, on an AMD CPU, the record of its instruction sets alone; None where there is none."""
    if numerics in records:
        return numerics
    kernels, _, model = numerics.rpartition(", ")
    return kernels if kernels in records and model.startswith(f"{INSTRUCTION_SET_RECORDS_VENDOR} ") else None


def load_baseline() -> dict:
    return json.loads(BASELINE.read_text())


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("shipped")


def test_every_shipped_fashion_mnist_scenario_has_a_recorded_baseline():
    assert sorted(load_baseline()["scenarios"]) == shipped_fashion_mnist()


@pytest.mark.parametrize("name", sorted(load_baseline()["scenarios"]))
def test_shipped_scenario_matches_its_recorded_baseline(name, work, one_thread):
    records = load_baseline()["scenarios"][name]
    assert records, f"{name} has no record"
    got = fingerprint(name, work)
    own = own_record(records, capability())
    for other in sorted(set(records) - {own}):  # other numerics: round 1 close
        bad = round1_disagreements(got["metrics"], records[other]["metrics"])
        assert not bad, f"{', '.join(bad)} differ by more than their tolerance from the {other} record " \
                        f"(this CPU: {capability()})"
    if own is not None:
        recorded = records[own]
        assert got["metrics"] == recorded["metrics"], f"bitwise metrics differ from the {own} record"
        assert got["state"] == recorded["state"], f"the final state differs bitwise from the {own} record"


def test_a_run_is_held_bitwise_to_its_own_numerics_record_or_on_amd_to_its_instruction_sets():
    records = {"AVX2": {}, "AVX512": {}, "AVX512, GenuineIntel 6/167": {}}
    assert own_record(records, "AVX512, GenuineIntel 6/167") == "AVX512, GenuineIntel 6/167"
    assert own_record(records, "AVX512, AuthenticAMD 25/17") == "AVX512"
    assert own_record(records, "AVX2, AuthenticAMD 23/49") == "AVX2"
    assert own_record(records, "AVX2, GenuineIntel 6/85") is None
    assert own_record(records, "AVX2, oneDNN AVX512, AuthenticAMD 25/17") is None
    assert own_record({"AVX2, oneDNN AVX512": {}}, "AVX2, oneDNN AVX512, AuthenticAMD 25/17") == "AVX2, oneDNN AVX512"


# round 1's relative tolerance across numerics: 1e-4, wider for a distance between two nearby
# networks, which magnifies kernel rounding (FedU's and FedEMA's train/divergence; module docstring)
ROUND1_TOLERANCE = {"train/divergence": 1e-3}


def round1_disagreements(got: dict, recorded: dict) -> list[str]:
    """The round-1 metrics of ``got`` that differ from ``recorded`` (other numerics') by more than
    their relative tolerance (:data:`ROUND1_TOLERANCE`, else 1e-4); a different set of metric names
    counts as one disagreement."""
    if got.keys() != recorded.keys():
        return ["the metric names"]
    return [key for key in recorded if key.startswith("1/") and float.fromhex(got[key]) != pytest.approx(
        float.fromhex(recorded[key]), rel=ROUND1_TOLERANCE.get(key[2:], 1e-4), abs=1e-6)]


def record(names: list[str], keep_others: bool = False) -> None:
    """Record the current capability's fingerprints of ``names`` (default: every shipped scenario).
    A re-recorded scenario's records of other capabilities are stale, so they are dropped, unless
    ``keep_others`` (``--add``): then the new record joins them, only where round 1 agrees with
    each of them (the scenario is unchanged since they were recorded); a disagreeing one is refused."""
    import tempfile
    torch.set_num_threads(1)
    baseline = load_baseline() if BASELINE.exists() else {"scenarios": {}}
    shipped = shipped_fashion_mnist()
    baseline["scenarios"] = {k: v for k, v in baseline["scenarios"].items() if k in shipped}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names or shipped:
            others = {cap: rec for cap, rec in baseline["scenarios"].get(name, {}).items() if cap != capability()}
            got = fingerprint(name, Path(tmp))
            if keep_others:
                for cap, rec in others.items():
                    if bad := round1_disagreements(got["metrics"], rec["metrics"]):
                        raise SystemExit(f"{name}: round 1 differs from the {cap} record ({', '.join(bad)}): "
                                         "the scenario changed; re-record it with --record on both kinds of machine")
                baseline["scenarios"][name] = {**others, capability(): got}
                note = f" beside the {', '.join(sorted(others))} record" if others else ""
            else:
                baseline["scenarios"][name] = {capability(): got}
                note = f" (dropped the stale {', '.join(sorted(others))} record: re-record it on such a machine)" if others else ""
            print(f"recorded {name} on {capability()}{note}", flush=True)
            BASELINE.write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] not in (["--record"], ["--add"]):
        raise SystemExit("usage: python tests/test_scenarios.py --record [scenarios/....yaml ...] | --add scenarios/....yaml ...")
    record(sys.argv[2:], keep_others=sys.argv[1] == "--add")
