from pathlib import Path

import pytest
import yaml

from simulator.records import FLOAT32_MAX
from simulator.scenario import FLOAT32, NON_NEGATIVE, POSITIVE, ScenarioError, load_scenario, lookup, parse_yaml

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
    ({"name": "runs/../x"}, "name", "expected a name without '/' or control characters"),
    ({"name": "a\0b"}, "name", "expected a name without '/' or control characters"),
    ({"name": "a\nb"}, "name", "expected a name without '/' or control characters such as NUL or a line break"),
    ({"name": "a\tb"}, "name", "expected a name without '/' or control characters"),
    ({"method": {"server_lr": float("inf")}}, "method.server_lr", "expected a finite number, got inf"),
    ({"population": {"num_clients": 5, "clients_per_round": 6}}, "population.clients_per_round",
     "expected at most population.num_clients (5), got 6"),
    # 1e-320 made 2 pi round / period infinite: math.sin's ValueError in round 1, a traceback
    ({"population": {"diurnal_period": 1e-320}}, "population.diurnal_period", "expected at least 2 rounds (the cycle "
     "is sampled once a round: a shorter period is a longer one's alias), got 1e-320"),
    ({"population": {"diurnal_period": 1.5}}, "population.diurnal_period", "expected at least 2 rounds"),
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
    ({"name": "é" * 101}, "name", "expected at most 200 bytes (with a timestamp it names the run directory, and file "
     "systems take names of 255), got 202"),
    ({"eval": {"knn_temperature": 0.01}}, "eval.knn_temperature", "expected at least 0.0113 (the kNN vote weighs a "
     "neighbour by exp(similarity / T), infinite in float32 below it), got 0.01"),
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
    ({"augment": {"hue": 0.6}}, "augment.hue", "expected a number in [0, 0.5] (a hue shift drawn in [-hue, hue], "
     "as torchvision's ColorJitter), got 0.6"),
    ({"augment": {"hue": -0.1}}, "augment.hue", "expected a non-negative number, got -0.1"),
    ({"augment": {"crop_sampler": "pil"}}, "augment.crop_sampler",
     "expected one of uniform_area, torchvision, got 'pil'"),
    ({"augment": {"jitter_order": "shuffled"}}, "augment.jitter_order",
     "expected one of fixed, random, got 'shuffled'"),
    ({"augment": {"interpolation": "nearest"}}, "augment.interpolation",
     "expected one of bilinear, bicubic, got 'nearest'"),
    ({"augment": {"blur_prob": 1.5}}, "augment.blur_prob", "expected a probability in [0, 1], got 1.5"),
    ({"augment": {"solarize_prob": -0.2}}, "augment.solarize_prob", "expected a probability in [0, 1], got -0.2"),
    ({"augment": {"blur_sigma": [2.0, 0.1]}}, "augment.blur_sigma",
     "expected [min, max] with 1e-06 <= min <= max <= 3.4e+38 (the blur's standard deviation in pixels, float32), "
     "got [2.0, 0.1]"),
    ({"augment": {"blur_sigma": [0.1, 1e39]}}, "augment.blur_sigma", "1e-06 <= min <= max <= 3.4e+38"),
    ({"augment": {"blur_sigma": [0.0, 1.0]}}, "augment.blur_sigma", "1e-06 <= min <= max"),
    ({"augment": {"blur_sigma": [0.1]}}, "augment.blur_sigma", "1e-06 <= min <= max"),
    ({"augment": {"blur_kernel": 4}}, "augment.blur_kernel",
     "expected an odd integer from 1 to 55 (its reflect padding, half of it, must stay below the images' side, "
     "28 pixels at least), got 4"),
    ({"augment": {"blur_kernel": 57}}, "augment.blur_kernel", "expected an odd integer from 1 to 55"),
    ({"augment": {"blur_kernel": -1}}, "augment.blur_kernel", "expected an odd integer from 1 to 55"),
    ({"augment_prime": {"blur_prob": 1.5}}, "augment_prime.blur_prob", "expected a probability in [0, 1], got 1.5"),
    ({"augment_prime": {"crop_scale": [0.9, 0.2]}}, "augment_prime.crop_scale", "0 < min <= max <= 1"),
    ({"augment_prime": {"blur": 0.1}}, "augment_prime.blur", "unknown key; expected one of crop_scale, flip_prob"),
    ({"augment_prime": {"solarize_prob": "often"}}, "augment_prime.solarize_prob", "expected a number, got 'often'"),
    ({"augment_prime": [0.1]}, "augment_prime", "expected a mapping, got list"),
    ({"augment_prime": {"solarize_prob": 0.2}, "method": {"name": "rotpred"}}, "augment_prime",
     "expected no keys: method rotpred with these parameters augments one view of a sample (augment), "
     "got solarize_prob"),
    ({"augment_prime": {"solarize_prob": 0.2}, "method": {"name": "fedavg", "objective": "supervised"}},
     "augment_prime", "expected no keys: method fedavg"),
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


