"""Paired kNN / probe gain differences (arm - as shipped) for the BatchNorm and jitter-0.8 arms (regime.md).
Run from the repository root: the interval is the project's (analysis.report.PairedDifference)."""
import glob, os, sys
from pathlib import Path

from analysis.report import PairedDifference, read_run

root = sys.argv[1] if len(sys.argv) > 1 else "/work/runs/s27/knn"
NAMES = {"A": "as shipped", "K": "BatchNorm encoder", "G": "colour jitter 0.8"}
runs = {}
for p in sorted(glob.glob(f"{root}/*/summary.json")):
    arm, seed = os.path.basename(os.path.dirname(p)).split("_s")
    d = read_run(Path(p).parent)
    runs[(arm, int(seed))] = {m: (100 * d["initial"][m], 100 * d["final"][m]) for m in ("knn_top1", "linear_top1")} | {"min": d["wall_seconds"] / 60}
print("| seed | arm | min | backbone kNN | linear probe | margins |\n|---|---|---|---|---|---|")
for (arm, seed), r in sorted(runs.items(), key=lambda kv: (kv[0][1], "AKG".index(kv[0][0]))):
    (k0, k1), (p0, p1) = r["knn_top1"], r["linear_top1"]
    miss = [x for x, c in (("probe", p1 - p0 < 4), ("kNN", k1 - k0 < 2)) if c]
    print(f"| {seed} | {NAMES[arm]} | {r['min']:.1f} | {k0:.2f} → {k1:.2f} ({k1 - k0:+.2f}) | {p0:.2f} → {p1:.2f} ({p1 - p0:+.2f}) | {'clears' if not miss else '**misses ' + ' and '.join(miss) + '**'} |")
gain = lambda r, m: r[m][1] - r[m][0]
print("\n| arm − as shipped | seeds | backbone-kNN gain difference [95% CI] | probe gain difference [95% CI] |\n|---|---|---|---|")
for arm in ("K", "G"):
    seeds = sorted(s for (a, s) in runs if a == arm and ("A", s) in runs)
    if len(seeds) < 2:
        continue
    cells = []
    for m in ("knn_top1", "linear_top1"):
        diff = PairedDifference.of(tuple(seeds), tuple(gain(runs[(arm, s)], m) - gain(runs[("A", s)], m) for s in seeds))
        low, high = diff.interval
        cells.append(f"{diff.mean:+.2f} [{low:+.2f}, {high:+.2f}] (per seed {', '.join(f'{x:+.2f}' for x in diff.diffs)})")
    print(f"| {NAMES[arm]} | {', '.join(map(str, seeds))} | {cells[0]} | {cells[1]} |")
