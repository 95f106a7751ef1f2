"""Scenario files: defaults, loading, ``--set`` overrides and validation.

A scenario is a YAML mapping with the sections of ``DEFAULTS``; the ``method`` section holds
``name`` plus the keys its method class declares in ``params``. Every problem is reported as one
``ScenarioError`` line naming the file, the dotted key and what is expected.
"""
from __future__ import annotations

import copy
import csv
import math
import os
import re
from pathlib import Path
from typing import Any

import yaml

from simulator.records import (FLOAT32_MAX, GPU_COUNT, NON_NEGATIVE_NUMBER, POSITIVE_INTEGER, POSITIVE_NUMBER, STRING,
                               RecordError, check_records, is_finite, is_number, out_of_float32)

DEFAULTS: dict[str, Any] = {
    "name": "unnamed",
    "seed": 0,
    "executor": "ray",  # or "in_process": the same rounds in the driver's process, without Ray
    "dataset": {"name": "fashion_mnist", "root": None, "download": False, "train_subset": None,
                "cache_dir": "~/.cache/fedssl"},
    "partition": {"kind": "iid", "alpha": 0.5, "scale_by_prior": False, "fill": "in_order", "k": 2,
                  "rotation_bins": 10, "rotation_alpha": 0.1},
    "population": {"num_clients": 100, "clients_per_round": 10, "dropout": 0.0,
                   "availability": 1.0, "availability_spread": 0.0, "diurnal_amplitude": 0.0,
                   "diurnal_period": 24.0, "availability_trace": None,
                   "speed_tiers": [{"fraction": 1.0, "samples_per_second": 100.0}],
                   "deadline_seconds": None, "over_selection": 0.0},
    "model": {"encoder": "small_cnn", "norm": "group", "projector_dim": 128, "hidden_dim": 512,
              "head_norm": "none"},
    "method": {"name": "fedavg"},
    "training": {"rounds": 50, "local_epochs": 1, "batch_size": 32, "lr": 0.05,
                 "lr_schedule": "constant", "momentum": 0.9, "weight_decay": 5e-4,
                 "grad_clip_norm": 0.0, "drop_last": False, "centralized": False},
    # augment_prime: the keys of augment that differ for a sample's second view (T') where the method
    # draws one (methods.base.Method.second_view), e.g. Orchestra's reference blurs less and solarises it
    "augment_prime": {},
    "augment": {"crop_scale": [0.35, 1.0], "flip_prob": 0.5, "jitter_prob": 0.8,
                "brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "grayscale_prob": 0.0,
                # torchvision's pipeline, as the papers' reference code runs it (simulator/augment.py):
                # hue jitter, ColorJitter's random order, RandomResizedCrop's boxes
                "hue": 0.0, "jitter_order": "fixed", "crop_sampler": "uniform_area",
                # the crop's bicubic resize (Pillow's), GaussianBlur, solarisation (Pillow's)
                "interpolation": "bilinear", "blur_prob": 0.0, "blur_sigma": [0.1, 2.0], "blur_kernel": 3,
                "solarize_prob": 0.0},
    "eval": {"enabled": True, "every": 10, "knn_k": 200, "knn_temperature": 0.1, "probe_iterations": 100,
             "train_subset": None, "test_subset": None,
             # label-efficient protocol: kNN, probe (and fine-tuning when finetune_steps > 0) on a
             # class-stratified fraction of the labelled train set, mean over label_draws draws
             # label_knn_k: the kNN's k on those few labels (null: knn_k; with 1% of a 10,000-image
             # subset, k = 200 is every one of the 100 banked images, a vote over the whole bank; with
             # 10%, at least 100 of the 200 neighbours are of other classes: results/protocol.md)
             "label_fractions": [0.01, 0.1], "label_draws": 3, "label_knn_k": None, "finetune_steps": 0,
             "finetune_batch_size": 64, "finetune_lr": 0.001, "finetune_augment": False,
             # the same protocol on the raw pixels, once a run (simulator.evaluation.monitor.raw_pixels)
             "pixel_reference": True},
    "ray": {"address": None, "num_workers": 2, "worker": {"num_cpus": 1, "num_gpus": 0.0},
            "worker_pools": [], "server": "driver",
            "driver_simulates": True, "evaluator": "driver", "while_starting": "driver",
            "share_timeout_seconds": None,
            # torch's determinism switches on GPU workers (simulator.resources.cuda_determinism):
            # without them a CUDA run does not repeat bitwise; false trades that for speed
            "cuda_deterministic": True},
    "output": {"dir": "runs", "checkpoint_every": 10},
}