def test_augment_prime_holds_the_keys_of_the_second_view_that_differ_from_augment(tmp_path):
    """``augment_prime``: none by default (null too); the keys written, type-checked against
    ``augment``, kept as written (``--set`` too); the method reads ``augment`` with them for T'."""
    from methods import build_method
    from methods.base import DataSpec
    assert load_scenario(write(tmp_path, {}))["augment_prime"] == {}
    assert load_scenario(write(tmp_path, {"augment_prime": None}))["augment_prime"] == {}
    scenario = load_scenario(write(tmp_path, {"augment": {"blur_prob": 0.5, "hue": 0.1},
                                              "augment_prime": {"blur_prob": 0, "solarize_prob": 0.2}}),
                             ["augment_prime.hue=0.2"])
    assert scenario["augment_prime"] == {"blur_prob": 0.0, "solarize_prob": 0.2, "hue": 0.2}
    assert isinstance(scenario["augment_prime"]["blur_prob"], float)
    method = build_method(scenario, DataSpec(1, 28, 10, (10,)))
    assert (method.augment_config.blur_prob, method.augment_config.solarize_prob, method.augment_config.hue) == \
        (0.5, 0.0, 0.1)
    assert (method.augment_prime_config.blur_prob, method.augment_prime_config.solarize_prob,
            method.augment_prime_config.hue, method.augment_prime_config.flip_prob) == (0.0, 0.2, 0.2, 0.5)


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


