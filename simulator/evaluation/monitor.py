"""Evaluation of a run's encoder: the labelled data it uses and the metrics it reports."""
from __future__ import annotations

import hashlib
import json
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from simulator.augment import AugmentConfig, BatchAugment
from simulator.context import derive_seed
from simulator.data.datasets import scenario_dataset, seeded_subset
from simulator.data.partition import build_partition
from simulator.evaluation.align_uniform import align_uniform_score
from simulator.held_out import EVAL_TEST_STREAM
from simulator.evaluation.metrics import extract_features, finetune_top1, knn_top1, label_subset, linear_probe_top1
from simulator.scenario import fraction_suffix


@dataclass(frozen=True)
class EvalData:
    """Labelled train (kNN bank, probe training) and test images; labels used only here."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    labelled_x: torch.Tensor | None = None  # semi-supervised runs: the clients' labelled samples
    labelled_y: torch.Tensor | None = None


def load_eval_data(scenario: Mapping[str, Any]) -> EvalData:
    dataset_cfg, eval_cfg, seed = scenario["dataset"], scenario["eval"], scenario["seed"]
    data = scenario_dataset(dataset_cfg, seed)
    train_x, train_y = seeded_subset(data.train_x, data.train_y, eval_cfg["train_subset"], derive_seed(seed, "eval-train"))
    test_x, test_y = seeded_subset(data.test_x, data.test_y, eval_cfg["test_subset"], derive_seed(seed, EVAL_TEST_STREAM))
    from methods import METHODS
    method = METHODS[scenario["method"]["name"]]
    labelled = method.labelled_train_indices(scenario, lambda: build_partition(scenario, data.train_y.numpy()))
    if labelled is None:
        return EvalData(train_x, train_y, test_x, test_y, data.num_classes)
    rows = torch.from_numpy(labelled)
    return EvalData(train_x, train_y, test_x, test_y, data.num_classes, data.train_x[rows], data.train_y[rows])


ALIGN_UNIFORM_IMAGES = 2000
# Every metric name evaluate_network can give (which ones a run has depends on its scenario and network).
EVALUATED_METRIC = re.compile(r"(?:knn|linear|knn_projector|labelled_linear)_top1|align|unif|align_unif_score"
                              r"|(?:knn|linear|finetune)_top1_\d+(?:p\d+)?pct")
# Fine-tuning's light augmentation: a mild random resized crop and the scenario's flip, no colour.
FINETUNE_CROP_SCALE = (0.8, 1.0)


def label_efficient_metrics(encoder: torch.nn.Module, train_f: torch.Tensor, test_f: torch.Tensor,
                            data: EvalData, scenario: Mapping[str, Any]) -> dict[str, float]:
    """The label-efficient protocol (SimCLR, Chen et al. 2020, section 6; Orchestra, Lubana et al.
    2022, Table 1) for each fraction ``f`` in ``eval.label_fractions``: ``knn_top1_<f>``,
    ``linear_top1_<f>`` (the kNN monitor and the linear probe with only a class-stratified fraction
    ``f`` of the labelled train set as bank / probe set, :func:`simulator.evaluation.metrics.label_subset`) and,
    where ``eval.finetune_steps > 0``, ``finetune_top1_<f>`` (a copy of the whole encoder and a
    linear head trained on that fraction, :func:`simulator.evaluation.metrics.finetune_top1`), each scored on
    the whole test set and averaged over ``eval.label_draws`` draws of the labels, draw ``d`` fixed
    by the run's seed and ``d``. Where ``eval.train_subset`` restricts the train set, the fractions
    are of that subset. ``train_f``, ``test_f``: the encoder's features of ``data.train_x``, ``data.test_x``."""
    eval_cfg, seed = scenario["eval"], scenario["seed"]
    augment = None
    if eval_cfg["finetune_augment"]:
        augment = BatchAugment(AugmentConfig(crop_scale=FINETUNE_CROP_SCALE, flip_prob=scenario["augment"]["flip_prob"],
                                             jitter_prob=0.0, grayscale_prob=0.0))
    metrics: dict[str, float] = {}
    for fraction in eval_cfg["label_fractions"]:
        scores: dict[str, list[float]] = defaultdict(list)
        for draw in range(eval_cfg["label_draws"]):
            rows = label_subset(data.train_y, fraction, seed, draw)
            features, labels = train_f[rows], data.train_y[rows]
            scores["knn_top1"].append(knn_top1(features, labels, test_f, data.test_y, data.num_classes,
                                               k=eval_cfg["label_knn_k"] or eval_cfg["knn_k"],
                                               temperature=eval_cfg["knn_temperature"]))
            scores["linear_top1"].append(linear_probe_top1(features, labels, test_f, data.test_y, data.num_classes,
                                                           max_iter=eval_cfg["probe_iterations"]))
            if eval_cfg["finetune_steps"] > 0:
                scores["finetune_top1"].append(finetune_top1(
                    encoder, data.train_x[rows], labels, data.test_x, data.test_y, data.num_classes,
                    steps=eval_cfg["finetune_steps"], batch_size=eval_cfg["finetune_batch_size"],
                    lr=eval_cfg["finetune_lr"], seed=derive_seed(seed, "finetune", fraction, draw),
                    augment=augment, train_features=features))
        metrics.update({f"{name}_{fraction_suffix(fraction)}": statistics.fmean(values)
                        for name, values in scores.items()})
    return metrics


