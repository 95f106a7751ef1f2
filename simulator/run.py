"""The driver of one run: data, Ray start-up (overlapped), the rounds, evaluation, the run files."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

from analysis.monitor import summarize_evaluations
from methods import METHODS
from methods.base import DataSpec
from simulator import engine
from simulator.context import RoundContext, freeze
from simulator.data.datasets import load_dataset
from simulator.data.partition import make_partition
from simulator.data.store import PartitionReader, cached_partition_dir, write_partition
from simulator.federation import sample_cohort
from simulator.runlog import RunLog, new_run_dir, write_checkpoint, write_summary


def prepare_partition(scenario: dict[str, Any]) -> Path:
    """The client partition on disk (Arrow files, cached by dataset, partition, population, seed)."""
    data_cfg, part = scenario["dataset"], scenario["partition"]
    num_clients = scenario["population"]["num_clients"]
    key = {"dataset": data_cfg["name"], "root": data_cfg["root"], "partition": part,
           "num_clients": num_clients, "seed": scenario["seed"], "format": 1}
    directory = cached_partition_dir(Path(data_cfg["cache_dir"]).expanduser() / "partitions", key)
    if not (directory / "meta.json").exists():
        dataset = load_dataset(data_cfg["name"], data_cfg["root"], data_cfg["download"], seed=scenario["seed"])
        partition = make_partition(part["kind"], dataset.train_y.numpy(), num_clients, scenario["seed"],
                                   alpha=part["alpha"], scale_by_prior=part["scale_by_prior"], k=part["k"],
                                   rotation_bins=part["rotation_bins"], rotation_alpha=part["rotation_alpha"])
        write_partition(dataset, partition, directory)
    return directory


class Progress:
    """One line per round on stderr (rewritten in place on a terminal)."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled = total, enabled
        self.tty = sys.stderr.isatty()

    def show(self, round_index: int, metrics: dict[str, float], last_eval: dict[str, float]) -> None:
        if not self.enabled:
            return
        loss = metrics.get("train/loss", float("nan"))
        line = (f"round {round_index}/{self.total}  loss {loss:.4f}  "
                f"{metrics.get('time/round_seconds', 0):.2f} s/round")
        if last_eval:
            line += f"  knn {100 * last_eval['knn_top1']:.2f}%  linear {100 * last_eval['linear_top1']:.2f}%"
        end = "" if self.tty and round_index < self.total else "\n"
        print(("\r" if self.tty else "") + line, end=end, file=sys.stderr, flush=True)


def run_scenario(scenario: dict[str, Any], out: str | None = None, progress: bool = True) -> tuple[Path, dict]:
    """Run a resolved scenario; returns the run directory and its summary."""
    start = time.time()
    prepared: dict[str, Any] = {}

    def prepare():  # overlaps data loading and partitioning with Ray's start-up
        try:
            prepared["dir"] = prepare_partition(scenario)
        except BaseException as err:  # re-raised in the driver thread
            prepared["error"] = err

    loader = threading.Thread(target=prepare, daemon=True)
    loader.start()
    # Ray must start in the main thread: its processes die with the thread that spawned them.
    engine.start_ray(scenario["ray"]["address"])
    federation = engine.RayFederation(scenario)
    try:
        loader.join()
        if "error" in prepared:
            raise prepared["error"]
        partition_dir = prepared["dir"]
        reader = PartitionReader(partition_dir)
        spec = DataSpec(reader.channels, reader.image_size, reader.num_classes,
                        tuple(int(s) for s in reader.sizes))
        run_dir = new_run_dir(out, scenario)
        stateful = METHODS[scenario["method"]["name"]].stateful_clients
        federation.setup(spec, str(partition_dir), str(run_dir / "client_state") if stateful else None)
        return run_dir, run_rounds(federation, scenario, run_dir, start, progress)
    finally:
        federation.shutdown()


def run_rounds(federation, scenario: dict[str, Any], run_dir: Path, start: float, progress: bool) -> dict:
    """The rounds, evaluations and checkpoints of a run; writes the run files, returns the summary."""
    log = RunLog(run_dir, start)
    pending = {0: federation.submit_eval()}
    evals: dict[int, dict[str, float]] = {}
    hparams = freeze(scenario)
    seed, rounds = scenario["seed"], scenario["training"]["rounds"]
    population, eval_every = scenario["population"], scenario["eval"]["every"]
    checkpoint_every = scenario["output"]["checkpoint_every"]
    display = Progress(rounds, progress)
    first_round = 0 if METHODS[scenario["method"]["name"]].has_setup_round else 1
    time_to_round1 = None
    for r in range(first_round, rounds + 1):
        sampled, kept = sample_cohort(seed, r, population["num_clients"], population["clients_per_round"],
                                      population["dropout"])
        ctx = RoundContext(r, rounds, kept, seed, hparams)
        began = time.time()
        metrics = federation.run_round(ctx)
        metrics.update({"time/round_seconds": time.time() - began, "clients/sampled": float(len(sampled)),
                        "clients/dropped": float(len(sampled) - len(kept))})
        log.log(r, metrics)
        if r == 1:
            time_to_round1 = time.time() - start
        if r >= 1 and (r % eval_every == 0 or r == rounds):
            pending[r] = federation.submit_eval()
        for done in [k for k, ref in pending.items() if engine.ready(ref)]:
            evals[done], logged = summarize_evaluations(engine.get(pending.pop(done)))
            log.log(done, logged)
        if r >= 1 and (r % checkpoint_every == 0 or r == rounds):
            write_checkpoint(run_dir, r, federation.state())
        log.flush()
        display.show(r, metrics, evals[max(evals)] if evals else {})
    for done, ref in sorted(pending.items()):
        evals[done], logged = summarize_evaluations(engine.get(ref))
        log.log(done, logged)
    log.close()
    totals = {"bytes_up": 0.0, "bytes_down": 0.0}
    for _, name, value, _ in log.rows:
        direction = name.split("/", 1)[0]
        if direction in totals:
            totals[direction] += value
    summary = {
        "name": scenario["name"], "method": scenario["method"]["name"],
        "initial": evals[0], "final": evals[max(evals)],
        "rounds_completed": rounds, "wall_seconds": time.time() - start,
        "seconds_to_end_of_round_1": time_to_round1,
        "bytes_up": totals["bytes_up"], "bytes_down": totals["bytes_down"],
    }
    write_summary(run_dir, summary)
    return summary