def test_a_character_yaml_forbids_deep_nesting_and_an_empty_file_are_one_scenario_error_each(tmp_path):
    """A NUL byte was PyYAML's two-line message without a line; 500 nested lists Python's RecursionError
    traceback; an empty file ran the defaults' 50-round federation as if it were a scenario."""
    path = tmp_path / "nul.yaml"
    path.write_text("name: x\nseed: 1\ntraining: {rounds: 2\0}\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value) == f"{path}: line 3: not valid YAML (special characters are not allowed: #x0000)"
    path.write_text("name: " + "[" * 500 + "]" * 500 + "\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value) == (f"{path}: -: not valid YAML here (nested too deeply for the reader); expected a "
                              f"scenario's few levels of sections and lists")
    with pytest.raises(ScenarioError, match="^--set: name: the value is not valid YAML \\(nested too deeply"):
        load_scenario(write(tmp_path, {}), ["name=" + "[" * 500 + "]" * 500])
    for text in ("", "# only a comment\n"):
        path.write_text(text)
        with pytest.raises(ScenarioError) as err:
            load_scenario(path)
        assert str(err.value) == (f"{path}: -: the file holds no YAML document; expected a scenario (a mapping "
                                  f"of sections such as dataset, method, training)")


def test_a_value_echoed_in_an_error_is_cut_where_the_line_would_be_long(tmp_path):
    """A list of 300,000 items for training.rounds was a 900 KB error line."""
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, {"training": {"rounds": [1] * 30_000}}))
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 's.yaml'}: training.rounds: expected an integer, got [1, 1, ")
    assert message.endswith("... (90,025 characters, cut)") and len(message) < 2200


def test_a_file_larger_than_any_scenario_is_refused_without_reading_it_whole(monkeypatch):
    """``fedssl validate /dev/zero`` read 10 GB in 10 s and went on."""
    from simulator import scenario as scenario_module
    monkeypatch.setattr(scenario_module, "LARGEST_YAML", 1000)
    with pytest.raises(ScenarioError) as err:
        load_scenario("/dev/zero")
    assert str(err.value) == ("/dev/zero: -: the file holds over 1,000 characters; expected a scenario's or claim "
                              "suite's YAML text")


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



def test_a_scenario_without_settings_is_the_plain_federation_on_ray(tmp_path):
    """The defaults of the keys that change what a run is: every client online, none dropping out, one
    speed tier and no deadline; whole evaluation splits; Ray with two workers, server and evaluator in
    the driver, deterministic CUDA kernels; an evaluation and a checkpoint every 10 rounds."""
    scenario = load_scenario(write(tmp_path, {}))
    population = scenario["population"]
    assert (population["availability"], population["availability_spread"], population["dropout"]) == (1.0, 0.0, 0.0)
    assert population["speed_tiers"] == [{"fraction": 1.0, "samples_per_second": 100.0}]
    assert population["deadline_seconds"] is None and population["availability_trace"] is None
    assert population["over_selection"] == 0.0
    assert scenario["eval"]["train_subset"] is None and scenario["eval"]["test_subset"] is None
    assert scenario["dataset"]["train_subset"] is None
    assert scenario["executor"] == "ray"
    assert {key: scenario["ray"][key] for key in ("num_workers", "worker_pools", "server", "evaluator",
                                                   "cuda_deterministic", "share_timeout_seconds")} == {
        "num_workers": 2, "worker_pools": [], "server": "driver", "evaluator": "driver", "cuda_deterministic": True,
        "share_timeout_seconds": None}
    assert scenario["eval"]["every"] == 10 and scenario["output"]["checkpoint_every"] == 10


@pytest.mark.parametrize("fraction, suffix", [(0.01, "1pct"), (0.1, "10pct"), (0.005, "0p5pct"), (1.0, "100pct"),
                                              (0.25, "25pct"), (1e-7, "0p00001pct")])
def test_a_label_fractions_metric_suffix_is_its_percentage_without_trailing_zeros(fraction, suffix):
    from simulator.scenario import fraction_suffix
    assert fraction_suffix(fraction) == suffix


def test_nullable_keys_take_their_own_type_and_only_they_read_a_whole_float_as_an_integer(tmp_path):
    """A subset size (an integer) may be written 1000.0; a deadline (a number) may be 1.5 or 30 (30.0);
    ``training.rounds`` (an integer with a default) is never read from a float."""
    path = write(tmp_path, {})
    scenario = load_scenario(path, ["eval.train_subset=1000", "eval.test_subset=500.0",
                                    "population.deadline_seconds=1.5", "ray.share_timeout_seconds=30"])
    assert type(scenario["eval"]["train_subset"]) is int and scenario["eval"]["train_subset"] == 1000
    assert type(scenario["eval"]["test_subset"]) is int and scenario["eval"]["test_subset"] == 500
    assert scenario["population"]["deadline_seconds"] == 1.5
    assert type(scenario["ray"]["share_timeout_seconds"]) is float and scenario["ray"]["share_timeout_seconds"] == 30
    assert load_scenario(path, ["population.deadline_seconds=30"])["population"]["deadline_seconds"] == 30.0
    for item, message in (("eval.train_subset=1000.5", "eval.train_subset: expected an integer, got 1000.5"),
                          ("training.rounds=7.0", "training.rounds: expected an integer, got 7.0")):
        with pytest.raises(ScenarioError) as err:
            load_scenario(path, [item])
        assert str(err.value) == f"--set: {message}"


@pytest.mark.parametrize("raw", [
    {"training": {"batch_size": 2}},  # the smallest batch with batch statistics
    {"population": {"num_clients": 5, "clients_per_round": 5}},  # everyone, every round
    {"population": {"availability": 0.5, "availability_spread": 0.4}},
    {"population": {"speed_tiers": [{"fraction": 0.25, "samples_per_second": 10},
                                    {"fraction": 0.75, "samples_per_second": 50}]}},
    {"eval": {"label_fractions": [1.0]}},  # every label
    {"eval": {"label_fractions": [1e-8]}},  # the smallest whose metric name is not 0pct
    {"eval": {"label_fractions": []}},
    {"augment": {"crop_scale": [0.5, 0.5]}},  # one fixed scale
    {"training": {"weight_decay": 0}},
], ids=["batch-of-two", "whole-population", "spread-below-availability", "two-tiers", "all-labels",
        "smallest-fraction", "no-fractions", "one-crop-scale", "no-weight-decay"])
def test_values_on_the_accepted_side_of_each_bound_are_accepted(tmp_path, raw):
    load_scenario(write(tmp_path, raw))


@pytest.mark.parametrize("raw, key, message", [
    ({"population": {"availability": 0.5, "availability_spread": 0.5}}, "population.availability_spread",
     "expected less than population.availability (0.5), or the clients whose availability it takes to 0 are never "
     "online; got 0.5"),
    ({"population": {"speed_tiers": [{"fraction": 0.5, "samples_per_second": 10}]}}, "population.speed_tiers",
     "expected fractions summing to 1, got 0.5"),
    ({"eval": {"label_fractions": [0.1, 0.1]}}, "eval.label_fractions",
     "expected distinct fractions in [1e-8, 1] (e.g. [0.01, 0.1]; [] for none; a metric's name "
     "gives the percentage to 6 decimals), got [0.1, 0.1]"),
    ({"eval": {"label_fractions": [0.1, 0.1000000001]}}, "eval.label_fractions",  # one metric name for both
     "expected distinct fractions in [1e-8, 1] (e.g. [0.01, 0.1]; [] for none; a metric's name "
     "gives the percentage to 6 decimals), got [0.1, 0.1000000001]"),
    ({"augment": {"crop_scale": [0.2, 0.5, 0.9]}}, "augment.crop_scale",
     "expected [min, max] with 0 < min <= max <= 1, got [0.2, 0.5, 0.9]"),
    ({"augment": {"crop_scale": [0.5, "x"]}}, "augment.crop_scale", "expected a list of numbers, got [0.5, 'x']"),
    ({"training": {"weight_decay": -0.1}}, "training.weight_decay", "expected a non-negative number, got -0.1"),
    ({"eval": {"label_knn_k": 0}}, "eval.label_knn_k", "expected a positive number, got 0"),
    ({"training": {"lr": float("nan")}}, "training.lr", "expected a finite number, got nan"),
    ({"training": {"lr": float("inf")}}, "training.lr", "expected a finite number, got inf"),
    ({"training": []}, "training", "expected a mapping, got list"),
    ({"dataset": ""}, "dataset", "expected a mapping, got str"),
    ({"method": {"name": "fedsc"}, "training": {"centralized": True}}, "training.centralized",
     "expected false for method fedsc (one client holding the union stands in only for a method without "
     "per-client state)"),
], ids=["spread-equal-to-availability", "tiers-short-of-one", "repeated-fraction", "fractions-of-one-suffix",
        "three-crop-bounds", "crop-not-a-number", "negative-weight-decay", "label-knn-k-zero", "nan-lr", "inf-lr",
        "empty-list-section", "empty-string-section", "centralized-fedsc"])
def test_values_on_the_refused_side_of_each_rule_are_one_exact_line(tmp_path, raw, key, message):
    path = write(tmp_path, raw)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value) == f"{path}: {key}: {message}"


