import json

import pytest
import yaml

from analysis.report import markdown_table, read_run
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
