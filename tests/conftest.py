"""One Ray instance shared by the tests of a test process, and small synthetic scenarios."""
import os
import sys

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")


_OWN_RAY = {}  # the GCS address of the instance the tests share


def own_ray():
    """The process connected to the tests' shared local Ray instance, 4 logical CPUs (so up to 4
    one-CPU workers fit on 2 cores), started once. A test run before may have left the process on
    another instance (a run that started its own, 2 CPUs) or on none (a command that disconnected
    the one it started): the shared one is then started afresh, so that no test depends on the order
    in which the tests run (``pytest -n`` runs them in another)."""
    import ray
    if not (ray.is_initialized() and ray.get_runtime_context().gcs_address == _OWN_RAY.get("gcs")):
        if ray.is_initialized():
            ray.shutdown()
        ray.init(address="local", num_cpus=4, include_dashboard=False, logging_level="warning")
        _OWN_RAY["gcs"] = ray.get_runtime_context().gcs_address
    return ray


@pytest.fixture(scope="session")
def ray_shut_down_at_the_end():
    yield
    sys.modules["ray"].shutdown()


@pytest.fixture(scope="module")
def ray_session(ray_shut_down_at_the_end):
    """The shared Ray instance (:func:`own_ray`), for a module's fixtures and its tests."""
    return own_ray()


@pytest.fixture(autouse=True)
def ray_session_is_still_the_shared_one(request):
    """Checked again before each test that asks for it, whatever ran since its module began."""
    if "ray_session" in request.fixturenames:
        own_ray()


@pytest.fixture
def one_thread():
    """Single-threaded, as the run's evaluator (and much faster for tiny networks on a busy machine)."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# The label-efficient evaluation (1% and 10% labels, 3 draws) takes over a third of a tiny run's
# time; a test of those metrics through the engine adds it back, with the whole train split (1% of
# it: 20 labelled images), to the tiny scenario's eval section.
LABEL_EFFICIENT_EVAL = {"label_fractions": [0.01, 0.1], "label_draws": 3, "train_subset": None}


def sample_cohort(seed: int, round_index: int, num_clients: int, clients_per_round: int
                  ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(sampled, completing) clients of a round for a population of equal, always-online clients
    (``simulator.population.Population.plan`` with the defaults). Round 0 samples everyone."""
    from simulator.population import Population
    from simulator.scenario import DEFAULTS
    config = {**DEFAULTS["population"], "num_clients": num_clients, "clients_per_round": clients_per_round}
    plan = Population(config, 1, (1,) * num_clients, seed).plan(round_index)
    return plan.sampled, plan.completed


def tiny_scenario(tmp_path):
    """A tiny synthetic FedAvg+SimCLR scenario (raw dict, before defaults) writing under ``tmp_path``,
    fast on 2 cores."""
    return {
        "name": "tiny", "seed": 3,
        "dataset": {"name": "synthetic", "cache_dir": str(tmp_path / "cache")},
        "partition": {"kind": "dirichlet", "alpha": 0.5},
        "population": {"num_clients": 8, "clients_per_round": 4},
        "model": {"hidden_dim": 64, "projector_dim": 32},
        "method": {"name": "fedavg", "objective": "simclr"},
        "training": {"rounds": 2, "batch_size": 32, "lr": 0.05},
        # a 500-image bank and probe set (of 2,000); no label-efficient metrics (see LABEL_EFFICIENT_EVAL)
        "eval": {"every": 1, "probe_iterations": 5, "knn_k": 20, "train_subset": 500, "label_fractions": []},
        "ray": {"num_workers": 2},
        "output": {"dir": str(tmp_path / "runs")},
    }


@pytest.fixture
def synthetic_raw(tmp_path):
    """:func:`tiny_scenario` in the test's own directory."""
    return tiny_scenario(tmp_path)