@pytest.mark.parametrize("key", sorted(FLOAT32))
def test_floats_made_into_tensors_are_within_float32(tmp_path, key):
    """``training.lr: 1e300`` was torch's overflow traceback in the first optimiser step; float32's
    largest value is accepted (what it does to training is the run's own line), and keys that never
    become tensors (a deadline) take larger ones."""
    section, name = key.split(".")
    path = write(tmp_path, {section: {name: 1e39}})
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value) == (f"{path}: {key}: expected a number within float32's range (at most 3.4e38 in size: "
                              f"fedssl computes in float32), got 1e+39")
    assert lookup(load_scenario(write(tmp_path, {section: {name: FLOAT32_MAX}})), key) == FLOAT32_MAX
    assert FLOAT32 <= POSITIVE | NON_NEGATIVE  # every one is checked
    assert load_scenario(write(tmp_path, {"population": {"deadline_seconds": 1e300}}))["population"][
        "deadline_seconds"] == 1e300


def test_an_availability_trace_naming_a_client_outside_the_population_is_refused(tmp_path):
    inside, outside = tmp_path / "inside.csv", tmp_path / "outside.csv"  # two files
    inside.write_text("round,client\n0,0\n0,4\n1,3\n")
    outside.write_text("round,client\n0,0\n0,5\n1,3\n")
    population = {"num_clients": 5, "clients_per_round": 2}
    path = write(tmp_path, {"population": {**population, "availability_trace": str(inside)}})
    assert load_scenario(path)["population"]["availability_trace"] == str(inside)  # ids 0..4 of 5: all inside
    path = write(tmp_path, {"population": {**population, "availability_trace": str(outside)}})
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value) == (f"{path}: population.availability_trace: expected client ids in [0, 5) "
                              f"(population.num_clients), got 5 in {outside}")


