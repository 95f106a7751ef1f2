"""Learning curves of finished runs: mean ± std over seeds per round, Parquet and PNGs read back."""
import math

import pyarrow.parquet as pq
import pytest

from analysis.curves import learning_curves, write_curves
from analysis.report import read_run
from simulator.cli import main
from tests.analysis.test_report import fake_run, write_metrics


def runs_with_curves(tmp_path):
    a0, a1, b0 = fake_run(tmp_path, "a", 0, 0.7), fake_run(tmp_path, "a", 1, 0.7), fake_run(tmp_path, "b", 0, 0.7)
    write_metrics(a0, [(0, "eval/knn_top1", 0.50), (2, "eval/knn_top1", 0.60), (4, "eval/knn_top1", 0.70),
                       (1, "train/loss", 3.0), (2, "train/loss", 2.0)])
    write_metrics(a1, [(0, "eval/knn_top1", 0.52), (2, "eval/knn_top1", 0.64),  # no round 4
                       (1, "train/loss", 5.0), (2, "train/loss", 4.0)])
    write_metrics(b0, [(0, "eval/knn_top1", 0.40), (4, "eval/knn_top1", 0.80), (1, "train/loss", 1.0)])
    return [read_run(d) for d in (a0, a1, b0)]


def test_curves_average_the_seeds_at_rounds_every_seed_logged(tmp_path):
    runs = runs_with_curves(tmp_path)
    rows = learning_curves(runs, ("eval/knn_top1", "train/loss"))
    knn_a = [(r["round"], r["mean"], r["std"], r["seeds"]) for r in rows
             if r["scenario"] == "a" and r["metric"] == "eval/knn_top1"]
    assert [k[0] for k in knn_a] == [0, 2] and [k[3] for k in knn_a] == [2, 2]
    assert knn_a[0][1] == pytest.approx(0.51) and knn_a[0][2] == pytest.approx(0.02 / 2 ** 0.5)
    assert knn_a[1][1] == pytest.approx(0.62) and knn_a[1][2] == pytest.approx(0.04 / 2 ** 0.5)
    knn_b = [(r["round"], r["mean"], r["std"]) for r in rows if r["scenario"] == "b" and r["metric"] == "eval/knn_top1"]
    assert knn_b == [(0, 0.40, 0.0), (4, 0.80, 0.0)]
    loss_a = [(r["round"], r["mean"]) for r in rows if r["scenario"] == "a" and r["metric"] == "train/loss"]
    assert loss_a == [(1, 4.0), (2, 3.0)]
    # knn_top1, as report's tables and --margin name it, is eval/knn_top1 (it was "no run logged it")
    assert learning_curves(runs, ("knn_top1",)) == [
        r for r in rows if r["metric"] == "eval/knn_top1"]


def test_curves_are_in_round_order_whatever_the_order_of_the_logged_rows(tmp_path):
    a0, a1 = fake_run(tmp_path, "a", 0, 0.7), fake_run(tmp_path, "a", 1, 0.7)
    write_metrics(a0, [(4, "eval/knn_top1", 0.70), (0, "eval/knn_top1", 0.50), (2, "eval/knn_top1", 0.60)])
    write_metrics(a1, [(2, "eval/knn_top1", 0.64), (4, "eval/knn_top1", 0.74), (0, "eval/knn_top1", 0.52)])
    rows = learning_curves([read_run(d) for d in (a0, a1)], ("eval/knn_top1",))
    assert [(r["round"], r["seeds"]) for r in rows] == [(0, 2), (2, 2), (4, 2)]
    assert [r["mean"] for r in rows] == pytest.approx([0.51, 0.62, 0.72])


