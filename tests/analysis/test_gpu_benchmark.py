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
        run_dir, summary = real(scenario, out, progress=progress)
        return run_dir, {**summary, "steady_samples_per_second": 1000.0 * len(calls)}

    monkeypatch.setattr(run, "run_scenario", second_differs)
    result = repeat_check("scenarios/quickstart.yaml", TINY, torch.device("cpu"))
    assert len(calls) == 2 and result["values_differing"] > 0, result
    assert result["images_per_second"] == 1000.0 and result["second_images_per_second"] == 2000.0
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


class WorkClock:
    """A clock that moves only with the work, and a log of the work, the device syncs and the clock
    reads in order: the benchmark's figures then have hand-computed values."""

    def __init__(self):
        self.now, self.events = 0.0, []

    def perf_counter(self):
        self.events.append("clock")
        return self.now

    def work(self, seconds, event):
        self.now += seconds
        self.events.append(event)

    def sync(self, device):
        self.events.append("sync")

    def reads_after_a_sync(self):
        return all(self.events[i - 1] == "sync" for i, e in enumerate(self.events) if e == "clock")


def clocked(monkeypatch):
    from types import SimpleNamespace

    import analysis.gpu_benchmark as gpu
    clock, real = WorkClock(), gpu.nt_xent
    monkeypatch.setattr(gpu, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    monkeypatch.setattr(gpu, "synchronize", clock.sync)

    def loss(*args):  # one loss evaluation: one second
        clock.work(1.0, "loss")
        return real(*args)
    monkeypatch.setattr(gpu, "nt_xent", loss)
    return clock


def test_the_plain_loop_times_only_its_steps_after_warm_up_and_counts_a_batch_per_step(monkeypatch):
    """Each step evaluates the loss once (1 s on the clock): ``steps`` timed steps of ``batch`` images
    are ``batch`` images/s whatever the untimed warm-up; the device is synchronised before each read
    of the clock."""
    clock = clocked(monkeypatch)
    assert plain_simclr_rate(torch.device("cpu"), "synthetic", "small_cnn", batch=16, steps=3) == 16.0
    warm_up = clock.events.index("sync")
    assert warm_up >= 1 and clock.events == ["loss"] * warm_up + ["sync", "clock"] + ["loss"] * 3 + ["sync", "clock"]


def test_several_clients_rates_count_every_clients_images_over_the_timed_steps_only(monkeypatch):
    """The loop evaluates each client's loss (K seconds a step), vmap all K at once (1 s a step):
    images/s are then ``batch`` and ``K * batch``, their ratio K; the clock is read after a sync."""
    clock = clocked(monkeypatch)
    result = several_clients_rates(torch.device("cpu"), clients=3, batch=8, steps=2)
    assert result["loop_images_per_second"] == 8.0 and result["vmap_images_per_second"] == 24.0
    assert result["vmap_over_loop"] == 3.0 and clock.reads_after_a_sync() and clock.events.count("clock") == 4


def test_synchronize_waits_for_a_cuda_device_only(monkeypatch):
    from analysis.gpu_benchmark import synchronize
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: calls.append(args))
    synchronize(torch.device("cpu"))
    assert calls == []
    synchronize(torch.device("cuda"))
    assert len(calls) == 1


def test_an_augmentation_is_timed_by_its_fastest_call_after_the_untimed_first(monkeypatch):
    """Calls of 0.1 s (the untimed first), 0.5, 0.25 and 2 s: 250 ms a batch, batch / 0.25 images/s."""
    import analysis.gpu_benchmark as gpu
    from simulator.scenario import load_scenario
    clock, durations = clocked(monkeypatch), [0.1, 0.5, 0.25, 2.0]

    class Augment:
        def __init__(self, config):
            pass

        def __call__(self, images, generator):
            clock.work(durations.pop(0), "augment")
            return images

    monkeypatch.setattr(gpu, "BatchAugment", Augment)
    section = load_scenario("scenarios/quickstart.yaml")["augment"]
    monkeypatch.setattr(gpu, "shipped_augmentations", lambda: [("scenarios/quickstart.yaml", "T", section, (1, 28, 28))])
    rows = gpu.augmentation_costs(torch.device("cpu"), batch=4, calls=3)
    assert rows == [{"scenario": "scenarios/quickstart.yaml", "view": "T", "image_shape": [1, 28, 28], "batch": 4,
                     "ms_per_batch": 250.0, "images_per_second": 16.0}]
    assert clock.events == ["sync", "clock", "augment", "sync", "clock"] * 4


def test_every_method_runs_at_the_documented_shape(monkeypatch, tmp_path):
    """Each method's federation: ResNet-18 (hetero: its own tiers) on synthetic_cifar10, 10 iid clients
    of 500 images, 4 a round, batch 128, one local epoch, 3 rounds (2 steady), in-process, no
    evaluation, no dropout."""
    import analysis.gpu_benchmark as gpu
    from simulator.data.store import PartitionReader, prepare_partition
    from simulator.scenario import load_scenario
    seen = []
    monkeypatch.setattr(gpu, "repeat_check", lambda path, overrides, device: seen.append((path, overrides)) or {})
    gpu.method_rates(torch.device("cpu"), smoke=False, switches=[])
    assert [path for path, _ in seen] == [path for _, path, _ in gpu.METHOD_RUNS]
    for path, overrides in seen:
        scenario = load_scenario(path, overrides)
        assert scenario["dataset"]["name"] == "synthetic_cifar10" and scenario["partition"]["kind"] == "iid", path
        assert scenario["executor"] == "in_process" and not scenario["eval"]["enabled"], path
        assert (scenario["population"]["num_clients"], scenario["population"]["clients_per_round"],
                scenario["population"]["dropout"]) == (10, 4, 0.0), path
        assert (scenario["training"]["batch_size"], scenario["training"]["local_epochs"],
                scenario["training"]["rounds"]) == (128, 1, 3), path
        if "hetero" not in path:
            assert scenario["model"]["encoder"] == "resnet18", path
    quickstart = load_scenario(*seen[0])
    reader = PartitionReader(prepare_partition({**quickstart, "dataset": {**quickstart["dataset"],
                                                                        "cache_dir": str(tmp_path / "cache")}}))
    assert list(reader.sizes) == [500] * 10


def test_a_federations_rate_is_its_steady_figures_and_its_peak_in_mib(monkeypatch):
    """The run summary's steady images/s and s/round; on a CUDA device also the peak allocated since
    the reset made just before the run, in MiB (the device here is a stand-in)."""
    from analysis.gpu_benchmark import federation_rate
    events = []
    summary = {"steady_samples_per_second": 100.0, "steady_seconds_per_round": 1.5}
    monkeypatch.setattr("simulator.run.run_scenario", lambda scenario, out, progress: events.append("run") or (out, summary))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *args: events.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *args: 3 * 2**20)
    quickstart = "scenarios/quickstart.yaml"
    assert federation_rate(quickstart, [], torch.device("cpu")) == {"images_per_second": 100.0, "seconds_per_round": 1.5}
    assert events == ["run"]
    assert federation_rate(quickstart, [], torch.device("cuda")) == {"images_per_second": 100.0, "seconds_per_round": 1.5,
                                                                     "peak_gpu_mib": 3.0}
    assert events == ["run", "reset", "run"]
