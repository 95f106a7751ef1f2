"""The thirty-second session's reproduction check (results/regime.md): each re-run of a kept claim run against
the kept run, every value of ``metrics.parquet`` by (round, name) but the ``time/`` and ``memory/`` names: how
many are compared, how many differ, the largest difference, the names only one of the two logged; and both
runs' round-0 and final backbone kNN and probe. Run from the repository root:
``.venv/bin/python results/runs/repro_s32/compare.py``."""
import json
from pathlib import Path

import pyarrow.parquet as pq

here = Path(__file__).parent
KEPT = {"rotation_only": "orchestra_r40/rotation_only", "no_target": "orchestra_r40/no_target",
        "orchestra": "orchestra_r40/orchestra", "fedavg_sc": "fedsc_full/fedavg_sc", "fedsc": "fedsc_full/fedsc"}


def values(run: Path) -> dict:
    return {(r["round"], r["name"]): r["value"] for r in pq.read_table(run / "metrics.parquet").to_pylist()
            if not r["name"].startswith(("time/", "memory/"))}


def ends(run: Path) -> str:
    s = json.loads((run / "summary.json").read_text())
    return " / ".join(f"{100 * s['initial'][m]:.2f} → {100 * s['final'][m]:.2f}" for m in ("knn_top1", "linear_top1"))


print("| arm, seed 0 | values compared | differing | largest difference | names only in the kept / the re-run | "
      "kept: kNN / probe | re-run: kNN / probe |\n|---|---|---|---|---|---|---|")
for arm, kept_dir in KEPT.items():
    rerun = here / f"repro_{arm}_s0"
    if not (rerun / "summary.json").exists():
        continue
    kept = here.parent / kept_dir / "seed_0"
    a, b = values(kept), values(rerun)
    common = sorted(set(a) & set(b))
    diffs = [abs(a[k] - b[k]) for k in common if a[k] != b[k]]
    only = (sorted({n for _, n in set(a) - set(b)}), sorted({n for _, n in set(b) - set(a)}))
    print(f"| {arm} | {len(common)} | {len(diffs)} | {max(diffs, default=0):.3g} | "
          f"{len(only[0])} / {len(only[1])} ({', '.join(only[1][:3])}{'...' if len(only[1]) > 3 else ''}) | "
          f"{ends(kept)} | {ends(rerun)} |")
