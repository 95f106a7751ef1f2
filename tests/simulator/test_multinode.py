"""A real multi-node Ray cluster (several raylets on this machine) gives the single-node metrics."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from analysis.run_diff import logged_values
from simulator.run import run_scenario
from simulator.scenario import resolve
from tests.conftest import tiny_scenario

SCRIPT = Path(__file__).with_name("multinode_run.py")


def lost_node_raw(synthetic_raw):
    """The lost-node tests' scenario: 4 rounds of 2 local epochs, evaluated every 2, checkpointed every round."""
    return {**synthetic_raw,
            "training": {**synthetic_raw["training"], "rounds": 4, "local_epochs": 2},
            "eval": {**synthetic_raw["eval"], "every": 2},
            "output": {**synthetic_raw["output"], "checkpoint_every": 1}}


@pytest.fixture(scope="module")
def single_node_run(ray_session, tmp_path_factory):
    """(run directory, summary) of the lost-node tests' scenario on the shared single-node Ray: the
    same for every fault and server placement, so run once per module (per xdist worker)."""
    base = tmp_path_factory.mktemp("single-node")
    raw = lost_node_raw(tiny_scenario(base))
    _, summary = run_scenario(resolve(raw), str(base / "single"), progress=False)
    return base / "single", summary


@pytest.mark.parametrize("fault, server", [("--lose-node-after-checkpoint", "driver"),
                                           ("--lose-node-before-server-step", "driver"),
                                           ("--lose-node-before-server-step", "actor")])
def test_three_node_cluster_with_a_lost_node_equals_single_node(single_node_run, synthetic_raw, tmp_path, fault,
                                                                 server):
    """A node lost between rounds, or in round 3 after its workers' shares returned and before the
    server step fetched their sums (lost with the node: simulated again on the other nodes), with
    the server in the driver or in an actor."""
    single_dir, single = single_node_run
    raw = lost_node_raw(synthetic_raw)
    multi = {**raw, "ray": {"num_workers": 4, "worker": {"num_cpus": 1, "num_gpus": 0.5}, "server": server}}
    scenario_file = tmp_path / "multi.yaml"
    scenario_file.write_text(yaml.safe_dump(multi))
    at = "1" if fault == "--lose-node-after-checkpoint" else "3"
    done = subprocess.run([sys.executable, str(SCRIPT), str(scenario_file), str(tmp_path / "multi"), fault, at],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["nodes"] == 3 and report["alive_nodes"] == 2
    assert report["worker_restarts"] >= 1  # the lost node's workers were replaced
    if fault == "--lose-node-before-server-step":
        assert report["lost_sums"] >= 1  # sums of shares that had returned were on the lost node
    assert report["final"] == single["final"]
    assert logged_values(tmp_path / "multi") == logged_values(single_dir)
