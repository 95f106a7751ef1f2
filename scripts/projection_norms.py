"""How often the spectral loss's clip binds in a run: ``python scripts/projection_norms.py RUN_DIR...
[--images N]``.

For each run directory, the norms of the projections of its global network (``encoder`` then
``projector``, in train mode as the loss sees them) on the first ``N`` training images of its
evaluation subset, each augmented once with the run's own augmentation (a fixed generator), at
round 0 (the seed's random network) and at the run's newest checkpoint: the smallest, the median,
the 99th percentile, the largest, and the share above ``sqrt(method.clip_mu)`` (the norm HaoChen et al.'s
clip, FedSC's and FedAvg+SC's, projects onto; ``-`` for a run without a clip). A clip that binds on
most projections trains Eq. 5 on fixed-norm projections (``results/fedsc.md``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from methods import build_method  # noqa: E402
from methods.objectives import project  # noqa: E402
from simulator.augment import BatchAugment, to_float  # noqa: E402
from simulator.data.datasets import DatasetUnavailable  # noqa: E402
from simulator.data.store import prepare_partition  # noqa: E402
from simulator.evaluation.monitor import load_eval_data  # noqa: E402
from simulator.federation import Server  # noqa: E402
from simulator.run import data_spec  # noqa: E402
from simulator.runlog import check_run_dir, latest_checkpoint, load_recorded_scenario, read_checkpoint  # noqa: E402
from simulator.scenario import ScenarioError  # noqa: E402

BATCH = 128


def projection_norms(network: torch.nn.ModuleDict, images: torch.Tensor, augment: BatchAugment) -> torch.Tensor:
    """The norm of each image's projection, one augmented view each, the network in train mode."""
    generator = torch.Generator().manual_seed(0)
    network.train()
    with torch.no_grad():
        return torch.cat([project(network, augment(images[i:i + BATCH], generator)).norm(dim=1)
                          for i in range(0, len(images), BATCH)])


def norm_row(run: str, seed: int, round_index: int, norms: torch.Tensor, clip_mu: float) -> str:
    clipped = f"{100 * (norms > clip_mu ** 0.5).double().mean():.1f}" if clip_mu > 0 else "-"
    return (f"| {run} | {seed} | {round_index} | {norms.min():.2f} | {norms.median():.2f} | {norms.quantile(0.99):.2f} "
            f"| {norms.max():.2f} | {clip_mu:g} | {clipped} |")


def run_rows(run_dir: Path, num_images: int) -> list[str]:
    """The table's rows of one run: its round 0 and its newest checkpoint."""
    check_run_dir(run_dir)
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise ValueError(f"{run_dir}: no checkpoint in the directory (results/runs/ keeps none; or the run stopped "
                         f"before its first)")
    scenario = load_recorded_scenario(run_dir)
    clip_mu = float(scenario["method"].get("clip_mu", 0.0))
    method = build_method(scenario, data_spec(prepare_partition(scenario), scenario))
    server = Server(method)
    images = to_float(load_eval_data(scenario).train_x[:num_images])
    augment = BatchAugment(method.augment_config)
    rows = []
    for round_index, state in ((0, None), (None, read_checkpoint(checkpoint))):
        if state is not None:
            server.state, round_index = state["state"], state["round"]
        networks = server.eval_networks(lambda cid: None)
        if len(networks) != 1:
            raise ValueError(f"{run_dir}: {len(networks)} networks to evaluate; expected a run with one global network")
        norms = projection_norms(next(iter(networks.values())), images, augment)
        rows.append(norm_row(scenario["name"], scenario["seed"], round_index, norms, clip_mu))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--images", type=int, default=5120, help="training images to project (default 5120)")
    args = parser.parse_args(argv)
    if args.images < 2:
        print(f"projection_norms: error: --images {args.images}: expected at least 2 (BatchNorm's train mode)",
              file=sys.stderr)
        return 2
    try:
        rows = [row for run_dir in args.run_dirs for row in run_rows(run_dir, args.images)]
    except (ValueError, OSError, DatasetUnavailable, ScenarioError) as err:
        print(f"projection_norms: error: {err}", file=sys.stderr)
        return 2
    print("| run | seed | round | smallest norm | median | 99th percentile | largest | clip_mu "
          "| % above sqrt(clip_mu) |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
