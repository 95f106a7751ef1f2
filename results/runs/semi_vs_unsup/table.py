"""The forty-fourth session's `_semi10` files with and without their labels (results/regime.md, "Do 10% of labels
change the backbone's linear probe?" and "The same question for SimCLR under joint shift"): each run's round-0 and final backbone kNN and probe, the
learning margins (probe +4, kNN +2), and, deciding nothing, the 10%- and 1%-label probes and the probe on the run's
own labelled samples (``labelled_linear_top1``, the `semi10` arm only). The paired test is ``fedssl claim``'s.
Run from the repository root: ``.venv/bin/python results/runs/semi_vs_unsup/table.py [RUNS_DIR]``
(the SimCLR one: ``RUNS_DIR`` = ``results/runs/semi_vs_unsup_simclr``)."""
import json
import sys
from pathlib import Path

root = Path(sys.argv[1]) if sys.argv[1:] else Path(__file__).parent
print("| arm | seed | min | backbone kNN | linear probe | margins | probe, 10% labels | probe, 1% labels | "
      "probe on its labelled samples |\n|---|---|---|---|---|---|---|---|---|")
for summary in sorted(root.glob("*/seed_*/summary.json"), key=lambda p: (p.parent.name, p.parent.parent.name)):
    j = json.load(open(summary))

    def gain(metric):
        if metric not in j["initial"]:
            return None, "—"
        a, b = 100 * j["initial"][metric], 100 * j["final"][metric]
        return b - a, f"{a:.2f} → {b:.2f} ({b - a:+.2f})"
    (dk, knn), (dp, probe) = gain("knn_top1"), gain("linear_top1")
    miss = [x for x, c in (("probe", dp < 4), ("kNN", dk < 2)) if c]
    print(f"| {summary.parent.parent.name} | {summary.parent.name.removeprefix('seed_')} | "
          f"{j['wall_seconds'] / 60:.1f} | {knn} | {probe} | "
          f"{'clears' if not miss else '**misses ' + ' and '.join(miss) + '**'} | {gain('linear_top1_10pct')[1]} | "
          f"{gain('linear_top1_1pct')[1]} | {gain('labelled_linear_top1')[1]} |")