def test_a_bad_value_set_on_the_command_line_is_named_as_the_command_line_s(tmp_path):
    """``fedssl run/validate/evaluate --set``: the error names ``--set`` for a key it set, under it,
    or holding it, and the file for the file's own values, even beside a good override."""
    path = write(tmp_path, {"name": "x"})
    cases = [
        (["eval.knn_k=-3"], "--set: eval.knn_k: expected a positive number, got -3"),
        (["eval.nope=3"], "--set: eval.nope: unknown key; expected one of "),
        (["eval=3"], "--set: eval: expected a mapping, got int"),
        (["training.foo.bar=1"], "--set: training.foo: unknown key; expected one of "),  # the key named holds it
        (["population.speed_tiers=[{fraction: 2, samples_per_second: 1}]"],
         "--set: population.speed_tiers: expected fractions summing to 1, got 2"),
        (["population.speed_tiers=[{fraction: 1, samples_per_second: -1}]"],  # under the key set
         "--set: population.speed_tiers[0].samples_per_second: expected a positive number, got -1"),
        (["population.speed_tiers=[{fraction: .inf, samples_per_second: 1}]"],  # NaN fractions once normalised
         "--set: population.speed_tiers[0].fraction: expected a positive number, got inf"),
        (["ray.worker_pools=[{name: a, count: 1, num_cpus: .inf, num_gpus: 0}]"],
         "--set: ray.worker_pools[0].num_cpus: expected a non-negative number, got inf"),
    ]
    for overrides, message in cases:
        with pytest.raises(ScenarioError) as err:
            load_scenario(path, overrides)
        assert str(err.value).startswith(message), (overrides, str(err.value))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntraining: {lr_schedule: step}\n")
    for overrides in (["eval.every=2"], ["training.lr=0.1"]):  # a prefix of the key is another key
        with pytest.raises(ScenarioError) as err:
            load_scenario(bad, overrides)
        assert str(err.value).startswith(f"{bad}: training.lr_schedule: expected one of ")


def test_a_set_splits_at_its_first_equals_sign_and_needs_a_key_and_sections_to_walk(tmp_path):
    path = write(tmp_path, {"name": "x"})
    assert load_scenario(path, ["name=run=1"])["name"] == "run=1"
    for item, message in (("=5", "--set: =5: expected dotted.key=value"),
                          # were "--set: : unknown key; expected one of name, seed, ..." and "--set: training.: ..."
                          (".=1", "--set: .=1: expected dotted.key=value"),
                          ("training..lr=1", "--set: training..lr=1: expected dotted.key=value"),
                          ("training.lr.=1", "--set: training.lr.=1: expected dotted.key=value"),
                          ("name.first=1", "--set: name.first: 'name' is not a section")):
        with pytest.raises(ScenarioError) as err:
            load_scenario(path, [item])
        assert str(err.value) == message


