"""``fedssl run`` / ``validate`` from the command line's point of view."""
import json

import yaml

from simulator.cli import main


def write(tmp_path, raw):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_run_prints_summary_and_writes_the_run(ray_session, synthetic_raw, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["run", str(write(tmp_path, synthetic_raw)), "--out", str(out), "--quiet",
                 "--set", "training.rounds=1"])
    assert code == 0
    printed = capsys.readouterr().out
    assert f"run directory: {out}" in printed
    assert json.loads((out / "summary.json").read_text())["rounds_completed"] == 1


def test_validate_accepts_a_good_scenario(synthetic_raw, tmp_path, capsys):
    assert main(["validate", str(write(tmp_path, synthetic_raw))]) == 0
    assert ": ok (fedavg, 8 clients, synthetic)" in capsys.readouterr().out


def test_bad_input_is_one_line_exit_2_and_writes_nothing(synthetic_raw, tmp_path, capsys):
    out = tmp_path / "never"
    cases = [
        ({**synthetic_raw, "population": {"num_clients": 4, "clients_per_round": 5}},
         "population.clients_per_round: expected at most population.num_clients (4), got 5"),
        ({**synthetic_raw, "dataset": {"name": "cifar10", "root": str(tmp_path / "empty")}},
         "cifar10"),
        ({**synthetic_raw, "partition": {"kind": "classes_per_client", "k": 11}}, "partition"),
    ]
    for raw, expected in cases:
        code = main(["run", str(write(tmp_path, raw)), "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.startswith("fedssl: error: ") and expected in err
        assert err.count("\n") == 1, err
        assert not out.exists()


def test_used_output_directory_is_refused(synthetic_raw, tmp_path, capsys):
    out = tmp_path / "used"
    out.mkdir()
    (out / "keep.txt").write_text("data")
    assert main(["run", str(write(tmp_path, synthetic_raw)), "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "data"
