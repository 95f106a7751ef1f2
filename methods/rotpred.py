"""RotPred: federated rotation prediction (Gidaris et al., ICLR 2018), the baseline row of Orchestra's
tables (Lubana et al., ICML 2022, Table 1 "Rot. Pred.").

Client step: from the global networks, each batch x is rotated by a random multiple of 90 degrees
(quarter turns drawn from the client's round generator) and the 4-way rotation head predicts the
turn from the projection, trained with the cross-entropy of :func:`methods.losses.rotation.rotation_loss`
(Orchestra's Eq. 3); the client uploads its networks (:mod:`methods.weight_averaging`). Server
step: the averaged weights through the server optimiser.

Networks as Orchestra's, so the two rows differ only in the objective: the encoder, Orchestra's
projector (ending in a BatchNorm without affine parameters) and a linear rotation head on the
projection. Unlike Orchestra's ``clustering: false`` ablation, no EMA target, no memory and no
centroids are computed (none of them enters this loss); the rotated image is the un-augmented x,
as Orchestra's Algorithm 1 rotates it. BatchNorm's ``num_batches_tracked`` is not uploaded.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from methods.base import ClientUpload, Method
from methods.local_training import LocalStep, copy_into, train_local_epochs
from methods.losses.rotation import rotation_loss
from methods.networks import build_networks, global_eval_network, make_workspace
from methods.objectives import Networks, project
from methods.orchestra import NUM_ROTATIONS, orchestra_projector
from methods.params import ServerOptimizerParams, server_optimizer_rules
from methods.weight_averaging import averaged_weights, initial_state, weight_uploads
from simulator.augment import rotate90, to_float
from simulator.context import derive_seed
from simulator.stats import Stats


class RotationNetworks(Networks):
    """Encoder, Orchestra's projector, and the rotation head on the projection (the loss lives in
    ``RotPred``'s client step)."""

    def build(self, encoder):
        return nn.ModuleDict({
            "encoder": encoder,
            "projector": orchestra_projector(encoder.out_dim, self.hidden_dim, self.projector_dim),
            "rotation": nn.Linear(self.projector_dim, NUM_ROTATIONS),
        })


class RotPred(Method):
    name = "rotpred"
    centralizable = True
    Params = ServerOptimizerParams

    @classmethod
    def param_rules(cls, config, scenario):
        return server_optimizer_rules(config)

    def __init__(self, scenario, spec):
        super().__init__(scenario, spec)
        self.networks = RotationNetworks(self.config, scenario["model"], spec.num_classes)

    def build_networks(self):
        return build_networks(self.networks, self.scenario, self.spec, derive_seed(self.scenario["seed"], "init"))

    # ---- server side -------------------------------------------------------------------------
    def init_state(self):
        return initial_state(*self.build_networks())

    def broadcast(self, state, ctx):
        return {"weights": state["weights"]}

    def server_update(self, state, total, records, ctx):
        return (state if total is None else averaged_weights(state, total.average(), self.config)), {}

    def eval_network(self, state):
        return global_eval_network(self.networks, self.scenario, self.spec, state)

    # ---- client side -------------------------------------------------------------------------
    def make_workspace(self, device):
        return make_workspace(*self.build_networks(), (self.augment_config, self.augment_config), device)

    def client_update(self, workspace, broadcast, extra, data, ctx, client_state=None):
        copy_into(workspace.slots, broadcast["weights"])
        online = workspace.online
        online.train()
        generator = ctx.client_generator(data.client_id)
        images = to_float(data.images.to(workspace.device))

        def batch_loss(rows: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
            turns = torch.randint(NUM_ROTATIONS, (len(rows),), generator=generator).to(images.device)
            logits = online["rotation"](project(online, rotate90(images[rows], turns)))
            return rotation_loss(logits, turns), {}

        metrics = train_local_epochs(LocalStep(batch_loss, list(online.parameters())), len(data.labels), generator,
                                     workspace.device, ctx, f"client {data.client_id}, method {self.name}")
        return ClientUpload(stats=Stats.from_tensors(weight_uploads(workspace.slots), len(data.labels)),
                            metrics=metrics)