# The keys each range rule covers, written out (not read from the sets the loader checks, so that a key
# dropped from POSITIVE, NON_NEGATIVE, PROBABILITIES or FLOAT32 fails here).
POSITIVE_KEYS = [
    "dataset.train_subset", "eval.every", "eval.finetune_batch_size", "eval.finetune_lr", "eval.knn_k",
    "eval.knn_temperature", "eval.label_draws", "eval.label_knn_k", "eval.probe_iterations", "eval.test_subset",
    "eval.train_subset", "model.hidden_dim", "model.projector_dim", "output.checkpoint_every", "partition.alpha",
    "partition.k", "partition.rotation_alpha", "partition.rotation_bins", "population.clients_per_round",
    "population.deadline_seconds", "population.diurnal_period", "population.num_clients", "ray.num_workers",
    "ray.share_timeout_seconds", "training.batch_size", "training.local_epochs", "training.lr", "training.rounds"]
NON_NEGATIVE_KEYS = [
    "augment.brightness", "augment.contrast", "augment.hue", "augment.saturation", "eval.finetune_steps",
    "population.availability_spread", "population.diurnal_amplitude", "population.over_selection",
    "ray.worker.num_cpus", "ray.worker.num_gpus", "seed", "training.grad_clip_norm", "training.momentum",
    "training.weight_decay"]
PROBABILITY_KEYS = ["augment.blur_prob", "augment.flip_prob", "augment.grayscale_prob", "augment.jitter_prob",
                    "augment.solarize_prob", "population.availability", "population.dropout"]
FLOAT32_KEYS = ["augment.brightness", "augment.contrast", "augment.saturation", "eval.finetune_lr",
                "eval.knn_temperature", "training.lr", "training.weight_decay"]


@pytest.mark.parametrize("key, value, expected", [
    *((key, 0, "a positive number") for key in POSITIVE_KEYS),
    *((key, -1, "a non-negative number") for key in NON_NEGATIVE_KEYS),
    *((key, value, "a probability in [0, 1]") for key in PROBABILITY_KEYS for value in (-0.5, 1.5)),
])
def test_every_ranged_key_refuses_a_value_outside_its_range(tmp_path, key, value, expected):
    """Each key of a count, size, rate or probability is range-checked (a key left out of its rule was
    accepted silently: ``training.grad_clip_norm: -1``, ``augment.grayscale_prob: 2``, ``dataset.train_subset: 0``)."""
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, {}), [f"{key}={value}"])
    assert str(err.value) in (f"--set: {key}: expected {expected}, got {value}",
                              f"--set: {key}: expected {expected}, got {float(value)}")


@pytest.mark.parametrize("key", FLOAT32_KEYS)
def test_every_float32_key_refuses_a_value_past_float32(tmp_path, key):
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, {}), [f"{key}=1e39"])
    assert str(err.value) == (f"--set: {key}: expected a number within float32's range (at most 3.4e38 in size: "
                              f"fedssl computes in float32), got 1e+39")


@pytest.mark.parametrize("key", ["training.lr", "augment.flip_prob", "population.deadline_seconds",
                                 "method.server_lr"])
def test_a_boolean_is_not_a_number(tmp_path, key):
    """``lr: true`` is not 1.0 (a bool is an int in Python; an int is read as a float, a bool is refused)."""
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, {}), [f"{key}=true"])
    assert str(err.value) == f"--set: {key}: expected a number, got True"


def test_nullable_integer_keys_stay_integers_and_refuse_a_fraction(tmp_path):
    """``eval.label_knn_k``, ``dataset.train_subset``: an integer (a k or a size), null by default."""
    path = write(tmp_path, {})
    scenario = load_scenario(path, ["eval.label_knn_k=5", "dataset.train_subset=600"])
    assert type(scenario["eval"]["label_knn_k"]) is int and scenario["eval"]["label_knn_k"] == 5
    assert type(scenario["dataset"]["train_subset"]) is int and scenario["dataset"]["train_subset"] == 600
    for key in ("eval.label_knn_k", "dataset.train_subset"):
        with pytest.raises(ScenarioError) as err:
            load_scenario(path, [f"{key}=2.5"])
        assert str(err.value) == f"--set: {key}: expected an integer, got 2.5"


