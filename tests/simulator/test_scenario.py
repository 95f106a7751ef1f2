from pathlib import Path

import pytest
import yaml

from simulator.scenario import ScenarioError, load_scenario, parse_yaml

SCENARIOS = sorted(Path(__file__).resolve().parents[2].joinpath("scenarios").rglob("*.yaml"))


def write(tmp_path, raw):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_defaults_fill_a_minimal_scenario(tmp_path):
    scenario = load_scenario(write(tmp_path, {"name": "x"}))
    assert scenario["method"]["objective"] == "simclr"
    assert scenario["ray"]["worker"]["num_gpus"] == 0.0
    assert scenario["training"]["lr"] == 0.05


@pytest.mark.parametrize("raw, key, expected", [
    ({"trainig": {}}, "trainig", "unknown key"),
    ({"training": {"epochs": 3}}, "training.epochs", "unknown key; expected one of rounds"),
    ({"training": {"rounds": "ten"}}, "training.rounds", "expected an integer, got 'ten'"),
    ({"training": {"rounds": True}}, "training.rounds", "expected an integer"),
    ({"training": {"lr": -1}}, "training.lr", "expected a positive number"),
    ({"training": {"batch_size": 1}}, "training.batch_size", "expected an integer >= 2 (a batch of one sample is skipped"),
    ({"training": {"momentum": 1.0}}, "training.momentum", "expected a number in [0, 1), got 1.0"),
    ({"seed": -1}, "seed", "expected a non-negative number, got -1"),
    ({"name": "runs/../x"}, "name", "expected a name without '/' or NUL"),
    ({"name": "a\0b"}, "name", "expected a name without '/' or NUL"),
    ({"method": {"server_lr": float("inf")}}, "method.server_lr", "expected a finite number, got inf"),
    ({"population": {"num_clients": 5, "clients_per_round": 6}}, "population.clients_per_round",
     "expected at most population.num_clients (5), got 6"),
    ({"ray": {"worker": {"num_gpus": 1.5}}}, "ray.worker.num_gpus", "whole number of GPUs"),
    ({"ray": {"share_timeout_seconds": 0}}, "ray.share_timeout_seconds", "expected a positive number, got 0"),
    ({"ray": {"share_timeout_seconds": "1m"}}, "ray.share_timeout_seconds", "expected a number, got '1m'"),
    ({"ray": {"cuda_deterministic": "yes"}}, "ray.cuda_deterministic", "expected true or false, got 'yes'"),
    ({"method": {"name": "no_such_method"}}, "method.name", "expected one of fedavg"),
    ({"method": {"objective": "no_such_objective"}}, "method.objective", "expected one of simclr"),
    ({"method": {"name": "fedu", "objective": "no_such_objective"}}, "method.objective", "expected one of simclr"),
    ({"method": {"name": "fedsc", "objective": "no_such_objective"}}, "method.objective",
     "expected spectral, got 'no_such_objective'"),
    ({"method": {"server_optimizer": "sgd"}}, "method.server_optimizer", "expected one of avg, adam, got 'sgd'"),
    ({"method": {"name": "orchestra", "server_optimizer": "sgd"}}, "method.server_optimizer",
     "expected one of avg, adam, got 'sgd'"),
    ({"method": {"no_such_key": 10}}, "method.no_such_key", "unknown key"),
    ({"method": {"server_lr": 0}}, "method.server_lr", "expected a positive number, got 0"),
    ({"eval": {"knn_temperature": 0}}, "eval.knn_temperature", "expected a positive number, got 0"),
    ({"method": {"server_betas": [0.9]}}, "method.server_betas", "expected two numbers in [0, 1)"),
    ({"method": {"server_betas": [0.9, 1.0]}}, "method.server_betas", "expected two numbers in [0, 1)"),
    ({"method": {"server_eps": 0}}, "method.server_eps", "expected a positive number, got 0"),
    ({"method": {"name": "rotpred", "server_lr": -1}}, "method.server_lr", "expected a positive number, got -1"),
    ({"method": {"name": "orchestra", "server_betas": [0.9, 0.999, 0.5]}}, "method.server_betas",
     "expected two numbers in [0, 1)"),
    ({"method": {"temperature": -0.5}}, "method.temperature", "expected a positive number, got -0.5"),
    ({"method": {"objective": "byol", "target_momentum": 1.5}}, "method.target_momentum",
     "expected a number in [0, 1], got 1.5"),
    ({"method": {"clip_mu": 4}}, "method.clip_mu", "expected 0 with a non-spectral objective"),
    ({"method": {"name": "hetero_ssfl", "objective": "byol", "rad_size": 64, "rad_batch_size": 128}},
     "method.rad_batch_size", "expected at most method.rad_size (64), got 128"),
    ({"method": {"name": "hetero_ssfl", "objective": "byol", "target_momentum": -0.1}}, "method.target_momentum",
     "expected a number in [0, 1], got -0.1"),
    ({"partition": {"kind": "shards"}}, "partition.kind", "expected one of iid"),
    ({"partition": {"fill": "sorted"}}, "partition.fill", "expected one of in_order, random_order, got 'sorted'"),
    ({"population": {"dropout": 1.5}}, "population.dropout", "probability"),
    ({"augment": {"crop_scale": [0.9, 0.2]}}, "augment.crop_scale", "0 < min <= max <= 1"),
    ({"dataset": "fashion_mnist"}, "dataset", "expected a mapping"),
    ({"method": "byol"}, "method", "expected a mapping, got str"),
    ({"method": {"name": ["fedavg"]}}, "method.name", "expected one of fedavg"),
    ({"ray": {"worker_pools": [{"name": "big", "count": 1}]}}, "ray.worker_pools[0]",
     "expected a mapping {name, count, num_cpus, num_gpus}, got {'count': 1, 'name': 'big'}"),
    ({"ray": {"worker_pools": [{"name": "big", "count": 1, "num_cpus": 1, "num_gpus": 0}] * 2}},
     "ray.worker_pools[1].name", "expected a value no earlier item has, got 'big'"),
    ({"ray": {"worker_pools": [{"name": "big", "count": 1, "num_cpus": -1, "num_gpus": 0}]}},
     "ray.worker_pools[0].num_cpus", "expected a non-negative number, got -1"),
    ({"ray": {"worker": {"num_cpus": 1, "num_gpus": 2.5}}}, "ray.worker.num_gpus",
     "expected a fraction <= 1 or a whole number of GPUs, got 2.5"),
    ({"ray": {"worker_pools": [{"name": "big", "count": 0, "num_cpus": 1, "num_gpus": 0}]}},
     "ray.worker_pools[0].count", "expected a positive integer"),
    ({"ray": {"worker_pools": [{"name": "big", "count": 1, "num_cpus": 1, "num_gpus": 1.5}]}},
     "ray.worker_pools[0].num_gpus", "whole number of GPUs"),
])
def test_errors_name_file_key_and_expectation(tmp_path, raw, key, expected):
    path = write(tmp_path, raw)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    message = str(err.value)
    assert message.startswith(f"{path}: {key}: ")
    assert expected in message
    assert "\n" not in message


