"""The local step of a method that trains an objective (FedAvg and its variants, Hetero-SSFL): two
(or one) augmented views of each batch, the objective's loss composed with the client's terms
(extensions' and the method's own), the EMA target (where the objective has one) after every step."""
from __future__ import annotations

from typing import Callable

from torch import Tensor

from methods.base import ClientData
from methods.extension import ClientTerm
from methods.local_training import LocalStep, Workspace, ema_update, train_local_epochs
from methods.objectives import Objective
from simulator.augment import to_float
from simulator.context import RoundContext


def composed_loss(objective: Objective, workspace: Workspace, terms: list[ClientTerm]
                  ) -> Callable[[list[Tensor], Tensor, Tensor], tuple[Tensor, dict[str, Tensor]]]:
    """``loss(views, labels, rows)`` of a batch (its augmented views, its labels, its rows in the
    client's data): the objective's loss on the views' embedding, as the terms' ``base_loss`` change
    it, plus each term's ``loss``, in order; with its parts when it has more than one: the base loss's
    own (FedSC's and the semi-supervised loss's, :meth:`methods.objectives.Objective.rows_loss_parts`),
    or the whole base loss as ``loss_objective``, and each added term's as ``loss_<term name>``."""
    online, target = workspace.online, workspace.target

    def base(embedding, labels, rows):
        return objective.rows_loss_parts(embedding, labels)

    for term in terms:
        base = term.base_loss(base)

    def loss(views: list[Tensor], labels: Tensor, rows: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        embedding = objective.embed(online, target, views)
        value, parts = base(embedding, labels, rows)
        parts = dict(parts) or {"loss_objective": value.detach()}
        for term in terms:
            added = term.loss(embedding)
            if added is not None:
                value = value + added
                parts[f"loss_{term.name}"] = added.detach()
        return value, parts if len(parts) > 1 else {}

    return loss


def train_objective(workspace: Workspace, objective: Objective, terms: list[ClientTerm], data: ClientData,
                    ctx: RoundContext, target_momentum: float, who: str) -> dict[str, float]:
    """Local SGD epochs on the client's data (:func:`methods.local_training.train_local_epochs`) on
    :func:`composed_loss`, views and sample order drawn from the client's round generator; returns
    the mean training loss (``"loss"``) and of each of its parts (none when no step ran: the round's
    means are over the clients that trained)."""
    online, target, device = workspace.online, workspace.target, workspace.device
    online.train()
    generator = ctx.client_generator(data.client_id)
    images = to_float(data.images.to(device))
    labels = data.labels.to(device)
    loss = composed_loss(objective, workspace, terms)

    def batch_loss(rows: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        return loss(workspace.views(images[rows], generator, objective.num_views), labels[rows], rows)

    step = LocalStep(batch_loss, list(online.parameters()) + [p for term in terms for p in term.parameters()],
                     after_step=[term.after_step for term in terms])
    if target is not None:
        step.after_step.append(lambda: ema_update(target, online, target_momentum))
    return train_local_epochs(step, len(labels), generator, device, ctx, who)
