import pytest

from analysis.benchmark import format_results, plain_loop
from simulator.scenario import resolve


def test_plain_loop_measures_steady_throughput(synthetic_raw):
    scenario = resolve({**synthetic_raw, "training": {**synthetic_raw["training"], "rounds": 3}})
    result = plain_loop(scenario, cores=1)
    # the steady rate counts the images of rounds 2-3 (round 1 left out) over their seconds
    from simulator.data.store import PartitionReader, prepare_partition
    from simulator.population import Population
    reader = PartitionReader(prepare_partition(scenario))
    sizes = [len(reader.client(cid)[1]) for cid in range(scenario["population"]["num_clients"])]
    population = Population(scenario["population"], 1, sizes, scenario["seed"])
    steady = sum(sizes[cid] for r in (2, 3) for cid in population.plan(r).completed)
    assert result["samples_per_second"] * result["seconds_per_round"] * 2 == pytest.approx(steady)
    assert result["samples_per_second"] > 0 and result["seconds_per_round"] > 0
    assert result["seconds_to_end_of_round_1"] > 0 and result["peak_memory_mb"] > 0
    table = format_results([{"mode": "loop", **result, "efficiency": 1.0}])
    assert table.splitlines()[2].startswith("| loop | ") and "| 1.00 |" in table


def test_a_simulator_mode_counts_the_driver_s_memory_of_its_own_run(synthetic_raw, monkeypatch):
    """The driver's lifetime peak holds the modes run before in the same process (the plain loop's):
    a mode's memory takes the driver's largest RSS during its own run instead."""
    from analysis.benchmark import simulator_run
    summary = {"steady_samples_per_second": 100.0, "steady_seconds_per_round": 1.0, "seconds_to_end_of_round_1": 2.0,
               "peak_memory_mb": {"driver": 900.0, "server": 0.0, "evaluator": 0.0, "workers": 300.0},
               "driver_rss_mb_max": 500.0}
    monkeypatch.setattr("simulator.run.run_scenario", lambda scenario, out, progress: (out, summary))
    assert simulator_run(resolve(synthetic_raw), 2, 1)["peak_memory_mb"] == 500.0 + 300.0


def test_plain_loop_times_rounds_2_to_t_and_counts_each_local_epoch(synthetic_raw, monkeypatch):
    """On a clock that moves only with the work (preparing the partition: 100 s; each client's update:
    1 s), every figure is a hand computation: the steady rate is rounds 2..3's completing clients'
    samples times the 2 local epochs over their seconds, s/round those seconds over the 2 steady
    rounds, and the end of round 1 counts the data's preparation with round 1's clients. Dropout makes
    the completing clients fewer than the sampled ones."""
    from types import SimpleNamespace

    import torch

    import analysis.benchmark as benchmark
    from simulator.data import store
    from simulator.population import Population
    clock = [0.0]
    monkeypatch.setattr(benchmark, "time", SimpleNamespace(time=lambda: clock[0]))
    real_prepare, real_build = store.prepare_partition, benchmark.build_method

    def slow_prepare(scenario):
        clock[0] += 100.0
        return real_prepare(scenario)

    def build_timed(scenario, spec):
        method = real_build(scenario, spec)
        update = method.client_update

        def timed(*args, **kwargs):
            clock[0] += 1.0
            return update(*args, **kwargs)
        method.client_update = timed
        return method

    monkeypatch.setattr(store, "prepare_partition", slow_prepare)
    monkeypatch.setattr(benchmark, "build_method", build_timed)
    scenario = resolve({**synthetic_raw, "population": {**synthetic_raw["population"], "dropout": 0.3},
                        "training": {**synthetic_raw["training"], "rounds": 3, "local_epochs": 2}})
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        result = plain_loop(scenario, cores=1)
        assert torch.get_num_threads() == 1  # the loop's torch uses the cores it is given
    finally:
        torch.set_num_threads(threads)
    reader = store.PartitionReader(real_prepare(scenario))
    sizes = [len(reader.client(cid)[1]) for cid in range(scenario["population"]["num_clients"])]
    population = Population(scenario["population"], 2, sizes, scenario["seed"])
    plans = {r: population.plan(r) for r in (1, 2, 3)}
    assert any(plan.completed != plan.sampled for plan in plans.values())  # dropout took someone
    steady_clients = sum(len(plans[r].completed) for r in (2, 3))
    steady_samples = 2 * sum(sizes[cid] for r in (2, 3) for cid in plans[r].completed)
    assert steady_clients > 0
    assert result["samples_per_second"] == pytest.approx(steady_samples / steady_clients)
    assert result["seconds_per_round"] == pytest.approx(steady_clients / 2)
    assert result["seconds_to_end_of_round_1"] == pytest.approx(100.0 + len(plans[1].completed))


