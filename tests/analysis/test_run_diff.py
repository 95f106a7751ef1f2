"""``fedssl diff``: two real runs compared value by value."""
import math
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.run_diff import diff_runs, logged_values
from simulator.cli import main
from simulator.run import run_scenario
from simulator.scenario import resolve
from tests.analysis.test_report import fake_run, write_metrics
from tests.conftest import tiny_scenario


@pytest.fixture(scope="module")
def runs(ray_session, tmp_path_factory):
    """The tiny synthetic scenario run twice on seed 3, and once on seed 4."""
    tmp_path = tmp_path_factory.mktemp("diff")
    raw = tiny_scenario(tmp_path)
    done = {}
    for name, seed in (("a", 3), ("again", 3), ("other_seed", 4)):
        done[name], _ = run_scenario(resolve({**raw, "seed": seed}), str(tmp_path / name), progress=False)
    return done


def copy_with_rows(run_dir, target, keep):
    """A copy of the run's directory whose ``metrics.parquet`` holds only the rows ``keep`` accepts."""
    shutil.copytree(run_dir, target)
    table = pq.read_table(run_dir / "metrics.parquet")
    pq.write_table(table.filter([keep(row) for row in table.to_pylist()]), target / "metrics.parquet")
    return target


def test_a_run_repeated_reproduces_and_another_seed_does_not(runs, capsys):
    a, again = logged_values(runs["a"]), logged_values(runs["again"])
    same = diff_runs(a, again)
    assert same.reproduces and same.compared == len(a) and same.last_round == 2
    assert main(["diff", str(runs["a"]), str(runs["again"])]) == 0  # wall times differ: left out
    assert "B reproduces A bitwise" in capsys.readouterr().out

    other = diff_runs(a, logged_values(runs["other_seed"]))
    assert not other.reproduces and other.differing
    assert other.differing[0][0][0] == 0  # a different seed's network differs from round 0 on
    assert main(["diff", str(runs["a"]), str(runs["other_seed"])]) == 1
    out = capsys.readouterr().out
    assert "B does not reproduce A" in out and "first differing: round 0" in out


def test_a_stopped_run_is_compared_as_far_as_it_got_and_new_names_are_listed_apart(runs, tmp_path, capsys):
    # the stopped copy lost its last round; the other lost one name (as a run of older code would)
    stopped = copy_with_rows(runs["a"], tmp_path / "stopped", lambda row: row["round"] <= 1)
    older = copy_with_rows(runs["again"], tmp_path / "older", lambda row: row["name"] != "eval/knn_top1")
    rows = pq.read_table(older / "metrics.parquet").to_pylist()  # and a name first logged after round 1
    rows.append({**rows[-1], "round": 2, "name": "eval/late", "value": 0.5})
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(older / "metrics.parquet")),
                   older / "metrics.parquet")
    result = diff_runs(logged_values(stopped), logged_values(older))
    assert result.last_round == 1 and result.reproduces
    assert result.only_a == ("eval/knn_top1",) and result.only_b == ()
    assert result.compared == sum(1 for r, n in logged_values(runs["a"]) if r <= 1 and n != "eval/knn_top1")
    assert main(["diff", str(stopped), str(older)]) == 0
    assert "logged by A alone (not compared): eval/knn_top1" in capsys.readouterr().out


def test_a_run_missing_values_of_a_name_both_log_does_not_reproduce(runs, tmp_path, capsys):
    """B lacks the round-1 evaluation A made (both log eval/ names): not bitwise the same run."""
    thinned = copy_with_rows(runs["again"], tmp_path / "thinned",
                             lambda row: not (row["round"] == 1 and row["name"].startswith("eval/")))
    result = diff_runs(logged_values(runs["a"]), logged_values(thinned))
    assert not result.differing and result.only_a == () and not result.reproduces
    assert result.missing and all(lacking == "B" and key[0] == 1 for key, lacking in result.missing)
    assert main(["diff", str(runs["a"]), str(thinned)]) == 1
    out = capsys.readouterr().out
    assert f"{len(result.missing)} values of names both runs log are missing from one run; first: round 1 eval/" in out
    assert "B does not reproduce A" in out


def test_a_nan_logged_by_both_runs_is_reproduced_and_against_a_number_it_differs(runs):
    a = logged_values(runs["a"])
    key = (2, "eval/linear_top1")
    assert diff_runs({**a, key: float("nan")}, {**a, key: float("nan")}).reproduces
    assert [k for k, _, _ in diff_runs(a, {**a, key: float("nan")}).differing] == [key]


