"""The thirty-first session's CPU runs (results/regime.md): the UV status check's three runs the thirtieth session's
cut-off left out (``status_*``), and the label-skew Spectral / Spectral+UV ``_semi10`` pair at 160 rounds
(``r160_*``), each against the learning margins with its round-0 and final numbers, and (deciding nothing) its
1%-label probe and kNN. Rows by run name. Run from the repository root: ``.venv/bin/python results/runs/uv_s31/table.py``;
another folder of runs as its argument (the thirty-second session's: ``... table.py results/runs/jitter_s32``)."""
import json
import sys
from pathlib import Path

root = Path(sys.argv[1]) if sys.argv[1:] else Path(__file__).parent
print("| run | rounds | min | backbone kNN | linear probe | margins | 1% labels: probe | 1% labels: kNN |\n"
      "|---|---|---|---|---|---|---|---|")
for summary in sorted(root.glob("*_s*/summary.json"), key=lambda p: p.parent.name):
    j = json.load(open(summary))

    def gain(metric):
        a, b = 100 * j["initial"][metric], 100 * j["final"][metric]
        return b - a, f"{a:.2f} → {b:.2f} ({b - a:+.2f})"
    (dk, knn), (dp, probe) = gain("knn_top1"), gain("linear_top1")
    miss = [x for x, c in (("probe", dp < 4), ("kNN", dk < 2)) if c]
    print(f"| {summary.parent.name} | {j['rounds_completed']} | {j['wall_seconds'] / 60:.1f} | {knn} | {probe} | "
          f"{'clears' if not miss else '**misses ' + ' and '.join(miss) + '**'} | {gain('linear_top1_1pct')[1]} | "
          f"{gain('knn_top1_1pct')[1]} |")
