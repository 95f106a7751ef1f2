"""Evaluation of a run's encoder: the labelled data it uses and the metrics it reports."""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import torch

from analysis.align_uniform import align_uniform_score
from analysis.evaluate import extract_features, knn_top1, linear_probe_top1
from simulator.augment import AugmentConfig, BatchAugment
from simulator.context import derive_seed
from simulator.data.datasets import load_dataset


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


def subset(x: torch.Tensor, y: torch.Tensor, size: int | None, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded random subset of ``size`` rows (all rows when ``size`` is None or too large)."""
    if size is None or size >= len(y):
        return x, y
    rows = torch.from_numpy(np.sort(np.random.default_rng(seed).permutation(len(y))[:size]))
    return x[rows], y[rows]


def load_eval_data(scenario: Mapping[str, Any]) -> EvalData:
    dataset_cfg, eval_cfg, seed = scenario["dataset"], scenario["eval"], scenario["seed"]
    data = load_dataset(dataset_cfg["name"], dataset_cfg["root"], dataset_cfg["download"], seed=seed)
    train_x, train_y = subset(data.train_x, data.train_y, eval_cfg["train_subset"], derive_seed(seed, "eval-train"))
    test_x, test_y = subset(data.test_x, data.test_y, eval_cfg["test_subset"], derive_seed(seed, "eval-test"))
    fraction = scenario["method"].get("labelled_fraction", 0.0)
    if not fraction:
        return EvalData(train_x, train_y, test_x, test_y, data.num_classes)
    from methods.semi_supervised import labelled_train_indices
    from simulator.run import build_partition
    rows = torch.from_numpy(labelled_train_indices(build_partition(scenario, data.train_y.numpy()), seed, fraction))
    return EvalData(train_x, train_y, test_x, test_y, data.num_classes, data.train_x[rows], data.train_y[rows])


ALIGN_UNIFORM_IMAGES = 2000


def evaluate_network(network: torch.nn.ModuleDict, data: EvalData, scenario: Mapping[str, Any]
                     ) -> dict[str, float]:
    """kNN (k, temperature from the scenario) and linear-probe top-1 on the backbone features of
    ``network["encoder"]``; with a ``network["projector"]``, ``knn_projector_top1``: the same kNN on
    the projector's output, as the FedSC reference code's kNN monitor measures it (Jing et al. 2024,
    Fig. 2); Orchestra's unsupervised score Align + 0.2 Unif (``analysis.align_uniform``) on 2,000
    train images without their labels, under the scenario's augmentations; with labelled samples
    (semi-supervised runs), also ``labelled_linear_top1``: a probe trained on them alone (Louizos et
    al. 2024, section 2.2)."""
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
    if data.labelled_x is not None:
        metrics["labelled_linear_top1"] = probe(extract_features(encoder, data.labelled_x), data.labelled_y)
    augment = BatchAugment(AugmentConfig.from_scenario(scenario["augment"]))
    generator = torch.Generator().manual_seed(derive_seed(scenario["seed"], "align-uniform"))
    metrics.update(align_uniform_score(encoder, data.train_x[:ALIGN_UNIFORM_IMAGES], augment, generator))
    return metrics


def evaluate_networks(networks: Mapping[str, torch.nn.ModuleDict], data: EvalData, scenario: Mapping[str, Any]
                      ) -> dict[str, dict[str, float]]:
    """:func:`evaluate_network` of each labelled network."""
    return {label: evaluate_network(network, data, scenario) for label, network in networks.items()}


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
