"""The thirty-first session's GPU screen (results/regime.md, "Twice the rounds for three pairs that missed on seed
101: a screen on the lent GPU"): each run's backbone kNN and probe at the shipped budget R and at 2R (or the last
evaluation a stopped run reached), as gains over its own round 0. Each run's ``scenario.yaml`` records
twice its file's shipped rounds, so R is half of that. Run: ``.venv/bin/python results/runs/gpu_s31/screen_table.py``."""
from pathlib import Path

import pyarrow.parquet as pq
import yaml

print("| file | seed | round 0: kNN, probe | at R (shipped): kNN, probe | at 2R: kNN, probe | 2R clears both |\n|---|---|---|---|---|---|")
for run in sorted((Path(__file__).parent / "runs").glob("*_s*/metrics.parquet"), key=lambda p: p.parent.name):
    file, seed = run.parent.name.rsplit("_s", 1)
    evals: dict[int, dict[str, float]] = {}
    for row in pq.read_table(run).to_pylist():
        if row["name"] in ("eval/knn_top1", "eval/linear_top1"):
            evals.setdefault(row["round"], {})[row["name"][5:]] = 100 * row["value"]
    r = yaml.safe_load((run.parent / "scenario.yaml").read_text())["training"]["rounds"] // 2
    k0, p0 = evals[0]["knn_top1"], evals[0]["linear_top1"]

    def at(n: int) -> str:
        if n not in evals:
            return f"not reached (last evaluation: round {max(evals)})"
        return f"{evals[n]['knn_top1'] - k0:+.2f}, {evals[n]['linear_top1'] - p0:+.2f}"
    clears = "—" if 2 * r not in evals else (
        "yes" if evals[2 * r]["knn_top1"] - k0 >= 2 and evals[2 * r]["linear_top1"] - p0 >= 4 else "**no**")
    print(f"| `uv/fmnist_{file}.yaml` | {seed} | {k0:.2f}, {p0:.2f} | {at(r)} | {at(2 * r)} | {clears} |")
