"""Orchestra (Lubana et al. 2022): unsupervised FL via globally consistent clustering.

Paper: "Orchestra: Unsupervised Federated Learning via Globally Consistent Clustering", section 4
and Appendix C.2 (Algorithms 1 and 2); reference code: the authors' Flower implementation (its
``projection_MLP_orchestra``, ``sknopp`` and class ``orchestra`` with ``local_clustering``,
``global_clustering``, ``reset_memory``; the client's ``ssl_train``; ``OrchestraTransform``; the
server strategy's ``aggregate_fit``).

Client (Algorithm 1), stateless: it receives the online networks (encoder, projector, rotation
head), the EMA target (encoder, projector) and the G global centroids. Every step, for a batch x:
an augmented view x~ goes through the online model, x through the target, and the clustering loss
(Eq. 4) ``H(P_T(x), P_O(x~))`` matches their soft assignments to the global centroids; x rotated
by a random multiple of 90 degrees goes through the online encoder and projector and the rotation
head (degeneracy loss, Eq. 3); one SGD step, then ``t <- m t + (1 - m) o`` over the target's
parameters. The target projections of x enter a memory of the ``memory_size`` most recent ones;
after training, the client clusters that memory into L equal-size local centroids (no extra pass
over its data) and uploads online + target weights (summed as ``Stats``, FedAvg) and its centroids
(payload kind ``"centroids"``). Beside its losses it logs ``train/assignment_entropy``, the mean
entropy of the assignments ``P_T(x)`` over its steps (the target's; the online model's without a
target): near ``log G`` the assignments are uniform and the clustering loss is inert (the finding
of ``results/orchestra.md``), lower when the projections have spread over the centroids.

Projector (reference ``projection_MLP_orchestra``): Linear(no bias) -> BatchNorm1d -> ReLU ->
Linear(no bias) -> BatchNorm1d(affine=False), widths ``model.hidden_dim`` / ``model.projector_dim``.
The last normalisation centres every coordinate over the batch. The backbone's post-ReLU features
all point nearly the same way (mean pairwise cosine 0.94-0.96 at init, 512 Fashion-MNIST images,
small CNN, seeds 0-2), and a projector without any normalisation keeps them so (0.96-0.97: every
assignment is the same and the clustering loss stays at log G); the hidden BatchNorm alone leaves
0.31-0.35, the final one brings it to 0.00. Networks run in train mode
throughout, as the reference's ``net.train()``: the online views, the target's view (no
gradient) and the setup round's memory fill use batch statistics. The BatchNorm running
statistics (running_mean, running_var) are part of the uploaded weights and averaged like every
other entry (sample-weighted, as FedAvg does; the reference averages its whole state dict too);
the target's follow its own forward passes (the EMA covers parameters only, as in the
reference). ``num_batches_tracked`` is not uploaded (unused with BatchNorm's momentum 0.1; an
integer count that grows every round would overflow the fixed-point sum): the server keeps its
value. The evaluator uses the averaged running statistics (eval mode).

Server (Algorithm 2): FedAvg of the networks (:mod:`methods.weight_averaging`, with its server
optimiser), then global clustering of all received local centroids (by client id) into G global
centroids: with ``global_clustering: sgd`` (default) the reference code's ``global_clustering``,
``global_clustering_steps`` SGD steps (lr ``global_clustering_lr``, momentum 0.9, weight decay
1e-4) on the centroid matrix, warm-started from the previous global centroids (at the setup round
from the reference's random ``nn.Linear`` initialisation); with ``kmeans`` the clients' equal-size
clustering loop from random rows (the paper's "one clustering function C"). Round 0 is the setup
round of Appendix C.2: every client fills its memory with target projections (forward passes
only, no training, BatchNorm statistics restored afterwards as the reference's ``reset_memory``
does) and clusters it; the server initialises the global centroids from these.

Ablations (Table 6): ``degeneracy: false`` drops the rotation head and loss; ``target: false``
drops the EMA target, the online model (without gradient) then gives the assignments of x;
``clustering: false`` drops the clustering loss from the local objective (the rotation-only
ablation: the centroids are still computed and the clustering loss is still logged, so its share of
the result is the difference to Orchestra; the tables' RotPred baseline row is its own method,
:mod:`methods.rotpred`).

Deliberate differences from the reference code (paper's Algorithm 1 where they disagree):

* Views: the target sees x itself and the rotation is applied to x, as Algorithm 1 and Figure 3
  write; the reference code feeds the target an augmented view T(x), the online model a second
  view T'(x) (``augment_prime``: its changes of ``augment``), the rotation a third view T(x), and
  fills the setup memory with views T(x). ``reference_views: true`` restores the three independent
  augmented views; the online view is T' in either case.
* EMA order: the target is updated after the online step (Algorithm 1, lines 15-16); the
  reference code updates it before the step, before the target's forward pass (``update_target``
  inside ``forward``, after the online forward passes, which change no parameter).
  ``ema_before_forward: true`` restores that.
* Incomplete batches: the reference drops every incomplete batch (``drop_last``); here only a
  batch of one sample is skipped (BatchNorm needs two), unless ``training.drop_last: true``, which
  restores the reference's rule; a client whose memory stays empty (no step ran) fills it by a
  forward pass as in the setup round, in eval mode for a single sample.
* The reference also runs the online model on the target's view (an unused output that only moves
  the online BatchNorm statistics); not done here.
* Sinkhorn-Knopp in float64 (reference float32); the global clustering normalises the local
  centroids before the transport's scores (they are unit vectors already).
* FedAvg weights clients by their number of samples (the reference: by its number of complete
  batches; Algorithm 2 writes a uniform mean).
* Local SGD takes ``training`` from the scenario (the reference: momentum 0.9, weight decay 1e-4,
  lr 0.003, batch 16, 10 local epochs; ``scenarios/orchestra/cifar10_resnet18.yaml`` sets these);
  the reference's backbone uses BatchNorm, the encoder's norm here is ``model.norm``.
* Setup round: every client fills its memory and clusters it; the reference's setup round is an
  ordinary Flower round, which samples ``fraction_fit`` of the clients (0.5 in its config), so its
  first global centroids come from half as many local centroids. Only the warm start differs.
* Memory: at most ``min(memory_size, n)`` projections for a client of n samples; the reference's
  memory always holds 128 rows, a small client's filled with projections of earlier epochs (copies
  of the same samples), so its local centroids are fitted to more, repeated, points.
* Augmentation: the reference's ``OrchestraTransform`` crops 50-100% (bicubic), jitters hue as well
  (ColorJitter(0.4, 0.4, 0.2, 0.1)) and blurs (p 0.5 in T, 0.1 in T', with solarisation p 0.2 in
  T'), on uint8 Pillow images (each operation rounds to whole grey levels; here the images stay
  float). ``scenarios/orchestra/cifar10_resnet18.yaml`` sets all of it: the crop scale,
  torchvision's crop boxes (``crop_sampler``) resampled bicubically (``interpolation``), the jitter
  strengths with hue and ColorJitter's random order, the blur, and in ``augment_prime`` the changes
  of T'; the Fashion-MNIST scenarios (one channel) use the simulator's defaults (no
  blur or solarisation, bilinear crops, one pipeline for every view).
* Label skew of the Fashion-MNIST scenarios: Dirichlet(0.1 x prior) per class (``partition.
  scale_by_prior: true``, Hsu et al.'s definition, which the paper cites), about 1.6 classes a
  client; the paper's Table 4 counts those of Dirichlet(0.1) label skew without the prior (4.69
  classes of CIFAR-10 a client), which ``scenarios/orchestra/cifar10_resnet18.yaml`` draws
  (``scale_by_prior: false``) and ``claims/orchestra_paper_skew.yaml`` runs; the Fashion-MNIST files
  keep theirs for their kept runs. The draw itself differs from the reference's ``sampler.py``, which
  splits each class over the clients by Dirichlet(0.1) and rebalances the matrix to equal client
  sizes (100 row/column rescalings; 494-499 samples, 4.69 classes a client); here each client's class
  mix is a Dirichlet(0.1) draw over the classes, equal sizes (about 4.8 classes a client): similar skew,
  not the same process.
  Their projector is 512 -> 128 (the reference's 512 -> 512), and the FedAvg+SimCLR baseline's
  projector has no BatchNorm (the reference's f-SimCLR: Linear(no bias) -> BatchNorm1d -> ReLU ->
  Linear -> BatchNorm1d(affine=False), as Orchestra's own).
* G = 128 global and L = 16 local clusters and temperature 0.1 are the reference's config
  (``num_global_clusters``, ``num_local_clusters``, ``main_T`` in its ``config.py``); the paper's text
  gives G = 64, L = 8 for CIFAR-10.

The evaluated encoder is the online one, as in the reference's kNN monitor.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from methods.base import ClientData, ClientUpload, Method
from methods.local_training import LocalStep, Workspace, copy_into, ema_update, train_local_epochs
from methods.losses.orchestra_clustering import assignment_entropy, orchestra_clustering_loss
from methods.losses.rotation import rotation_loss
from methods.networks import build_networks, global_eval_network, make_workspace
from methods.objectives import Networks, project
from methods.sinkhorn import equal_size_clustering, initial_global_centroids, sgd_global_clustering
from methods.params import ServerOptimizerParams, server_optimizer_rules
from methods.weight_averaging import averaged_weights, initial_state, weight_uploads
from simulator.augment import rotate90, to_float
from simulator.context import RoundContext, derive_seed
from simulator.stats import Stats

NUM_ROTATIONS = 4
GLOBAL_CLUSTERING = ("sgd", "kmeans")


def orchestra_projector(in_dim: int, hidden_dim: int, out_dim: int) -> nn.Sequential:
    """The reference's ``projection_MLP_orchestra``: Linear(no bias) -> BatchNorm1d -> ReLU ->
    Linear(no bias) -> BatchNorm1d(affine=False). The output has zero mean and unit variance per
    coordinate over a training batch (biases before a BatchNorm would get no gradient)."""
    return nn.Sequential(
        nn.Linear(in_dim, hidden_dim, bias=False),
        nn.BatchNorm1d(hidden_dim),
        nn.ReLU(inplace=True),
        nn.Linear(hidden_dim, out_dim, bias=False),
        nn.BatchNorm1d(out_dim, affine=False),
    )


class OrchestraNetworks(Networks):
    """Orchestra's online networks: encoder, the reference's 2-layer projector ending in a
    BatchNorm without affine parameters and (with degeneracy) a linear 4-way rotation head on the
    (unnormalised) projection, as the reference's ``deg_layer``; the EMA target copies encoder and
    projector.

    Networks without an objective: the loss needs the global centroids and lives in
    ``Orchestra.step_loss``.
    """

    def __init__(self, config, model_config, num_classes):
        super().__init__(config, model_config, num_classes)
        self.uses_target = config.target

    def build(self, encoder):
        networks = nn.ModuleDict({
            "encoder": encoder,
            "projector": orchestra_projector(encoder.out_dim, self.hidden_dim, self.projector_dim),
        })
        if self.config.degeneracy:
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


@dataclass(frozen=True)
class OrchestraParams(ServerOptimizerParams):
    num_global_clusters: int = 128
    num_local_clusters: int = 16
    memory_size: int = 128
    temperature: float = 0.1
    target_momentum: float = 0.996
    clustering_iterations: int = 5
    global_clustering: str = "sgd"
    global_clustering_steps: int = 500
    global_clustering_lr: float = 0.01
    degeneracy: bool = True
    target: bool = True
    clustering: bool = True
    reference_views: bool = False
    ema_before_forward: bool = False


MAX_CLUSTERS = 2 ** 16  # the reference config.py: 128 global, 16 local; 10^10 was a terabyte allocation in the run


class Orchestra(Method):
    name = "orchestra"
    @classmethod
    def has_setup_round(cls, config):
        return True  # Appendix C.2: every client's memory initialises the global centroids
    Params = OrchestraParams

    @classmethod
    def second_view(cls, config):
        return True  # the online model's view, T' (the reference's transform_prime)

    @classmethod
    def param_rules(cls, config, scenario):
        c = config
        integers = ("num_global_clusters", "num_local_clusters", "memory_size", "clustering_iterations",
                    "global_clustering_steps")
        return [
            *server_optimizer_rules(c),
            *((key, getattr(c, key) >= 1, "a positive integer") for key in integers),
            *((key, getattr(c, key) <= MAX_CLUSTERS, f"at most {MAX_CLUSTERS} (each cluster is a row of the "
                                                      f"centroid matrices and of every score matrix)")
              for key in ("num_global_clusters", "num_local_clusters")),
            *((key, getattr(c, key) > 0, "a positive number") for key in ("temperature", "global_clustering_lr")),
            ("target_momentum", 0 <= c.target_momentum <= 1, "a number in [0, 1]"),
            ("clustering", c.clustering or c.degeneracy, "true when degeneracy is false (no loss would be left)"),
            ("global_clustering", c.global_clustering in GLOBAL_CLUSTERING,
             f"one of {', '.join(GLOBAL_CLUSTERING)}"),
        ]

    def __init__(self, scenario, spec):
        super().__init__(scenario, spec)
        self.networks = OrchestraNetworks(self.config, scenario["model"], spec.num_classes)

    def build_networks(self) -> tuple[nn.ModuleDict, nn.ModuleDict | None]:
        """Online networks and target, initialised deterministically from the scenario seed."""
        return build_networks(self.networks, self.scenario, self.spec, derive_seed(self.scenario["seed"], "init"))

    # ---- server side -------------------------------------------------------------------------
    def init_state(self):
        return {**initial_state(*self.build_networks()), "centroids": None}

    def broadcast(self, state, ctx):
        payload = {"weights": state["weights"]}
        if state["centroids"] is not None:
            payload["centroids"] = state["centroids"]
        return payload

    def server_update(self, state, total, records, ctx):
        if total is not None:
            state = averaged_weights(state, total.average(), self.config)
        metrics = {}
        local = [records[cid]["centroids"] for cid in sorted(records)]
        if local:
            centroids = self.global_centroids(torch.cat(local).float().cpu(), state["centroids"], ctx)
            state = {**state, "centroids": centroids}
            metrics["clustering/local_centroids"] = float(sum(len(c) for c in local))
        return state, metrics

    def eval_network(self, state):
        return global_eval_network(self.networks, self.scenario, self.spec, state)

    def global_centroids(self, local: Tensor, previous: Tensor | None, ctx: RoundContext) -> Tensor:
        """The G global centroids of the received local centroids ``local`` [N, D]."""
        count = self.config.num_global_clusters
        if self.config.global_clustering == "kmeans":
            generator = torch.Generator().manual_seed(derive_seed(ctx.seed, ctx.round, "global-clustering"))
            return equal_size_clustering(local, count, generator, self.config.clustering_iterations)
        if previous is None:
            generator = torch.Generator().manual_seed(derive_seed(ctx.seed, "global-centroids"))
            previous = initial_global_centroids(count, local.shape[1], generator)
        return sgd_global_clustering(local, previous, self.config.temperature,
                                     self.config.global_clustering_steps, self.config.global_clustering_lr)

    # ---- client side -------------------------------------------------------------------------
    def make_workspace(self, device):
        return make_workspace(*self.build_networks(), (self.augment_config, self.augment_prime_config), device)

    def client_update(self, workspace, broadcast, extra, data, ctx, client_state=None):
        copy_into(workspace.slots, broadcast["weights"])
        generator = ctx.client_generator(data.client_id, "train")
        clustering_generator = ctx.client_generator(data.client_id, "local-clustering")
        if ctx.round == 0:
            memory = self.fill_memory(workspace, data, ctx, generator)
            return ClientUpload(record={"centroids": self.local_centroids(memory, clustering_generator)})
        if "centroids" not in broadcast:
            raise ValueError(f"round {ctx.round}: Orchestra needs the global centroids of the setup round")
        metrics, memory = self.train_locally(workspace, broadcast["centroids"], data, ctx, generator)
        return ClientUpload(stats=Stats.from_tensors(weight_uploads(workspace.slots), len(data.labels)),
                            record={"centroids": self.local_centroids(memory, clustering_generator)},
                            metrics=metrics)

    def assignment_model(self, workspace: Workspace) -> nn.ModuleDict:
        """The network whose projections give the assignments of x: the target, or the online model."""
        return workspace.target if workspace.target is not None else workspace.online

    def memory_capacity(self, data: ClientData) -> int:
        # With fewer samples than the memory, the last n projections are the latest of every sample.
        return min(self.config.memory_size, len(data.labels))

    @torch.no_grad()
    def fill_memory(self, workspace: Workspace, data: ClientData, ctx: RoundContext,
                    generator: torch.Generator) -> Tensor:
        """Target projections of a random ``memory_size`` of the client's samples (setup round).

        As the reference's ``reset_memory``: train mode (batch statistics) in batches of
        ``training.batch_size`` (at least that many rows each), BatchNorm running statistics
        restored afterwards; a single sample is projected in eval mode.
        """
        model = self.assignment_model(workspace)
        rows = torch.randperm(len(data.labels), generator=generator)[:self.memory_capacity(data)]
        images = to_float(data.images[rows].to(workspace.device))
        if self.config.reference_views:
            images = workspace.augment(images, generator)
        saved = {name: buffer.clone() for name, buffer in model.named_buffers()}
        model.train(len(images) > 1)
        chunks = torch.tensor_split(images, max(1, len(images) // max(2, ctx.hparams["training"]["batch_size"])))
        memory = torch.cat([F.normalize(project(model, chunk), dim=1) for chunk in chunks])
        for name, buffer in model.named_buffers():
            buffer.copy_(saved[name])
        model.train()
        return memory

    def local_centroids(self, memory: Tensor, generator: torch.Generator) -> Tensor:
        return equal_size_clustering(memory, self.config.num_local_clusters, generator,
                                     self.config.clustering_iterations).cpu()

    def step_loss(self, workspace: Workspace, x: Tensor, centroids: Tensor, generator: torch.Generator
                  ) -> tuple[Tensor, Tensor, Tensor | None, Tensor]:
        """One step's loss on the batch ``x`` (float images): (loss, clustering loss, rotation loss
        or None, the normalised target projections of x that enter the memory).

        Random draws, in this order: the target's view (``reference_views`` only), the online
        view, the rotation's view (``reference_views`` only), the quarter turns.
        """
        online = workspace.online
        reference_views = self.config.reference_views
        target_view = workspace.augment(x, generator) if reference_views else x
        online_view = workspace.augment_prime(x, generator)
        with torch.no_grad():
            z_target = F.normalize(project(self.assignment_model(workspace), target_view), dim=1)
        z_online = project(online, online_view)
        cluster = orchestra_clustering_loss(z_online, z_target, centroids, self.config.temperature)
        if "rotation" not in online:
            return cluster, cluster, None, z_target
        rotation_view = workspace.augment(x, generator) if reference_views else x
        turns = torch.randint(NUM_ROTATIONS, (len(x),), generator=generator).to(x.device)
        rotation = rotation_loss(online["rotation"](project(online, rotate90(rotation_view, turns))), turns)
        if not self.config.clustering:  # the rotation-only ablation
            return rotation, cluster, rotation, z_target
        return cluster + rotation, cluster, rotation, z_target

    def train_locally(self, workspace: Workspace, centroids: Tensor, data: ClientData, ctx: RoundContext,
                      generator: torch.Generator) -> tuple[dict[str, float], Tensor]:
        """Algorithm 1 over the local epochs (:func:`methods.local_training.train_local_epochs`);
        returns mean losses and the memory of projections."""
        online, target, device = workspace.online, workspace.target, workspace.device
        online.train()
        if target is not None:
            target.train()
        centroids = centroids.to(device)
        images = to_float(data.images.to(device))
        memory = RecentProjections(self.memory_capacity(data))

        def batch_loss(rows: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
            loss, cluster, rotation, z_target = self.step_loss(workspace, images[rows], centroids, generator)
            memory.push(z_target)
            parts = {"loss_cluster": cluster,
                     "assignment_entropy": assignment_entropy(z_target, centroids, self.config.temperature)}
            if rotation is not None:
                parts["loss_rotation"] = rotation
            return loss, parts

        step = LocalStep(batch_loss, list(online.parameters()))
        if target is not None:
            momentum = self.config.target_momentum
            hooks = step.before_forward if self.config.ema_before_forward else step.after_step
            hooks.append(lambda: ema_update(target, online, momentum))
        metrics = train_local_epochs(step, len(data.labels), generator, device, ctx,
                                     f"client {data.client_id}, method {self.name}")
        if memory.size == 0:  # no step ran (a single sample)
            return metrics, self.fill_memory(workspace, data, ctx, generator)
        return metrics, memory.contents()
