"""The thirty-fourth session's device pair (results/gpu.md): the two quickstart runs in-process on CUDA,
side by side, with live evaluation: every value of ``metrics.parquet`` by (round, name) but the
``time/`` and ``memory/`` names, how many differ and by how much, and round 0 / last evaluated
backbone kNN and probe. Run from the repository root: ``.venv/bin/python results/runs/gpu_s34/compare.py``."""
from pathlib import Path

import pyarrow.parquet as pq

here = Path(__file__).parent


def values(run: Path) -> dict:
    return {(r["round"], r["name"]): r["value"] for r in pq.read_table(run / "metrics.parquet").to_pylist()
            if not r["name"].startswith(("time/", "memory/"))}


a, b = values(here / "quickstart_a"), values(here / "quickstart_b")
differing = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
evaluated = sorted(r for r, n in a if n == "eval/linear_top1")
print(f"{len(a)} / {len(b)} values, {len(differing)} differing {differing[:5]}; "
      f"{sum(1 for _, n in a if n.startswith('eval/'))} of them evaluations, at rounds {evaluated}")
for name in ("eval/knn_top1", "eval/linear_top1", "eval/linear_top1_1pct"):
    print(name, " → ".join(f"{100 * a[(r, name)]:.2f}" for r in evaluated))
