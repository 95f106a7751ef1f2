"""``scripts/projection_norms.py``: how often the spectral loss's clip binds in a run."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from simulator.augment import AugmentConfig, BatchAugment
from simulator.evaluation.monitor import load_eval_data
from simulator.run import run_scenario
from simulator.runlog import load_recorded_scenario
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


def load_script():
    spec = importlib.util.spec_from_file_location("projection_norms", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def unchanged(images, generator):
    return images


def batch_normalized(features: int) -> torch.nn.ModuleDict:
    """A network whose projections are its flattened images normalized over the batch (no affine)."""
    return torch.nn.ModuleDict({"encoder": torch.nn.Flatten(),
                                "projector": torch.nn.BatchNorm1d(features, affine=False)})


def test_a_row_is_the_smallest_median_99th_percentile_largest_and_share_strictly_above_sqrt_clip_mu():
    """101 norms 0, 1, ..., 99, 1000 (shuffled): the median 50, the 99th percentile the 100th value, 99;
    sqrt(2500) = 50, strictly above it 51, ..., 99, 1000: 50 of 101."""
    norms = torch.tensor([float(i) for i in range(100)] + [1000.0])
    norms = norms[torch.randperm(101, generator=torch.Generator().manual_seed(1))]
    norm_row = load_script().norm_row
    assert norm_row("run", 7, 3, norms, 2500.0) == "| run | 7 | 3 | 0.00 | 50.00 | 99.00 | 1000.00 | 2500 | 49.5 |"
    assert norm_row("run", 7, 3, norms, 0.25) == "| run | 7 | 3 | 0.00 | 50.00 | 99.00 | 1000.00 | 0.25 | 99.0 |"
    assert norm_row("run", 7, 3, norms, 0.0).endswith("| 1000.00 | 0 | - |")  # no clip


def test_the_norms_are_of_each_image_in_train_mode_over_batches_of_128():
    """Batch-normalized 16-feature projections in train mode: over each batch of 128 the squared norms sum
    to 128 * 16 (the batch variance over itself plus BatchNorm's epsilon: a factor within 1e-3 of 1), the last
    44 to 44 * 16; not so in eval mode (the initial running statistics pass the images on: 16 / 3 an image),
    nor over the first 64 of a batch whose next 64 spread wider."""
    images = torch.rand(300, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    images[64:128] *= 3  # the first batch's second half spread wider: its first half alone is no batch
    norms = load_script().projection_norms(batch_normalized(16), images, unchanged)
    assert norms.shape == (300,)
    squares = norms.double() ** 2
    for start, size in ((0, 128), (128, 128), (256, 44)):
        assert abs(squares[start:start + size].sum().item() / (16 * size) - 1) < 1e-3
    # the first 64 images about half as spread as the batch: (1/12 + 0.5^2) / (5/12 + 0.5^2) of the batch's
    assert abs(squares[:64].sum().item() / (16 * 64) - 0.5) < 0.1


def test_the_views_are_drawn_from_a_fixed_generator():
    """Two calls augment alike: a network's table does not depend on what ran before."""
    noisy = lambda images, generator: images + torch.rand(images.shape, generator=generator)  # noqa: E731
    images = torch.rand(200, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    projection_norms = load_script().projection_norms
    first, second = (projection_norms(batch_normalized(16), images, noisy) for _ in range(2))
    assert torch.equal(first, second)
    assert not torch.equal(first, projection_norms(batch_normalized(16), images, unchanged))  # the views drawn


def test_a_run_projects_its_first_training_images_of_the_eval_subset_with_its_augmentation(synthetic_raw, tmp_path,
                                                                                              monkeypatch):
    """Round 0's and the newest checkpoint's rows; the images are the first N of the evaluation subset's
    training images in [0, 1], augmented by the run's ``augment``; ``-`` for a method without a clip; a run
    with other than one global network is an error."""
    raw = {**synthetic_raw, "executor": "in_process", "training": {**synthetic_raw["training"], "rounds": 2},
           "method": {"name": "fedavg", "objective": "spectral", "clip_mu": 1e6}}
    run_dir, _ = run_scenario(resolve(raw), str(tmp_path / "run"), progress=False)
    module = load_script()
    seen = []
    original = module.projection_norms
    monkeypatch.setattr(module, "projection_norms",
                        lambda network, images, augment: seen.append((images, augment)) or original(network, images,
                                                                                                     augment))
    rows = module.run_rows(run_dir, 64)
    assert [row.split(" | ")[2] for row in rows] == ["0", "2"]  # round 0 and the newest checkpoint's
    scenario = load_recorded_scenario(run_dir)
    expected = load_eval_data(scenario).train_x[:64].double() / 255
    for images, augment in seen:
        assert images.shape[0] == 64 and torch.allclose(images.double(), expected)
        assert isinstance(augment, BatchAugment) and augment.config == AugmentConfig.from_scenario(scenario["augment"])
    # a method without a clip (Orchestra's, HeteroSSFL's parameters have no clip_mu): clip_mu 0, no share
    recorded = module.load_recorded_scenario
    monkeypatch.setattr(module, "load_recorded_scenario", lambda run_dir: {
        **recorded(run_dir), "method": {k: v for k, v in recorded(run_dir)["method"].items() if k != "clip_mu"}})
    assert [row.rsplit(" | ", 2)[1:] for row in module.run_rows(run_dir, 64)] == [["0", "- |"]] * 2
    for networks in ({}, {"a": None, "b": None}):
        monkeypatch.setattr(module.Server, "eval_networks", lambda self, load, networks=networks: networks)
        with pytest.raises(ValueError, match=f"{len(networks)} networks to evaluate; expected a run with one global"):
            module.run_rows(run_dir, 64)


def test_a_directory_that_is_not_a_run_is_one_line_exit_2_and_two_images_are_enough(tmp_path, capsys):
    assert load_script().main([str(tmp_path), "--images", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a run directory (no scenario.yaml)" in err


def test_a_data_set_that_is_not_here_is_one_line_exit_2(tmp_path, capsys):
    absent = tmp_path / "absent"
    (tmp_path / "scenario.yaml").write_text(f"name: x\nseed: 1\ndataset: {{name: fashion_mnist, root: {absent}}}\n")
    (tmp_path / "checkpoints" / "round_00001").mkdir(parents=True)
    (tmp_path / "checkpoints" / "round_00001" / "state.pt").write_bytes(b"")
    assert load_script().main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("projection_norms: error: fashion_mnist: dataset.root ")


def test_the_table_projects_5120_images_by_default(tmp_path, monkeypatch, capsys):
    module = load_script()
    asked = []
    monkeypatch.setattr(module, "run_rows", lambda run_dir, num_images: asked.append(num_images) or ["| a row |"])
    assert module.main([str(tmp_path)]) == 0 and asked == [5120]
    assert capsys.readouterr().out.splitlines()[2:] == ["| a row |"]