def test_curves_parquet_and_one_png_per_metric_are_written(tmp_path):
    rows = learning_curves(runs_with_curves(tmp_path), ("eval/knn_top1", "train/loss"))
    paths = write_curves(rows, tmp_path / "plots")
    assert [p.name for p in paths] == ["eval_knn_top1.png", "train_loss.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
    assert pq.read_table(tmp_path / "plots" / "curves.parquet").to_pylist() == rows


def test_each_scenario_is_plotted_with_its_band_and_its_number_of_seeds(tmp_path, monkeypatch):
    """What the PNGs draw, read from matplotlib's calls: per metric, one line per scenario (a: 2 seeds,
    b: 1) over the rounds every seed logged, a band of mean -+ std, and a legend naming the seeds."""
    from matplotlib.axes import Axes
    calls = []

    def recording(method):
        original = getattr(Axes, method)

        def record(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            if method == "legend":
                calls.append((method, [text.get_text() for text in result.get_texts()]))
            else:
                calls.append((method, [list(a) for a in args], kwargs.get("label")))
            return result
        monkeypatch.setattr(Axes, method, record)
    for method in ("plot", "fill_between", "legend"):
        recording(method)
    rows = learning_curves(runs_with_curves(tmp_path), ("eval/knn_top1", "train/loss"))
    write_curves(rows, tmp_path / "plots")
    # eval/knn_top1: a at rounds 0, 2: means 0.51, 0.62, std 0.02 / sqrt 2, 0.04 / sqrt 2; b at 0, 4 (std 0)
    sa0, sa2 = 0.02 / 2 ** 0.5, 0.04 / 2 ** 0.5
    expected = [("plot", [[0, 2], [0.51, 0.62]], "a (2)"),
                ("fill_between", [[0, 2], [0.51 - sa0, 0.62 - sa2], [0.51 + sa0, 0.62 + sa2]], None),
                ("plot", [[0, 4], [0.40, 0.80]], "b (1)"),
                ("fill_between", [[0, 4], [0.40, 0.80], [0.40, 0.80]], None),
                ("legend", ["a (2)", "b (1)"]),
                # train/loss: a at rounds 1, 2: means 4, 3, std sqrt 2; b at round 1 alone
                ("plot", [[1, 2], [4.0, 3.0]], "a (2)"),
                ("fill_between", [[1, 2], [4.0 - 2 ** 0.5, 3.0 - 2 ** 0.5], [4.0 + 2 ** 0.5, 3.0 + 2 ** 0.5]], None),
                ("plot", [[1], [1.0]], "b (1)"),
                ("fill_between", [[1], [1.0], [1.0]], None),
                ("legend", ["a (2)", "b (1)"])]
    assert [call[0] for call in calls] == [call[0] for call in expected]
    for call, wanted in zip(calls, expected):
        if call[0] == "legend":
            assert call == wanted
        else:
            assert call[2] == wanted[2] and call[1] == [pytest.approx(values) for values in wanted[1]], call


def test_report_plot_from_the_command_line(tmp_path, capsys):
    dirs = [r["dir"] for r in runs_with_curves(tmp_path)]
    assert main(["report", *dirs, "--plot", str(tmp_path / "plots"), "--metric", "train/loss"]) == 0
    assert f"curves: {tmp_path / 'plots' / 'train_loss.png'}" in capsys.readouterr().out
    assert main(["report", *dirs, "--plot", str(tmp_path / "plots2"), "--metric", "eval/nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedssl: error: --metric eval/nope: no run logged it") and err.count("\n") == 1


def test_report_plot_refuses_a_folder_that_holds_files_and_a_file(tmp_path, capsys):
    dirs = [r["dir"] for r in runs_with_curves(tmp_path)]
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "curves.parquet").write_text("earlier curves")
    afile = tmp_path / "notes.txt"
    afile.write_text("notes")
    for plot, message in [(kept, f"{kept}: output directory is not empty; choose another --plot"),
                          (afile, f"{afile}: is a file; expected a directory for --plot"),
                          (afile / "plots", f"{afile / 'plots'}: lies under the file {afile}; expected a directory "
                                            f"for --plot")]:
        assert main(["report", *dirs, "--plot", str(plot), "--metric", "train/loss"]) == 2
        captured = capsys.readouterr()
        assert captured.err == f"fedssl: error: {message}\n" and captured.out == ""
    assert (kept / "curves.parquet").read_text() == "earlier curves" and afile.read_text() == "notes"
    assert [p.name for p in kept.iterdir()] == ["curves.parquet"]
    empty = tmp_path / "empty"  # an empty folder is used, as run --out uses one
    empty.mkdir()
    assert main(["report", *dirs, "--plot", str(empty), "--metric", "train/loss"]) == 0
    assert (empty / "curves.parquet").exists()


def test_a_nan_logged_by_one_seed_is_a_nan_point_not_an_error(tmp_path):
    """The alignment of NaN features is NaN: that round's mean and std are NaN (statistics.stdev raises on one)."""
    a0, a1 = fake_run(tmp_path, "a", 0, 0.7), fake_run(tmp_path, "a", 1, 0.7)
    write_metrics(a0, [(0, "eval/align", 0.50), (2, "eval/align", float("nan"))])
    write_metrics(a1, [(0, "eval/align", 0.70), (2, "eval/align", 0.40)])
    rows = learning_curves([read_run(d) for d in (a0, a1)], ("eval/align",))
    assert [r["round"] for r in rows] == [0, 2]
    assert rows[0]["mean"] == pytest.approx(0.60) and rows[0]["std"] == pytest.approx(0.2 / 2 ** 0.5)
    assert math.isnan(rows[1]["mean"]) and math.isnan(rows[1]["std"])


def test_a_metric_that_one_scenario_alone_logged_is_its_curve_alone(tmp_path):
    """A group metric of a Hetero-SSFL run, say, that the other scenario's runs do not log: plotted for
    the scenario that logged it (no error, and no line nor crash for the other)."""
    a0, b0 = fake_run(tmp_path, "a", 0, 0.7), fake_run(tmp_path, "b", 0, 0.7)
    write_metrics(a0, [(0, "eval/small_cnn/knn_top1_mean", 0.30), (2, "eval/small_cnn/knn_top1_mean", 0.40),
                       (1, "train/loss", 3.0)])
    write_metrics(b0, [(1, "train/loss", 2.0)])
    rows = learning_curves([read_run(d) for d in (a0, b0)], ("eval/small_cnn/knn_top1_mean", "train/loss"))
    assert [(r["scenario"], r["metric"], r["round"], r["mean"]) for r in rows] == [
        ("a", "eval/small_cnn/knn_top1_mean", 0, 0.30), ("a", "eval/small_cnn/knn_top1_mean", 2, 0.40),
        ("a", "train/loss", 1, 3.0), ("b", "train/loss", 1, 2.0)]
    paths = write_curves(rows, tmp_path / "plots")
    assert [p.name for p in paths] == ["eval_small_cnn_knn_top1_mean.png", "train_loss.png"]