def evaluate_network(network: torch.nn.ModuleDict, data: EvalData, scenario: Mapping[str, Any]
                     ) -> dict[str, float]:
    """kNN (k, temperature from the scenario) and linear-probe top-1 on the backbone features of
    ``network["encoder"]``; with a ``network["projector"]``, ``knn_projector_top1``: the same kNN on
    the projector's output, as the FedSC reference code's kNN monitor measures it (Jing et al. 2024,
    Fig. 2); Orchestra's unsupervised score Align + 0.2 Unif (``simulator.evaluation.align_uniform``) on 2,000
    train images without their labels, under the scenario's augmentations; with labelled samples
    (semi-supervised runs), also ``labelled_linear_top1``: a probe trained on them alone (Louizos et
    al. 2024, section 2.2); and the label-efficient metrics of :func:`label_efficient_metrics`
    (``knn_top1_1pct``, ``linear_top1_10pct``, ..., ``finetune_top1_1pct`` where enabled)."""
    eval_cfg, encoder = scenario["eval"], network["encoder"]
    train_f = extract_features(encoder, data.train_x)
    test_f = extract_features(encoder, data.test_x)
    probe = lambda features, labels: linear_probe_top1(features, labels, test_f, data.test_y, data.num_classes,
                                                       max_iter=eval_cfg["probe_iterations"])
    knn = lambda train, test: knn_top1(train, data.train_y, test, data.test_y, data.num_classes,
                                       k=eval_cfg["knn_k"], temperature=eval_cfg["knn_temperature"])
    metrics = {"knn_top1": knn(train_f, test_f), "linear_top1": probe(train_f, data.train_y)}
    if "projector" in network:
        project = lambda features: extract_features(network["projector"], features)
        metrics["knn_projector_top1"] = knn(project(train_f), project(test_f))
    metrics.update(label_efficient_metrics(encoder, train_f, test_f, data, scenario))
    if data.labelled_x is not None:
        metrics["labelled_linear_top1"] = probe(extract_features(encoder, data.labelled_x), data.labelled_y)
    augment = BatchAugment(AugmentConfig.from_scenario(scenario["augment"]))
    generator = torch.Generator().manual_seed(derive_seed(scenario["seed"], "align-uniform"))
    metrics.update(align_uniform_score(encoder, data.train_x[:ALIGN_UNIFORM_IMAGES], augment, generator))
    return metrics


def raw_pixels() -> dict[str, torch.nn.ModuleDict]:
    """The networks to evaluate for the raw-pixel reference: an "encoder" that only flattens the
    images ([0, 1] pixels as the feature vector, 784 values for Fashion-MNIST).

    :func:`evaluate_network` of it applies the run's whole protocol (kNN, linear probe, the
    label-efficient metrics, fine-tuning, which trains the head alone) to the pixels: a reference
    fixed by the evaluation data alone, the same for every method, network and round, beside which
    a trained network's numbers read as what its features add over the images themselves (a linear
    probe on all of Fashion-MNIST's pixels scores 84.01%, ``results/regime.md``). It decides
    nothing: ``summary.json`` ``pixels``, ``reference/pixels/*`` in the logs, ``fedssl report``'s
    table against it."""
    return {"global": torch.nn.ModuleDict({"encoder": torch.nn.Flatten()})}