# The lists of records (simulator.records): each one's fields, and check_records' options.
RECORD_LISTS = {
    "population.speed_tiers": ({"fraction": POSITIVE_NUMBER, "samples_per_second": POSITIVE_NUMBER},
                               {"non_empty": True}),
    # ray.worker_pools: empty, one pool of ray.num_workers workers with ray.worker's resources
    "ray.worker_pools": ({"name": STRING, "count": POSITIVE_INTEGER, "num_cpus": NON_NEGATIVE_NUMBER,
                          "num_gpus": GPU_COUNT}, {"distinct": "name"}),
}
# Keys whose default is null, and the type they take otherwise.
NULLABLE = {"dataset.root": str, "dataset.train_subset": int, "eval.train_subset": int, "eval.test_subset": int,
            "eval.label_knn_k": int, "ray.address": str,
            "ray.share_timeout_seconds": float, "population.availability_trace": str, "population.deadline_seconds": float}
POSITIVE = {"population.num_clients", "population.clients_per_round", "training.rounds",
            "training.local_epochs", "training.batch_size", "eval.every", "eval.knn_k",
            "eval.probe_iterations", "ray.num_workers", "model.projector_dim", "model.hidden_dim",
            "partition.k", "partition.rotation_bins", "dataset.train_subset", "eval.train_subset", "eval.test_subset",
            "output.checkpoint_every", "partition.alpha", "partition.rotation_alpha", "training.lr",
            "eval.label_draws", "eval.finetune_batch_size", "eval.finetune_lr",
            "population.diurnal_period", "population.deadline_seconds", "ray.share_timeout_seconds",
            "eval.knn_temperature", "eval.label_knn_k"}
NON_NEGATIVE = {"seed", "training.momentum", "training.weight_decay", "training.grad_clip_norm", "ray.worker.num_cpus",
                "eval.finetune_steps",
                "ray.worker.num_gpus", "augment.brightness",
                "augment.contrast", "augment.saturation", "population.availability_spread",
                "population.diurnal_amplitude", "population.over_selection", "augment.hue"}
# Floats that training or evaluation makes tensors of (float32): a larger one is an error, not torch's overflow.
FLOAT32 = {"training.lr", "training.weight_decay", "augment.brightness", "augment.contrast", "augment.saturation",
           "eval.knn_temperature", "eval.finetune_lr"}
MAX_NAME_BYTES = 200  # a run directory is NAME-YYYYmmdd-HHMMSS[-N]: 255 bytes at most on common file systems
# The kNN monitor weighs a neighbour by exp(cosine similarity / T) in float32: below this T, exp(1 / T) is
# infinite and every near neighbour's vote ties at infinity (float32's largest exponent is 88.72).
KNN_MIN_TEMPERATURE = 0.0113
# A Gaussian blur's kernel: its reflect padding, half of it, must stay below the smallest images' side (28).
MAX_BLUR_KERNEL = 55
MIN_BLUR_SIGMA = 1e-6  # a blur's standard deviation (pixels), of which float32 keeps a non-zero value
# The diurnal cycle is sampled once a round: a period under two rounds is a longer one's alias (and one of 1e-320
# made 2 pi round / period infinite, math.sin's ValueError in round 1).
MIN_DIURNAL_PERIOD = 2.0
PROBABILITIES = {"population.dropout", "population.availability", "augment.flip_prob", "augment.jitter_prob",
                 "augment.grayscale_prob", "augment.blur_prob", "augment.solarize_prob"}


