import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from analysis.report import (LEARNING_MARGINS, by_scenario, learning_table, markdown_table, mean_std,
                             paired_difference, paired_table, pixel_table, read_run, t_interval)
from simulator.cli import main


def fake_run(tmp_path, name, seed, final_knn, projector_knn=None, numerics=None, code=None, pixels=None):
    run_dir = tmp_path / f"{name}-{seed}"
    run_dir.mkdir()
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump({"name": name, "seed": seed}))
    projector = lambda value: {} if projector_knn is None else {"knn_projector_top1": value}  # noqa: E731
    summary = {"initial": {"knn_top1": 0.5, "linear_top1": 0.6, **projector(0.4)},
               "final": {"knn_top1": final_knn, "linear_top1": 0.7, **projector(projector_knn)},
               "rounds_completed": 3, "wall_seconds": 12.0, **({"numerics": numerics} if numerics else {}),
               **({"code": code} if code else {}), **({"pixels": pixels} if pixels else {})}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def test_table_has_mean_std_per_scenario_and_per_seed_rows(tmp_path):
    runs = [read_run(fake_run(tmp_path, "a", s, v)) for s, v in [(0, 0.70), (1, 0.80), (2, 0.90)]]
    runs.append(read_run(fake_run(tmp_path, "b", 0, 0.75)))
    table = markdown_table(runs)
    assert "| a | 0,1,2 | 50.00 ± 0.00 | 60.00 ± 0.00 | 80.00 ± 10.00 | 70.00 ± 0.00 |" in table
    assert "| b | 0 | 50.00 (1 seed) | 60.00 (1 seed) | 75.00 (1 seed) |" in table  # not "± 0.00": no spread known
    assert "| a | 1 | 50.00 | 60.00 | 80.00 | 70.00 | 3 | 12 |" in table


def test_a_value_that_is_not_a_finite_number_makes_its_cell_n_a():
    assert mean_std([0.5, float("nan"), 0.4]) == "n/a" and mean_std([float("inf")]) == "n/a"
    assert mean_std([0.5, 0.4]) == "45.00 ± 7.07"


def test_unfinished_run_is_an_error(tmp_path, capsys):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "scenario.yaml").write_text(yaml.safe_dump({"name": "a", "seed": 0}))
    with pytest.raises(ValueError, match="no summary.json"):
        read_run(tmp_path / "half")
    assert main(["report", str(tmp_path / "half")]) == 2
    assert "did not finish" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "typo")]) == 2  # not "did not finish": it never started
    assert capsys.readouterr().err == f"fedssl: error: {tmp_path / 'typo'}: no such run directory\n"
    (tmp_path / "folder").mkdir()  # nor for a folder that holds no run at all
    assert main(["report", str(tmp_path / "folder")]) == 2
    assert capsys.readouterr().err == (f"fedssl: error: {tmp_path / 'folder'}: -: not a run directory (no scenario.yaml); "
                                       f"expected a directory written by fedssl run\n")