def evaluate_networks(networks: Mapping[str, torch.nn.ModuleDict], data: EvalData, scenario: Mapping[str, Any]
                      ) -> dict[str, dict[str, float]]:
    """:func:`evaluate_network` of each labelled network."""
    return {label: evaluate_network(network, data, scenario) for label, network in networks.items()}


def tensor_digest(hasher, tensor: torch.Tensor | None) -> None:
    """Feed ``tensor``'s dtype, shape and bytes (or its absence) to ``hasher``."""
    if tensor is None:
        hasher.update(b"none")
        return
    tensor = tensor.detach().cpu().contiguous()
    hasher.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
    hasher.update(tensor.reshape(-1).view(torch.uint8).numpy())


class EvaluationCache:
    """:func:`evaluate_networks` evaluating each network once per evaluation data, settings and
    weights: re-evaluating a claim's runs (``fedssl evaluate``) meets the same raw pixels in every run
    of a seed and the same round-0 network in every arm of a seed that shares its architecture. The
    key digests the data's tensors, all that :func:`evaluate_network` reads of the scenario (its
    ``eval`` and ``augment`` sections and seed) and the network's structure and state, so a hit is
    exactly what evaluating again would give in the same process (evaluation is deterministic in them)."""

    def __init__(self):
        self.results: dict[tuple[str, str], dict[str, float]] = {}
        self.data, self.data_key = None, ""  # the last data evaluated and its digest (a run's, several calls)

    def settings_key(self, data: EvalData, scenario: Mapping[str, Any]) -> str:
        if data is not self.data:
            hasher = hashlib.blake2b()
            for tensor in (data.train_x, data.train_y, data.test_x, data.test_y, data.labelled_x, data.labelled_y):
                tensor_digest(hasher, tensor)
            hasher.update(str(data.num_classes).encode())
            self.data, self.data_key = data, hasher.hexdigest()
        read = [scenario["eval"], scenario["augment"], scenario["seed"]]
        return self.data_key + json.dumps(read, sort_keys=True)

    @staticmethod
    def network_key(network: torch.nn.ModuleDict) -> str:
        hasher = hashlib.blake2b(repr(network).encode())
        for name, tensor in network.state_dict().items():
            hasher.update(name.encode())
            tensor_digest(hasher, tensor)
        return hasher.hexdigest()

    def evaluate_networks(self, networks: Mapping[str, torch.nn.ModuleDict], data: EvalData,
                          scenario: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        settings = self.settings_key(data, scenario)
        evaluations = {}
        for label, network in networks.items():
            key = (settings, self.network_key(network))
            if key not in self.results:
                self.results[key] = evaluate_network(network, data, scenario)
            evaluations[label] = dict(self.results[key])
        return evaluations


def summarize_evaluations(evaluations: dict[str, dict[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
    """(overall metrics, every metric to log) from the metrics of each evaluated encoder.

    One ``"global"`` encoder: logged as ``eval/<metric>``. Per-client encoders labelled
    ``"<group>/<name>"``: logged per label, as ``eval/<group>/<metric>_mean`` and ``_std`` over the
    group's clients, and as ``eval/<metric>`` = the mean over all clients (the overall value).
    """
    metric_names = sorted({m for metrics in evaluations.values() for m in metrics})
    overall = {m: statistics.fmean(e[m] for e in evaluations.values()) for m in metric_names}
    logged = {f"eval/{m}": v for m, v in overall.items()}
    if list(evaluations) == ["global"]:
        return overall, logged
    groups: dict[str, list[dict[str, float]]] = defaultdict(list)
    for label, metrics in sorted(evaluations.items()):
        groups[label.split("/", 1)[0]].append(metrics)
        logged.update({f"eval/{label}/{m}": v for m, v in metrics.items()})
    for group, members in groups.items():
        for m in metric_names:
            values = [e[m] for e in members]
            logged[f"eval/{group}/{m}_mean"] = statistics.fmean(values)
            logged[f"eval/{group}/{m}_std"] = statistics.pstdev(values)
    return overall, logged
