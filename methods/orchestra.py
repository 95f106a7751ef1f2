"""Orchestra (Lubana et al. 2022): unsupervised FL via globally consistent clustering.

Paper: "Orchestra: Unsupervised Federated Learning via Globally Consistent Clustering", section 4
and Appendix C.2 (Algorithms 1 and 2).

Client (Algorithm 1), stateless: it receives the online networks (encoder, projector, rotation
head), the EMA target (encoder, projector) and the G global centroids. Every step, for a batch x:
an augmented view x~ goes through the online model, x through the target, and the clustering loss
(Eq. 4) matches their soft assignments to the global centroids; x rotated by a random multiple of
90 degrees goes through the online model and the rotation head (degeneracy loss, Eq. 3); then
t <- m t + (1 - m) o. The target projections of x enter a memory of the ``memory_size`` most recent
ones; after training, the client clusters that memory into L equal-size local centroids (no extra
pass over its data) and uploads online + target weights (summed as ``Stats``, FedAvg) and its
centroids (payload kind ``"centroids"``).

Server (Algorithm 2): FedAvg of the networks (inherited from ``FedAvg``), then equal-size
clustering of all received local centroids (by client id) into G global centroids. Round 0 is the
setup round of Appendix C.2: every client fills its memory with target projections (forward passes
only, no training) and clusters it; the server initialises the global centroids from these.

Ablations (Table 6): ``degeneracy: false`` drops the rotation head and loss; ``target: false``
drops the EMA target, the online model (without gradient) then gives the assignments of x.

Choices: the target sees the original x and the rotation is applied to x, as Algorithm 1 writes;
FedAvg weights clients by their number of samples (Algorithm 2 writes a uniform mean); the
evaluated encoder is the online one (as for the other methods; the two coincide asymptotically).
"""
from __future__ import annotations

from collections import deque

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from methods.base import ClientData, ClientUpload
from methods.fedavg import FedAvg, Workspace, ema_update, sgd_step
from methods.losses.orchestra_clustering import orchestra_clustering_loss
from methods.losses.rotation import rotation_loss
from methods.objectives import Objective, project
from methods.sinkhorn import equal_size_clustering
from simulator.augment import rotate90, to_float
from simulator.context import RoundContext, derive_seed
from simulator.stats import Stats

SERVER_KEYS = ("server_optimizer", "server_lr", "server_betas", "server_eps")
NUM_ROTATIONS = 4


class OrchestraNetworks(Objective):
    """Orchestra's online networks: encoder, 2-layer projector and (with degeneracy) a linear
    4-way rotation head on the projection; the EMA target copies encoder and projector.

    The loss needs the global centroids and lives in ``Orchestra.train_locally``.
    """

    name = "orchestra"

    def __init__(self, config, model_config, num_classes):
        super().__init__(config, model_config, num_classes)
        self.uses_target = config["target"]

    def build(self, encoder):
        networks = super().build(encoder)
        if self.config["degeneracy"]:
            networks["rotation"] = nn.Linear(self.projector_dim, NUM_ROTATIONS)
        return networks


