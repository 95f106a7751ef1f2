import json

import pyarrow.parquet as pq
import pytest
import yaml

from analysis.sweep import grid, run_dir_name
from simulator.cli import main
from simulator.scenario import ScenarioError


def test_grid_is_the_product_of_the_swept_values():
    keys, combos = grid(["population.num_clients=10,20", "seed=0,1,2"])
    assert keys == ["population.num_clients", "seed"]
    assert len(combos) == 6 and combos[0] == ["population.num_clients=10", "seed=0"]
    with pytest.raises(ScenarioError, match="expected dotted.key=value1,value2"):
        grid(["seed"])
    with pytest.raises(ScenarioError, match="--over: seed: swept twice; expected each key in one --over"):
        grid(["seed=0,1", "population.num_clients=10", "seed=2"])
    # a list-valued key: its values in brackets (the commas inside them split nothing)
    keys, combos = grid(["augment.crop_scale=[0.2,1.0],[0.35,1.0]"])
    assert combos == [["augment.crop_scale=[0.2,1.0]"], ["augment.crop_scale=[0.35,1.0]"]]


EXPECTED_OVER = ("expected dotted.key=value1,value2,... (a list value in brackets, "
                 "e.g. augment.crop_scale=[0.2,1.0],[0.35,1.0])")


