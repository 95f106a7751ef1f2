"""The semi-supervised variant of Louizos et al. 2024 (section 2.2, Algorithm 2 of Appendix C).

A fixed fraction of each client's samples is labelled. The choice depends only on (run seed, client
id, client size), so the evaluator can rebuild the same labelled subset of the training set
(``labelled_train_indices``) and train its linear probe on it alone.

:class:`SemiSupervised` is this as an extension (:mod:`methods.extension`): ``method.labelled_fraction
> 0`` adds a linear label classifier on the backbone features to the online networks and computes
the objective's loss as :func:`semi_supervised_loss`, for any self-supervised objective.

Two ablation keys switch off one of the two changes that section 2.2 makes to the plain objective
(the paper does not ablate them; both default to the paper's Algorithm 2): ``method.within_class:
false`` computes the plain loss over the whole batch, labelled rows included, instead of the loss
within each class on the labelled rows; ``method.label_loss: false`` drops the label classifier's
cross-entropy (the classifier is still built, so that every other network starts as with it, and is
then never trained).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from methods.extension import ClientTerm, Extension
from methods.losses.supervised_contrastive import within_class_loss
from methods.objectives import Embedding, Objective
from methods.params import Params
from simulator.context import derive_seed
from simulator.data.partition import Partition


def labelled_positions(seed: int, client_id: int, size: int, fraction: float) -> np.ndarray:
    """Sorted positions, within the client's data, of its labelled samples: round(fraction * size)
    of them, drawn without replacement from the stream (seed, client id, "labelled")."""
    count = int(fraction * size + 0.5)
    rng = np.random.default_rng(derive_seed(seed, client_id, "labelled"))
    return np.sort(rng.permutation(size)[:count])


def labelled_mask(seed: int, client_id: int, size: int, fraction: float) -> Tensor:
    """Boolean [size]: which of the client's samples are labelled."""
    mask = torch.zeros(size, dtype=torch.bool)
    mask[torch.from_numpy(labelled_positions(seed, client_id, size, fraction))] = True
    return mask


def labelled_train_indices(partition: Partition, seed: int, fraction: float) -> np.ndarray:
    """Sorted train-set indices of every client's labelled samples (client data are stored in the
    order of ``partition.indices``), for the semi-supervised linear probe."""
    chosen = [indices[labelled_positions(seed, cid, len(indices), fraction)]
              for cid, indices in enumerate(partition.indices)]
    return np.sort(np.concatenate(chosen))


def semi_supervised_loss(objective: Objective, embedding: Embedding, labels: Tensor, labelled: Tensor,
                         classifier: nn.Module, within_class: bool = True, label_loss: bool = True
                         ) -> tuple[Tensor, dict[str, Tensor]]:
    """Algorithm 2 without the UV term: the plain loss on the unlabelled rows, the loss within each
    class on the labelled rows (Eq. 9), and the label classifier's cross-entropy on the backbone
    features of both views of the labelled rows (Eq. 10-11: ``CE(y | h1) + CE(y | h2)``).
    ``within_class=False``: the plain loss on every row instead of the first two terms;
    ``label_loss=False``: no cross-entropy (the module docstring's ablations).

    Returns the loss and its parts, detached, for the training log: ``loss_objective`` (the plain
    loss on the unlabelled rows; split as the objective splits it, as FedSC's Eq. 5 into
    ``loss_objective`` and ``loss_inter_client``), ``loss_within_class`` (the objective's whole loss
    within each class) and ``loss_label`` (the cross-entropies' sum): each term that the settings keep,
    0 in a batch without the rows it is computed on."""
    unlabelled_rows = (~labelled).nonzero().squeeze(1)
    labelled_rows = labelled.nonzero().squeeze(1)
    loss = torch.zeros((), device=labels.device)
    kept = [*(objective.loss_parts or ["loss_objective"]), *(["loss_within_class"] if within_class else []),
            *(["loss_label"] if label_loss else [])]
    parts = {name: torch.zeros((), device=labels.device) for name in kept}

    def counted(term: Tensor, split: dict[str, Tensor]) -> Tensor:
        """``term``, its parts (``split``, detached values by name) added to the logged ones."""
        for name, value in split.items():
            parts[name] = parts[name] + value
        return term

    if not within_class or len(unlabelled_rows):
        plain, split = objective.rows_loss_parts(embedding, labels, unlabelled_rows if within_class else None)
        loss = loss + counted(plain, split or {"loss_objective": plain.detach()})
    if len(labelled_rows):
        if within_class:
            within = within_class_loss(lambda rows: objective.rows_loss(embedding, labels, labelled_rows[rows]),
                                       labels[labelled_rows])
            loss = loss + counted(within, {"loss_within_class": within.detach()})
        if label_loss:
            for features in embedding["features"]:
                label = F.cross_entropy(classifier(features[labelled_rows]), labels[labelled_rows])
                loss = loss + counted(label, {"loss_label": label.detach()})
    return loss, parts


