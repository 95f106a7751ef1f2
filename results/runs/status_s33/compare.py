"""The thirty-third session's reproduction check (results/regime.md, "The shipped files with no run of
current code"): each Hetero-SSFL re-run against its kept claim run, every value of ``metrics.parquet`` by
(round, name) but the ``time/`` and ``memory/`` names, up to the re-run's last logged round: how many are
compared, how many differ, the largest difference, the names only one of the two logged; and both runs'
round-0 and last evaluated backbone kNN and probe. Run from the repository root:
``.venv/bin/python results/runs/status_s33/compare.py``."""
from pathlib import Path

import pyarrow.parquet as pq

here = Path(__file__).parent
KEPT = {"repro_hetero_20c5_mu05_s0": "hetero/mu05/seed_0", "repro_hetero_20c5_mu0_s1": "hetero/mu0/seed_1",
        "repro_hetero_20c5_rad_control_s0": "hetero/rad_control/seed_0"}


def values(run: Path, last: int | None = None) -> dict:
    return {(r["round"], r["name"]): r["value"] for r in pq.read_table(run / "metrics.parquet").to_pylist()
            if not r["name"].startswith(("time/", "memory/")) and (last is None or r["round"] <= last)}


def ends(logged: dict) -> str:
    rounds = sorted(r for r, n in logged if n == "eval/knn_top1")
    return " / ".join(f"{100 * logged[(rounds[0], m)]:.2f} → {100 * logged[(rounds[-1], m)]:.2f}"
                      for m in ("eval/knn_top1", "eval/linear_top1")) + f" (round {rounds[-1]})"


print("| re-run | last round | values compared | differing | largest difference | names only in the kept / the "
      "re-run | kept: kNN / probe | re-run: kNN / probe |\n|---|---|---|---|---|---|---|---|")
for name, kept_dir in KEPT.items():
    rerun = here / name
    if not (rerun / "metrics.parquet").exists():
        continue
    b = values(rerun)
    last = max(r for r, _ in b)
    a = values(here.parent / kept_dir, last)
    common = sorted(set(a) & set(b))
    diffs = [abs(a[k] - b[k]) for k in common if a[k] != b[k]]
    only = (sorted({n for _, n in set(a) - set(b)}), sorted({n for _, n in set(b) - set(a)}))
    print(f"| {name} | {last} | {len(common)} | {len(diffs)} | {max(diffs, default=0):.3g} | "
          f"{len(only[0])} / {len(only[1])} ({', '.join(only[1][:3])}{'...' if len(only[1]) > 3 else ''}) | "
          f"{ends(a)} | {ends(b)} |")
