"""``scripts/pixel_reference.py``: the raw-pixel reference of runs older than its record."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

from simulator.run import run_scenario
from simulator.scenario import resolve
from tests.conftest import LABEL_EFFICIENT_EVAL

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pixel_reference.py"


def test_an_older_run_gets_the_reference_a_run_records(synthetic_raw, tmp_path):
    raw = {**synthetic_raw, "executor": "in_process", "training": {**synthetic_raw["training"], "rounds": 1},
           "eval": {**synthetic_raw["eval"], **LABEL_EFFICIENT_EVAL}}
    run_dir, summary = run_scenario(resolve(raw), str(tmp_path / "recorded"), progress=False)
    older = tmp_path / "older"
    older.mkdir()
    for name in ("scenario.yaml", "metrics.parquet"):
        shutil.copy(run_dir / name, older / name)
    (older / "summary.json").write_text(json.dumps({k: v for k, v in summary.items() if k != "pixels"}))
    done = subprocess.run([sys.executable, str(SCRIPT), str(older), str(run_dir), "--json", str(tmp_path / "p.json")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "p.json").read_text())
    assert found[str(older)] == found[str(run_dir)] == summary["pixels"] and "knn_top1_1pct" in summary["pixels"]
    knn = 100 * summary["pixels"]["knn_top1"]
    assert f"| tiny | 3 | {knn:.2f} | {100 * summary['initial']['knn_top1'] - knn:+.2f} |" in done.stdout


def test_a_directory_without_a_summary_is_one_line_exit_2(tmp_path):
    (tmp_path / "scenario.yaml").write_text("name: x\n")
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no summary.json" in done.stderr
