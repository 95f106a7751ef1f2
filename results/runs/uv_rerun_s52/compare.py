"""Each re-run against its 1118525 counterpart listed in results/claims/SUITE.md (probe and kNN, round 0 and
final, to the two printed decimals)."""
import json, re, sys
from pathlib import Path
suite, runs = sys.argv[1], Path(sys.argv[2])
old = {}
for line in Path(f"/work/main/results/claims/{suite}.md").read_text().splitlines():
    m = re.match(r"(\w+) seed_(\d+) probe ([\d.]+)->([\d.]+) \([^)]*\) knn ([\d.]+)->([\d.]+)", line)
    if m:
        old[m[1], int(m[2])] = tuple(float(x) for x in m.groups()[2:])
for (arm, seed), o in sorted(old.items()):
    f = runs / arm / f"seed_{seed}" / "summary.json"
    if not f.exists():
        print(f"{arm} seed {seed}: not run"); continue
    d = json.loads(f.read_text()); i, fi = d["initial"], d["final"]
    new = tuple(round(100 * v, 2) for v in (i["linear_top1"], fi["linear_top1"], i["knn_top1"], fi["knn_top1"]))
    same = new == o
    print(f"{arm} seed {seed}: 1118525 probe {o[0]:.2f}->{o[1]:.2f} knn {o[2]:.2f}->{o[3]:.2f} | now probe "
          f"{new[0]:.2f}->{new[1]:.2f} knn {new[2]:.2f}->{new[3]:.2f} | {'same' if same else 'DIFFERS'} | {d['wall_seconds']:.0f}s")