def fraction_suffix(fraction: float) -> str:
    """The metric-name suffix of an ``eval.label_fractions`` entry: 0.01 -> ``"1pct"``, 0.1 ->
    ``"10pct"``, 0.005 -> ``"0p5pct"`` (two fractions are distinct when their suffixes are)."""
    return f"{100 * fraction:f}".rstrip("0").rstrip(".").replace(".", "p") + "pct"


class ScenarioError(ValueError):
    """A one-line description of what is wrong in a scenario: ``FILE: KEY: expected ...``; a message of over
    :data:`LONGEST_MESSAGE` characters (a value echoed whole: a list of 300,000 items was 900 KB) is cut."""

    def __init__(self, source: str, key: str, message: str):
        if len(message) > LONGEST_MESSAGE:
            message = f"{message[:LONGEST_MESSAGE]}... ({len(message):,} characters, cut)"
        super().__init__(f"{source}: {key}: {message}")
        self.key, self.message = key, message


LONGEST_MESSAGE = 2000
LARGEST_YAML = 10_000_000  # characters of a scenario or suite file (the shipped ones hold at most a few thousand)


def choices() -> dict[str, tuple[str, ...]]:
    """Keys restricted to a set of names (imported lazily: they come from the packages); the
    ``method:`` section's are its method's ``param_rules``, ``method.name`` is checked first."""
    from simulator.augment import CROP_SAMPLERS, INTERPOLATIONS, JITTER_ORDERS
    from simulator.data.datasets import DATASETS
    from simulator.data.partition import DIRICHLET_FILLS, PARTITION_KINDS
    from simulator.models import ENCODERS, HEAD_NORMS, NORMS
    return {
        "dataset.name": tuple(DATASETS), "partition.kind": tuple(PARTITION_KINDS), "partition.fill": tuple(DIRICHLET_FILLS),
        "model.encoder": tuple(ENCODERS), "model.norm": tuple(NORMS),
        "training.lr_schedule": ("constant", "cosine"),
        "executor": ("ray", "in_process"),
        "model.head_norm": HEAD_NORMS,
        "ray.server": ("driver", "actor"), "ray.evaluator": ("driver", "actor"),
        "ray.while_starting": ("driver", "wait"),
        "augment.crop_sampler": tuple(CROP_SAMPLERS), "augment.jitter_order": JITTER_ORDERS,
        "augment.interpolation": INTERPOLATIONS,
    }


class ScenarioLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's floats: ``1e-3`` and ``5E-4`` are numbers (YAML 1.1, which
    PyYAML follows, reads an exponent without a dot, as researchers write learning rates, as a string),
    and a key written twice in one mapping is an error (PyYAML keeps the last silently, so a second
    ``training:`` section would drop the first)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key!r} is written twice in one mapping; expected each key once",
                        key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


ScenarioLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


class UnreadableYaml(ValueError):
    """Text that is not valid YAML, or holds a value Python cannot build: ``problem`` on one line,
    ``line`` (from 1) where the reader knows it, ``expected`` what a scenario holds instead where it does not."""

    def __init__(self, problem: str, line: int | None = None, expected: str | None = None):
        super().__init__(problem)
        self.problem, self.line, self.expected = problem, line, expected