@pytest.mark.parametrize("damaged, content, expected", [
    ("summary.json", "{not json", "summary.json: -: not valid JSON (Expecting property name"),
    ("summary.json", "[1, 2]", "summary.json: -: expected a JSON object (the summary fedssl run writes), got list"),
    ("summary.json", "{}", "summary.json: initial: expected the evaluated metrics, got None"),
    ("summary.json", '{"initial": {"knn_top1": 0.5, "linear_top1": 0.6}, "final": {}}',
     "summary.json: final: expected the evaluated metrics (with knn_top1, linear_top1), found no knn_top1, linear_top1"),
    ("summary.json", '{"initial": {"knn_top1": 0.5, "linear_top1": 0.6}, "final": {"knn_top1": null, "linear_top1": 1}}',
     "summary.json: final.knn_top1: expected a finite number, got None"),
    ("summary.json", '{"initial": {"knn_top1": "abc", "linear_top1": 0.6}, "final": {"knn_top1": 1, "linear_top1": 1}}',
     "summary.json: initial.knn_top1: expected a finite number, got 'abc'"),
    ("summary.json", '{"initial": {"knn_top1": 0.5, "linear_top1": NaN}, "final": {"knn_top1": 1, "linear_top1": 1}}',
     "summary.json: initial.linear_top1: expected a finite number, got nan"),
    ("summary.json", '{"initial": {"knn_top1": 0.5, "linear_top1": 0.6, "align": "x"}, '
                     '"final": {"knn_top1": 1, "linear_top1": 1}}',
     "summary.json: initial.align: expected a number, got 'x'"),
    ("summary.json", '{"initial": {"knn_top1": 0.5, "linear_top1": 0.6}, "final": {"knn_top1": 1, "linear_top1": 1}, '
                     '"pixels": {"knn_top1": true}}',
     "summary.json: pixels.knn_top1: expected a finite number, got True"),
    ("summary.json", '{"initial": {"knn_top1": 0.5, "linear_top1": 0.6}, "final": {"knn_top1": 1, "linear_top1": 1}, '
                     '"rounds_completed": "3", "wall_seconds": 12.0}',
     "summary.json: rounds_completed: expected a non-negative integer, got '3'"),
    ("summary.json", '{"initial": {"knn_top1": 0.5, "linear_top1": 0.6}, "final": {"knn_top1": 1, "linear_top1": 1}, '
                     '"rounds_completed": 3, "wall_seconds": [12]}',
     "summary.json: wall_seconds: expected a number of seconds, got [12]"),
    ("summary.json", '{"initial": {"knn_top1": 0.5, "linear_top1": 0.6}, "final": {"knn_top1": 1, "linear_top1": 1}, '
                     '"rounds_completed": true, "wall_seconds": 12.0}',
     "summary.json: rounds_completed: expected a non-negative integer, got True"),
    ("summary.json", '{"initial": {"knn_top1": 0.5, "linear_top1": 0.6}, "final": {"knn_top1": 1, "linear_top1": 1}, '
                     '"rounds_completed": -1, "wall_seconds": 12.0}',
     "summary.json: rounds_completed: expected a non-negative integer, got -1"),
    ("summary.json", '{"initial": {"knn_top1": 0.5, "linear_top1": 0.6}, "final": {"knn_top1": 1, "linear_top1": 1}, '
                     '"rounds_completed": 3, "wall_seconds": true}',
     "summary.json: wall_seconds: expected a number of seconds, got True"),
    ("summary.json", '{"initial": {"knn_top1": 0.5, "linear_top1": 0.6}, "final": {"knn_top1": 1, "linear_top1": 1}, '
                     '"rounds_completed": 3, "wall_seconds": Infinity}',
     "summary.json: wall_seconds: expected a number of seconds, got inf"),
    ("scenario.yaml", "name: [unclosed", "scenario.yaml: line 1: not valid YAML"),
    ("scenario.yaml", "- a list", "scenario.yaml: -: expected the resolved scenario fedssl run writes"),
])
def test_a_damaged_run_file_is_one_line_naming_it_in_report_and_diff(tmp_path, capsys, damaged, content, expected):
    good, run_dir = fake_run(tmp_path, "a", 0, 0.7), fake_run(tmp_path, "a", 1, 0.7)
    (run_dir / damaged).write_text(content)
    commands = [["report", str(run_dir)]]
    if damaged == "summary.json" and not content.startswith("{"):  # diff reads the summary for its code line
        pq.write_table(pa.table({"round": [0], "name": ["eval/knn_top1"], "value": [0.5]}), good / "metrics.parquet")
        pq.write_table(pa.table({"round": [0], "name": ["eval/knn_top1"], "value": [0.5]}), run_dir / "metrics.parquet")
        commands.append(["diff", str(good), str(run_dir)])
    for argv in commands:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"fedssl: error: {run_dir / expected}"), err
        assert err.count("\n") == 1, err


@pytest.mark.parametrize("key, value", [("code", 5), ("code", [1, 2]), ("code", "fedssl 0.1.0"), ("numerics", 5),
                                        ("numerics", {"torch": "2.14.1"})])
