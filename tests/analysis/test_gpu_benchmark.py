"""The GPU benchmark's pieces on the CPU, at tiny sizes (the figures themselves: results/gpu.md)."""
import json
from pathlib import Path

import torch

from analysis.gpu_benchmark import engines_agree, plain_simclr_rate, repeat_check, several_clients_rates


def test_vmap_of_several_clients_does_the_loops_work():
    result = several_clients_rates(torch.device("cpu"), clients=3, batch=8, steps=2)
    assert result["max_weight_difference"] < 1e-5
    assert result["loop_images_per_second"] > 0 and result["vmap_images_per_second"] > 0


def test_the_plain_loop_runs_and_gives_a_rate():
    assert plain_simclr_rate(torch.device("cpu"), "synthetic", "small_cnn", batch=16, steps=2) > 0


TINY = ["executor=in_process", "eval.enabled=false", "dataset.name=synthetic", "dataset.train_subset=200",
        "training.rounds=2", "training.batch_size=16", "population.num_clients=4", "population.clients_per_round=2",
        "ray.num_workers=1", "output.checkpoint_every=1000"]


def test_the_repeat_check_finds_two_cpu_runs_equal():
    result = repeat_check("scenarios/quickstart.yaml", TINY, torch.device("cpu"))
    assert result["values"] > 0 and result["values_differing"] == 0 and result["values_missing"] == 0, result
    assert result["first_differing"] is None and result["max_abs_difference"] == 0.0


def test_the_repeat_check_sees_a_run_that_does_not_repeat(monkeypatch):
    """Its second run at another learning rate stands in for a device whose runs do not repeat."""
    from simulator import run
    calls, real = [], run.run_scenario

    def second_differs(scenario, out, progress=True):
        calls.append(out)
        if len(calls) == 2:
            scenario = {**scenario, "training": {**scenario["training"], "lr": scenario["training"]["lr"] * 0.5}}
        return real(scenario, out, progress=progress)

    monkeypatch.setattr(run, "run_scenario", second_differs)
    result = repeat_check("scenarios/quickstart.yaml", TINY, torch.device("cpu"))
    assert len(calls) == 2 and result["values_differing"] > 0, result
    assert result["first_differing"][0] == 1 and result["max_abs_difference"] > 0


def test_the_engines_part_compares_ray_and_in_process_runs_and_sees_one_that_differs(ray_session, monkeypatch):
    """On a CPU the four runs (Ray with two workers, again, Ray with one, in-process) agree; the
    third run at another learning rate stands in for an engine whose results differ."""
    from simulator import run
    calls, real = [], run.run_scenario

    def third_differs(scenario, out, progress=True):
        calls.append(scenario["executor"])
        if len(calls) == 3:
            scenario = {**scenario, "training": {**scenario["training"], "lr": scenario["training"]["lr"] * 0.5}}
        return real(scenario, out, progress=progress)

    monkeypatch.setattr(run, "run_scenario", third_differs)
    rows = engines_agree(TINY, torch.device("cpu"))
    assert calls == ["ray", "ray", "ray", "in_process"]
    assert [row["values_differing_from_first"] == 0 for row in rows] == [True, True, False, True], rows
    assert rows[2]["first_differing"][0] == 1 and all(row["values"] > 0 for row in rows)


def test_the_augmentation_part_times_each_distinct_shipped_augmentation_once():
    """One row per distinct (augmentation, image shape) of the shipped files, T' where a file sets
    ``augment_prime``, each on its data set's image shape."""
    from analysis.gpu_benchmark import augmentation_costs, shipped_augmentations
    views = shipped_augmentations()
    keys = [(json.dumps(section, sort_keys=True), shape) for _, _, section, shape in views]
    assert len(set(keys)) == len(keys) > 3
    found = {(path, view): shape for path, view, _, shape in views}
    assert found[("scenarios/orchestra/cifar10_resnet18.yaml", "T'")] == (3, 32, 32)
    assert found[("scenarios/cross_device.yaml", "T")] == (1, 28, 28)
    assert len(views) < len(list(Path("scenarios").rglob("*.yaml")))  # files that share one are timed once
    rows = augmentation_costs(torch.device("cpu"), batch=4, calls=1)
    assert [(row["scenario"], row["view"]) for row in rows] == [(path, view) for path, view, _, _ in views]
    assert all(row["ms_per_batch"] > 0 and row["images_per_second"] > 0 for row in rows)
