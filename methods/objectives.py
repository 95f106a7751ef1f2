"""Local self-supervised (and supervised) objectives that FedAvg-style methods train on a client.

An objective builds the online networks on top of an encoder and computes the loss of a batch from
its augmented views. The target network of BYOL is built by the method (an EMA copy of encoder and
projector) and handed in as ``target``.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from methods.losses import byol_loss, nt_xent, simsiam_loss, spectral_contrastive
from simulator.models import mlp


class Objective:
    """Base: ``build`` the online networks, ``loss`` of a batch of views."""

    name = ""
    num_views = 2
    uses_target = False
    uses_labels = False

    def __init__(self, config: Mapping[str, Any], model_config: Mapping[str, Any], num_classes: int):
        self.config = config
        self.hidden_dim = model_config["hidden_dim"]
        self.projector_dim = model_config["projector_dim"]
        self.num_classes = num_classes

    def build(self, encoder: nn.Module) -> nn.ModuleDict:
        return nn.ModuleDict({
            "encoder": encoder,
            "projector": mlp(encoder.out_dim, self.hidden_dim, self.projector_dim),
        })

    def loss(self, online: nn.ModuleDict, target: nn.ModuleDict | None,
             views: list[torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


def project(net: nn.ModuleDict, x: torch.Tensor) -> torch.Tensor:
    return net["projector"](net["encoder"](x))


class SimCLR(Objective):
    """SimCLR (Chen et al. 2020): NT-Xent between the projections of two views."""

    name = "simclr"

    def loss(self, online, target, views, labels):
        return nt_xent(project(online, views[0]), project(online, views[1]), self.config["temperature"])


class Spectral(Objective):
    """Spectral contrastive loss (HaoChen et al. 2021) as FedSC writes it (Eq. 1 of Jing et al. 2024)."""

    name = "spectral"

    def loss(self, online, target, views, labels):
        return spectral_contrastive(project(online, views[0]), project(online, views[1]))


class _WithPredictor(Objective):
    def build(self, encoder):
        networks = super().build(encoder)
        networks["predictor"] = mlp(self.projector_dim, self.hidden_dim, self.projector_dim)
        return networks


class BYOL(_WithPredictor):
    """BYOL (Grill et al. 2020): the online predictor regresses the EMA target's projection."""

    name = "byol"
    uses_target = True

    def loss(self, online, target, views, labels):
        p1, p2 = (online["predictor"](project(online, v)) for v in views)
        with torch.no_grad():
            z1, z2 = (project(target, v) for v in views)
        return byol_loss(p1, p2, z1, z2)


class SimSiam(_WithPredictor):
    """SimSiam (Chen & He 2021): BYOL without a target network, stop-gradient on the projection."""

    name = "simsiam"

    def loss(self, online, target, views, labels):
        z1, z2 = (project(online, v) for v in views)
        return simsiam_loss(online["predictor"](z1), online["predictor"](z2), z1, z2)


class Supervised(Objective):
    """Supervised cross-entropy on one view: the upper-bound baseline (uses labels)."""

    name = "supervised"
    num_views = 1
    uses_labels = True

    def build(self, encoder):
        return nn.ModuleDict({"encoder": encoder,
                              "classifier": nn.Linear(encoder.out_dim, self.num_classes)})

    def loss(self, online, target, views, labels):
        return F.cross_entropy(online["classifier"](online["encoder"](views[0])), labels)


OBJECTIVES = {cls.name: cls for cls in (SimCLR, Spectral, BYOL, SimSiam, Supervised)}