class RecentProjections:
    """The memory of the ``capacity`` most recent target projections (first in, first out)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.batches: deque[Tensor] = deque()
        self.size = 0

    def push(self, projections: Tensor) -> None:
        self.batches.append(projections.detach())
        self.size += len(projections)
        while self.size - len(self.batches[0]) >= self.capacity:
            self.size -= len(self.batches.popleft())

    def contents(self) -> Tensor:
        return torch.cat(list(self.batches))[-self.capacity:]


class Orchestra(FedAvg):
    name = "orchestra"
    has_setup_round = True
    params = {
        "num_global_clusters": 128,
        "num_local_clusters": 16,
        "memory_size": 128,
        "temperature": 0.1,
        "target_momentum": 0.996,
        "clustering_iterations": 5,
        "degeneracy": True,
        "target": True,
        **{key: FedAvg.params[key] for key in SERVER_KEYS},
    }

    def __init__(self, scenario, spec):
        # FedAvg's own options (its objective, UV head, labelled fraction) keep their defaults, off;
        # the objective's networks are replaced by Orchestra's below.
        super().__init__(scenario, spec)
        for key in ("num_global_clusters", "num_local_clusters", "memory_size", "clustering_iterations"):
            if self.config[key] < 1:
                raise ValueError(f"method.{key}: expected a positive integer, got {self.config[key]!r}")
        if not self.config["temperature"] > 0:
            raise ValueError(f"method.temperature: expected a positive number, got {self.config['temperature']!r}")
        if not 0 <= self.config["target_momentum"] <= 1:
            raise ValueError(f"method.target_momentum: expected a number in [0, 1], "
                             f"got {self.config['target_momentum']!r}")
        self.objective = OrchestraNetworks(self.config, scenario["model"], spec.num_classes)

    # ---- server side -------------------------------------------------------------------------
    def init_state(self):
        return {**super().init_state(), "centroids": None}

    def broadcast(self, state, ctx):
        payload = super().broadcast(state, ctx)
        if state["centroids"] is not None:
            payload["centroids"] = state["centroids"]
        return payload

    def server_update(self, state, total, records, ctx):
        state, metrics = super().server_update(state, total, records, ctx)
        local = [records[cid]["centroids"] for cid in sorted(records)]
        if local:
            generator = torch.Generator().manual_seed(derive_seed(ctx.seed, ctx.round, "global-clustering"))
            centroids = equal_size_clustering(torch.cat(local).float().cpu(), self.config["num_global_clusters"],
                                              generator, self.config["clustering_iterations"])
            state = {**state, "centroids": centroids}
            metrics["clustering/local_centroids"] = float(sum(len(c) for c in local))
        return state, metrics

    # ---- client side -------------------------------------------------------------------------
    def client_update(self, workspace, broadcast, extra, data, ctx, client_state=None):
        with torch.no_grad():
            for name, slot in workspace.slots.items():
                slot.copy_(broadcast["weights"][name])
        generator = ctx.client_generator(data.client_id, "train")
        clustering_generator = ctx.client_generator(data.client_id, "local-clustering")
        if ctx.round == 0:
            memory = self.fill_memory(workspace, data, generator)
            return ClientUpload(record={"centroids": self.local_centroids(memory, clustering_generator)})
        if "centroids" not in broadcast:
            raise ValueError(f"round {ctx.round}: Orchestra needs the global centroids of the setup round")
        metrics, memory = self.train_locally(workspace, broadcast["centroids"], data, ctx, generator)
        upload = {f"weights/{k}": v for k, v in workspace.slots.items()}
        return ClientUpload(stats=Stats.from_tensors(upload, len(data.labels)),
                            record={"centroids": self.local_centroids(memory, clustering_generator)},
                            metrics=metrics)

    def assignment_model(self, workspace: Workspace) -> nn.ModuleDict:
        """The network whose projections give the assignments of x: the target, or the online model."""
        return workspace.target if workspace.target is not None else workspace.online

    def memory_capacity(self, data: ClientData) -> int:
        # With fewer samples than the memory, the last n projections are the latest of every sample.
        return min(self.config["memory_size"], len(data.labels))

    @torch.no_grad()
    def fill_memory(self, workspace: Workspace, data: ClientData, generator: torch.Generator) -> Tensor:
        """Setup round: target projections of a random ``memory_size`` of the client's samples."""
        rows = torch.randperm(len(data.labels), generator=generator)[:self.memory_capacity(data)]
        images = to_float(data.images[rows].to(workspace.device))
        return F.normalize(project(self.assignment_model(workspace), images), dim=1)

    def local_centroids(self, memory: Tensor, generator: torch.Generator) -> Tensor:
        return equal_size_clustering(memory, self.config["num_local_clusters"], generator,
                                     self.config["clustering_iterations"]).cpu()

    def train_locally(self, workspace: Workspace, centroids: Tensor, data: ClientData, ctx: RoundContext,
                      generator: torch.Generator) -> tuple[dict[str, float], Tensor]:
        """Algorithm 1 over the local epochs; returns mean losses and the memory of projections."""
        training = ctx.hparams["training"]
        online, target, device = workspace.online, workspace.target, workspace.device
        assigner = self.assignment_model(workspace)
        online.train()
        parameters = list(online.parameters())
        optimizer = torch.optim.SGD(parameters, lr=self.local_lr(ctx),
                                    momentum=training["momentum"], weight_decay=training["weight_decay"])
        centroids = centroids.to(device)
        images = to_float(data.images.to(device))
        n, batch_size = len(data.labels), training["batch_size"]
        memory = RecentProjections(self.memory_capacity(data))
        losses: dict[str, list[Tensor]] = {"loss": [], "loss_cluster": [], "loss_rotation": []}
        for _ in range(training["local_epochs"]):
            order = torch.randperm(n, generator=generator).to(device)
            for start in range(0, n, batch_size):
                x = images[order[start:start + batch_size]]
                with torch.no_grad():
                    z_target = F.normalize(project(assigner, x), dim=1)
                z_online = project(online, workspace.augment(x, generator))
                cluster = orchestra_clustering_loss(z_online, z_target, centroids, self.config["temperature"])
                loss = cluster
                if "rotation" in online:
                    turns = torch.randint(NUM_ROTATIONS, (len(x),), generator=generator).to(device)
                    rotation = rotation_loss(online["rotation"](project(online, rotate90(x, turns))), turns)
                    loss = loss + rotation
                    losses["loss_rotation"].append(rotation.detach())
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"round {ctx.round}, client {data.client_id}, method {self.name}: "
                                             f"loss is {loss.item()}")
                sgd_step(optimizer, loss, parameters, training["grad_clip_norm"])
                if target is not None:
                    ema_update(target, online, self.config["target_momentum"])
                memory.push(z_target)
                losses["loss"].append(loss.detach())
                losses["loss_cluster"].append(cluster.detach())
        metrics = {name: torch.stack(values).mean().item() for name, values in losses.items() if values}
        return metrics, memory.contents()
