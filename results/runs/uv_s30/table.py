"""The thirtieth session's runs (results/regime.md, section "The joint-shift SimSiam `_semi10` pair with the
paper's batch and colour jitter 0.8"): each run against the learning margins with its round-0 and final numbers,
then (secondary, decides nothing) its gains minus those of the kept runs of the same file and seed.
Run from the repository root: ``.venv/bin/python results/runs/uv_s30/table.py``."""
import json
from pathlib import Path

KEPT = {"batch 64, jitter 0.4 (as shipped)": {("jss", 101): "uv_s24/jss_b64_s101", ("jss", 102): "uv_s24/jss_b64_s102"},
        "batch 128, jitter 0.4": {("jssuv", 100): "uv_s23/jssuv_b128_s100", ("jssuv", 101): "uv_s23/jssuv_b128_s101",
                                  ("jssuv", 102): "uv_s24/jssuv_b128_s102"}}
FILES = {"jss": "fmnist_joint_shift_simsiam_semi10.yaml", "jssuv": "fmnist_joint_shift_simsiam_uv_semi10.yaml"}
root = Path(__file__).parent


def gains(run_dir):
    j = json.load(open(run_dir / "summary.json"))
    return j, {m: (100 * j["initial"][m], 100 * j["final"][m]) for m in ("knn_top1", "linear_top1")}


print("| file | seed | min | backbone kNN | linear probe | margins |\n|---|---|---|---|---|---|")
mine = {}
for summary in sorted(root.glob("*_BG_s*/summary.json"), key=lambda p: p.parent.name):
    name, seed = summary.parent.name.split("_BG_s")
    j, g = gains(summary.parent)
    mine[(name, int(seed))] = g
    (k0, k1), (p0, p1) = g["knn_top1"], g["linear_top1"]
    miss = [x for x, c in (("probe", p1 - p0 < 4), ("kNN", k1 - k0 < 2)) if c]
    print(f"| `uv/{FILES[name]}` | {seed} | {j['wall_seconds'] / 60:.1f} | {k0:.2f} → {k1:.2f} ({k1 - k0:+.2f}) | "
          f"{p0:.2f} → {p1:.2f} ({p1 - p0:+.2f}) | {'clears' if not miss else '**misses ' + ' and '.join(miss) + '**'} |")
print("\nSecondary (decides nothing): gain of this arm minus gain of a kept run, same file and seed, in points\n")
print("| file | seed | against | backbone kNN | linear probe |\n|---|---|---|---|---|")
for (name, seed), g in mine.items():
    for label, kept in KEPT.items():
        if (name, seed) in kept:
            _, h = gains(root.parent / kept[(name, seed)])
            d = [(g[m][1] - g[m][0]) - (h[m][1] - h[m][0]) for m in ("knn_top1", "linear_top1")]
            print(f"| `uv/{FILES[name]}` | {seed} | {label} | {d[0]:+.2f} | {d[1]:+.2f} |")