def parse_yaml(text: str) -> Any:
    """A YAML document read by :class:`ScenarioLoader`; :class:`UnreadableYaml` where it cannot be."""
    try:
        return yaml.load(text, Loader=ScenarioLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        position = getattr(err, "position", None)  # a reader's error: a character YAML does not allow
        line = mark.line + 1 if mark else text.count("\n", 0, position) + 1 if position is not None else None
        raise UnreadableYaml(yaml_problem(err), line) from None
    except RecursionError:
        raise UnreadableYaml("nested too deeply for the reader",
                             expected="a scenario's few levels of sections and lists") from None
    except ValueError as err:  # an integer of over 4,300 digits, a date that is none (2026-13-45)
        raise UnreadableYaml(str(err).split(";")[0],  # without Python's advice to raise its limit
                             expected="a scenario's numbers, names and lists") from None


def read_yaml(path: str | Path) -> Any:
    """The YAML document in ``path`` (``None`` when empty); an unreadable file or invalid YAML raises
    ``ScenarioError`` (``FILE: -: cannot read the file (...)``, ``FILE: line N: not valid YAML (...)``)."""
    source = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(LARGEST_YAML + 1)  # /dev/zero, or a data file given by mistake, is not read whole
    except OSError as err:
        raise ScenarioError(source, "-", f"cannot read the file ({err.strerror})") from None
    except UnicodeDecodeError:
        raise ScenarioError(source, "-", "cannot read the file (not UTF-8 text); expected a YAML text file") from None
    if len(text) > LARGEST_YAML:
        raise ScenarioError(source, "-", f"the file holds over {LARGEST_YAML:,} characters; expected a scenario's "
                                         f"or claim suite's YAML text")
    try:
        return parse_yaml(text)
    except UnreadableYaml as err:
        if err.line is not None:
            raise ScenarioError(source, f"line {err.line}", f"not valid YAML ({err.problem})") from None
        raise ScenarioError(source, "-", f"not valid YAML here ({err.problem})"
                                         + (f"; expected {err.expected}" if err.expected else "")) from None


def yaml_problem(err: yaml.YAMLError) -> str:
    """The problem a YAML error names, on one line (a reader's error spans two)."""
    if isinstance(err, yaml.reader.ReaderError):  # its character: a code point (or a byte of bad UTF-8)
        code = err.character if isinstance(err.character, int) else ord(err.character)
        return f"{err.reason}: #x{code:04x}"
    return " ".join(str(getattr(err, "problem", None) or err).split())


def load_scenario(path: str | Path, overrides: list[str] = (), overrides_source: str = "--set") -> dict[str, Any]:
    """Read, override, complete with defaults and validate a scenario file; an error in a value the
    overrides set names ``overrides_source`` (the command line's ``--set``, a claim suite's ``set``)
    in the file's place."""
    source = str(path)
    raw = read_yaml(path)
    if raw is None:
        raise ScenarioError(source, "-", "the file holds no YAML document; expected a scenario (a mapping of "
                                         "sections such as dataset, method, training)")
    if not isinstance(raw, dict):
        raise ScenarioError(source, "-", "expected a mapping of sections at the top level")
    for item in overrides:
        apply_override(raw, item, overrides_source)
    try:
        return resolve(raw, source)
    except ScenarioError as err:
        raise named_as_set(err, overrides, overrides_source) from None


def named_as_set(err: ScenarioError, overrides: list[str], overrides_source: str = "--set") -> ScenarioError:
    """``err`` naming ``overrides_source`` in its file's place where one of ``overrides`` set its key (a
    value the command line set is named as the command line's)."""
    if any(overridden(err.key, item.partition("=")[0]) for item in overrides):
        return ScenarioError(overrides_source, err.key, err.message)
    return err


def overridden(key: str, set_key: str) -> bool:
    """Whether the scenario key ``key`` (``eval.knn_k``, ``population.speed_tiers[0].fraction``) is, lies
    under, or holds the dotted key ``set_key`` that ``--set`` changed."""
    return any(outer == inner or inner.startswith((outer + ".", outer + "["))
               for outer, inner in ((set_key, key), (key, set_key)))


def apply_override(raw: dict, item: str, source: str = "--set") -> None:
    """Apply one ``dotted.key=value`` (value parsed as YAML) to the raw scenario; an error names
    ``source`` (the command line's ``--set``, a claim suite's ``set``)."""
    key, sep, value = item.partition("=")
    if not sep or not all(key.split(".")):  # an empty part (".=1", "training..lr=1") names no key
        raise ScenarioError(source, item, "expected dotted.key=value")
    node = raw
    parts = key.split(".")
    for part in parts[:-1]:
        if node.get(part) is None:  # absent, or a section written empty
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise ScenarioError(source, key, f"{part!r} is not a section")
    try:
        node[parts[-1]] = parse_yaml(value)
    except UnreadableYaml as err:
        raise ScenarioError(source, key, f"the value is not valid YAML ({err.problem}); "
                                         f"expected e.g. 5, 0.1, true, [0.8, 1.0] or a name") from None


def resolve(raw: dict, source: str = "<scenario>") -> dict[str, Any]:
    """Defaults merged with ``raw``, type- and range-checked; raises ``ScenarioError``."""
    from methods import METHODS
    defaults = copy.deepcopy(DEFAULTS)
    method_section = raw.get("method") or {}
    if not isinstance(method_section, dict):
        raise ScenarioError(source, "method", f"expected a mapping, got {type(method_section).__name__}")
    method_name = method_section.get("name", defaults["method"]["name"])
    if not isinstance(method_name, str) or method_name not in METHODS:
        raise ScenarioError(source, "method.name", f"expected one of {', '.join(METHODS)}, got {method_name!r}")
    defaults["method"].update(copy.deepcopy(METHODS[method_name].params))
    scenario = merge(defaults, {k: v for k, v in raw.items() if k != "augment_prime"}, source, "")
    scenario["augment_prime"] = second_view_changes(scenario["augment"], raw.get("augment_prime"), source)
    check_values(scenario, source)
    if scenario["augment_prime"]:  # the second view's augmentation checked as the first is, its keys as written
        try:
            check_values({**scenario, "augment": {**scenario["augment"], **scenario["augment_prime"]}}, source)
        except ScenarioError as err:
            raise ScenarioError(source, err.key.replace("augment.", "augment_prime.", 1), err.message) from None
    from methods.base import ParamError
    try:
        METHODS[method_name].check_params(scenario["method"], scenario)
    except ParamError as err:
        raise ScenarioError(source, f"method.{err.key}", err.message) from None
    method = METHODS[method_name]
    if scenario["augment_prime"] and not method.second_view(method.Params.from_config(scenario["method"])):
        raise ScenarioError(source, "augment_prime", f"expected no keys: method {method_name} with these parameters "
                                                     f"augments one view of a sample (augment), got "
                                                     f"{', '.join(scenario['augment_prime'])}")
    if scenario["training"]["centralized"] and not METHODS[method_name].centralizable:
        raise ScenarioError(source, "training.centralized", f"expected false for method {method_name} (one "
                            "client holding the union stands in only for a method without per-client state)")
    return scenario


def second_view_changes(augment: dict, changes: Any, source: str) -> dict:
    """``augment_prime`` (null: none), type-checked against the resolved ``augment`` section: the keys
    written, with their values."""
    if changes is None:
        return {}
    merged = merge(augment, changes, source, "augment_prime.")
    return {key: merged[key] for key in changes}


def merge(defaults: dict, raw: Any, source: str, prefix: str) -> dict:
    if not isinstance(raw, dict):
        raise ScenarioError(source, prefix.rstrip(".") or "-", f"expected a mapping, got {type(raw).__name__}")
    out = {}
    for key in raw:
        if key not in defaults:
            raise ScenarioError(source, prefix + str(key),
                                f"unknown key; expected one of {', '.join(defaults)}")
    for key, default in defaults.items():
        dotted = prefix + key
        if isinstance(default, dict):  # a section written empty (``training:``) keeps its defaults
            out[key] = merge(default, {} if raw.get(key) is None else raw[key], source, dotted + ".")
        else:
            out[key] = check_type(dotted, raw.get(key, default), default, source)
    return out


def check_type(key: str, value: Any, default: Any, source: str) -> Any:
    if value is None:
        if default is None:
            return None
        raise ScenarioError(source, key, f"expected {type_name(default)}, got null")
    expected = NULLABLE.get(key) if default is None else type(default)
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        if not is_finite(value):  # an integer past float's range: float() raises OverflowError
            raise ScenarioError(source, key, f"expected a finite number, got {value!r}")
        return float(value)
    if expected is int and isinstance(value, float) and value.is_integer() and key in NULLABLE:
        return int(value)
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ScenarioError(source, key, f"expected {type_name(default, expected)}, got {value!r}")
    # a list with an empty default is a list of records: the scenario's own (RECORD_LISTS) checked
    # here, a method's (Hetero-SSFL's tiers) by its Params
    if expected is list and (default or key in RECORD_LISTS):
        return check_list(key, value, source)
    return value


def check_list(key: str, value: list, source: str) -> list:
    """A list of numbers, or of records if ``key`` is one of ``RECORD_LISTS``."""
    if key in RECORD_LISTS:
        fields, options = RECORD_LISTS[key]
        try:
            return check_records(value, fields, **options)
        except RecordError as err:
            raise ScenarioError(source, key + err.where, err.message) from None
    if not all(map(is_number, value)):
        raise ScenarioError(source, key, f"expected a list of numbers, got {value!r}")
    return value


def type_name(default: Any, expected: type | None = None) -> str:
    expected = expected or type(default)
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
             list: "a list"}
    return names.get(expected, expected.__name__)


