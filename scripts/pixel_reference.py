"""The raw-pixel reference of finished runs that did not record it (runs older than the record):
``python scripts/pixel_reference.py RUN_DIR... [--json FILE]``.

Each run's reference is :func:`simulator.evaluation.monitor.raw_pixels` evaluated under the run's own
``scenario.yaml`` (evaluation subsets, seed, kNN and probe settings, label fractions), one thread, as
the run's evaluator computes it; runs that recorded it keep theirs. It needs no checkpoint (only
``scenario.yaml`` and ``summary.json``), and is computed once per evaluation data: the labelled
samples of semi-supervised runs are left out, so it holds every metric but ``labelled_linear_top1``.
Prints ``fedssl report``'s table against the pixels; ``--json`` also writes each run's reference.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.report import pixel_table, read_run  # noqa: E402
from simulator.data.datasets import DatasetUnavailable  # noqa: E402
from simulator.evaluation.monitor import evaluate_networks, load_eval_data, raw_pixels, summarize_evaluations  # noqa: E402
from simulator.runlog import atomic_write  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402


def evaluation_data_key(scenario: dict) -> str:
    """What the reference depends on: the data set, the eval settings, the seed (the subsets and the
    label draws) and the augmentations (the alignment-uniformity score's)."""
    dataset = {k: v for k, v in scenario["dataset"].items() if k not in ("root", "cache_dir")}
    return json.dumps([dataset, scenario["eval"], scenario["seed"], scenario["augment"]], sort_keys=True)


def with_references(runs: list[dict]) -> list[dict]:
    """The runs (:func:`analysis.report.read_run`), each with its reference: recorded, or computed here."""
    cache: dict[str, dict[str, float]] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for run in runs:
            if run.get("pixels"):
                continue
            scenario = load_scenario(Path(run["dir"]) / "scenario.yaml")
            key = evaluation_data_key(scenario)
            if key not in cache:
                data = dataclasses.replace(load_eval_data(scenario), labelled_x=None, labelled_y=None)
                cache[key] = summarize_evaluations(evaluate_networks(raw_pixels(), data, scenario))[0]
            run["pixels"] = cache[key]
    finally:
        torch.set_num_threads(threads)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, help="write {run directory: reference} here")
    args = parser.parse_args(argv)
    try:
        runs = with_references([read_run(d) for d in args.run_dirs])
    except (ValueError, OSError, DatasetUnavailable) as err:
        print(f"pixel_reference: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        pixels = json.dumps({run["dir"]: run["pixels"] for run in runs}, indent=1, sort_keys=True) + "\n"
        atomic_write(args.json, lambda path: path.write_text(pixels))
    print(pixel_table(runs), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