def test_an_exponent_with_a_plus_sign_or_none_is_a_number_too(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("population:\n  deadline_seconds: 1e3\ntraining:\n  lr: 2E+0\n")
    scenario = load_scenario(path)
    assert scenario["population"]["deadline_seconds"] == 1000.0 and scenario["training"]["lr"] == 2.0


@pytest.mark.parametrize("raw", [
    {"augment": {"hue": 0.5}},  # torchvision's largest hue
    {"augment": {"blur_kernel": 55}},
    {"augment": {"blur_sigma": [1e-6, 1e-6]}},
    {"augment": {"blur_sigma": [0.1, FLOAT32_MAX]}},
    {"eval": {"knn_temperature": 0.0113}},
    {"name": "n" * 200},
    {"population": {"diurnal_period": 2}},
], ids=["hue-half", "largest-kernel", "smallest-sigma", "largest-sigma", "smallest-temperature", "name-200-bytes",
        "shortest-diurnal-period"])
def test_each_bound_itself_is_accepted(tmp_path, raw):
    """The documented bounds are inclusive: hue up to 0.5, a kernel up to 55, sigma from 1e-6 to float32's
    largest, a kNN temperature from 0.0113, a name of up to 200 bytes, a diurnal period from 2 rounds."""
    load_scenario(write(tmp_path, raw))


@pytest.mark.parametrize("raw, key, message", [
    ({"augment": {"crop_scale": [0, 0.5]}}, "augment.crop_scale",
     "expected [min, max] with 0 < min <= max <= 1, got [0, 0.5]"),
    ({"eval": {"label_fractions": [4e-9]}}, "eval.label_fractions",  # its metric would be named knn_top1_0pct
     "expected distinct fractions in [1e-8, 1] (e.g. [0.01, 0.1]; [] for none; a metric's name "
     "gives the percentage to 6 decimals), got [4e-09]"),
    ({"eval": {"label_fractions": [0.0, 0.1]}}, "eval.label_fractions",
     "expected distinct fractions in [1e-8, 1] (e.g. [0.01, 0.1]; [] for none; a metric's name "
     "gives the percentage to 6 decimals), got [0.0, 0.1]"),
    ({"population": {"speed_tiers": [{"fraction": 0.5, "samples_per_second": 10},
                                     {"fraction": 0.49, "samples_per_second": 20}]}}, "population.speed_tiers",
     "expected fractions summing to 1, got 0.99"),
    ({"name": "n" * 201}, "name", "expected at most 200 bytes (with a timestamp it names the run directory, and file "
     "systems take names of 255), got 201"),
], ids=["crop-from-zero", "fraction-named-0pct", "zero-fraction", "tiers-one-percent-short", "name-201-bytes"])
def test_just_past_each_bound_is_refused(tmp_path, raw, key, message):
    path = write(tmp_path, raw)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value) == f"{path}: {key}: {message}"


def test_a_file_whose_top_level_is_not_a_mapping_is_one_scenario_error(tmp_path):
    path = tmp_path / "list.yaml"
    for text in ("- training\n- eval\n", "fedavg\n", "3\n"):
        path.write_text(text)
        with pytest.raises(ScenarioError) as err:
            load_scenario(path, ["training.rounds=2"])
        assert str(err.value) == f"{path}: -: expected a mapping of sections at the top level"


def test_a_server_beta_of_zero_is_accepted(tmp_path):
    """Adam's betas are in [0, 1): beta1 = 0 (no first-moment average, RMSProp's step) is a valid choice."""
    scenario = load_scenario(write(tmp_path, {"method": {"server_optimizer": "adam", "server_betas": [0, 0.999]}}))
    assert scenario["method"]["server_betas"] == [0, 0.999]



BIG = 10 ** 400  # an integer YAML reads whole and float cannot hold