class LabelledTerm(ClientTerm):
    """The semi-supervised extension bound to one client: which of its samples are labelled."""

    def __init__(self, objective: Objective, labelled: Tensor, classifier: nn.Module, within_class: bool,
                 label_loss: bool):
        self.objective, self.labelled, self.classifier = objective, labelled, classifier
        self.within_class, self.label_loss = within_class, label_loss

    def base_loss(self, base):
        """Replaces the objective's batch loss (``base``) by the semi-supervised one, which splits the
        batch by label and calls the objective on each part, something a composed ``base`` cannot be
        called for; so no extension bound before this one may change the base loss (UV, the only one,
        does not: it adds a term)."""
        return lambda embedding, labels, rows: semi_supervised_loss(
            self.objective, embedding, labels, self.labelled[rows], self.classifier, self.within_class, self.label_loss)


@dataclass(frozen=True)
class SemiSupervisedParams(Params):
    labelled_fraction: float = 0.0
    within_class: bool = True
    label_loss: bool = True


class SemiSupervised(Extension):
    """``method.labelled_fraction`` > 0: a labelled fraction of every client's samples."""

    name = "semi_supervised"
    Params = SemiSupervisedParams

    @classmethod
    def enabled(cls, config):
        return config.labelled_fraction > 0

    @classmethod
    def param_rules(cls, config, objective, scenario):
        fraction = config.labelled_fraction
        return [
            ("labelled_fraction", 0 <= fraction <= 1, "a fraction in [0, 1]"),
            ("labelled_fraction", not (fraction > 0 and objective.uses_labels),
             f"0 with objective {objective.name} (it uses every label)"),
            ("labelled_fraction", not (fraction > 0 and scenario["training"]["centralized"]),
             "0 with training.centralized (the labelled samples are fixed per client; the one centralized "
             "client draws other images from the union every round)"),
            ("within_class", config.within_class or fraction > 0,
             "true unless method.labelled_fraction > 0 (it shapes the loss of the labelled samples)"),
            ("label_loss", config.label_loss or fraction > 0,
             "true unless method.labelled_fraction > 0 (it trains the classifier of the labelled samples)"),
        ]

    def add_networks(self, online, feature_dim):
        online["label_classifier"] = nn.Linear(feature_dim, self.spec.num_classes)

    def bind(self, workspace, objective, broadcast, data, ctx):
        mask = labelled_mask(ctx.seed, data.client_id, len(data.labels), self.config.labelled_fraction)
        return LabelledTerm(objective, mask.to(workspace.device), workspace.online["label_classifier"],
                            self.config.within_class, self.config.label_loss)

    @classmethod
    def labelled_train_indices(cls, scenario, partition):
        fraction = SemiSupervisedParams.from_config(scenario["method"]).labelled_fraction
        return labelled_train_indices(partition(), scenario["seed"], fraction) if fraction else None