def test_a_code_or_numerics_that_is_not_a_list_of_strings_is_one_line_in_report_and_diff(tmp_path, capsys, key,
                                                                                         value):
    good, run_dir = fake_run(tmp_path, "a", 0, 0.7), fake_run(tmp_path, "a", 1, 0.7)
    path = run_dir / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    for each in (good, run_dir):
        write_metrics(each, [(0, "eval/knn_top1", 0.5)])
    for argv in (["report", str(run_dir)], ["diff", str(good), str(run_dir)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"fedssl: error: {path}: {key}: expected a list of strings ("), err
        assert err.endswith(f"got {value!r}\n") and err.count("\n") == 1, err


def test_a_run_directory_that_is_a_file_is_said_to_be_one_in_report_and_diff(tmp_path, capsys):
    afile, good = tmp_path / "notes.txt", fake_run(tmp_path, "a", 0, 0.7)
    afile.write_text("data")
    write_metrics(good, [(0, "eval/knn_top1", 0.5)])
    for argv in (["report", str(afile)], ["diff", str(good), str(afile)], ["diff", str(afile), str(good)]):
        assert main(argv) == 2, argv
        assert capsys.readouterr().err == f"fedssl: error: {afile}: is a file; expected a run directory\n", argv
    assert afile.read_text() == "data"


@pytest.mark.parametrize("damage, expected", [
    (lambda path: pq.write_table(pa.table({"a": [1]}), path),
     "round: expected the metrics table fedssl run writes (columns round, name, value); found the columns a (int64)"),
    (lambda path: path.mkdir(), "-: not a file; expected the metrics table fedssl run writes"),
    (lambda path: path.write_text("round,name,value\\n"), "-: cannot be read as Parquet (Parquet magic bytes not found"),
    (lambda path: None, "-: no such file; expected the metrics table fedssl run writes"),
])
def test_a_damaged_metrics_table_is_one_line_naming_it_in_report_diff_and_plot(tmp_path, capsys, damage, expected):
    good, run_dir = fake_run(tmp_path, "a", 0, 0.7), fake_run(tmp_path, "a", 1, 0.7)
    write_metrics(good, [(0, "eval/knn_top1", 0.5)])
    damage(run_dir / "metrics.parquet")
    commands = [["report", str(good), str(run_dir), "--plot", str(tmp_path / "plots")], ["diff", str(good), str(run_dir)]]
    if run_dir.joinpath("metrics.parquet").exists():  # a run without one is tabulated (no groups), not plotted or diffed
        commands.append(["report", str(run_dir)])
    for argv in commands:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        if argv[0] == "diff" and expected.startswith("-: no such file"):
            assert err == f"fedssl: error: {run_dir}: no metrics.parquet (expected a run directory whose run has " \
                          f"logged a round)\n"
            continue
        assert err.startswith(f"fedssl: error: {run_dir / 'metrics.parquet'}: {expected}"), (argv, err)
        assert err.count("\n") == 1, err
    assert not (tmp_path / "plots").exists()


def test_paired_table_differences_by_seed_against_the_baseline(tmp_path, capsys):
    dirs = [fake_run(tmp_path, "base", s, v) for s, v in [(0, 0.60), (1, 0.70), (2, 0.80)]]
    dirs += [fake_run(tmp_path, "new", s, v) for s, v in [(0, 0.65), (1, 0.68), (3, 0.99)]]  # seed 3: unpaired
    table = paired_table([read_run(d) for d in dirs], "base")
    # differences on seeds 0 and 1: +5 and -2 points: mean +1.50, std 4.95, standard error 3.5,
    # t(0.975, 1 dof) = 12.7062: +1.50 -+ 44.47; ahead on 1 of 2
    assert ("| new | 0,1 (unpaired, left out: 2,3) | +1.50 [-42.97, +45.97] (ahead on 1/2) | +0.00 [+0.00, +0.00] "
            "(ahead on 0/2) |") in table
    assert "95% Student-t interval" in table
    assert "| base |" not in table
    assert main(["report", *map(str, dirs), "--baseline", "base"]) == 0
    assert "| new | 0,1 (unpaired, left out: 2,3) | +1.50" in capsys.readouterr().out
    assert main(["report", *map(str, dirs), "--baseline", "nope"]) == 2
    assert "--baseline: expected one of the scenario names ['base', 'new'], got 'nope'" in capsys.readouterr().err
    assert main(["report", *map(str, dirs), "--baseline", ""]) == 2  # was the table without it, exit 0
    assert capsys.readouterr().err == ("fedssl: error: --baseline: expected one of the scenario names ['base', 'new'], "
                                       "got ''\n")
    assert main(["report", *map(str, dirs[:3]), "--baseline", "base"]) == 2  # no other scenario: an empty table
    assert capsys.readouterr().err == ("fedssl: error: --baseline: every run given is scenario 'base'; expected runs "
                                       "of another scenario too, to compare with it\n")


def test_a_paired_difference_pairs_runs_by_seed_not_by_the_order_of_their_values():
    """Arm 0.9 on seed 0 and 0.1 on seed 1, baseline the reverse, listed in other orders: the
    differences are +80 and -80 points (pairing the sorted values, or the lists' orders, gives 0, 0)."""
    from analysis.report import paired_difference
    arm = [{"seed": 1, "v": 0.1}, {"seed": 0, "v": 0.9}]
    baseline = [{"seed": 0, "v": 0.1}, {"seed": 1, "v": 0.9}]
    pair = paired_difference(arm, baseline, lambda run: run["v"])
    assert pair.seeds == (0, 1) and pair.diffs == pytest.approx((80.0, -80.0)) and pair.ahead == 1


def test_paired_table_names_the_seeds_whose_runs_computed_with_different_numerics(tmp_path):
    avx2, avx512 = ["torch 2.14.1, CPU AVX2"], ["torch 2.14.1, CPU AVX512"]
    dirs = [fake_run(tmp_path, "base", s, 0.6, numerics=avx2) for s in (0, 1, 2)]
    dirs += [fake_run(tmp_path, "new", 0, 0.6, numerics=avx2), fake_run(tmp_path, "new", 1, 0.6, numerics=avx512),
             fake_run(tmp_path, "new", 2, 0.6)]  # seed 2: recorded none (an older run)
    table = paired_table([read_run(d) for d in dirs], "base")
    assert [line for line in table.splitlines() if line.startswith("- ")] == [
        "- seed 1: base on torch 2.14.1, CPU AVX2; new on torch 2.14.1, CPU AVX512"]
    assert "CPU instruction sets" in table
    same = [fake_run(tmp_path, "same", s, 0.6, numerics=avx2) for s in (0, 1)]
    assert "CPU instruction sets" not in paired_table([read_run(d) for d in [*dirs[:2], *same]], "base")


def test_two_runs_of_one_scenario_and_seed_are_one_line_exit_2(tmp_path, capsys):
    first, second = fake_run(tmp_path, "a", 0, 0.6), fake_run(tmp_path / "again", "a", 0, 0.7) if (
        tmp_path / "again").mkdir() is None else None
    other = fake_run(tmp_path, "a", 1, 0.6)
    assert main(["report", str(first), str(other), str(second)]) == 2
    err = capsys.readouterr().err
    assert err == (f"fedssl: error: {first} and {second} are both scenario 'a' seed 0; expected one run per "
                   f"scenario and seed (leave one out, or give one another name)\n")
    assert main(["report", str(first), str(other)]) == 0


def test_the_report_names_the_code_and_the_numerics_of_its_runs(tmp_path, capsys):
    one, two = "fedssl 0.1.0, git 0123456789ab", "fedssl 0.1.0, git ba9876543210+modified"
    avx2, avx512 = "torch 2.14.1+cu130, CPU AVX2", "torch 2.14.1+cu130, CPU AVX512"
    dirs = [fake_run(tmp_path, "a", 0, 0.6, code=[one], numerics=[avx2]),
            fake_run(tmp_path, "a", 1, 0.6, code=[one], numerics=[avx2]),
            fake_run(tmp_path, "b", 0, 0.6, code=[one, two], numerics=[avx512]),  # resumed under the second
            fake_run(tmp_path, "b", 1, 0.6)]  # older than the record
    assert main(["report", *map(str, dirs)]) == 0
    assert capsys.readouterr().out.splitlines()[-3:] == [
        "Code of the runs (`summary.json` `code`; a resumed run names each session's): "
        "`fedssl 0.1.0, git 0123456789ab` (3 runs); `fedssl 0.1.0, git ba9876543210+modified` (1 run); "
        "not recorded in 1 run (older than the record).",
        "",
        "Numerics of the runs (`summary.json` `numerics`; runs agree bitwise only where these agree): "
        "`torch 2.14.1+cu130, CPU AVX2` (2 runs); `torch 2.14.1+cu130, CPU AVX512` (1 run); "
        "not recorded in 1 run (older than the record)."]


def test_projector_knn_is_shown_when_every_run_has_it(tmp_path):
    dirs = [fake_run(tmp_path, "base", s, 0.6, projector_knn=p) for s, p in [(0, 0.30), (1, 0.40)]]
    dirs += [fake_run(tmp_path, "new", s, 0.6, projector_knn=p) for s, p in [(0, 0.35), (1, 0.50)]]
    runs = [read_run(d) for d in dirs]
    table = markdown_table(runs)
    assert "| initial knn_top1 | initial linear_top1 | initial knn_projector_top1 | final knn_top1 |" in table
    row = "| base | 0,1 | 50.00 ± 0.00 | 60.00 ± 0.00 | 40.00 ± 0.00 | 60.00 ± 0.00 | 70.00 ± 0.00 | 35.00 ± 7.07 |"
    assert row in table
    paired = paired_table(runs, "base")
    # +5 and +10 points on projector kNN: standard error 2.5, 12.7062 x 2.5 = 31.77
    assert "(ahead on 0/2) | +0.00 [+0.00, +0.00] (ahead on 0/2) | +7.50 [-24.27, +39.27] (ahead on 2/2) |" in paired
    older = read_run(fake_run(tmp_path, "older", 0, 0.6))
    assert "knn_projector_top1" not in markdown_table(runs + [older])
    assert "knn_projector_top1" not in paired_table(runs + [older], "base")


def write_metrics(run_dir, rows):
    columns = list(zip(*rows))
    pq.write_table(pa.table({"round": list(columns[0]), "name": list(columns[1]), "value": list(columns[2]),
                             "wall_seconds": [0.0] * len(rows)}), run_dir / "metrics.parquet")


def test_group_means_of_the_last_evaluation_per_scenario(tmp_path):
    dirs = []
    for seed, small_knn in ((0, 0.60), (1, 0.70)):
        run_dir = fake_run(tmp_path, "tiers", seed, 0.7)
        write_metrics(run_dir, [
            (5, "eval/small_cnn/knn_top1_mean", 0.1), (5, "eval/small_cnn/linear_top1_mean", 0.1),
            (5, "eval/large_cnn/knn_top1_mean", 0.2), (5, "eval/large_cnn/linear_top1_mean", 0.2),
            (10, "eval/small_cnn/knn_top1_mean", small_knn), (10, "eval/small_cnn/linear_top1_mean", 0.5),
            (10, "eval/small_cnn/knn_top1_std", 0.3), (10, "eval/small_cnn/4/knn_top1", 0.9),
            (10, "eval/knn_top1", 0.7), (10, "train/loss", 1.0)])
        dirs.append(run_dir)
    plain = fake_run(tmp_path, "plain", 0, 0.7)
    write_metrics(plain, [(3, "eval/knn_top1", 0.7), (3, "eval/linear_top1", 0.7)])
    runs = [read_run(d) for d in [*dirs, plain]]
    assert runs[0]["groups"] == {"small_cnn": {"knn_top1": 0.60, "linear_top1": 0.5}}  # round 10 only
    assert runs[2]["groups"] == {}
    groups_table = markdown_table(runs).split("(group mean)")[-1]
    assert "| tiers | small_cnn | 0,1 | 65.00 ± 7.07 | 50.00 ± 0.00 |" in groups_table
    assert "plain" not in groups_table and "large_cnn" not in groups_table


def test_paired_interval_is_the_t_interval_of_the_per_seed_differences(tmp_path, capsys):
    """Three seeds by hand: differences +1, +2, +6 points; mean 3, sample std sqrt(7) = 2.6458,
    standard error 1.5275, t(0.975, 2 dof) = 4.3027 (tables): 3 -+ 6.572 = [-3.57, +9.57]."""
    dirs = [fake_run(tmp_path, "base", s, v) for s, v in [(0, 0.50), (1, 0.60), (2, 0.70)]]
    dirs += [fake_run(tmp_path, "arm", s, v) for s, v in [(0, 0.51), (1, 0.62), (2, 0.76)]]
    dirs += [fake_run(tmp_path, "single", 2, 0.65)]  # one paired seed: no interval
    runs = [read_run(d) for d in dirs]
    low, high = t_interval([1.0, 2.0, 6.0])
    assert low == pytest.approx(3 - 4.302653 * 7 ** 0.5 / 3 ** 0.5, abs=1e-5)
    assert high == pytest.approx(9.5724, abs=1e-4)
    assert t_interval([1.0]) is None
    difference = paired_difference(by_scenario(runs)["arm"], by_scenario(runs)["base"], lambda run: run["final"]["knn_top1"])
    assert difference.seeds == (0, 1, 2) and difference.diffs == pytest.approx((1.0, 2.0, 6.0))
    assert difference.mean == pytest.approx(3.0) and difference.ahead == 3
    assert difference.interval == pytest.approx((-3.5724, 9.5724), abs=1e-4)
    table = paired_table(runs, "base")
    assert "| arm | 0,1,2 | +3.00 [-3.57, +9.57] (ahead on 3/3) |" in table
    assert "| single | 2 (unpaired, left out: 0,1) | -5.00 [n/a: 1 seed] (ahead on 0/1) |" in table
    assert main(["report", *map(str, dirs), "--baseline", "base"]) == 0
    assert "| arm | 0,1,2 | +3.00 [-3.57, +9.57] (ahead on 3/3) |" in capsys.readouterr().out


def test_the_interval_over_five_seeds_uses_t_with_four_degrees_of_freedom(tmp_path, capsys):
    """The protocol's five seeds by hand: differences +1, -1, +2, +3, 0 points; mean 1, sample std
    sqrt(10/4) = 1.581139 (n - 1 in the denominator), standard error 0.707107, two-sided 95%
    t(0.975, 4 dof) = 2.776445 (tables): 1 -+ 1.963243 = [-0.96, +2.96]. z = 1.96 would give [-0.39, +2.39],
    the population std [-0.76, +2.76], t with 5 dof [-0.82, +2.82], the one-sided t(0.95, 4) = 2.131847
    [-0.51, +2.51]."""
    half = 2.776445 * (10 / 4) ** 0.5 / 5 ** 0.5
    assert t_interval([1.0, -1.0, 2.0, 3.0, 0.0]) == pytest.approx((1 - half, 1 + half), abs=1e-5)
    dirs = [fake_run(tmp_path, "base", s, 0.60) for s in range(5)]
    dirs += [fake_run(tmp_path, "arm", s, v) for s, v in enumerate((0.61, 0.59, 0.62, 0.63, 0.60))]
    assert main(["report", *map(str, dirs), "--baseline", "base"]) == 0
    assert "| arm | 0,1,2,3,4 | +1.00 [-0.96, +2.96] (ahead on 3/5) |" in capsys.readouterr().out


def test_runs_given_out_of_seed_order_are_paired_and_named_in_seed_order(tmp_path, capsys):
    """Differences by seed: 0: 65 - 60 = +5, 1: 68 - 70 = -2, 2: 83 - 80 = +3 points; mean 2, sample std
    sqrt(13) = 3.60555, standard error 2.08167, t(0.975, 2) = 4.302653: 2 -+ 8.95669 = [-6.96, +10.96]."""
    dirs = [fake_run(tmp_path, "base", s, v) for s, v in [(2, 0.80), (0, 0.60), (1, 0.70)]]
    dirs += [fake_run(tmp_path, "new", s, v) for s, v in [(1, 0.68), (2, 0.83), (0, 0.65)]]
    runs = [read_run(d) for d in dirs]
    difference = paired_difference(by_scenario(runs)["new"], by_scenario(runs)["base"],
                                   lambda run: run["final"]["knn_top1"])
    assert difference.seeds == (0, 1, 2) and difference.diffs == pytest.approx((5.0, -2.0, 3.0))
    assert difference.interval == pytest.approx((-6.95669, 10.95669), abs=1e-5)
    assert main(["report", *map(str, dirs), "--baseline", "base"]) == 0
    assert "| new | 0,1,2 | +2.00 [-6.96, +10.96] (ahead on 2/3) |" in capsys.readouterr().out


def test_a_paired_run_lacking_the_value_gives_no_difference(tmp_path):
    """A missing value (None: a metric of later code) on either side of a pair gives no difference
    (shown as n/a), whichever side lacks it; and mean_std of values with a missing one is n/a."""
    dirs = [fake_run(tmp_path, "with", s, 0.6, projector_knn=0.3) for s in (0, 1)]
    dirs += [fake_run(tmp_path, "without", s, 0.6) for s in (0, 1)]
    groups = by_scenario([read_run(d) for d in dirs])
    projector = lambda run: run["final"].get("knn_projector_top1")  # noqa: E731
    assert paired_difference(groups["with"], groups["without"], projector) is None  # the baseline lacks it
    assert paired_difference(groups["without"], groups["with"], projector) is None  # the arm lacks it
    assert paired_difference(groups["with"], groups["with"], projector).diffs == (0.0, 0.0)
    assert mean_std([0.5, None]) == "n/a" and mean_std([None]) == "n/a"
    assert mean_std([0.5, 0.7]) == "60.00 ± 14.14"


def test_differences_of_exactly_a_margin_on_every_seed_are_that_margin_and_a_nan_is_no_difference(tmp_path):
    """Accuracies are counts over the test images: 100 images of 10,000 apart on every seed is a
    difference of exactly 1 point, whatever floating point makes of 100 * (0.8123 - 0.8023); the
    interval is then [+1, +1], and ``decide`` reads it as exactly 1 (at a 1-point margin a tie is "not
    reproduced", not "contradicted" or "reproduced" by noise). A NaN (of metrics.parquet) is no value."""
    from analysis.claims import decide
    assert 100 * (0.8123 - 0.8023) > 1 and 100 * (0.011 - 0.001) < 1  # the noise the rounding removes
    for a, b in ((0.8123, 0.8023), (0.011, 0.001)):
        runs = {name: [{"seed": seed, "final": {"m": value}} for seed in (0, 1, 2)]
                for name, value in (("a", a), ("b", b))}
        d = paired_difference(runs["a"], runs["b"], lambda run: run["final"]["m"])
        assert d.diffs == pytest.approx((1.0, 1.0, 1.0), abs=1e-12)
        assert d.cell() == "+1.00 [+1.00, +1.00] (ahead on 3/3)"
        assert decide(d.interval, "not_greater", 1.0)[0] == decide(d.interval, "equivalent", 1.0)[0] == "not reproduced"
    runs = [{"seed": seed, "final": {"m": value}} for seed, value in ((0, 0.5), (1, float("nan")))]
    baseline = [{"seed": seed, "final": {"m": 0.4}} for seed in (0, 1)]
    assert paired_difference(runs, baseline, lambda run: run["final"]["m"]) is None


def test_a_scenario_sharing_no_seed_with_the_baseline_is_a_row_of_n_a(tmp_path):
    """It was left out of ``fedssl report --baseline``'s table without a word."""
    dirs = [fake_run(tmp_path, "base", s, 0.6) for s in (0, 1)] + [fake_run(tmp_path, "other", s, 0.7) for s in (5, 6)]
    table = paired_table([read_run(d) for d in dirs], "base")
    assert "| other | none (no seed in common with the baseline) | n/a | n/a |" in table


def test_seeds_of_one_side_only_are_named_as_left_out_of_the_pairs(tmp_path):
    dirs = [fake_run(tmp_path, "base", s, 0.6) for s in (0, 1, 3)] + [fake_run(tmp_path, "other", s, 0.7)
                                                                       for s in (0, 1, 2)]
    table = paired_table([read_run(d) for d in dirs], "base")
    assert "| other | 0,1 (unpaired, left out: 2,3) | +10.00 [+10.00, +10.00] (ahead on 2/2) |" in table


def label_efficient_run(tmp_path, name, seed, finetune=False):
    """A run whose summary carries the label-efficient metrics (0.01 and 0.1, fine-tuning optional)."""
    run_dir = fake_run(tmp_path, name, seed, 0.7)
    summary = json.loads((run_dir / "summary.json").read_text())
    extra = {"knn_top1_10pct": 0.45, "linear_top1_10pct": 0.55, "knn_top1_1pct": 0.25, "linear_top1_1pct": 0.35,
             **({"finetune_top1_1pct": 0.40, "finetune_top1_10pct": 0.60} if finetune else {})}
    for section, shift in (("initial", 0.0), ("final", 0.1 + 0.01 * seed)):
        summary[section].update({k: v + shift for k, v in extra.items()})
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def test_label_efficient_metrics_are_shown_by_fraction_when_every_run_has_them(tmp_path, capsys):
    dirs = [label_efficient_run(tmp_path, "a", s) for s in (0, 1)]
    runs = [read_run(d) for d in dirs]
    table = markdown_table(runs)
    header = ("| scenario | seeds | initial knn_top1 | initial linear_top1 | initial knn_top1_1pct | "
              "initial linear_top1_1pct | initial knn_top1_10pct | initial linear_top1_10pct | final knn_top1 |")
    assert header in table
    # final 1% kNN: 0.25 + 0.10 and + 0.11 -> 35.50 ± 0.71
    assert "| 70.00 ± 0.00 | 70.00 ± 0.00 | 35.50 ± 0.71 | 45.50 ± 0.71 | 55.50 ± 0.71 | 65.50 ± 0.71 |" in table
    initial, final = "50.00 | 60.00 | 25.00 | 35.00 | 45.00 | 55.00", "70.00 | 70.00 | 36.00 | 46.00 | 56.00 | 66.00"
    assert f"| a | 1 | {initial} | {final} | 3 | 12 |" in table
    assert "final linear_top1_10pct" in paired_table(runs + [read_run(label_efficient_run(tmp_path, "b", 0))], "a")
    # fine-tuning columns when every run fine-tuned; none of the label-efficient ones beside an older run
    tuned = [read_run(label_efficient_run(tmp_path, "t", s, finetune=True)) for s in (0, 1)]
    assert ("| initial knn_top1_1pct | initial linear_top1_1pct | initial finetune_top1_1pct | initial knn_top1_10pct "
            "| initial linear_top1_10pct | initial finetune_top1_10pct |") in markdown_table(tuned)
    assert "finetune" not in markdown_table(runs + tuned) and "knn_top1_1pct" in markdown_table(runs + tuned)
    older = read_run(fake_run(tmp_path, "older", 0, 0.6))
    assert "pct" not in markdown_table(runs + [older])
    assert main(["report", *map(str, dirs)]) == 0
    assert header in capsys.readouterr().out


def test_learning_table_gives_each_runs_gain_over_its_round_0_and_whether_it_clears_the_margins(tmp_path, capsys):
    # round 0: kNN 0.50, probe 0.60 (fake_run); finals: probe 0.70 (+10) everywhere
    dirs = [fake_run(tmp_path, "a", 0, 0.53), fake_run(tmp_path, "a", 1, 0.515), fake_run(tmp_path, "b", 0, 0.49)]
    runs = [read_run(d) for d in dirs]
    table = learning_table(runs, LEARNING_MARGINS)
    assert "| scenario | seed | knn_top1 final − round 0 | linear_top1 final − round 0 | learned? |" in table
    assert "| a | 0 | +3.00 | +10.00 | clears the margins |" in table
    assert "| a | 1 | +1.50 | +10.00 | **below the margin** on knn_top1 (+1.50 < +2) |" in table
    assert "| b | 0 | -1.00 | +10.00 | **not above its round-0 network** on knn_top1 (-1.00) |" in table
    level = read_run(fake_run(tmp_path, "level", 0, 0.50))  # a final level with its round 0 has not learned
    assert "| level | 0 | +0.00 | +10.00 | **not above its round-0 network** on knn_top1 (+0.00) |" in \
        learning_table([level], LEARNING_MARGINS)
    assert "1 of 3 runs clear the learning margins (linear_top1 ≥ +4, knn_top1 ≥ +2 points over round 0)" in table
    # a gain of exactly the margin clears it, though 100 * (0.0203 - 0.0003) < 2 in floating point
    exact = {"initial": {"knn_top1": 0.0003, "linear_top1": 0.5006}, "final": {"knn_top1": 0.0203, "linear_top1": 0.5406}}
    assert 100 * (0.0203 - 0.0003) < 2 and 100 * (0.5406 - 0.5006) < 4
    assert learning_table([{**runs[0], **exact}], LEARNING_MARGINS).count("clears the margins") == 1
    # a gain just below a margin is not printed as reaching it (+3.999 rounds to +4.00)
    short = {"initial": {"knn_top1": 0.5, "linear_top1": 0.6}, "final": {"knn_top1": 0.53, "linear_top1": 0.63999}}
    assert "| a | 0 | +3.00 | +3.999 | **below the margin** on linear_top1 (+3.999 < +4) |" in \
        learning_table([{**runs[0], **short}], LEARNING_MARGINS)
    # the probe's margin decides too: +10 is below a margin of 11
    assert "**below the margin** on linear_top1 (+10.00 < +11)" in learning_table(runs[:1], {"linear_top1": 11.0})
    # fedssl report prints it, with margins of the user's
    assert main(["report", *map(str, dirs)]) == 0
    assert "| a | 1 | +1.50 | +10.00 | **below the margin**" in capsys.readouterr().out
    assert main(["report", *map(str, dirs), "--margin", "knn_top1=1"]) == 0
    out = capsys.readouterr().out
    assert "| a | 1 | +1.50 | +10.00 | clears the margins |" in out
    # the probe keeps its margin of 4 (one --margin replaced both, and a probe gain of 0 then "cleared")
    assert "(linear_top1 ≥ +4, knn_top1 ≥ +1 points over round 0)" in out


def test_learning_table_says_whether_each_run_gains_more_with_1pct_of_the_labels(tmp_path, capsys):
    # round 0 / final, in points: kNN 50 -> 53 (+3), probe 60 -> 70 (+10); 1%-label forms below
    def run_with_scarce_labels(name, knn_1pct_final, probe_1pct_final):
        run_dir = fake_run(tmp_path, name, 0, 0.53)
        summary = json.loads((run_dir / "summary.json").read_text())
        summary["initial"].update(knn_top1_1pct=0.30, linear_top1_1pct=0.40)
        summary["final"].update(knn_top1_1pct=knn_1pct_final, linear_top1_1pct=probe_1pct_final)
        (run_dir / "summary.json").write_text(json.dumps(summary))
        return run_dir
    dirs = [run_with_scarce_labels("more", 0.34, 0.55),  # +4 > +3, +15 > +10
            run_with_scarce_labels("kless", 0.33, 0.55),  # +3 is not more than +3
            run_with_scarce_labels("pless", 0.40, 0.49)]  # +9 < +10 on the probe
    table = learning_table([read_run(d) for d in dirs], LEARNING_MARGINS)
    assert "| learned? | more with 1% labels? |" in table
    assert "| more | 0 | +3.00 | +10.00 | +4.00 | +15.00 | clears the margins | yes |" in table
    assert "| kless | 0 | +3.00 | +10.00 | +3.00 | +15.00 | clears the margins | no: knn_top1_1pct +3.00 ≤ knn_top1 +3.00 |" \
        in table
    assert "| pless | 0 | +3.00 | +10.00 | +10.00 | +9.00 | clears the margins | no: linear_top1_1pct +9.00 ≤ linear_top1 +10.00 |" \
        in table
    assert "1 of 3 gain more with 1% of the labels than with all of them on linear_top1, knn_top1" in table
    # only for the margin metrics (a --margin on kNN alone judges the kNN pair alone), and not without 1% metrics
    assert "| kless | 0 | +3.00 | +10.00 | +3.00 | +15.00 | clears the margins | no: knn_top1_1pct" in learning_table(
        [read_run(d) for d in dirs], {"knn_top1": 2.0})
    assert "| pless | 0 | +3.00 | +10.00 | +10.00 | +9.00 | clears the margins | yes |" in learning_table(
        [read_run(d) for d in dirs], {"knn_top1": 2.0})
    assert "1%" not in learning_table([read_run(fake_run(tmp_path, "plain", 0, 0.53))], LEARNING_MARGINS)
    assert main(["report", *map(str, dirs)]) == 0
    assert "| more | 0 | +3.00 | +10.00 | +4.00 | +15.00 | clears the margins | yes |" in capsys.readouterr().out


@pytest.mark.parametrize("margin, message", [
    ("knn_top1", "--margin: expected METRIC=POINTS, e.g. knn_top1=2, got 'knn_top1'"),
    ("knn_top1=-1", "--margin: expected METRIC=POINTS with a metric name and finite POINTS > 0, got 'knn_top1=-1'"),
    ("knn_top1=inf", "--margin: expected METRIC=POINTS with a metric name and finite POINTS > 0, got 'knn_top1=inf'"),
    # "clears a margin of 0" would contradict "not above its round-0 network" for a gain of exactly 0
    ("knn_top1=0", "--margin: expected METRIC=POINTS with a metric name and finite POINTS > 0, got 'knn_top1=0'"),
    ("nope=2", "--margin: expected metrics every run has (knn_top1, linear_top1), got nope"),
    (["knn_top1=2", "knn_top1=30"], "--margin: expected each metric once, got knn_top1 twice ('knn_top1=30')"),
])
def test_a_bad_margin_is_one_line_exit_2(tmp_path, capsys, margin, message):
    run_dir = fake_run(tmp_path, "a", 0, 0.53)
    margins = [margin] if isinstance(margin, str) else margin
    assert main(["report", str(run_dir), *(arg for m in margins for arg in ("--margin", m))]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"fedssl: error: {message}\n" and captured.out == ""


def test_a_margin_on_a_metric_missing_from_the_final_evaluation_is_one_line(tmp_path, capsys):
    run_dir = fake_run(tmp_path, "a", 0, 0.53)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["initial"]["knn_projector_top1"] = 0.4  # round 0 has it, the final evaluation not
    (run_dir / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(run_dir), "--margin", "knn_projector_top1=1"]) == 2
    assert capsys.readouterr().err == ("fedssl: error: --margin: expected metrics every run has (knn_top1, "
                                       "linear_top1), got knn_projector_top1\n")


def test_the_pixel_table_puts_round_0_and_final_beside_the_raw_pixel_reference(tmp_path, capsys):
    # round 0: kNN 0.50, probe 0.60; finals: probe 0.70 (fake_run)
    pixels = {"knn_top1": 0.52, "linear_top1": 0.65, "align": 0.3}
    dirs = [fake_run(tmp_path, "a", 0, 0.55, pixels=pixels), fake_run(tmp_path, "a", 1, 0.51, pixels=pixels)]
    runs = [read_run(d) for d in dirs]
    table = pixel_table(runs)
    assert ("| scenario | seed | knn_top1 pixels | round 0 − pixels | final − pixels | linear_top1 pixels | "
            "round 0 − pixels | final − pixels |") in table
    assert "| a | 0 | 52.00 | -2.00 | +3.00 | 65.00 | -5.00 | +5.00 |" in table
    assert "| a | 1 | 52.00 | -2.00 | -1.00 | 65.00 | -5.00 | +5.00 |" in table
    assert "1 of 2 final networks are above it on knn_top1, linear_top1" in table
    # the count is of the kNN and the probe: a final below the pixels with 1% of the labels still counts
    scarce = [{**run, "initial": {**run["initial"], "linear_top1_1pct": 0.3}, "final": {**run["final"], "linear_top1_1pct": 0.4},
               "pixels": {**pixels, "linear_top1_1pct": 0.5}} for run in runs]
    assert "| 50.00 | -20.00 | -10.00 |" in pixel_table(scarce)
    assert "1 of 2 final networks are above it on knn_top1, linear_top1." in pixel_table(scarce)
    # fedssl report prints it; a run without the reference (older runs) leaves the table out
    assert main(["report", *map(str, dirs)]) == 0
    assert "| a | 0 | 52.00 | -2.00 | +3.00 |" in capsys.readouterr().out
    older = read_run(fake_run(tmp_path, "b", 0, 0.55))
    assert pixel_table(runs + [older]) is None
    assert main(["report", *map(str, dirs), older["dir"]]) == 0
    assert "pixels" not in capsys.readouterr().out


def test_the_pixel_table_shows_only_the_metrics_every_runs_reference_holds(tmp_path):
    """Both runs have the 1%-label kNN, but only seed 0's raw-pixel reference does (references of
    different code): the column is left out, not read from a reference that lacks it."""
    pixels = {"knn_top1": 0.52, "linear_top1": 0.65}
    runs = [read_run(fake_run(tmp_path, "a", s, 0.55, pixels=pixels)) for s in (0, 1)]
    runs = [{**run, "initial": {**run["initial"], "knn_top1_1pct": 0.3},
             "final": {**run["final"], "knn_top1_1pct": 0.4}} for run in runs]
    runs[0] = {**runs[0], "pixels": {**pixels, "knn_top1_1pct": 0.35}}
    table = pixel_table(runs)
    assert "knn_top1_1pct" not in table
    assert "| a | 0 | 52.00 | -2.00 | +3.00 | 65.00 | -5.00 | +5.00 |" in table
    assert "| a | 1 | 52.00 | -2.00 | +3.00 | 65.00 | -5.00 | +5.00 |" in table
    # with every reference holding it, it is shown: 35 pixels, round 0 30 (-5), final 40 (+5)
    runs[1] = {**runs[1], "pixels": {**pixels, "knn_top1_1pct": 0.35}}
    assert "| a | 1 | 52.00 | -2.00 | +3.00 | 65.00 | -5.00 | +5.00 | 35.00 | -5.00 | +5.00 |" in pixel_table(runs)
