"""``scripts/pixel_reference.py``: the raw-pixel reference of runs older than its record."""
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from simulator.evaluation.monitor import EvalData
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


def load_script():
    spec = importlib.util.spec_from_file_location("pixel_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_is_keyed_by_the_evaluation_data_not_by_where_the_files_are(synthetic_raw):
    """Two runs share a reference where the data set (but its root and cache), the eval settings, the seed
    and the augmentation agree."""
    key = load_script().evaluation_data_key
    scenario = resolve(synthetic_raw)
    changed = lambda section, **values: {**scenario, section: {**scenario[section], **values}}  # noqa: E731
    assert key(changed("dataset", root="/elsewhere", cache_dir="/other/cache")) == key(scenario)
    assert len({key(scenario), key({**scenario, "seed": scenario["seed"] + 1}), key(changed("eval", knn_k=7)),
                key(changed("augment", flip_prob=0.25)), key(changed("dataset", name="other")),
                key(changed("dataset", train_subset=100))}) == 6


def test_each_evaluation_data_is_evaluated_once_on_one_thread_without_the_labelled_samples(synthetic_raw,
                                                                                            monkeypatch):
    """Runs of one evaluation data share one evaluation; a run that recorded its reference keeps it (its
    directory is not even read); the labelled samples of semi-supervised runs are left out; one thread,
    the caller's number of threads restored after."""
    module = load_script()
    scenarios = {"/a": resolve(synthetic_raw), "/b": resolve(synthetic_raw),
                 "/c": resolve({**synthetic_raw, "seed": synthetic_raw["seed"] + 1})}
    labelled = torch.zeros(2, 1, 28, 28)
    evaluated = []

    def evaluate(networks, data, scenario):
        evaluated.append((scenario["seed"], data.labelled_x, data.labelled_y, torch.get_num_threads()))
        return {"global": {"knn_top1": scenario["seed"] / 100}}

    monkeypatch.setattr(module, "load_scenario", lambda path: scenarios[str(Path(path).parent)])
    monkeypatch.setattr(module, "load_eval_data", lambda scenario: EvalData(
        labelled, torch.zeros(2), labelled, torch.zeros(2), 10, labelled_x=labelled, labelled_y=torch.zeros(2)))
    monkeypatch.setattr(module, "evaluate_networks", evaluate)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        runs = module.with_references([{"dir": "/a"}, {"dir": "/b"}, {"dir": "/c"},
                                       {"dir": "/recorded", "pixels": {"knn_top1": 0.9}}])
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(threads)
    seed = synthetic_raw["seed"]
    assert evaluated == [(seed, None, None, 1), (seed + 1, None, None, 1)]
    assert [run["pixels"] for run in runs] == [{"knn_top1": seed / 100}] * 2 + [{"knn_top1": (seed + 1) / 100},
                                                                                 {"knn_top1": 0.9}]


def test_a_data_set_that_is_not_here_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    module = load_script()
    absent = tmp_path / "absent"
    (tmp_path / "scenario.yaml").write_text(f"name: x\nseed: 1\ndataset: {{name: fashion_mnist, root: {absent}}}\n")
    # a finished run without its reference
    monkeypatch.setattr(module, "read_run", lambda run_dir: {"dir": str(run_dir)})
    assert module.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pixel_reference: error: fashion_mnist: dataset.root ")


def test_no_run_directory_is_the_usage_exit_2(capsys):
    with pytest.raises(SystemExit) as exited:
        load_script().main([])
    assert exited.value.code == 2 and "usage: " in capsys.readouterr().err
