from analysis.benchmark import format_results, plain_loop
from simulator.scenario import resolve


def test_plain_loop_measures_steady_throughput(synthetic_raw):
    scenario = resolve({**synthetic_raw, "training": {**synthetic_raw["training"], "rounds": 3}})
    result = plain_loop(scenario, cores=1)
    assert result["samples_per_second"] > 0 and result["seconds_per_round"] > 0
    assert result["seconds_to_end_of_round_1"] > 0 and result["peak_memory_mb"] > 0
    table = format_results([{"mode": "loop", **result, "efficiency": 1.0}])
    assert table.splitlines()[2].startswith("| loop | ") and "| 1.00 |" in table
