"""Per arm: final linear probe (and kNN) at rotation_alpha 0.01 minus the kept shipped-skew (0.1) run of
the same seed, paired by seed, 95% t-interval (secondary, decides nothing; results/uv.md protocol)."""
import json, statistics, sys
from pathlib import Path
from scipy import stats
new_root, old_root = Path(sys.argv[1]), Path(sys.argv[2])
for arm in ("federated_simclr", "local_simclr"):
    for metric in ("linear_top1", "knn_top1"):
        diffs, r0 = [], []
        for seed in range(5):
            n = new_root / arm / f"seed_{seed}" / "summary.json"
            o = old_root / arm / f"seed_{seed}" / "summary.json"
            if not n.exists():
                continue
            a, b = json.loads(n.read_text()), json.loads(o.read_text())
            diffs.append(100 * (a["final"][metric] - b["final"][metric]))
            r0.append(100 * (a["initial"][metric] - b["initial"][metric]))
        m = statistics.mean(diffs)
        half = stats.t.ppf(0.975, len(diffs) - 1) * statistics.stdev(diffs) / len(diffs) ** 0.5
        print(f"{arm} {metric}: 0.01 - 0.1 final {m:+.2f} [{m - half:+.2f}, {m + half:+.2f}] over {len(diffs)} seeds "
              f"(per seed {', '.join(f'{d:+.2f}' for d in diffs)}); round-0 difference max |{max(map(abs, r0)):.2f}|")
