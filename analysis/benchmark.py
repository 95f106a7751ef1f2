"""The simulator's own cost: the same local-SGD work three ways on this machine.

1. ``loop``: a plain single-process loop over the same clients and rounds, no federation, torch
   using every core (the physical limit);
2. ``simulator-1-worker``: the simulator with one worker actor holding every core;
3. ``simulator-N-workers``: the simulator with one single-core worker per core.

Throughput is steady state (rounds after the first, where start-up is paid); efficiency is the
simulator's throughput over the loop's. Evaluation is switched off so that only training is timed.
"""
from __future__ import annotations

import copy
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from methods import build_method
from methods.base import ClientData
from simulator.context import RoundContext, freeze
from simulator.data.store import PartitionReader
from simulator.federation import Server
from simulator.population import Population
from simulator.run import data_spec
from simulator.resources import memory_mb


def plain_loop(scenario: dict[str, Any], cores: int) -> dict[str, float]:
    """Every round's clients trained one after another in this process; no aggregation."""
    from simulator.data.store import prepare_partition
    torch.set_num_threads(cores)
    began = time.time()
    partition_dir = prepare_partition(scenario)
    reader = PartitionReader(partition_dir)
    spec = data_spec(partition_dir, scenario)
    method = build_method(scenario, spec)
    workspace = method.make_workspace(torch.device("cpu"))
    server = Server(method)
    rounds, seed = scenario["training"]["rounds"], scenario["seed"]
    population = Population(scenario["population"], scenario["training"]["local_epochs"], spec.client_sizes, seed)
    hparams = freeze(scenario)
    steady_seconds, steady_samples, round1 = 0.0, 0, None
    for r in range(1, rounds + 1):
        ctx = RoundContext(r, rounds, population.plan(r).completed, seed, hparams)
        broadcast = method.broadcast(server.state, ctx)
        start, samples = time.time(), 0
        for cid in ctx.cohort:
            images, labels = reader.client(cid)
            method.client_update(workspace, broadcast, None, ClientData(cid, images, labels), ctx)
            samples += len(labels) * scenario["training"]["local_epochs"]
        if r == 1:
            round1 = time.time() - began
        else:
            steady_seconds += time.time() - start
            steady_samples += samples
    return {"samples_per_second": steady_samples / steady_seconds, "seconds_per_round": steady_seconds / (rounds - 1),
            "seconds_to_end_of_round_1": round1, "peak_memory_mb": memory_mb()["peak_mb"]}


def simulator_run(scenario: dict[str, Any], workers: int, cpus_per_worker: int) -> dict[str, float]:
    from simulator.run import run_scenario
    scenario = copy.deepcopy(scenario)
    scenario["ray"].update({"num_workers": workers, "worker": {"num_cpus": cpus_per_worker, "num_gpus": 0.0}})
    with tempfile.TemporaryDirectory() as out:
        _, summary = run_scenario(scenario, str(Path(out) / "run"), progress=False)
    memory = summary["peak_memory_mb"]
    # the driver's peak during this run (its lifetime peak, memory["driver"], holds the earlier modes' too)
    return {"samples_per_second": summary["steady_samples_per_second"],
            "seconds_per_round": summary["steady_seconds_per_round"],
            "seconds_to_end_of_round_1": summary["seconds_to_end_of_round_1"],
            "peak_memory_mb": summary["driver_rss_mb_max"] + memory["server"] + memory["workers"]}


def run_benchmark(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    scenario = copy.deepcopy(scenario)
    scenario["eval"]["enabled"] = False
    cores = os.cpu_count() or 1
    loop = plain_loop(scenario, cores)
    results = [{"mode": f"loop ({cores} threads)", **loop},
               {"mode": f"simulator-1-worker ({cores} cpus)", **simulator_run(scenario, 1, cores)},
               {"mode": f"simulator-{cores}-workers (1 cpu each)", **simulator_run(scenario, cores, 1)}]
    for result in results:
        result["efficiency"] = result["samples_per_second"] / loop["samples_per_second"]
    return results


def format_results(results: list[dict[str, Any]]) -> str:
    lines = ["| mode | samples/s | s/round | efficiency | end of round 1 (s) | peak memory (MiB) |",
             "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['mode']} | {r['samples_per_second']:.0f} | {r['seconds_per_round']:.2f} | "
                     f"{r['efficiency']:.2f} | {r['seconds_to_end_of_round_1']:.1f} | {r['peak_memory_mb']:.0f} |")
    return "\n".join(lines) + "\n"
