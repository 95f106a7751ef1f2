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


def test_the_networks_are_drawn_from_the_seed_encoder_first_then_the_heads(synthetic_raw):
    """``build_networks(seed)`` is torch's generator seeded with ``seed``, the encoder drawn first and
    the objective's heads (BYOL: projector, predictor) after it from the same stream: a run's
    initial weights, and with them its results, are fixed by its init seed alone."""
    from simulator.models import build_encoder
    objective, scenario, spec = objective_and_spec(synthetic_raw)
    online, _ = build_networks(objective, scenario, spec, 5, encoder="small_cnn")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        expected = objective.build(build_encoder("small_cnn", spec.channels, spec.image_size, scenario["model"]["norm"]))
    assert list(online) == ["encoder", "projector", "predictor"]
    got, want = online.state_dict(), expected.state_dict()
    assert list(got) == list(want)
    for name in want:
        assert torch.equal(got[name], want[name]), name


def test_byol_s_target_is_a_frozen_copy_of_the_online_encoder_and_projector(synthetic_raw):
    """The EMA target starts equal to the online encoder and projector (no predictor: Grill et al.
    2020, section 3.1), holds its own tensors (an EMA update of one must not move the other) and takes
    no gradient; the online networks all do."""
    objective, scenario, spec = objective_and_spec(synthetic_raw)
    online, target = build_networks(objective, scenario, spec, 3)
    assert list(target) == ["encoder", "projector"]
    for name, value in target.state_dict().items():
        assert torch.equal(value, online.state_dict()[name]), name
        assert value.data_ptr() != online.state_dict()[name].data_ptr(), name
    assert all(not p.requires_grad for p in target.parameters())
    assert all(p.requires_grad for p in online.parameters())
    with torch.no_grad():
        next(online["encoder"].parameters()).add_(1.0)
    assert not torch.equal(next(online["encoder"].parameters()), next(target["encoder"].parameters()))


class LinearExtension:
    """A stand-in extension adding a 3-way linear head on the features."""

    def add_networks(self, online, feature_dim):
        online["extra_head"] = torch.nn.Linear(feature_dim, 3)


def test_an_extension_s_networks_are_drawn_from_the_seed_too(synthetic_raw):
    """Extensions' heads (UV's projector, the label classifier) are drawn after the objective's from
    the same seeded stream: fixed by the seed whatever torch's global generator holds, which they leave
    as it was."""
    objective, scenario, spec = objective_and_spec(synthetic_raw)

    def head(global_seed):
        torch.manual_seed(global_seed)
        before = torch.get_rng_state()
        online, _ = build_networks(objective, scenario, spec, 4, extensions=[LinearExtension()])
        assert torch.equal(torch.get_rng_state(), before)
        return online["extra_head"].weight.detach().clone()

    assert torch.equal(head(0), head(1))


def test_a_workspace_draws_the_first_view_with_t_and_the_second_with_t_prime(synthetic_raw):
    """``views`` = (T, T'): the workspace's ``augment`` is the first, ``augment_prime`` the second, and
    its slots are the networks' own tensors (restoring a client's weights writes into the networks),
    and it holds the extensions' parts it is given."""
    from methods.networks import make_workspace
    from simulator.augment import AugmentConfig
    objective, scenario, spec = objective_and_spec(synthetic_raw)
    online, target = build_networks(objective, scenario, spec, 1)
    first, second = AugmentConfig(flip_prob=0.0), AugmentConfig(flip_prob=1.0)
    workspace = make_workspace(online, target, (first, second), torch.device("cpu"), {"uv": "its part"})
    assert workspace.augment.config is first and workspace.augment_prime.config is second
    assert workspace.parts == {"uv": "its part"}  # extensions' client-side modules
    assert workspace.online is online and workspace.target is target
    slot = workspace.slots["online.encoder.features.0.0.weight"]
    slot.zero_()
    assert online["encoder"].features[0][0].weight.abs().sum() == 0
    assert "target.projector.0.weight" in workspace.slots


def test_the_evaluated_global_network_is_the_states_encoder_and_projector(synthetic_raw):
    """What the evaluation probes: the global online encoder and projector loaded from the state (not
    the predictor, not the seed-0 initial weights it is built with)."""
    from methods.networks import global_eval_network
    from methods.weight_averaging import initial_state
    objective, scenario, spec = objective_and_spec(synthetic_raw)
    state = initial_state(*build_networks(objective, scenario, spec, 9))
    network = global_eval_network(objective, scenario, spec, state)
    assert list(network) == ["encoder", "projector"]
    for name, value in network.state_dict().items():
        assert torch.equal(value, state["weights"][f"online.{name}"]), name
    assert not torch.equal(network.state_dict()["encoder.features.0.0.weight"],
                           flat_state(*build_networks(objective, scenario, spec, 0))["online.encoder.features.0.0.weight"])


def test_a_build_takes_the_encoder_it_is_given_over_the_scenario_s(synthetic_raw):
    """Hetero-SSFL builds each tier's client networks on the tier's encoder: ``encoder`` overrides
    ``model.encoder`` (here small_cnn), which is the default."""
    objective, scenario, spec = objective_and_spec(synthetic_raw)
    assert scenario["model"]["encoder"] == "small_cnn"
    large, _ = build_networks(objective, scenario, spec, 1, encoder="large_cnn")
    default, _ = build_networks(objective, scenario, spec, 1)
    assert len(large["encoder"].features) == 4 and large["encoder"].out_dim == 256
    assert large["projector"][0].in_features == 256
    assert len(default["encoder"].features) == 3 and default["encoder"].out_dim == 128
