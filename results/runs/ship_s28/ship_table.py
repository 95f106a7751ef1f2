"""Tables of the twenty-eighth session's shipping protocol (results/regime.md, section "Shipping BatchNorm
in the encoder or colour jitter 0.8 in `fedavg/simclr.yaml`..."): every run against the margins with its
round-0 and final numbers, then the paired gain differences (arm - as shipped) per scenario; it serves the
twenty-ninth session's (section "Shipping colour jitter 0.8 in the quickstart...", ``results/runs/ship_s29``) and the
thirty-fifth's (section "Do BatchNorm in the encoder or colour jitter 0.8 lift Orchestra's two missing arms?",
``results/runs/orch_levers_s35``) too.
Run from the repository root: ``PYTHONPATH=. .venv/bin/python results/runs/ship_s28/ship_table.py [DIR | NAME=RUN_DIR] ...``
(each DIR holds run directories named ``[SCENARIO_]ARM_sSEED``; NAME=RUN_DIR adds one run under such a name; no
SCENARIO is ``simclr``, ``cross`` is ``cross_device.yaml``, ``quick`` is ``quickstart.yaml``,
``orchsimclr`` and ``orchnodegen`` are ``orchestra/fedavg_simclr.yaml`` and ``orchestra/no_degeneracy.yaml``)."""
import re
import sys
from pathlib import Path

from analysis.report import PairedDifference, read_run

NAMES = {"A": "as shipped", "K": "BatchNorm encoder", "G": "colour jitter 0.8"}
PATHS = {"simclr": "fedavg/simclr.yaml", "cross": "cross_device.yaml", "quick": "quickstart.yaml",
         "orchsimclr": "orchestra/fedavg_simclr.yaml", "orchnodegen": "orchestra/no_degeneracy.yaml"}
named = {}
for arg in sys.argv[1:] or ["results/runs/ship_s28"]:
    if "=" in arg:
        name, run_dir = arg.split("=", 1)
        named[name] = Path(run_dir)
    else:
        named |= {summary.parent.name: summary.parent for summary in sorted(Path(arg).glob("*/summary.json"))}
runs = {}
for name, run_dir in named.items():
    scenario, arm, seed = re.fullmatch(r"(?:(.+)_)?([AKG])_s(\d+)", name).groups()
    d = read_run(run_dir)
    runs[(scenario or "simclr", arm, int(seed))] = {
        m: (100 * d["initial"][m], 100 * d["final"][m]) for m in ("knn_top1", "linear_top1")} | {"min": d["wall_seconds"] / 60}
scenarios = sorted({s for s, _, _ in runs}, key=lambda s: (s != "simclr", s))
gain = lambda r, m: r[m][1] - r[m][0]  # noqa: E731
for scenario in scenarios:
    path = PATHS.get(scenario, f"fedavg/{scenario}.yaml")
    print(f"\n`{path}`\n\n| seed | arm | min | backbone kNN | linear probe | margins |\n|---|---|---|---|---|---|")
    mine = {(a, s): r for (sc, a, s), r in runs.items() if sc == scenario}
    for (arm, seed), r in sorted(mine.items(), key=lambda kv: (kv[0][1], "AKG".index(kv[0][0]))):
        (k0, k1), (p0, p1) = r["knn_top1"], r["linear_top1"]
        miss = [x for x, c in (("probe", p1 - p0 < 4), ("kNN", k1 - k0 < 2)) if c]
        print(f"| {seed} | {NAMES[arm]} | {r['min']:.1f} | {k0:.2f} → {k1:.2f} ({k1 - k0:+.2f}) | {p0:.2f} → {p1:.2f} "
              f"({p1 - p0:+.2f}) | {'clears' if not miss else '**misses ' + ' and '.join(miss) + '**'} |")
    rows = []
    for arm in ("K", "G"):
        seeds = sorted(s for (a, s) in mine if a == arm and ("A", s) in mine)
        if not seeds:
            continue
        cells = []
        for m in ("knn_top1", "linear_top1"):
            diffs = tuple(gain(mine[(arm, s)], m) - gain(mine[("A", s)], m) for s in seeds)
            if len(seeds) < 2:
                cells.append(f"{diffs[0]:+.2f} (one seed)")
                continue
            diff = PairedDifference.of(tuple(seeds), diffs)
            low, high = diff.interval
            cells.append(f"{diff.mean:+.2f} [{low:+.2f}, {high:+.2f}] (per seed {', '.join(f'{x:+.2f}' for x in diff.diffs)})")
        rows.append(f"| {NAMES[arm]} | {', '.join(map(str, seeds))} | {cells[0]} | {cells[1]} |")
    if rows:
        print("\n| arm − as shipped | seeds | backbone-kNN gain difference [95% CI] | probe gain difference [95% CI] |\n|---|---|---|---|")
        print("\n".join(rows))
