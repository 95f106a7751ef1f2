"""Extensions: features that compose with a method's objective instead of being flags inside it.

An extension (the UV heads of :mod:`methods.uv`, the labelled subset of :mod:`methods.semi_supervised`)
owns its parameters (under ``method:``; a ``Params`` part the methods that allow it compose into theirs), its networks (added to the online networks, so they are
trained and averaged like the others), its server state and write-back, and its loss term. A method
that allows extensions (``FedAvg`` and its variants) builds the enabled ones and, for each client,
binds them (:meth:`Extension.bind`) to a :class:`ClientTerm` that its local step composes with the
objective's loss:

    loss = term_n.base_loss(... term_1.base_loss(objective loss)) + sum of term.loss(...)

A term may also replace the loss it is handed (the semi-supervised one does, as its
``base_loss`` says); it is then built after every extension that changes the base loss.
"""
from __future__ import annotations

from typing import Any, Callable, ClassVar, Mapping

import numpy as np
from torch import Tensor, nn

from methods.base import ClientData, DataSpec, Rule
from methods.local_training import Workspace
from methods.objectives import Embedding, Objective
from methods.params import Params as MethodParams
from simulator.context import RoundContext

# The objective's loss of a batch: (embedding, the batch's labels, the batch's rows) -> (loss, the
# named parts it sums, detached, for the training log; may be {} for one part), as ``Objective.rows_loss_parts``.
BaseLoss = Callable[[Embedding, Tensor, Tensor], tuple[Tensor, dict[str, Tensor]]]


class ClientTerm:
    """An extension bound to one client for one round (nothing, by default). A term that adds to the
    loss is logged under ``loss_<name>`` (its mean over the steps, as ``train/loss_<name>``)."""

    name: ClassVar[str] = ""

    def parameters(self) -> list[Tensor]:
        """Trainable tensors of the extension's own (beyond the online networks)."""
        return []

    def base_loss(self, base: BaseLoss) -> BaseLoss:
        """The objective's batch loss as this extension changes it (unchanged by default)."""
        return base

    def loss(self, embedding: Embedding) -> Tensor | None:
        """A term added to the batch loss (None: nothing)."""
        return None

    def after_step(self) -> None:
        """Run after every optimiser step."""

    def upload(self) -> dict[str, Tensor]:
        """Entries added to the client's summed upload (``"<kind>/<name>"``)."""
        return {}


class Extension:
    """A feature that composes with any objective of a method that allows it."""

    name: ClassVar[str]
    Params: ClassVar[type[MethodParams]]  # its method: keys, among the bases of a method's Params that allows it
    sparse_rows: ClassVar[tuple[str, ...]] = ()  # upload keys holding one nonzero row per client

    def __init__(self, config: MethodParams, scenario: Mapping[str, Any], spec: DataSpec):
        self.config, self.scenario, self.spec = config, scenario, spec

    @classmethod
    def enabled(cls, config: MethodParams) -> bool:
        raise NotImplementedError

    @classmethod
    def param_rules(cls, config: MethodParams, objective: type[Objective], scenario: Mapping[str, Any]
                    ) -> list[Rule]:
        return []

    def add_networks(self, online: nn.ModuleDict, feature_dim: int) -> None:
        """Add the extension's networks to the online networks (initialised from the global RNG)."""

    def init_state(self) -> dict[str, Any]:
        return {}

    def broadcast(self, state: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def server_update(self, state: Mapping[str, Any], mean: Mapping[str, Tensor]) -> dict[str, Any]:
        """The extension's entries of the next global state, from the round's averaged uploads."""
        return {}

    def make_part(self, device) -> Any:
        """The extension's preallocated client-side module in a worker's workspace (``parts[name]``;
        None: none)."""
        return None

    def bind(self, workspace: Workspace, objective: Objective, broadcast: Mapping[str, Any], data: ClientData,
             ctx: RoundContext) -> ClientTerm:
        """The extension for client ``data.client_id`` this round (its part of the workspace is
        ``workspace.parts[name]``), with the objective the client trains. Called after the round's
        start weights are in the workspace (for FedU / FedEMA a mix of the global and the client's
        own): a term anchored on the global weights reads ``broadcast["weights"]``."""
        raise NotImplementedError

    @classmethod
    def labelled_train_indices(cls, scenario: Mapping[str, Any], partition: Callable[[], Any]) -> np.ndarray | None:
        """Train-set indices whose labels the evaluator's probe may use instead of all (None: all);
        ``partition()`` builds the run's client partition."""
        return None
