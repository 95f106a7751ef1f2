"""The twenty-ninth session's status check (results/regime.md, section "The FedAvg family's other shipped
scenarios on seeds 113 and 114"): each run against the learning margins with its round-0 and final numbers.
Run: ``.venv/bin/python results/runs/status_s29/status_table.py results/runs/status_s29``."""
import json, sys
from pathlib import Path
for d in sorted(Path(sys.argv[1]).glob("status_*_s*/summary.json"), key=lambda p: (p.parent.name.rsplit("_s", 1)[1], p.parent.name)):
    j = json.load(open(d)); name, seed = d.parent.name[len("status_"):].rsplit("_s", 1)
    k0, k1 = 100 * j["initial"]["knn_top1"], 100 * j["final"]["knn_top1"]
    p0, p1 = 100 * j["initial"]["linear_top1"], 100 * j["final"]["linear_top1"]
    miss = [x for x, c in (("probe", p1 - p0 < 4), ("kNN", k1 - k0 < 2)) if c]
    print(f"| `fedavg/{name}.yaml` | {seed} | {j['wall_seconds'] / 60:.1f} | {k0:.2f} → {k1:.2f} ({k1 - k0:+.2f}) | "
          f"{p0:.2f} → {p1:.2f} ({p1 - p0:+.2f}) | {'clears' if not miss else '**misses ' + ' and '.join(miss) + '**'} |")