def test_a_changed_value_is_found_with_its_size(runs, tmp_path):
    changed = copy_with_rows(runs["a"], tmp_path / "changed", lambda row: True)
    table = pq.read_table(changed / "metrics.parquet").to_pylist()
    target = next(row for row in table if row["round"] == 2 and row["name"] == "eval/linear_top1")
    target["value"] += 1e-6
    pq.write_table(pa.Table.from_pylist(table, schema=pq.read_schema(changed / "metrics.parquet")),
                   changed / "metrics.parquet")
    result = diff_runs(logged_values(runs["a"]), logged_values(changed))
    assert [key for key, _, _ in result.differing] == [(2, "eval/linear_top1")]
    (_, value_a, value_b), = result.differing
    assert value_b - value_a == pytest.approx(1e-6)


def test_a_directory_without_metrics_is_one_error_line(runs, tmp_path, capsys):
    assert main(["diff", str(runs["a"]), str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedssl: error:") and "no metrics.parquet" in err[0]


def test_two_runs_that_share_no_logged_value_have_nothing_to_compare_and_do_not_reproduce(tmp_path, capsys):
    a, b = fake_run(tmp_path, "a", 0, 0.7), fake_run(tmp_path, "b", 0, 0.7)
    write_metrics(a, [(0, "eval/knn_top1", 0.5), (1, "eval/knn_top1", 0.6)])
    write_metrics(b, [(0, "train/loss", 2.0), (1, "train/loss", 1.0)])
    result = diff_runs(logged_values(a), logged_values(b))
    assert (result.compared, result.differing, result.missing) == (0, (), ()) and not result.reproduces
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert out.endswith("\nnothing to compare: the runs share no logged value\n") and "bitwise" not in out


def test_a_metrics_table_without_a_row_is_one_error_line_naming_it(tmp_path, capsys):
    good, empty = fake_run(tmp_path, "a", 0, 0.7), fake_run(tmp_path, "a", 1, 0.7)
    write_metrics(good, [(0, "eval/knn_top1", 0.5)])
    pq.write_table(pa.table({"round": pa.array([], pa.int32()), "name": pa.array([], pa.string()),
                             "value": pa.array([], pa.float64())}), empty / "metrics.parquet")
    for argv in (["diff", str(good), str(empty)], ["diff", str(empty), str(good)]):
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        assert captured.err == (f"fedssl: error: {empty / 'metrics.parquet'}: no value logged (expected a run "
                                f"directory whose run has logged a round)\n") and captured.out == "", argv


def test_runs_that_log_no_round_in_common_say_so_not_rounds_0_to_minus_1(tmp_path, capsys):
    a, b = fake_run(tmp_path, "a", 0, 0.7), fake_run(tmp_path, "b", 0, 0.7)
    write_metrics(a, [(0, "eval/knn_top1", 0.5)])
    write_metrics(b, [(0, "time/round_seconds", 2.0)])  # machine-dependent: left out, nothing of B is compared
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "\nno round logged by both runs: 0 values compared" in out and "rounds 0--1" not in out, out
    assert out.endswith("\nnothing to compare: the runs share no logged value\n")


def test_a_nan_in_a_against_a_number_in_b_differs(tmp_path, capsys):
    key = (1, "eval/knn_top1")
    a, b = {(0, "eval/knn_top1"): 0.5, key: float("nan")}, {(0, "eval/knn_top1"): 0.5, key: 0.6}
    result = diff_runs(a, b)
    assert [k for k, _, _ in result.differing] == [key] and not result.reproduces
    run_a, run_b = fake_run(tmp_path, "a", 0, 0.7), fake_run(tmp_path, "b", 0, 0.7)
    write_metrics(run_a, [(r, n, v) for (r, n), v in a.items()])
    write_metrics(run_b, [(r, n, v) for (r, n), v in b.items()])
    assert main(["diff", str(run_a), str(run_b)]) == 1
    assert "first differing: round 1 eval/knn_top1: nan (A) against 0.6 (B)" in capsys.readouterr().out


def test_the_diff_text_gives_round_0_and_last_headlines_the_first_and_the_largest_difference(tmp_path, capsys):
    """Three values differ: round 0 probe by 0.01 (the first), round 2 kNN by 0.02, round 1 loss by 0.5
    (the largest); the headline runs from round 0 to the last evaluated round, 2."""
    run_a, run_b = fake_run(tmp_path, "a", 0, 0.7), fake_run(tmp_path, "b", 0, 0.7)
    write_metrics(run_a, [(0, "eval/knn_top1", 0.50), (0, "eval/linear_top1", 0.55), (1, "train/loss", 2.0),
                          (2, "eval/knn_top1", 0.60), (2, "eval/linear_top1", 0.70), (2, "time/round_seconds", 1.0)])
    write_metrics(run_b, [(0, "eval/knn_top1", 0.50), (0, "eval/linear_top1", 0.56), (1, "train/loss", 2.5),
                          (2, "eval/knn_top1", 0.62), (2, "eval/linear_top1", 0.70), (2, "time/round_seconds", 9.0)])
    assert main(["diff", str(run_a), str(run_b)]) == 1
    assert capsys.readouterr().out == (
        f"A: {run_a}: knn_top1 50.00 (round 0) → 60.00 (round 2), linear_top1 55.00 (round 0) → 70.00 (round 2); "
        f"code not recorded, numerics not recorded\n"
        f"B: {run_b}: knn_top1 50.00 (round 0) → 62.00 (round 2), linear_top1 56.00 (round 0) → 70.00 (round 2); "
        f"code not recorded, numerics not recorded\n"
        "rounds 0-2: 5 values compared (time/ and memory/ left out), 3 differ\n"
        "first differing: round 0 eval/linear_top1: 0.55 (A) against 0.56 (B); largest difference 0.5 "
        "(train/loss, round 1)\n"
        "B does not reproduce A\n")


def test_a_value_one_ulp_apart_differs_the_diff_having_no_tolerance():
    a = {(0, "eval/knn_top1"): 0.5, (1, "train/loss"): 2.0}
    result = diff_runs(a, {**a, (1, "train/loss"): math.nextafter(2.0, 3.0)})
    assert [key for key, _, _ in result.differing] == [(1, "train/loss")] and not result.reproduces


def test_minus_zero_against_zero_differs_the_diff_comparing_bits():
    a = {(0, "eval/knn_top1"): 0.5, (1, "train/loss_uv"): 0.0}
    result = diff_runs(a, {**a, (1, "train/loss_uv"): -0.0})
    assert [key for key, _, _ in result.differing] == [(1, "train/loss_uv")] and not result.reproduces
    assert diff_runs(a, dict(a)).reproduces


def test_a_value_that_b_logged_and_a_lacks_is_missing_from_a(tmp_path, capsys):
    """B made a round-1 evaluation A did not (both evaluate at round 0): missing from A, not reproduced."""
    a = {(0, "eval/knn_top1"): 0.5, (1, "train/loss"): 2.0}
    b = {**a, (1, "eval/knn_top1"): 0.6}
    result = diff_runs(a, b)
    assert (result.compared, result.differing, result.missing) == (2, (), (((1, "eval/knn_top1"), "A"),))
    assert not result.reproduces
    run_a, run_b = fake_run(tmp_path, "a", 0, 0.7), fake_run(tmp_path, "b", 0, 0.7)
    write_metrics(run_a, [(r, n, v) for (r, n), v in a.items()])
    write_metrics(run_b, [(r, n, v) for (r, n), v in b.items()])
    assert main(["diff", str(run_a), str(run_b)]) == 1
    out = capsys.readouterr().out
    assert ("\n1 values of names both runs log are missing from one run; first: round 1 eval/knn_top1, missing from "
            "A\nB does not reproduce A\n") in out


def test_each_runs_line_gives_its_own_code_numerics_and_last_evaluated_round(tmp_path, capsys):
    """Two runs of other code: each line names its own; the kNN headline ends at the last evaluated
    round (2), not the last round logged (3, a loss)."""
    run_a = fake_run(tmp_path, "a", 0, 0.7, code=["fedssl 0.1.0, git abc1234"],
                     numerics=["torch 2.4.0, CPU AVX2"])
    run_b = fake_run(tmp_path, "b", 0, 0.7, code=["fedssl 0.1.0, git def5678"],
                     numerics=["torch 2.5.1, CPU AVX512"])
    rows = [(0, "eval/knn_top1", 0.5), (2, "eval/knn_top1", 0.6), (3, "train/loss", 1.0)]
    write_metrics(run_a, rows)
    write_metrics(run_b, rows)
    assert main(["diff", str(run_a), str(run_b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [f"A: {run_a}: knn_top1 50.00 (round 0) → 60.00 (round 2); code fedssl 0.1.0, git abc1234, "
                         f"numerics torch 2.4.0, CPU AVX2",
                         f"B: {run_b}: knn_top1 50.00 (round 0) → 60.00 (round 2); code fedssl 0.1.0, git def5678, "
                         f"numerics torch 2.5.1, CPU AVX512"]


def test_a_summary_whose_code_is_not_a_list_is_one_error_line_naming_it(tmp_path, capsys):
    """A code of "abc1234" (a string, not the list fedssl run records) is refused, not shown as
    "a; b; c; 1; 2; 3; 4"."""
    run_a, run_b = fake_run(tmp_path, "a", 0, 0.7), fake_run(tmp_path, "b", 0, 0.7, code="abc1234")
    for run_dir in (run_a, run_b):
        write_metrics(run_dir, [(0, "eval/knn_top1", 0.5)])
    assert main(["diff", str(run_a), str(run_b)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"fedssl: error: {run_b / 'summary.json'}: code: expected a list of strings")
