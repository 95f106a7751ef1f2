"""``scripts/projection_norms.py``: how often the spectral loss's clip binds in a run."""
import subprocess
import sys
from pathlib import Path

import yaml

from simulator.run import run_scenario
from simulator.scenario import resolve

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "projection_norms.py"


def norms_table(run_dir: Path) -> list[list[str]]:
    done = subprocess.run([sys.executable, str(SCRIPT), str(run_dir), "--images", "64"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [line.strip("| ").split(" | ") for line in done.stdout.splitlines()[2:]]


def with_clip_mu(run_dir: Path, clip_mu: float) -> Path:
    recorded = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    recorded["method"]["clip_mu"] = clip_mu
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(recorded))
    return run_dir


def test_the_share_above_the_clip_is_of_the_norms_of_round_0_and_of_the_checkpoint(synthetic_raw, tmp_path):
    raw = {**synthetic_raw, "executor": "in_process", "training": {**synthetic_raw["training"], "rounds": 1},
           "method": {"name": "fedavg", "objective": "spectral", "clip_mu": 1e6}}
    run_dir, _ = run_scenario(resolve(raw), str(tmp_path / "run"), progress=False)
    (run_0, seed_0, round_0, _, median_0, _, largest_0, mu, above_0), \
        (run_1, seed_1, round_1, smallest_1, median_1, _, largest_1, _, above_1) = norms_table(run_dir)
    assert (run_0, seed_0, round_0, run_1, seed_1, round_1, mu, above_0, above_1) == \
        ("tiny", "3", "0", "tiny", "3", "1", "1e+06", "0.0", "0.0")
    assert median_0 != median_1 and float(largest_0) < float(smallest_1)  # the checkpoint's network, not round 0's
    # the clip at sqrt(mu), not mu: just under round 1's smallest norm, all of round 1 and none of round 0 above
    assert [row[-1] for row in norms_table(with_clip_mu(run_dir, (float(smallest_1) - 0.01) ** 2))] == ["0.0", "100.0"]
    assert norms_table(with_clip_mu(run_dir, (float(largest_1) + 0.01) ** 2))[1][-1] == "0.0"


def test_a_run_without_a_checkpoint_is_one_line_exit_2(tmp_path):
    (tmp_path / "scenario.yaml").write_text("name: x\nseed: 1\n")
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no checkpoint" in done.stderr


def test_fewer_than_two_images_is_one_line_exit_2(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--images", "1"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--images 1: expected at least 2" in done.stderr
