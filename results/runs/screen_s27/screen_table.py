"""The screen's table (regime.md, twenty-seventh session): per arm and seed, round 0 -> final, gains; arm means; candidates."""
import glob, json, os, statistics as st, sys
root = sys.argv[1] if len(sys.argv) > 1 else "/work/runs/s27/screen"
NAMES = {"A": "as shipped", "B": "crop 8-100%", "C": "crop 20-100%", "D": "crop 60-100%", "E": "crop 80-100%",
         "F": "no colour jitter", "G": "jitter 0.8", "H": "no flip", "I": "temperature 0.1", "J": "temperature 0.5",
         "K": "BatchNorm encoder", "L": "client lr 0.1", "M": "2 local epochs", "N": "100 rounds"}
runs = {}
for p in sorted(glob.glob(f"{root}/*/summary.json")):
    name = os.path.basename(os.path.dirname(p)); arm, seed = name.split("_s")
    d = json.load(open(p)); i, f = d["initial"], d["final"]
    runs[(arm, seed)] = {m: (100 * i[m], 100 * f[m]) for m in ("knn_top1", "linear_top1")} | {"min": d["wall_seconds"] / 60, "rounds": d["rounds_completed"]}
print("| arm | seed | rounds | min | backbone kNN | linear probe | margins |\n|---|---|---|---|---|---|---|")
for (arm, seed), r in sorted(runs.items()):
    k0, k1 = r["knn_top1"]; p0, p1 = r["linear_top1"]
    ok = "clears" if p1 - p0 >= 4 and k1 - k0 >= 2 else "**misses " + " and ".join(x for x, c in (("probe", p1 - p0 < 4), ("kNN", k1 - k0 < 2)) if c) + "**"
    print(f"| {arm} {NAMES[arm]} | {seed} | {r['rounds']} | {r['min']:.1f} | {k0:.2f} → {k1:.2f} ({k1 - k0:+.2f}) | {p0:.2f} → {p1:.2f} ({p1 - p0:+.2f}) | {ok} |")
mean = {}
for arm in NAMES:
    got = [r for (a, _), r in runs.items() if a == arm]
    if len(got) == 2:
        mean[arm] = (st.mean(r["linear_top1"][1] - r["linear_top1"][0] for r in got), st.mean(r["knn_top1"][1] - r["knn_top1"][0] for r in got))
print("\n| arm | mean probe gain | mean kNN gain | probe vs A | kNN vs A | candidate |\n|---|---|---|---|---|---|")
for arm, (pg, kg) in mean.items():
    if "A" in mean:
        dp, dk = pg - mean["A"][0], kg - mean["A"][1]
        print(f"| {arm} {NAMES[arm]} | {pg:+.2f} | {kg:+.2f} | {dp:+.2f} | {dk:+.2f} | {'yes' if dp >= 1.0 and dk >= -0.5 else 'no'} |")
