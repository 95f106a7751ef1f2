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
    # values alike only in Python's equality or in a float's precision are two values
    assert len(grid(["x=1,true"])[1]) == 2 and len(grid(["seed=100000000000000000,100000000000000001"])[1]) == 2


EXPECTED_OVER = ("expected dotted.key=value1,value2,... (a list value in brackets, "
                 "e.g. augment.crop_scale=[0.2,1.0],[0.35,1.0])")


@pytest.mark.parametrize("over, message", [
    ("training.lr=0.1,0.1", "--over: training.lr=0.1,0.1: the value 0.1 is given twice; expected each value once"),
    ("seed=0,1,2,1", "--over: seed=0,1,2,1: the value 1 is given twice; expected each value once"),
    # one value written two ways ran the same point twice, under two folder names
    ("training.lr=0.1,0.10", '--over: training.lr=0.1,0.10: the values "0.1" and "0.10" are one value; expected each '
                             'value once'),
    ("training.lr=1,0.5,1.0", '--over: training.lr=1,0.5,1.0: the values "1" and "1.0" are one value; expected each '
                              'value once'),
    ("seed=1, 1", '--over: seed=1, 1: the values "1" and " 1" are one value; expected each value once'),
    ("augment.crop_scale=[0.2,1.0],[0.2, 1.0]", '--over: augment.crop_scale=[0.2,1.0],[0.2, 1.0]: the values '
                                                '"[0.2,1.0]" and "[0.2, 1.0]" are one value; expected each value once'),
    # a list's numbers written two ways ran the same point twice (a 100-round quickstart each)
    ("augment.crop_scale=[0.2,1.0],[0.2,1]", '--over: augment.crop_scale=[0.2,1.0],[0.2,1]: the values "[0.2,1.0]" '
                                             'and "[0.2,1]" are one value; expected each value once'),
    ("population.speed_tiers=[{fraction: 1, samples_per_second: 9}],[{samples_per_second: 9.0, fraction: 1}]",
     '--over: population.speed_tiers=[{fraction: 1, samples_per_second: 9}],[{samples_per_second: 9.0, fraction: 1}]: '
     'the values "[{fraction: 1, samples_per_second: 9}]" and "[{samples_per_second: 9.0, fraction: 1}]" are one '
     'value; expected each value once'),
    ("=1,2", f"--over: =1,2: {EXPECTED_OVER}"),
    ("seed=1,,2", f"--over: seed=1,,2: {EXPECTED_OVER}"),
    ("augment.crop_scale=[0.2,1.0],[0.35,1.0", f"--over: augment.crop_scale=[0.2,1.0],[0.35,1.0: {EXPECTED_OVER}"),
    ("training.lr=0.1,{a", "--over: training.lr=0.1,{a: the value {a is not valid YAML; expected e.g. 5, 0.1, true, "
                           "[0.8,1.0] or a name"),  # was blamed on --set
    ("training.lr=0.1," + "[" * 3000 + "]" * 3000, "--over: training.lr=0.1," + "[" * 3000 + "]" * 3000 + ": a value is "
     "not valid YAML (nested too deeply for the reader); expected e.g. 5, 0.1, true, [0.8,1.0] or a name"),  # was a
    # RecursionError; a value Python cannot build (over 4,300 digits) was a ValueError's traceback
    ("seed=1," + "9" * 5000, "--over: seed=1," + "9" * 5000 + ": a value is not valid YAML (Exceeds the limit (4300 "
     "digits) for integer string conversion: value has 5000 digits); expected e.g. 5, 0.1, true, [0.8,1.0] or a name"),
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


def summary_of(n: int) -> dict:
    """A run's summary.json with every value the sweep's row reads distinct (``n``: which run)."""
    return {"steady_seconds_per_round": 1.5 * n, "steady_samples_per_second": 1000.0 * n,
            "driver_rss_mb_max": 700.0 + n, "peak_memory_mb": {"workers": 2000.0 + n, "driver": 9.0},
            "bytes_per_round": 5e6 * n, "bytes_up": 1.0, "bytes_down": 2.0,
            "final": {"knn_top1": 0.70 + n / 100, "linear_top1": 0.75 + n / 100},
            "initial": {"knn_top1": 0.40, "linear_top1": 0.45}, "pixels": {"knn_top1": 0.65, "linear_top1": 0.68},
            "rounds_completed": 10 * n, "seconds_to_end_of_round_1": 60.0 + n}


def test_a_row_reads_each_measure_from_its_own_summary_key():
    """Each measure of the table is its run's summary value of that name (a cost read from the wrong key,
    e.g. round 1's time as the steady time per round, tabulates and plots without a word)."""
    from analysis.sweep import row_of
    assert row_of({"seed": 3}, summary_of(2)) == {
        "seed": 3, "seconds_per_round": 3.0, "samples_per_second": 2000.0, "driver_peak_mb": 702.0,
        "workers_peak_mb": 2002.0, "bytes_per_round": 1e7, "final_knn_top1": 0.72, "final_linear_top1": 0.77,
        "round0_knn_top1": 0.40, "round0_linear_top1": 0.45, "pixels_knn_top1": 0.65, "pixels_linear_top1": 0.68,
        "rounds": 20, "seconds_to_end_of_round_1": 62.0}
    # evaluation off: no accuracies, not an error
    assert row_of({}, {**summary_of(1), "final": None, "initial": None, "pixels": None})["final_knn_top1"] is None


def test_the_table_holds_the_finished_runs_when_a_later_run_fails(synthetic_raw, tmp_path, monkeypatch):
    """sweep.parquet and sweep.md are rewritten after every run: a sweep whose second run fails keeps
    the first run's row (written only at the end, hours of runs left no table)."""
    import simulator.run
    from analysis.sweep import run_sweep

    class Boom(Exception):
        pass
    ran = []

    def fake_run(scenario, run_dir, progress):
        ran.append(scenario["population"]["num_clients"])
        if len(ran) == 2:
            raise Boom
        return None, summary_of(1)
    monkeypatch.setattr(simulator.run, "run_scenario", fake_run)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(synthetic_raw))
    out = tmp_path / "sweep"
    with pytest.raises(Boom):
        run_sweep(str(scenario), ["population.num_clients=4,8,16"], [], out, progress=False)
    assert ran == [4, 8]
    rows = pq.read_table(out / "sweep.parquet").to_pylist()
    assert [(r["population.num_clients"], r["seconds_per_round"]) for r in rows] == [(4, 1.5)]
    assert "| 4 | 1.5 | 1000 |" in (out / "sweep.md").read_text()


def test_markdown_prints_floats_to_four_significant_digits_and_a_missing_value_empty():
    from analysis.sweep import markdown
    text = markdown([{"method.name": "fedavg", "seed": 0, "seconds_per_round": 1.234567, "bytes_per_round": 1234567.0,
                      "final_knn_top1": 0.81234, "final_linear_top1": None}])
    assert text.splitlines()[:3] == [
        "| method.name | seed | seconds_per_round | bytes_per_round | final_knn_top1 | final_linear_top1 |",
        "|---|---|---|---|---|---|",
        "| fedavg | 0 | 1.235 | 1.235e+06 | 0.8123 |  |"]


def test_a_plot_draws_each_measure_against_the_first_key_one_line_per_other_combination(tmp_path, monkeypatch):
    """Swept as population.num_clients=100,10 and seed=0,1: per measure, a line per seed, its points
    ordered along the x axis of the clients (not in sweep order), every value plotted (a zero too)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from analysis.sweep import MEASURES, plot
    figures = []
    subplots = plt.subplots

    def recording(*args, **kwargs):
        figure, axis = subplots(*args, **kwargs)
        figures.append(axis)
        return figure, axis
    monkeypatch.setattr(plt, "subplots", recording)
    rows = [{"population.num_clients": n, "seed": seed, **{m: float(value) for m in MEASURES}}
            for (n, seed), value in zip([(100, 0), (100, 1), (10, 0), (10, 1)], [4, 3, 0, 1])]
    plot(rows, ["population.num_clients", "seed"], tmp_path)
    assert [axis.get_ylabel() for axis in figures] == list(MEASURES.values())
    for axis in figures:
        assert axis.get_xlabel() == "population.num_clients"
        assert [(line.get_label(), list(line.get_xdata()), list(line.get_ydata())) for line in axis.get_lines()] == [
            ("seed=0", [10.0, 100.0], [0.0, 4.0]), ("seed=1", [10.0, 100.0], [1.0, 3.0])]


def test_the_same_sweep_again_keeps_its_finished_runs_and_resumes_the_interrupted_one(synthetic_raw, tmp_path,
                                                                                      capsys):
    """A sweep whose second run was interrupted after its round-1 checkpoint (its round-2 checkpoint
    and summary gone, as a stop leaves them), run again by the same command: the first run is kept as
    it is (not repeated), the second resumes from round 1 and ends bitwise as it had; the table is the
    first sweep's. Another grid, another --set or the scenario file edited since is one line, exit 2,
    and nothing is written."""
    import shutil
    raw = {**synthetic_raw, "executor": "in_process", "output": {**synthetic_raw["output"], "checkpoint_every": 1}}
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(raw))
    out = tmp_path / "sweep"
    command = ["sweep", str(scenario), "--over", "training.lr=0.05,0.1", "--out", str(out)]
    assert main(command) == 0
    capsys.readouterr()
    first, second = out / "training.lr=0.05", out / "training.lr=0.1"
    table = pq.read_table(out / "sweep.parquet").to_pylist()
    kept = {p: p.read_bytes() for p in first.rglob("*") if p.is_file()}
    finished = json.loads((second / "summary.json").read_text())
    shutil.rmtree(second / "checkpoints" / "round_00002")
    (second / "summary.json").unlink()
    for other in (["sweep", str(scenario), "--over", "training.lr=0.05,0.2", "--out", str(out)],
                  [*command, "--set", "training.rounds=3"]):
        assert main(other) == 2
        err = capsys.readouterr().err
        assert err == (f"fedssl: error: {out}: holds another sweep ({scenario} --over training.lr=0.05,0.1); "
                       f"expected the same scenario, --over and --set to resume it, or a new --out\n")
    scenario.write_text(yaml.safe_dump({**raw, "seed": 4}))
    assert main(command) == 2
    assert capsys.readouterr().err == (f"fedssl: error: {out}: its sweep ran {scenario} as it was before an edit, not "
                                       f"{scenario} as it is now; expected the file as it was, to resume the sweep, "
                                       f"or a new --out\n")
    assert not (second / "summary.json").exists()
    scenario.write_text(yaml.safe_dump(raw))
    state = second / "checkpoints" / "round_00001" / "state.pt"
    saved = state.read_bytes()
    state.write_bytes(b"damaged")  # the interrupted run's checkpoint is checked before anything runs
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedssl: error: {state}") and err.count("\n") == 1
    state.write_bytes(saved)
    assert main(command) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("sweep: ")]
    assert lines[:2] == ["sweep: run 1/2 (training.lr=0.05)  finished before: kept",
                         "sweep: run 2/2 (training.lr=0.1)  resuming"]
    assert {p: p.read_bytes() for p in first.rglob("*") if p.is_file()} == kept
    resumed = json.loads((second / "summary.json").read_text())
    assert resumed["final"] == finished["final"] and resumed["rounds_completed"] == 2
    assert strip_times(pq.read_table(out / "sweep.parquet").to_pylist()) == strip_times(table)
    assert main(command) == 0  # everything finished: nothing runs
    assert "sweep: run 2/2 (training.lr=0.1)  finished before: kept" in capsys.readouterr().err


def strip_times(rows: list[dict]) -> list[dict]:
    """Table rows without the measures of the machine's speed and memory (a resumed run's differ)."""
    machine = ("seconds_per_round", "samples_per_second", "driver_peak_mb", "workers_peak_mb",
               "seconds_to_end_of_round_1")
    return [{k: v for k, v in row.items() if k not in machine} for row in rows]
