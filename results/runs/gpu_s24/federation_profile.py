"""Where the in-process federation's time goes on a GPU, against the plain loop (twenty-fourth session).

results/gpu.md left "the federation runs at 0.54x of the plain loop on an H200" unprofiled. For the
quickstart's shape (FedAvg+SimCLR, 10 iid clients, 4 a round, one local epoch) with a ResNet-18 on
synthetic_cifar10 (batch 128) and with the small CNN on synthetic (batch 64), this runs, switches off
as the plain loop: the plain loop's rate; the federation's steady rate; the federation under cProfile
(top functions by own and by cumulative time); the federation under torch.profiler (CPU and CUDA time
per op, and the share of the wall time the GPU was busy). Writes under --out. The code measured is
the working directory's (``simulator/``, ``methods/``, ``analysis/``, ``scenarios/``), so the same
script measures two versions of the code from two directories; ``--no-profile`` gives the rates only.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, os.getcwd())
from analysis.gpu_benchmark import common_overrides, plain_simclr_rate, torch_defaults  # noqa: E402
from simulator.run import run_scenario  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

SHAPES = {"resnet18": ["dataset.name=synthetic_cifar10", "model.encoder=resnet18"],
          "small_cnn": ["dataset.name=synthetic", "training.batch_size=64"]}


def run(overrides: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as out:
        _, summary = run_scenario(load_scenario("scenarios/quickstart.yaml", overrides), str(Path(out) / "run"),
                                  progress=False)
    return {"images_per_second": summary["steady_samples_per_second"],
            "seconds_per_round": summary["steady_seconds_per_round"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--no-profile", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    report = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "torch": torch.__version__}
    for shape in args.shapes:
        overrides = [*common_overrides(device, args.smoke), *SHAPES[shape], "ray.cuda_deterministic=false",
                     f"training.rounds={args.rounds}", *(["dataset.train_subset=200"] if args.smoke else [])]
        torch_defaults(device)
        batch = 16 if args.smoke else (128 if shape == "resnet18" else 64)
        dataset = "synthetic_cifar10" if shape == "resnet18" else "synthetic"
        row = {"plain_images_per_second": plain_simclr_rate(device, dataset, shape, batch, 3 if args.smoke else 30)}
        row["federation"] = run(overrides)
        row["federation_again"] = run(overrides)
        report[shape] = row
        if args.no_profile:
            print({shape: row}, flush=True)
            (out / "profile.json").write_text(json.dumps(report, indent=1))
            continue
        profiler = cProfile.Profile()
        profiler.enable()
        row["federation_cprofile"] = run(overrides)
        profiler.disable()
        for key in ("tottime", "cumulative"):
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(60)
            (out / f"{shape}_cprofile_{key}.txt").write_text(text.getvalue())
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        began = time.perf_counter()
        with torch.profiler.profile(activities=activities) as prof:
            row["federation_torch_profiler"] = run(overrides)
        wall = time.perf_counter() - began
        averages = prof.key_averages()
        (out / f"{shape}_torch_cpu.txt").write_text(averages.table(sort_by="self_cpu_time_total", row_limit=50))
        if device.type == "cuda":
            (out / f"{shape}_torch_cuda.txt").write_text(averages.table(sort_by="self_device_time_total", row_limit=50))
            busy = sum(e.self_device_time_total for e in averages) / 1e6
            row["gpu_busy_seconds"], row["profiled_wall_seconds"] = busy, wall
        report[shape] = row
        print({shape: row}, flush=True)
        (out / "profile.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
