"""Local self-supervised (and supervised) objectives that FedAvg-style methods train on a client.

An objective builds the online networks on top of an encoder, ``embed``s a batch of augmented views
(backbone features and whatever its loss needs, one tensor per view, rows aligned with the batch)
and computes its loss on any subset of the batch's rows (``rows_loss``), so that extensions can add
terms on the backbone features (the user-verification head of Louizos et al. 2024) or evaluate the
loss within groups of rows (their semi-supervised variant) without copies of the objectives. The
target network of BYOL is built by the method (an EMA copy of encoder and projector) and handed in
as ``target``.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from methods.losses import byol_loss, norm_clip, nt_xent, simsiam_loss, spectral_contrastive
from methods.params import Params
from simulator.models import mlp

# Per-view tensors of a batch by name; "features" (the online encoder's outputs) is always there.
Embedding = dict[str, list[Tensor]]


class Networks:
    """What :func:`methods.networks.build_networks` needs of a method: ``build`` the online networks on
    an encoder (here: encoder and projector) and whether an EMA target copies them (``uses_target``)."""

    uses_target = False

    def __init__(self, config: Params, model_config: Mapping[str, Any], num_classes: int):
        self.config, self.model_config = config, model_config
        self.hidden_dim = model_config["hidden_dim"]
        self.projector_dim = model_config["projector_dim"]
        self.head_norm = model_config["head_norm"]
        self.num_classes = num_classes

    def build(self, encoder: nn.Module) -> nn.ModuleDict:
        return nn.ModuleDict({
            "encoder": encoder,
            "projector": mlp(encoder.out_dim, self.hidden_dim, self.projector_dim, hidden_norm=self.head_norm),
        })


class Objective(Networks):
    """Networks with a local loss: ``embed`` views, ``rows_loss`` on a subset of rows."""

    name = ""
    num_views = 2
    uses_labels = False
    has_predictor = False
    loss_parts: tuple[str, ...] = ()  # the names of the parts rows_loss_parts splits the loss into, if it does

    def embed(self, online: nn.ModuleDict, target: nn.ModuleDict | None, views: list[Tensor]) -> Embedding:
        """Backbone features and projections of every view."""
        features = [online["encoder"](v) for v in views]
        return {"features": features, "z": [online["projector"](h) for h in features]}

    def rows_loss(self, embedding: Embedding, labels: Tensor, rows: Tensor | None = None) -> Tensor:
        """The objective's loss on the batch rows ``rows`` (all rows when ``None``)."""
        raise NotImplementedError

    def rows_loss_parts(self, embedding: Embedding, labels: Tensor, rows: Tensor | None = None
                        ) -> tuple[Tensor, dict[str, Tensor]]:
        """:meth:`rows_loss` with the named parts it sums (:attr:`loss_parts`), detached, for the training
        log (``{}``: one part; an objective that a method extends names the plain objective's part
        ``loss_objective``)."""
        return self.rows_loss(embedding, labels, rows), {}


def take(tensors: list[Tensor], rows: Tensor | None) -> list[Tensor]:
    """The rows ``rows`` of each tensor (all of them when ``None``)."""
    return tensors if rows is None else [t[rows] for t in tensors]


def project(net: nn.ModuleDict, x: Tensor) -> Tensor:
    return net["projector"](net["encoder"](x))


class SimCLR(Objective):
    """SimCLR (Chen et al. 2020): NT-Xent between the projections of two views."""

    name = "simclr"

    def rows_loss(self, embedding, labels, rows=None):
        z1, z2 = take(embedding["z"], rows)
        return nt_xent(z1, z2, self.config.temperature)


class Spectral(Objective):
    """Spectral contrastive loss (HaoChen et al. 2021) as FedSC writes it (Eq. 1 of Jing et al. 2024),
    on projections clipped to norm ``sqrt(clip_mu)`` as in HaoChen et al.'s code (0: unclipped).
    With ``model.head_norm: batch`` (every shipped Fashion-MNIST spectral file) the projections' norms
    are about 4 and the clip at mu = 4 binds on over 99% of them: the loss then trains fixed-norm
    projections (the FedSC docstring, "Projector normalisation")."""

    name = "spectral"

    def clipped_projections(self, embedding: Embedding, rows: Tensor | None) -> list[Tensor]:
        mu = self.config.clip_mu
        return [norm_clip(z, mu) if mu > 0 else z for z in take(embedding["z"], rows)]

    def rows_loss(self, embedding, labels, rows=None):
        return spectral_contrastive(*self.clipped_projections(embedding, rows))


class _WithPredictor(Objective):
    has_predictor = True

    def build(self, encoder):
        networks = super().build(encoder)
        networks["predictor"] = mlp(self.projector_dim, self.hidden_dim, self.projector_dim, hidden_norm=self.head_norm)
        return networks

    def embed(self, online, target, views):
        embedding = super().embed(online, target, views)
        embedding["p"] = [online["predictor"](z) for z in embedding["z"]]
        return embedding

    def rows_loss(self, embedding, labels, rows=None):
        """Each view's prediction regresses the other view's ``regressed`` projection (``pair_loss``)."""
        p1, p2 = take(embedding["p"], rows)
        z1, z2 = take(embedding[self.regressed], rows)
        return self.pair_loss(p1, p2, z1, z2)


class BYOL(_WithPredictor):
    """BYOL (Grill et al. 2020): the online predictor regresses the EMA target's projection."""

    name = "byol"
    uses_target = True
    regressed = "target_z"  # the EMA target's projection
    pair_loss = staticmethod(byol_loss)

    def embed(self, online, target, views):
        embedding = super().embed(online, target, views)
        with torch.no_grad():
            embedding["target_z"] = [project(target, v) for v in views]
        return embedding


class SimSiam(_WithPredictor):
    """SimSiam (Chen & He 2021): BYOL without a target network, stop-gradient on the projection."""

    name = "simsiam"
    regressed = "z"  # the online projection, its gradient stopped by the loss
    pair_loss = staticmethod(simsiam_loss)


class Supervised(Objective):
    """Supervised cross-entropy on one view: the upper-bound baseline (uses labels)."""

    name = "supervised"
    num_views = 1
    uses_labels = True

    def build(self, encoder):
        return nn.ModuleDict({"encoder": encoder,
                              "classifier": nn.Linear(encoder.out_dim, self.num_classes)})

    def embed(self, online, target, views):
        features = [online["encoder"](v) for v in views]
        return {"features": features, "logits": [online["classifier"](h) for h in features]}

    def rows_loss(self, embedding, labels, rows=None):
        (logits,) = take(embedding["logits"], rows)
        return F.cross_entropy(logits, labels if rows is None else labels[rows])


OBJECTIVES = {cls.name: cls for cls in (SimCLR, Spectral, BYOL, SimSiam, Supervised)}


def objectives_with(**capabilities: bool) -> list[str]:
    """The names of the objectives whose class attributes have these values (e.g. ``has_predictor=True``),
    for a method that needs what they build rather than one objective by name."""
    return [name for name, cls in OBJECTIVES.items()
            if all(getattr(cls, key) == value for key, value in capabilities.items())]


def draws_two_views(name: str) -> bool:
    """Whether the objective ``name`` augments two views of a sample (T and T'; False for an unknown name)."""
    return name in OBJECTIVES and OBJECTIVES[name].num_views == 2


def build_objective(config: Params, scenario: Mapping[str, Any], num_classes: int) -> Objective:
    """The objective named by ``config.objective``, for the scenario's model widths."""
    return OBJECTIVES[config.objective](config, scenario["model"], num_classes)
