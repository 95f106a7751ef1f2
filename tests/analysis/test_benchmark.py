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
