"""Divergence-aware federated BYOL, the stateful-client baselines of EasyFL's ``applications/fedssl``
(Zhuang et al.): FedU (:mod:`methods.fedu`) and FedEMA (:mod:`methods.fedema`).

Both are FedAvg with the BYOL objective whose clients keep their networks between rounds (the
client-state store) and start a round from a mix of the global networks and their own; they differ
in the mix (``mix``, which ``start_weights`` applies) and FedEMA also in what a client keeps
(``next_client_state``: its first divergence's scale). The server averages the online networks (encoder, projector,
predictor) and the target, weighted by sample counts, as EasyFL's server does.

The divergence ``d`` of a client (reference: ``Client._calculate_divergence``): the mean, over the
online encoder's convolution kernels, of the l2 norm of each kernel's change during the client's
last local training (end minus start; the start is the mixed networks for FedEMA). It is computed
after training and used at the client's next participation.

First participation (as the reference): the global online networks, the target set to the global
online encoder and projector. Deliberate difference: the reference aliases target and online in
that first round (one module object), so its EMA does nothing and the target equals the online
networks throughout; here the target is a copy that follows BYOL's EMA from there.

Further differences from the reference (see also :mod:`methods.fedavg`'s list: BYOL's loss is half
the reference's sum, the heads' widths, the augmentation, an incomplete last batch is kept unless
``training.drop_last``):

* The divergence takes every 4-d kernel of the online encoder; the reference takes the parameters
  whose name contains ``conv``, which leaves out a ResNet's 1x1 shortcut convolutions (the same set
  for ``small_cnn``, whose kernels are all convolutions).
* A client's BatchNorm statistics go with the networks they belong to (the reference swaps whole
  modules): the target's are the client's, the online networks' the server's, FedU's kept predictor
  keeps its own. FedEMA's predictor takes the server's statistics; the reference's takes the
  client's when ``mu > 0.5`` (they are used by neither training, in train mode, nor evaluation).

Heads of the reference's layers (EasyFL's ``MLP``: Linear, BatchNorm1d, ReLU, Linear; 4096 -> 2048 wide
there, ``model.hidden_dim`` / ``model.projector_dim`` here) only with
``model.head_norm: batch``, which the shipped FedU and FedEMA scenarios set; the key's default
(``none``) keeps earlier runs reproducible. Without it BYOL did not learn on Fashion-MNIST here
(``results/regime.md``: ``byol_dir05_s100`` against ``byol_dir05_bn_s100``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from methods.fedavg import FedAvg, FedAvgParams
from methods.objectives import objectives_with
from simulator.context import RoundContext

ONLINE, TARGET = "online.", "target."
WITH_TARGET_AND_PREDICTOR = objectives_with(uses_target=True, has_predictor=True)


def divergence(start: dict[str, Tensor], end: dict[str, Tensor]) -> float:
    """Mean over the online encoder's convolution kernels (4-d weights) of ||end - start||_2."""
    kernels = [name for name, value in start.items()
               if name.startswith(ONLINE + "encoder.") and name.endswith(".weight") and value.ndim == 4]
    norms = [torch.dist(end[name].double().cpu(), start[name].double().cpu()).item() for name in kernels]
    return sum(norms) / len(norms)


@dataclass(frozen=True)
class DivergenceAwareParams(FedAvgParams):
    objective: str = "byol"


class DivergenceAware(FedAvg):
    """FedAvg + BYOL with stateful clients; a subclass gives ``mix`` (a returning client's start)."""

    stateful_clients = True
    centralizable = False
    Params = DivergenceAwareParams

    @classmethod
    def param_rules(cls, config, scenario):
        return [*super().param_rules(config, scenario),
                ("objective", config.objective in WITH_TARGET_AND_PREDICTOR,
                 f"{' or '.join(WITH_TARGET_AND_PREDICTOR)} (an online predictor and an EMA target)"),
                ("uv", not config.uv, "false (the client keeps its own networks)")]

    def start_weights(self, workspace, global_weights, client_state, ctx):
        if not self.mixes(client_state, ctx):
            start = dict(global_weights)  # the global online networks, the target copied from them
            for name in start:
                if name.startswith(TARGET):
                    start[name] = global_weights[ONLINE + name[len(TARGET):]]
            return start
        parameters = {ONLINE + name for name, _ in workspace.online.named_parameters()}
        return self.mix(global_weights, client_state, parameters)

    def mixes(self, client_state: dict[str, Any] | None, ctx: RoundContext) -> bool:
        """Whether the client starts from a mix of the global networks and its own (:meth:`mix`): a
        returning client that does not start afresh."""
        return client_state is not None and not self.starts_afresh(client_state, ctx)

    def starts_afresh(self, client_state: dict[str, Any], ctx: RoundContext) -> bool:
        """Whether a returning client starts as at its first participation (never here)."""
        return False

    def mix(self, global_weights: dict[str, Tensor], client_state: dict[str, Any], parameters: set[str]
            ) -> dict[str, Tensor]:
        """A returning client's start from the global weights and its state (``"weights"``: its
        networks after its last training, ``"distance"``: d of that training); ``parameters``: the
        online networks' trainable names (the others, e.g. BatchNorm statistics, come from the server)."""
        raise NotImplementedError

    def next_client_state(self, slots, start, client_state, ctx):
        end = {name: value.detach().cpu().clone() for name, value in slots.items()}
        return {"weights": end, "distance": divergence(start, end), "round": ctx.round}

    def client_update(self, workspace, broadcast, extra, data, ctx, client_state=None):
        """FedAvg's client step, logging beside the loss the divergence d of this training
        (``train/divergence``) and, for a client that mixed its start, the mix (:meth:`mix_metrics`)."""
        upload = super().client_update(workspace, broadcast, extra, data, ctx, client_state)
        upload.metrics["divergence"] = upload.client_state["distance"]
        if self.mixes(client_state, ctx):
            upload.metrics.update(self.mix_metrics(client_state))
        return upload

    def mix_metrics(self, client_state: dict[str, Any]) -> dict[str, float]:
        """How a returning client's start mixed the global networks with its own (logged as ``train/<name>``,
        the mean over the clients that mixed)."""
        raise NotImplementedError