@pytest.mark.parametrize("item, key, expected", [
    (f"training.lr={BIG}", "training.lr", "a finite number"),  # a float key: float() overflowed
    (f"seed={BIG}", "seed", "a finite number"),  # an integer key: math.isfinite overflowed
    (f"training.rounds={BIG}", "training.rounds", "a finite number"),
    (f"population.deadline_seconds={BIG}", "population.deadline_seconds", "a finite number"),
    (f"method.server_lr={BIG}", "method.server_lr", "a finite number"),
    (f"population.speed_tiers=[{{fraction: {BIG}, samples_per_second: 1}}]", "population.speed_tiers[0].fraction",
     "a positive number"),
    (f"ray.worker.num_gpus={BIG}", "ray.worker.num_gpus", "a finite number"),
    (f"ray.worker_pools=[{{name: a, count: 1, num_cpus: 1, num_gpus: {BIG}}}]", "ray.worker_pools[0].num_gpus",
     "a fraction <= 1 or a whole number of GPUs"),
])
def test_an_integer_past_float_s_range_is_one_scenario_error_not_an_overflow_traceback(tmp_path, item, key, expected):
    """``training.lr: 1`` followed by 400 zeros was OverflowError's traceback (float() in the type check,
    math.isfinite in the range check and the record fields), which the command line does not catch."""
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, {}), [item])
    message = str(err.value)
    assert message.startswith(f"--set: {key}: expected {expected}, got 1000") and "\n" not in message, message


def test_a_value_yaml_reads_but_python_cannot_build_is_one_scenario_error(tmp_path):
    """An integer of over 4,300 digits (Python's limit) and a date that is no date (``2026-13-45``, which
    YAML reads as a timestamp) were ValueError's traceback from PyYAML's constructor, file and override alike."""
    digits = "1" + "0" * 5000
    path = tmp_path / "s.yaml"
    for text, problem in ((f"seed: {digits}\n", "Exceeds the limit (4300 digits) for integer string conversion: "
                                                 "value has 5001 digits"),
                          ("name: 2026-13-45\n", "month must be in 1..12")):
        path.write_text(text)
        with pytest.raises(ScenarioError) as err:
            load_scenario(path)
        assert str(err.value) == (f"{path}: -: not valid YAML here ({problem}); expected a scenario's numbers, "
                                  f"names and lists")
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, {}), [f"seed={digits}"])
    assert str(err.value) == ("--set: seed: the value is not valid YAML (Exceeds the limit (4300 digits) for integer "
                              "string conversion: value has 5001 digits); expected e.g. 5, 0.1, true, [0.8, 1.0] or a name")


def test_the_defaults_the_readme_documents(tmp_path):
    """The README's stated defaults of the evaluation and the augmentation, and no download unless asked
    (a shipped scenario that leaves them out runs with these; the baselines pin only what trains)."""
    scenario = load_scenario(write(tmp_path, {}))
    assert scenario["dataset"]["download"] is False and scenario["dataset"]["train_subset"] is None
    assert {key: scenario["eval"][key] for key in ("knn_k", "knn_temperature", "label_fractions", "label_draws",
                                                    "label_knn_k", "finetune_steps", "finetune_batch_size",
                                                    "finetune_lr", "finetune_augment", "pixel_reference")} == {
        "knn_k": 200, "knn_temperature": 0.1, "label_fractions": [0.01, 0.1], "label_draws": 3, "label_knn_k": None,
        "finetune_steps": 0, "finetune_batch_size": 64, "finetune_lr": 0.001, "finetune_augment": False,
        "pixel_reference": True}
    assert {key: scenario["augment"][key] for key in ("hue", "jitter_order", "crop_sampler", "interpolation",
                                                       "blur_prob", "blur_sigma", "blur_kernel", "solarize_prob")} == {
        "hue": 0.0, "jitter_order": "fixed", "crop_sampler": "uniform_area", "interpolation": "bilinear",
        "blur_prob": 0.0, "blur_sigma": [0.1, 2.0], "blur_kernel": 3, "solarize_prob": 0.0}
    assert scenario["partition"]["fill"] == "in_order" and scenario["training"]["grad_clip_norm"] == 0.0