@pytest.mark.parametrize("over, message", [
    ("training.lr=0.1,0.1", "--over: training.lr=0.1,0.1: the value 0.1 is given twice; expected each value once"),
    ("seed=0,1,2,1", "--over: seed=0,1,2,1: the value 1 is given twice; expected each value once"),
    ("=1,2", f"--over: =1,2: {EXPECTED_OVER}"),
    ("seed=1,,2", f"--over: seed=1,,2: {EXPECTED_OVER}"),
    ("augment.crop_scale=[0.2,1.0],[0.35,1.0", f"--over: augment.crop_scale=[0.2,1.0],[0.35,1.0: {EXPECTED_OVER}"),
    ("training.lr=0.1,{a", "--over: training.lr=0.1,{a: the value {a is not valid YAML; expected e.g. 5, 0.1, true, "
                           "[0.8,1.0] or a name"),  # was blamed on --set
    ("training.lr=0.1," + "[" * 3000 + "]" * 3000, "--over: training.lr=0.1," + "[" * 3000 + "]" * 3000 + ": a value is "
     "nested too deeply for the reader; expected e.g. 5, 0.1, true, [0.8,1.0] or a name"),  # was a RecursionError
])
def test_a_repeated_value_or_a_missing_key_is_one_line_before_anything_runs(synthetic_raw, tmp_path, capsys, over,
                                                                            message):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(synthetic_raw))
    with pytest.raises(ScenarioError) as err:
        grid([over])
    assert str(err.value) == message
    out = tmp_path / "sweep"
    assert main(["sweep", str(scenario), "--over", over, "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"fedssl: error: {message}\n"
    assert not out.exists()


def test_a_combination_whose_data_cannot_be_had_stops_the_sweep_before_anything_is_written(synthetic_raw, tmp_path,
                                                                                           capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({**synthetic_raw, "partition": {"kind": "classes_per_client"}}))
    out = tmp_path / "sweep"
    assert main(["sweep", str(scenario), "--over", "partition.k=2,11", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedssl: error: {scenario} (partition.k=11): partition: ") and err.count("\n") == 1, err
    assert not out.exists()


def test_sweep_writes_table_and_plots(ray_session, synthetic_raw, tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({**synthetic_raw, "training": {**synthetic_raw["training"], "rounds": 2}}))
    out = tmp_path / "sweep"
    assert main(["sweep", str(scenario), "--over", "population.num_clients=4,8", "--out", str(out)]) == 0
    rows = pq.read_table(out / "sweep.parquet").to_pylist()
    assert [r["population.num_clients"] for r in rows] == [4, 8]  # numbers, as a researcher's pandas expects
    assert all(r["samples_per_second"] > 0 and r["workers_peak_mb"] > 0 and r["bytes_per_round"] > 0 for r in rows)
    assert all(0 <= r["final_knn_top1"] <= 1 for r in rows)
    for row in rows:  # each row's accuracies are its run's: final beside round 0 and the pixels
        summary = json.loads((out / f"population.num_clients={row['population.num_clients']}" / "summary.json").read_text())
        for metric in ("knn_top1", "linear_top1"):
            assert row[f"final_{metric}"] == summary["final"][metric]
            assert row[f"round0_{metric}"] == summary["initial"][metric]
            assert row[f"pixels_{metric}"] == summary["pixels"][metric]
    # the command's second run starts long after the process's launch: no launch-to-round-1 time
    second = json.loads((out / "population.num_clients=8" / "summary.json").read_text())
    assert second["seconds_from_launch_to_end_of_round_1"] is None
    for measure in ("seconds_per_round", "samples_per_second", "workers_peak_mb", "final_linear_top1"):
        assert (out / f"{measure}.png").read_bytes()[:4] == b"\x89PNG"
    printed = capsys.readouterr()
    assert "| population.num_clients |" in printed.out
    assert "Accuracies (`*_top1`) are fractions of the test images" in (out / "sweep.md").read_text()
    lines = [line for line in printed.err.splitlines() if line.startswith("sweep: ")]
    assert lines[0].startswith("sweep: run 1/2 (population.num_clients=4)  elapsed ") and "eta" not in lines[0]
    assert lines[1].startswith("sweep: run 2/2 (population.num_clients=8)  elapsed ") and "  eta " in lines[1]
    assert lines[2].startswith("sweep: 2/2 runs done  elapsed ") and len(lines) == 3


def test_swept_values_are_numbers_where_every_value_of_the_key_is_one():
    from analysis.sweep import swept_values
    keys, combos = grid(["training.lr=0.1,1", "method.name=fedavg,rotpred", "seed=3,4", "augment.crop_scale=[0.2,1.0]",
                         "training.drop_last=true,false"])
    values = swept_values(keys, combos)
    assert len(values) == 16 and values[0] == {"training.lr": 0.1, "method.name": "fedavg", "seed": 3,
                                              "augment.crop_scale": "[0.2,1.0]", "training.drop_last": "true"}
    assert [type(v["training.lr"]) for v in values] == [float] * 16  # 1 among 0.1: a float column, not mixed
    assert values[-1]["training.lr"] == 1.0 and values[-1]["seed"] == 4


def test_a_sweep_over_names_plots_them_in_sweep_order(tmp_path):
    from analysis.sweep import MEASURES, plot
    rows = [{"method.name": name, "seed": "0", **{m: 1.0 + i for m in MEASURES}}
            for i, name in enumerate(["fedavg", "rotpred"])]
    plot(rows, ["method.name", "seed"], tmp_path)
    assert all((tmp_path / f"{m}.png").read_bytes()[:4] == b"\x89PNG" for m in MEASURES)


def test_a_measure_no_run_has_gets_no_plot(tmp_path):
    """Evaluation off (no accuracies), one round (no steady state): no PNG of empty axes for those."""
    from analysis.sweep import MEASURES, plot
    missing = {"final_knn_top1", "final_linear_top1", "seconds_per_round"}
    rows = [{"population.num_clients": n, **{m: None if m in missing else 1.0 + i for m in MEASURES}}
            for i, n in enumerate([10, 100])]
    plot(rows, ["population.num_clients"], tmp_path)
    assert sorted(p.stem for p in tmp_path.glob("*.png")) == sorted(set(MEASURES) - missing)


def test_sweep_validates_every_combination_before_running(synthetic_raw, tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(synthetic_raw))
    out = tmp_path / "never"
    code = main(["sweep", str(scenario), "--over", "population.clients_per_round=2,99", "--out", str(out)])
    assert code == 2 and "population.clients_per_round" in capsys.readouterr().err
    assert not out.exists()


def test_every_run_of_a_sweep_stays_in_its_out_and_too_long_a_name_is_one_line_before_anything_runs(
        synthetic_raw, tmp_path, capsys):
    """``--over output.dir=a/../../x`` wrote its run outside ``--out``; a combination of over 255 bytes was
    ``OSError: File name too long`` after an empty ``--out`` had been made."""
    assert run_dir_name(["output.dir=a/../../x", "name=n%2"]) == "output.dir=a%2F..%2F..%2Fx,name=n%252"
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(synthetic_raw))
    out = tmp_path / "never"
    lr = "0.05" + "0" * 50 + "1"  # a valid value of 55 characters: with the name's 205, a directory of 273
    assert main(["sweep", str(scenario), "--over", "name=" + "n" * 200 + ",m", "--over", f"training.lr={lr}",
                 "--out", str(out)]) == 2
    assert capsys.readouterr().err == ("fedssl: error: --over: a name of 273 bytes (name=nnnnnnnnnnnnnnn...); expected "
                                       "at most 255, the longest file name file systems take\n")
    assert not out.exists()


@pytest.mark.parametrize("set_item", ["training.rounds=3", "training={rounds: 3}"])
def test_a_key_set_and_swept_at_once_is_one_line_before_anything_runs(synthetic_raw, tmp_path, capsys, set_item):
    """``--set training.rounds=3 --over training.rounds=1,2`` ran rounds 1 and 2, the --set dropped unsaid."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(synthetic_raw))
    out = tmp_path / "never"
    assert main(["sweep", str(scenario), "--set", set_item, "--over", "training.rounds=1,2", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"fedssl: error: --set: {set_item.partition('=')[0]}: is swept by --over "
                                       f"training.rounds as well; expected each key in --set or in --over, not both\n")
    assert not out.exists()
