import json

import pytest
import yaml

from analysis.report import markdown_table, paired_table, read_run
from simulator.cli import main


def fake_run(tmp_path, name, seed, final_knn):
    run_dir = tmp_path / f"{name}-{seed}"
    run_dir.mkdir()
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump({"name": name, "seed": seed}))
    summary = {"initial": {"knn_top1": 0.5, "linear_top1": 0.6},
               "final": {"knn_top1": final_knn, "linear_top1": 0.7},
               "rounds_completed": 3, "wall_seconds": 12.0}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def test_table_has_mean_std_per_scenario_and_per_seed_rows(tmp_path):
    runs = [read_run(fake_run(tmp_path, "a", s, v)) for s, v in [(0, 0.70), (1, 0.80), (2, 0.90)]]
    runs.append(read_run(fake_run(tmp_path, "b", 0, 0.75)))
    table = markdown_table(runs)
    assert "| a | 0,1,2 | 50.00 ± 0.00 | 60.00 ± 0.00 | 80.00 ± 10.00 | 70.00 ± 0.00 |" in table
    assert "| b | 0 | " in table
    assert "| a | 1 | 50.00 | 60.00 | 80.00 | 70.00 | 3 | 12 |" in table


def test_unfinished_run_is_an_error(tmp_path, capsys):
    (tmp_path / "half").mkdir()
    with pytest.raises(ValueError, match="no summary.json"):
        read_run(tmp_path / "half")
    assert main(["report", str(tmp_path / "half")]) == 2
    assert "did not finish" in capsys.readouterr().err


def test_paired_table_differences_by_seed_against_the_baseline(tmp_path, capsys):
    dirs = [fake_run(tmp_path, "base", s, v) for s, v in [(0, 0.60), (1, 0.70), (2, 0.80)]]
    dirs += [fake_run(tmp_path, "new", s, v) for s, v in [(0, 0.65), (1, 0.68), (3, 0.99)]]  # seed 3: unpaired
    table = paired_table([read_run(d) for d in dirs], "base")
    # differences on seeds 0 and 1: +5 and -2 points: mean +1.50, std 4.95, ahead on 1 of 2
    assert "| new | 0,1 | +1.50 ± 4.95 (ahead on 1/2) | +0.00 ± 0.00 (ahead on 0/2) |" in table
    assert "| base |" not in table
    assert main(["report", *map(str, dirs), "--baseline", "base"]) == 0
    assert "| new | 0,1 | +1.50" in capsys.readouterr().out
    assert main(["report", *map(str, dirs), "--baseline", "nope"]) == 2
    assert "--baseline: expected one of the scenario names ['base', 'new'], got 'nope'" in capsys.readouterr().err