def test_a_section_written_empty_keeps_its_defaults_and_takes_overrides(tmp_path):
    """``training:`` with its keys commented out is YAML's null: the section's defaults, as ``method:``."""
    plain = load_scenario(write(tmp_path, {"name": "x"}))
    path = tmp_path / "empty_sections.yaml"
    path.write_text("name: x\ntraining:\n#  lr: 0.1\nray:\n  worker:\n")
    scenario = load_scenario(path)
    assert scenario["training"] == plain["training"] and scenario["ray"] == plain["ray"]
    assert load_scenario(path, ["training.lr=0.2", "ray.worker.num_cpus=2"])["training"]["lr"] == 0.2
    path.write_text("name: x\ntraining: 3\n")  # a section given as a value is still an error
    with pytest.raises(ScenarioError, match="training: expected a mapping, got int"):
        load_scenario(path)


def test_set_overrides_parse_yaml_values(tmp_path):
    scenario = load_scenario(write(tmp_path, {}), ["training.rounds=7", "ray.address=auto",
                                                   "method.objective=byol", "eval.train_subset=1000"])
    assert scenario["training"]["rounds"] == 7
    assert scenario["ray"]["address"] == "auto"
    assert scenario["method"]["objective"] == "byol"
    assert scenario["eval"]["train_subset"] == 1000
    with pytest.raises(ScenarioError, match="--set: training: expected dotted.key=value"):
        load_scenario(write(tmp_path, {}), ["training"])


