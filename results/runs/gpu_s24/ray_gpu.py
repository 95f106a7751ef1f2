"""The Ray engine on a GPU (twenty-fourth session): never run there before, the device machine having
no Ray (a trimmed Ray 2.60 wheel and its missing dependencies were carried for this call).

The quickstart's shape with a ResNet-18 on synthetic_cifar10 (10 iid clients, 4 a round, batch 128,
3 rounds, evaluation off), ``ray.cuda_deterministic`` as shipped (on): (a) Ray, two workers sharing
the GPU (0.5 each), (b) the same again, (c) Ray, one worker with the whole GPU, (d) in-process. Every
logged value (time and memory aside) of (b), (c), (d) is compared with (a)'s; each run's numerics
(summary.json) and steady images/s are printed. ``--smoke``: the same on a CPU, tiny.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import torch

sys.path.insert(0, os.getcwd())
from analysis.gpu_benchmark import common_overrides  # noqa: E402
from simulator.run import run_scenario  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    gpu = 1 if cuda else 0
    base = [*common_overrides(torch.device("cuda" if cuda else "cpu"), args.smoke), "dataset.name=synthetic_cifar10",
            "model.encoder=resnet18", *(["dataset.train_subset=200"] if args.smoke else [])]
    runs = {"ray, 2 workers x 0.5 GPU": ["executor=ray", "ray.num_workers=2", f"ray.worker.num_gpus={gpu / 2}"],
            "ray, 2 workers x 0.5 GPU, again": ["executor=ray", "ray.num_workers=2", f"ray.worker.num_gpus={gpu / 2}"],
            "ray, 1 worker x 1 GPU": ["executor=ray", "ray.num_workers=1", f"ray.worker.num_gpus={gpu}"],
            "in-process, 1 GPU": ["executor=in_process", "ray.num_workers=1", f"ray.worker.num_gpus={gpu}"]}
    report, logged = {}, {}
    with tempfile.TemporaryDirectory() as out:
        for label, own in runs.items():
            try:
                run_dir, summary = run_scenario(load_scenario("scenarios/quickstart.yaml", [*base, *own]),
                                                str(Path(out) / label.replace(" ", "_").replace(",", "")), progress=False)
            except Exception as error:  # report it and go on with the others
                report[label] = {"error": f"{type(error).__name__}: {error}"}
                print({label: report[label]}, flush=True)
                continue
            logged[label] = {(row["round"], row["name"]): row["value"]
                             for row in pq.read_table(run_dir / "metrics.parquet").to_pylist()
                             if not row["name"].startswith(("time/", "memory/"))}
            report[label] = {"numerics": summary.get("numerics"), "images_per_second": summary["steady_samples_per_second"]}
            first = next(iter(logged.values()))
            differing = sorted(k for k in first if first[k] != logged[label].get(k))
            report[label].update(values=len(logged[label]), values_differing_from_first=len(differing),
                                 first_differing=list(differing[0]) if differing else None)
            print({label: report[label]}, flush=True)
            Path(args.out).write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
