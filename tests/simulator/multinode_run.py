"""Run a scenario on a real multi-raylet Ray cluster on this machine (used by test_multinode.py).

Usage: python multinode_run.py SCENARIO.yaml RUN_DIR [--lose-node-after-checkpoint N | --lose-node-before-server-step N]
Three raylets: a head without GPUs and two nodes with logical GPUs, so fractional-GPU workers are
scheduled across nodes. With --lose-node-after-checkpoint, the first GPU node is removed once the
run has written checkpoint N; with --lose-node-before-server-step, in round N after every share
returned and before the server step fetches their sums (those of the node's workers are lost with
it: "lost_sums" counts them). The run must continue on the remaining nodes.
"""
import json
import sys
import threading
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

from simulator import engine
from simulator.run import run_scenario
from simulator.scenario import load_scenario


def main() -> None:
    scenario_file, run_dir = sys.argv[1], Path(sys.argv[2])
    mode, lose_at = (sys.argv[3], int(sys.argv[4])) if len(sys.argv) > 4 else (None, None)
    lose_after = lose_at if mode == "--lose-node-after-checkpoint" else None
    # the GCS checks each raylet every second instead of every 3 s (Ray's default) and, as by default, marks
    # it dead after 5 failed checks in a row: a killed raylet refuses each check at once, so the lost node is
    # declared dead after about 5 s instead of 15; a live raylet slowed by the busy machine keeps the default
    # 10 s to answer each check
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 5}})
    doomed = cluster.add_node(num_cpus=2, num_gpus=1)
    cluster.add_node(num_cpus=4, num_gpus=2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)

    def lose_node():
        marker = run_dir / "checkpoints" / f"round_{lose_after:05d}" / "state.pt"
        while not marker.exists():
            time.sleep(0.02)
        cluster.remove_node(doomed, allow_graceful=False)

    if lose_after is not None:
        threading.Thread(target=lose_node, daemon=True).start()
    lost_sums = []
    if mode == "--lose-node-before-server-step":  # whichever host the scenario's server has
        for host in (engine.ServerInDriver, engine.ServerInActor):
            def lose_node_then_aggregate(server, ctx, bytes_down, results, aggregate=host.aggregate):
                if ctx.round == lose_at and not lost_sums:
                    refs = [r for r in results if isinstance(r, ray.ObjectRef)]
                    ray.wait(refs, num_returns=len(refs), fetch_local=False)
                    where = ray.experimental.get_object_locations(refs)
                    lost_sums.append(sum(doomed.node_id in where[r]["node_ids"] for r in refs))
                    cluster.remove_node(doomed, allow_graceful=False)
                return aggregate(server, ctx, bytes_down, results)

            host.aggregate = lose_node_then_aggregate
    try:  # a failed run must not leave the cluster behind (ray.init() would join its stale address)
        _, summary = run_scenario(load_scenario(scenario_file), str(run_dir), progress=False)
        deadline = time.time() + 60  # the GCS notices a dead node after its health checks fail
        while mode is not None and sum(n["Alive"] for n in ray.nodes()) > 2 and time.time() < deadline:
            time.sleep(0.5)
        print(json.dumps({"nodes": len(ray.nodes()), "alive_nodes": sum(n["Alive"] for n in ray.nodes()),
                          "lost_sums": lost_sums[0] if lost_sums else 0,
                          **{k: summary[k] for k in ("worker_restarts", "worker_nodes", "final")}}))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
