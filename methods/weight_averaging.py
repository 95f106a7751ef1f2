"""Weight averaging with a server optimiser (FedAvg, McMahan et al. 2017; FedOpt, Reddi et al. 2021):
a helper for methods whose clients upload their networks, not a base class.

The global state holds the networks' flat weights (``"weights"``), the names of the trainable ones
(``"trainable"``) and the server optimiser's state (``"server_opt"``). Clients upload their weights
under ``"weights/<name>"`` scaled by their sample count; the server takes the average
``w = sum_j n_j w_j / sum_j n_j`` (``server_optimizer: avg`` with ``server_lr`` 1), moves by a
fraction of the change (``server_lr``: ``w <- w + server_lr (avg - w)``), or feeds the averaged
delta to Adam (``server_optimizer: adam``, FedAdam). The server step (``server_lr``, Adam) moves only
the online networks' trainable parameters (``"trainable"``), as FedOpt steps a model's parameters;
buffers (BatchNorm's running statistics) and an EMA target (BYOL's, Orchestra's) take the plain
average, so with FedAdam or ``server_lr`` != 1 the target is not stepped like the online networks.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor, nn

from methods.params import ServerOptimizerParams
from methods.server_optimizer import server_step

def flat_state(online: nn.Module, target: nn.Module | None) -> dict[str, Tensor]:
    """The networks' state by flat name: ``online.<key>`` and, with a target, ``target.<key>``."""
    state = {f"online.{k}": v for k, v in online.state_dict().items()}
    if target is not None:
        state.update({f"target.{k}": v for k, v in target.state_dict().items()})
    return state


def initial_state(online: nn.Module, target: nn.Module | None) -> dict[str, Any]:
    """The averaged part of a global state: copies of the networks' weights, the trainable names."""
    weights = {k: v.detach().clone() for k, v in flat_state(online, target).items()}
    trainable = [f"online.{k}" for k, _ in online.named_parameters()]
    return {"weights": weights, "trainable": trainable, "server_opt": None}


NOT_UPLOADED = "num_batches_tracked"  # BatchNorm's integer step counter


def weight_uploads(slots: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A client's weights as upload entries (``"weights/<name>"``). BatchNorm's step counters are
    left out: unused with a momentum (torch's default 0.1), they keep the broadcast value, and they
    grow by a client's batch count every round, so summed in fixed point they would overflow."""
    return {f"weights/{k}": v for k, v in slots.items() if not k.endswith(NOT_UPLOADED)}


def averaged_weights(state: dict[str, Any], mean: Mapping[str, Tensor], config: ServerOptimizerParams) -> dict[str, Any]:
    """``state`` with its weights after the server step on the round's averaged uploads ``mean``
    (keys ``"weights/<name>"``; weights nobody uploaded keep their value)."""
    averaged = {k.split("/", 1)[1]: v for k, v in mean.items() if k.startswith("weights/")}
    weights = dict(state["weights"])
    for name, value in averaged.items():
        weights[name] = value.to(weights[name].dtype)
    if config.server_optimizer == "adam" or config.server_lr != 1.0:  # else the plain average
        previous = {k: state["weights"][k] for k in state["trainable"]}
        stepped, opt_state = server_step(previous, {k: averaged[k] - value for k, value in previous.items()},
                                         state["server_opt"], config)
        weights.update(stepped)
        state = {**state, "server_opt": opt_state}
    return {**state, "weights": weights}


def online_weights(state: Mapping[str, Any], network: nn.ModuleDict) -> dict[str, torch.Tensor]:
    """The global online weights of the modules ``network`` holds (for loading an evaluated copy)."""
    online = {k[len("online."):]: v for k, v in state["weights"].items() if k.startswith("online.")}
    return {k: v for k, v in online.items() if k.split(".")[0] in network}