def test_numbers_with_an_exponent_and_no_dot_are_numbers_in_files_and_overrides(tmp_path):
    # PyYAML (YAML 1.1) reads 5e-4 as the string '5e-4'; scenarios read it as YAML 1.2 does
    path = tmp_path / "s.yaml"
    path.write_text("training:\n  lr: 1e-3\n  weight_decay: 5E-4\n")
    scenario = load_scenario(path, ["method.server_lr=2.5e-3", "training.momentum=9e-1"])
    assert scenario["training"]["lr"] == 0.001 and scenario["training"]["weight_decay"] == 0.0005
    assert scenario["method"]["server_lr"] == 0.0025 and scenario["training"]["momentum"] == 0.9
    assert load_scenario(path, ["name=run1e5"])["name"] == "run1e5"  # not a number: still a string


def test_unreadable_and_invalid_yaml_files(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read the file"):
        load_scenario(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(bad)


def test_a_file_that_is_not_utf8_text_is_one_scenario_error(tmp_path):
    path = tmp_path / "utf16.yaml"
    path.write_text("name: x\n", encoding="utf-16")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value) == f"{path}: -: cannot read the file (not UTF-8 text); expected a YAML text file"


def test_a_key_written_twice_in_one_mapping_is_an_error_not_a_silent_replacement(tmp_path):
    # PyYAML keeps the last of two equal keys: the first training section would vanish without a word
    path = tmp_path / "twice.yaml"
    path.write_text("training: {rounds: 5}\nname: x\ntraining:\n  lr: 0.1\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value) == (f"{path}: line 3: not valid YAML (the key 'training' is written twice in one "
                              f"mapping; expected each key once)")
    path.write_text("training: {rounds: 5, lr: 0.1, rounds: 6}\n")
    with pytest.raises(ScenarioError, match="line 1: not valid YAML \\(the key 'rounds' is written twice"):
        load_scenario(path)
    with pytest.raises(ScenarioError, match="--set: augment: the value is not valid YAML \\(the key 'flip_prob'"):
        load_scenario(write(tmp_path, {}), ["augment={flip_prob: 0.5, flip_prob: 0}"])
    # a key a merge brings in and the mapping sets again is no repeat: the mapping's own value wins, as in YAML
    assert parse_yaml("base: &base {rounds: 5, lr: 0.1}\ntraining:\n  <<: *base\n  rounds: 6\n")["training"] == {
        "rounds": 6, "lr": 0.1}


def test_a_set_value_that_is_not_valid_yaml_is_one_scenario_error(tmp_path):
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, {}), ["training.lr=[1,"])
    message = str(err.value)
    assert message.startswith("--set: training.lr: the value is not valid YAML (") and "\n" not in message
    assert message.endswith("expected e.g. 5, 0.1, true, [0.8, 1.0] or a name")


def test_shipped_scenarios_are_valid():
    assert SCENARIOS, "no scenarios shipped"
    for path in SCENARIOS:
        load_scenario(path)


def test_of_several_bad_values_the_same_one_is_named_whatever_the_hash_seed(tmp_path):
    import subprocess
    import sys
    path = write(tmp_path, {"training": {"momentum": -1, "rounds": 0}, "eval": {"every": 0}})
    code = ("import sys; from simulator.scenario import load_scenario\n"
            "try:\n    load_scenario(sys.argv[1])\nexcept ValueError as err:\n    print(err)")
    named = {subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                            env={**__import__("os").environ, "PYTHONHASHSEED": str(seed)}).stdout
             for seed in range(6)}
    (only,) = named  # one key named on every hash seed, and it is named: the file is refused
    assert only.startswith(f"{path}: ") and ": expected a positive" in only, only
