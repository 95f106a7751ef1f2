"""The thirtieth session's status check (results/regime.md, section "The UV folder's scenarios run only on the
search seed, on a fresh seed"): each run against the learning margins with its round-0 and final numbers, by
run name (file mtimes do not survive a clone; the order the runs ran is `status.sh`'s). Run: ``.venv/bin/python results/runs/uv_s30/status_table.py results/runs/uv_s30``."""
import json
import sys
from pathlib import Path

print("| scenario | seed | rounds | min | backbone kNN | linear probe | margins |\n|---|---|---|---|---|---|---|")
for d in sorted(Path(sys.argv[1]).glob("status_*_s*/summary.json"), key=lambda p: p.parent.name):
    j = json.load(open(d))
    name, seed = d.parent.name[len("status_"):].rsplit("_s", 1)
    folder, file = name.split("_", 1)
    k0, k1 = 100 * j["initial"]["knn_top1"], 100 * j["final"]["knn_top1"]
    p0, p1 = 100 * j["initial"]["linear_top1"], 100 * j["final"]["linear_top1"]
    miss = [x for x, c in (("probe", p1 - p0 < 4), ("kNN", k1 - k0 < 2)) if c]
    print(f"| `{folder}/{file}.yaml` | {seed} | {j['rounds_completed']} | {j['wall_seconds'] / 60:.1f} | "
          f"{k0:.2f} → {k1:.2f} ({k1 - k0:+.2f}) | {p0:.2f} → {p1:.2f} ({p1 - p0:+.2f}) | "
          f"{'clears' if not miss else '**misses ' + ' and '.join(miss) + '**'} |")
