"""Each run of this folder against the kept run of the same arm and seed (deciding nothing): is its
round-40 linear probe and backbone kNN the kept run's, and on which numerics each ran.
Run from the repository root: .venv/bin/python results/runs/orchestra_paper_skew_finetune/compare_kept.py"""
import json
from pathlib import Path

HERE = Path("results/runs/orchestra_paper_skew_finetune")
KEPT = {"orchestra": Path("results/runs/orchestra_paper_skew_avx512/orchestra"),
        "fedavg_simclr": Path("results/runs/orchestra_paper_skew/fedavg_simclr")}

for arm, kept_dir in KEPT.items():
    for seed in range(5):
        new_file, kept_file = HERE / arm / f"seed_{seed}" / "summary.json", kept_dir / f"seed_{seed}" / "summary.json"
        if not new_file.exists():
            continue
        new, kept = json.loads(new_file.read_text()), json.loads(kept_file.read_text())
        same = {m: new["final"][m] == kept["final"][m] for m in ("linear_top1", "knn_top1")}
        print(f"{arm} seed {seed}: probe {100 * new['final']['linear_top1']:.2f} (kept {100 * kept['final']['linear_top1']:.2f}), "
              f"kNN {100 * new['final']['knn_top1']:.2f} (kept {100 * kept['final']['knn_top1']:.2f}); "
              f"equal: {same}; numerics {new['numerics']} vs kept {kept['numerics']}")