def test_run_benchmark_runs_the_three_documented_modes_without_evaluation(synthetic_raw, monkeypatch):
    """The loop with every core, the simulator with one worker holding every core, then one 1-CPU
    worker per core; efficiency is each mode's samples/s over the loop's; the caller's scenario is
    left as it was."""
    from types import SimpleNamespace

    import analysis.benchmark as benchmark
    calls = []

    def loop(scenario, cores):
        calls.append(("loop", scenario["eval"]["enabled"], cores))
        return {"samples_per_second": 200.0, "seconds_per_round": 1.0, "seconds_to_end_of_round_1": 3.0,
                "peak_memory_mb": 10.0}

    def simulator(scenario, workers, cpus_per_worker):
        calls.append(("simulator", scenario["eval"]["enabled"], workers, cpus_per_worker))
        return {"samples_per_second": 150.0 if workers == 1 else 300.0, "seconds_per_round": 1.0,
                "seconds_to_end_of_round_1": 3.0, "peak_memory_mb": 10.0}

    monkeypatch.setattr(benchmark, "os", SimpleNamespace(cpu_count=lambda: 4))
    monkeypatch.setattr(benchmark, "plain_loop", loop)
    monkeypatch.setattr(benchmark, "simulator_run", simulator)
    scenario = resolve(synthetic_raw)
    results = benchmark.run_benchmark(scenario)
    assert calls == [("loop", False, 4), ("simulator", False, 1, 4), ("simulator", False, 4, 1)]
    assert [r["mode"] for r in results] == ["loop (4 threads)", "simulator-1-worker (4 cpus)",
                                            "simulator-4-workers (1 cpu each)"]
    assert [r["efficiency"] for r in results] == [1.0, 0.75, 1.5]
    assert scenario["eval"]["enabled"] is True


def test_a_simulator_mode_runs_its_workers_and_reports_the_runs_steady_figures(synthetic_raw, monkeypatch):
    """The run gets ``workers`` CPU-only workers of ``cpus_per_worker`` each; its figures are the run
    summary's steady ones and its end of round 1 (not the launch's)."""
    from analysis.benchmark import simulator_run
    summary = {"steady_samples_per_second": 100.0, "steady_seconds_per_round": 1.5, "seconds_to_end_of_round_1": 2.0,
               "seconds_from_launch_to_end_of_round_1": 7.0, "driver_rss_mb_max": 500.0,
               "peak_memory_mb": {"driver": 900.0, "server": 20.0, "evaluator": 0.0, "workers": 300.0}}
    seen = []
    monkeypatch.setattr("simulator.run.run_scenario",
                        lambda scenario, out, progress: (seen.append(scenario["ray"]), (out, summary))[1])
    scenario = resolve(synthetic_raw)
    assert simulator_run(scenario, 3, 2) == {"samples_per_second": 100.0, "seconds_per_round": 1.5,
                                             "seconds_to_end_of_round_1": 2.0, "peak_memory_mb": 820.0}
    assert seen[0]["num_workers"] == 3 and seen[0]["worker"]["num_cpus"] == 2 and seen[0]["worker"]["num_gpus"] == 0.0
    assert scenario["ray"]["num_workers"] == 2  # the caller's scenario is left alone


def test_the_table_has_the_documented_columns_in_their_units():
    row = {"mode": "loop (2 threads)", "samples_per_second": 1234.4, "seconds_per_round": 0.456, "efficiency": 1.0,
           "seconds_to_end_of_round_1": 3.21, "peak_memory_mb": 789.6}
    assert format_results([row]) == ("| mode | samples/s | s/round | efficiency | end of round 1 (s) | peak memory (MiB) |\n"
                                     "|---|---|---|---|---|---|\n"
                                     "| loop (2 threads) | 1234 | 0.46 | 1.00 | 3.2 | 790 |\n")
