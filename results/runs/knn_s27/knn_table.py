"""Paired kNN / probe gain differences (arm - as shipped) for the BatchNorm and jitter-0.8 arms (regime.md)."""
import glob, json, os, statistics as st, sys
root = sys.argv[1] if len(sys.argv) > 1 else "/work/runs/s27/knn"
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}
NAMES = {"A": "as shipped", "K": "BatchNorm encoder", "G": "colour jitter 0.8"}
runs = {}
for p in sorted(glob.glob(f"{root}/*/summary.json")):
    arm, seed = os.path.basename(os.path.dirname(p)).split("_s")
    d = json.load(open(p))
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
        d = [gain(runs[(arm, s)], m) - gain(runs[("A", s)], m) for s in seeds]
        mean, half = st.mean(d), T975[len(d) - 1] * st.stdev(d) / len(d) ** 0.5
        cells.append(f"{mean:+.2f} [{mean - half:+.2f}, {mean + half:+.2f}] (per seed {', '.join(f'{x:+.2f}' for x in d)})")
    print(f"| {NAMES[arm]} | {', '.join(map(str, seeds))} | {cells[0]} | {cells[1]} |")
