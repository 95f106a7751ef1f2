import threading

import torch

from methods import build_method
from methods.base import DataSpec
from methods.networks import build_networks
from methods.weight_averaging import flat_state
from simulator.held_out import HeldOutImages
from simulator.population import CohortSchedule
from simulator.scenario import resolve


def objective_and_spec(synthetic_raw):
    scenario = resolve({**synthetic_raw, "method": {"name": "fedavg", "objective": "byol"}})
    sizes = (10,) * scenario["population"]["num_clients"]
    spec = DataSpec(1, 28, 10, sizes, HeldOutImages.of(scenario), CohortSchedule.of(scenario, sizes))
    return build_method(scenario, spec).objective, scenario, spec


def weights(seed, objective, scenario, spec, encoder="small_cnn"):
    """Every tensor of the built networks, flattened into one."""
    state = flat_state(*build_networks(objective, scenario, spec, seed, encoder=encoder))
    return torch.cat([value.flatten().float() for value in state.values()])


def test_a_build_is_fixed_by_its_seed_and_leaves_torch_global_generator_as_it_was(synthetic_raw):
    built = objective_and_spec(synthetic_raw)
    torch.manual_seed(7)
    before = torch.get_rng_state()
    first = weights(1, *built)
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(first, weights(1, *built))
    assert not torch.equal(first, weights(2, *built))


def test_networks_built_in_threads_at_once_are_those_built_one_by_one(synthetic_raw):
    # The driver's rounds build a Hetero-SSFL client's networks at its first round while the thread
    # that starts Ray builds the workers' workspaces: torch draws every initial value from one
    # process-wide generator, so unguarded builds at once would take each other's draws.
    built = objective_and_spec(synthetic_raw)
    seeds = {"small_cnn": range(0, 40), "large_cnn": range(100, 104)}
    alone = {(encoder, seed): weights(seed, *built, encoder=encoder) for encoder, s in seeds.items() for seed in s}
    at_once, threads_started = {}, threading.Barrier(len(seeds))

    def build_all(encoder):
        threads_started.wait()
        for seed in seeds[encoder]:
            at_once[encoder, seed] = weights(seed, *built, encoder=encoder)

    threads = [threading.Thread(target=build_all, args=(encoder,)) for encoder in seeds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    differing = [key for key, value in alone.items() if not torch.equal(value, at_once[key])]
    assert not differing, f"built differently beside another thread: {differing}"