def lookup(scenario: dict, dotted: str) -> Any:
    node = scenario
    for part in dotted.split("."):
        node = node[part]
    return node


def check_values(scenario: dict, source: str) -> None:
    for key, allowed in choices().items():
        value = lookup(scenario, key)
        if value is not None and value not in allowed:
            raise ScenarioError(source, key, f"expected one of {', '.join(allowed)}, got {value!r}")
    for key in sorted(POSITIVE | NON_NEGATIVE | PROBABILITIES):  # the first bad key, whatever the hash seed
        value = lookup(scenario, key)
        if value is None:
            continue
        if not is_finite(value):
            raise ScenarioError(source, key, f"expected a finite number, got {value!r}")
        if key in FLOAT32 and (too_large := out_of_float32(value)) is not None:
            raise ScenarioError(source, key, f"expected {too_large}, got {value!r}")
        if key in POSITIVE and value <= 0:
            raise ScenarioError(source, key, f"expected a positive number, got {value!r}")
        if key in NON_NEGATIVE and value < 0:
            raise ScenarioError(source, key, f"expected a non-negative number, got {value!r}")
        if key in PROBABILITIES and not 0 <= value <= 1:
            raise ScenarioError(source, key, f"expected a probability in [0, 1], got {value!r}")
    if scenario["eval"]["knn_temperature"] < KNN_MIN_TEMPERATURE:
        raise ScenarioError(source, "eval.knn_temperature",
                            f"expected at least {KNN_MIN_TEMPERATURE} (the kNN vote weighs a neighbour by "
                            f"exp(similarity / T), infinite in float32 below it), "
                            f"got {scenario['eval']['knn_temperature']!r}")
    if "/" in scenario["name"] or any(ord(c) < 32 or ord(c) == 127 for c in scenario["name"]):
        raise ScenarioError(source, "name", f"expected a name without '/' or control characters such as NUL or a "
                                            f"line break (it names the run directory inside output.dir, printed "
                                            f"on one line), got {scenario['name']!r}")
    if len(os.fsencode(scenario["name"])) > MAX_NAME_BYTES:
        raise ScenarioError(source, "name", f"expected at most {MAX_NAME_BYTES} bytes (with a timestamp it names "
                                            f"the run directory, and file systems take names of 255), got "
                                            f"{len(os.fsencode(scenario['name']))}")
    training = scenario["training"]
    if training["batch_size"] < 2:
        raise ScenarioError(source, "training.batch_size",
                            f"expected an integer >= 2 (a batch of one sample is skipped: batch statistics need two), "
                            f"got {training['batch_size']!r}")
    if not training["momentum"] < 1:
        raise ScenarioError(source, "training.momentum", f"expected a number in [0, 1), got {training['momentum']!r}")
    population = scenario["population"]
    if population["clients_per_round"] > population["num_clients"]:
        raise ScenarioError(source, "population.clients_per_round",
                            f"expected at most population.num_clients ({population['num_clients']}), "
                            f"got {population['clients_per_round']}")
    if not population["availability_spread"] < population["availability"]:
        raise ScenarioError(source, "population.availability_spread",
                            f"expected less than population.availability ({population['availability']}), or the "
                            f"clients whose availability it takes to 0 are never online; got "
                            f"{population['availability_spread']!r}")
    if population["diurnal_period"] < MIN_DIURNAL_PERIOD:
        raise ScenarioError(source, "population.diurnal_period",
                            f"expected at least {MIN_DIURNAL_PERIOD:g} rounds (the cycle is sampled once a round: a "
                            f"shorter period is a longer one's alias), got {population['diurnal_period']!r}")
    fractions = sum(tier["fraction"] for tier in population["speed_tiers"])
    if not math.isclose(fractions, 1.0, abs_tol=1e-6):
        raise ScenarioError(source, "population.speed_tiers", f"expected fractions summing to 1, got {fractions!r}")
    check_gpus(scenario["ray"]["worker"]["num_gpus"], "ray.worker.num_gpus", source)
    fractions = scenario["eval"]["label_fractions"]
    if (not all(0 < f <= 1 and fraction_suffix(f) != "0pct" for f in fractions)
            or len(set(map(fraction_suffix, fractions))) < len(fractions)):
        raise ScenarioError(source, "eval.label_fractions",
                            f"expected distinct fractions in [1e-8, 1] (e.g. [0.01, 0.1]; [] for none; a metric's name "
                            f"gives the percentage to 6 decimals), got {fractions!r}")
    if not scenario["augment"]["hue"] <= 0.5:
        raise ScenarioError(source, "augment.hue", f"expected a number in [0, 0.5] (a hue shift drawn in [-hue, hue], "
                                                   f"as torchvision's ColorJitter), got {scenario['augment']['hue']!r}")
    crop = scenario["augment"]["crop_scale"]
    if len(crop) != 2 or not 0 < crop[0] <= crop[1] <= 1:
        raise ScenarioError(source, "augment.crop_scale", f"expected [min, max] with 0 < min <= max <= 1, got {crop!r}")
    sigma = scenario["augment"]["blur_sigma"]
    if len(sigma) != 2 or not MIN_BLUR_SIGMA <= sigma[0] <= sigma[1] <= FLOAT32_MAX:
        raise ScenarioError(source, "augment.blur_sigma", f"expected [min, max] with {MIN_BLUR_SIGMA} <= min <= max "
                                                          f"<= {FLOAT32_MAX:.3g} (the blur's standard deviation in "
                                                          f"pixels, float32), got {sigma!r}")
    kernel = scenario["augment"]["blur_kernel"]
    if not (kernel % 2 == 1 and 0 < kernel <= MAX_BLUR_KERNEL):
        raise ScenarioError(source, "augment.blur_kernel", f"expected an odd integer from 1 to {MAX_BLUR_KERNEL} "
                                                           f"(its reflect padding, half of it, must stay below "
                                                           f"the images' side, 28 pixels at least), got {kernel!r}")
    if population["availability_trace"] is not None:
        check_trace(population["availability_trace"], population["num_clients"], source)


def check_trace(path: str, num_clients: int, source: str) -> None:
    """``population.availability_trace``: a readable ``round,client`` CSV whose client ids are the
    population's (an id outside it would silently leave a client offline for good)."""
    from simulator.population import read_trace
    key = "population.availability_trace"
    try:
        trace = read_trace(str(Path(path).expanduser()))
    except OSError as err:
        raise ScenarioError(source, key, f"cannot read {path}: {err.strerror or err}") from None
    except (ValueError, KeyError, TypeError, csv.Error) as err:  # csv.Error: a stray quote swallowed the file
        raise ScenarioError(source, key, f"expected a CSV with columns round,client of non-negative integers, "
                                         f"got {path} ({err})") from None
    outside = sorted(c for online in trace.online.values() for c in online if not 0 <= c < num_clients)
    if outside:
        raise ScenarioError(source, key, f"expected client ids in [0, {num_clients}) (population.num_clients), "
                                         f"got {outside[0]} in {path}")


def check_gpus(gpus: float, key: str, source: str) -> None:
    if not GPU_COUNT.accepts(gpus):
        raise ScenarioError(source, key, f"expected {GPU_COUNT.expected}, got {gpus!r}")
