"""The in-process executor (``executor: in_process``): the round of ``simulator.engine`` without Ray.

The same pieces (``simulator.federation``: cohort routing, a worker's client loop, the server step)
run one after another in the driver: each worker pool's share goes through one preallocated
workspace with the pool's thread count, the evaluation runs single-threaded as the evaluator actor
does, and the client-state store is the same files. Client randomness comes from (seed, round,
client id) and sums are exact, so a run gives bitwise the metrics of the same scenario on Ray
(``tests/simulator/test_inprocess.py``). For a machine without Ray (a GPU box, a debugger, a
profiler); it simulates what the scenario's workers would, only sequentially.
"""
from __future__ import annotations

import copy

import torch

from methods import build_method
from methods.base import DataSpec
from simulator.client_store import ClientStateStore, dumps, loads
from simulator.context import RoundContext
from simulator.data.store import PartitionReader
from simulator.evaluation.monitor import evaluate_networks, load_eval_data
from simulator.federation import (Server, WorkerFailure, bytes_down_metrics, prepare_worker_device, route_cohort,
                                  run_passes, simulate_clients, worker_device, worker_pools)
from simulator.resources import memory_mb, process_numerics, threads


class InProcessFederation:
    """The interface of ``engine.RayFederation``, in the driver's process."""

    worker_restarts = server_restarts = evaluator_restarts = 0
    rounds_while_ray_started = 0  # no Ray here

    def __init__(self, scenario: dict):
        self.scenario = scenario
        self.pools = worker_pools(scenario)
        self.eval_data = None  # loaded at the first evaluation, as the evaluator actor does
        self.store = None

    def setup(self, spec: DataSpec, partition_dir: str, client_state_dir: str | None) -> None:
        self.spec = self.method_spec = spec
        self.method = build_method(self.scenario, spec)
        self.server = Server(build_method(self.scenario, spec))
        self.workspaces = {name: self.method.make_workspace(prepare_worker_device(pool["num_gpus"], self.scenario))
                           for name, pool in self.pools.items()}
        self.reader = PartitionReader(partition_dir)
        if client_state_dir is not None:
            self.store = ClientStateStore(client_state_dir)

    def replace_server(self) -> None:
        """A parameter server in its initial state (never needed here: it cannot die alone)."""
        self.server = Server(build_method(self.scenario, self.method_spec))
        self.server_restarts += 1

    def run_round(self, ctx: RoundContext) -> dict[str, float]:
        return run_passes(self.method, self.run_phase, ctx)

    def run_phase(self, ctx: RoundContext) -> dict[str, float]:
        routes = route_cohort(ctx.cohort, self.spec.client_sizes, self.method.client_pool,
                              {name: pool["count"] for name, pool in self.pools.items()})
        if not routes:  # nobody reports; the online clients received the broadcast all the same
            with threads(1):
                return {"clients/completed": 0.0, **bytes_down_metrics(self.server.bytes_down_without_reports(ctx))}
        shares = [share for _, _, share in routes]
        with threads(1):  # the server actor's thread count (Ray gives an actor without CPUs one)
            broadcast, extras, bytes_down = self.server.payload(ctx, shares)
        results = []
        for (pool, _, share), share_extras in zip(routes, extras):
            states = None
            if self.store is not None:
                states = {cid: loads(blob) for cid, blob in self.store.get(share).items()}
            # a worker receives its own copy of the broadcast, as it does from Ray's object store
            try:
                with threads(self.pools[pool]["num_cpus"]):
                    result = simulate_clients(self.method, self.workspaces[pool], self.reader.client,
                                              copy.deepcopy(broadcast), copy.deepcopy(share_extras), share, ctx,
                                              states)
            except FloatingPointError as err:
                raise WorkerFailure(str(err)) from None
            if self.store is not None:
                self.store.put({cid: dumps(s) for cid, s in result.client_states.items()})
                result.client_states = {}
            results.append(result)  # no worker process: its memory is the driver's (memory/driver_rss_mb)
        with threads(1):
            metrics = self.server.aggregate(ctx, results)
        if self.store is not None:  # as the Ray engine: once the server step has every share
            self.store.commit()
        return {**metrics, **bytes_down_metrics(bytes_down)}

    def networks_now(self) -> dict[str, torch.nn.ModuleDict]:
        """A copy of the networks to evaluate, as they are now."""
        def load_client_state(cid: int):
            blob = self.store.get([cid]).get(cid) if self.store is not None else None
            return None if blob is None else loads(blob)
        return copy.deepcopy(self.server.eval_networks(load_client_state))

    def submit_eval(self, networks: dict[str, torch.nn.ModuleDict] | None = None) -> dict[str, dict[str, float]]:
        """Evaluate ``networks`` (default: the current ones) now; returns the result itself."""
        if self.eval_data is None:
            self.eval_data = load_eval_data(self.scenario)
        with threads(1):
            return evaluate_networks(networks if networks is not None else self.networks_now(), self.eval_data,
                                     self.scenario)

    @staticmethod
    def ready(evaluation: dict[str, dict[str, float]]) -> bool:
        return True

    @staticmethod
    def result(evaluation: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        return evaluation

    def state(self) -> dict:
        return self.server.state

    def restore(self, state: dict) -> None:
        self.server.state = state

    def peak_memory_mb(self) -> dict[str, float]:
        """Everything runs in the driver: its peak is the run's."""
        return {"driver": memory_mb()["peak_mb"], "server": 0.0, "evaluator": 0.0, "workers": 0.0}

    @staticmethod
    def worker_nodes() -> int:
        return 1

    def pool_numerics(self) -> dict[str, set[str]]:
        """Per worker pool, the numerics of its device in the driver: one each."""
        return {name: {process_numerics(worker_device(pool["num_gpus"]))} for name, pool in self.pools.items()}

    def shutdown(self) -> None:
        pass
