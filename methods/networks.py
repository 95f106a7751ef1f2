"""Building a method's networks (its objective's, or other :class:`methods.objectives.Networks`): the
online networks on an encoder, the EMA target, a worker's preallocated workspace, and the evaluated
copy of the global networks."""
from __future__ import annotations

import copy
import threading
from typing import Any, Iterable, Mapping

import torch
from torch import nn

from methods.base import DataSpec, evaluated_networks
from methods.local_training import Workspace
from methods.objectives import Networks
from methods.weight_averaging import flat_state, online_weights
from simulator.augment import AugmentConfig, BatchAugment
from simulator.models import build_encoder


# torch initialises modules from its one process-wide generator: a build seeds it, in a forked
# state, under this lock, so that threads building at once (the driver's rounds and the thread that
# starts Ray's workers) neither see nor move each other's draws
GLOBAL_RNG_LOCK = threading.Lock()


def build_networks(networks: Networks, scenario: Mapping[str, Any], spec: DataSpec, seed: int,
                   encoder: str | None = None, extensions: Iterable = ()) -> tuple[nn.ModuleDict, nn.ModuleDict | None]:
    """The online networks (``networks``' on a ``encoder`` backbone, ``model.encoder`` by default,
    then each extension's) and, where ``networks`` uses one, the EMA target (a frozen copy of
    encoder and projector), initialised from ``seed``; torch's global generator is left as it was."""
    model = scenario["model"]
    with GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        backbone = build_encoder(encoder or model["encoder"], spec.channels, spec.image_size, model["norm"])
        online = networks.build(backbone)
        for extension in extensions:
            extension.add_networks(online, backbone.out_dim)
    target = None
    if networks.uses_target:
        target = copy.deepcopy(nn.ModuleDict({k: online[k] for k in ("encoder", "projector")}))
        target.requires_grad_(False)
    return online, target


def make_workspace(online: nn.ModuleDict, target: nn.ModuleDict | None, views: tuple[AugmentConfig, AugmentConfig],
                   device: torch.device, parts: dict[str, Any] | None = None) -> Workspace:
    """A worker's workspace around networks it owns, moved to ``device``; ``views``: the augmentations
    of a sample's first and second views (T and T')."""
    online.to(device)
    if target is not None:
        target.to(device)
    return Workspace(online, target, flat_state(online, target), *map(BatchAugment, views), device, parts or {})


def global_eval_network(networks: Networks, scenario: Mapping[str, Any], spec: DataSpec,
                        state: Mapping[str, Any]) -> nn.ModuleDict:
    """Encoder and projector of ``networks`` holding the global online weights of ``state``."""
    network = evaluated_networks(build_networks(networks, scenario, spec, seed=0)[0])  # any init: overwritten
    network.load_state_dict(online_weights(state, network))
    return network
