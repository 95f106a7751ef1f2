"""Hetero-SSFL (Makhija, Ho, Ghosh, "Federated Self-supervised Learning for Heterogeneous Clients",
section 3, Algorithm 1): every client keeps its own model, of its own architecture, trained with
BYOL or SimSiam plus ``mu`` times a linear-CKA alignment term on the server's Representation
Alignment Dataset (RAD: the first ``rad_size`` test images that no client holds and no evaluation
tests on, handed in as ``DataSpec.held_out``, :mod:`simulator.held_out`). The server aggregates kernel matrices on the RAD and
never averages weights.

In this engine's rounds (t = 1..T, no setup round):

- A sampled client restores its model from the client-state store (the first time: initialises it,
  seeded by run seed and client id, and receives the RAD, payload kind ``"rad"``, once; it keeps the
  RAD in its state; the server marks a client as holding the RAD only once it has reported, so one
  sampled but not reporting (dropped, late, over-selected) is sent it again, and ``bytes_down/rad``
  counts each sending), trains E local epochs (:func:`methods.objective_step.train_objective`, the
  loop FedAvg's clients run) on ``l_SSL + mu * (1 - CKA(K_k, Kbar(t-1)))`` (:func:`methods.losses.cka.cka_alignment_loss`),
  the gradient flowing through its predictor outputs on the RAD, and uploads its new kernel.
- Kernels: ``K = H A A^T H / ||H A A^T H||_F`` with ``A`` the predictor outputs on the whole RAD in
  eval mode (the paper's choice of representation and linear kernel). Centring ``K`` before the
  upload changes no CKA (:func:`methods.losses.cka.linear_cka` centres both kernels anyway). The
  unit Frobenius norm leaves CKA with a given ``Kbar`` unchanged, but not ``Kbar`` itself: deviation
  (5) below.
- Server: ``Kbar = sum_j w_j K_j / sum_j w_j`` over the current kernel of every client that has
  trained at least once (those not sampled keep their kernel, as their model is unchanged), ``w_j``
  uniform or ``n_j`` (``kernel_weights``). A client uploads the change of its weighted kernel,
  ``w_j (K_new - K_old)`` (it keeps its last ``A`` in its state; ``K_old = 0`` the first time), so
  the server holds one L x L sum, not a kernel per client. Kernels travel as payload kind
  ``"kernels"``.
- Device tiers: ``tiers: [{fraction, encoder}, ...]`` (empty: every client has ``model.encoder``),
  assigned by a seeded permutation of the client ids. Evaluation: each client's own encoder, for the
  ``eval_clients_per_tier`` clients of each tier that complete the most rounds, labelled
  ``"<encoder>/client_<id>"``.

Deviations from Algorithm 1: (1) it aggregates the kernels of all N clients, including the
initial (random) models of clients that have not trained yet; here a client joins ``Kbar`` when it
first trains, so that in a large population the aggregate is not dominated by untrained models and
no setup round over all clients is needed (round 1 has no ``Kbar`` and trains local SSL only).
(2) It computes ``K_i`` on the whole RAD once per local epoch; here each SGD step computes the term
on a fresh random batch of ``rad_batch_size`` RAD images (CKA against the matching sub-block of
``Kbar``), so the term's gradient is as fresh as the SSL loss's.
(3) Evaluation: Table 4 averages over all clients of an architecture; here the
``eval_clients_per_tier`` clients of each tier that train most often (2 per tier in the Fashion-MNIST
scenarios: of 10 or of 50 with 20 or 100 clients, of 2 or 3 with 5), the best-trained ones, so the
per-tier accuracies are those of the most-trained clients, not of the average client. (4) ``rad_size``
defaults to 1000 and ``rad_batch_size`` to 128 (section 5.1: a 5000-image RAD); every shipped scenario
sets both. (5) Eq. 2 sums the clients' raw kernels; here each kernel is normalised to unit Frobenius
norm before the sum, which changes ``Kbar`` (not the CKA of a client with a given ``Kbar``): each client
counts with its weight ``w_j`` whatever the scale of its representations, so that a client or tier with
large representations does not dominate ``Kbar``, and the uploads stay within the exact fixed-point
range of ``Stats`` (raw kernels have no bound). Measured on random networks of the Fashion-MNIST
tiers (centred-kernel norms 0.28 to 0.62): a client's CKA 0.929 with the raw-kernel ``Kbar``, 0.924
with this one; with scales 100x apart (random features) 0.08 against 0.63. (6) The split:
the paper samples a set of classes for each client; ``partition.kind: classes_per_client`` deals one
permutation of the classes out cyclically, so with 20 or 100 clients and 2 classes each only 5 class
pairs exist (clients i, i+5, i+10, ... share one); with 5 clients (section 5.1) the pairs are disjoint.
(7) Traffic, in the byte counters only: section 3.2 sends the representations (L x d) up and the RAD
down every round; here a client uploads an L x L kernel change (``bytes_up/kernels``: L / d times the
paper's, 39x with 5000 RAD images of 128-d outputs) and receives the RAD once, not every round (a
smaller ``bytes_down/rad``). Training is the same; compare communication with the paper's with care.
(8) Sign: Eq. 2 writes ``+ mu * Linear-CKA(K_k, Kbar)``, which minimised would push a client away
from its peers; the text asks for a proximal term measuring distance (with mu -> infinity "the local
models try to converge on the RAD representations"), so the term is ``mu * (1 - CKA)``.
(9) Centring: Eq. 1 is CKA without centring; here CKA centres the kernels as Kornblith et al. define
it (:func:`methods.losses.cka.linear_cka`), which changes the value for representations with a
common offset (equal for column-centred ones).
(10) Local loss: section 3.2 writes one direction of an unnormalised squared error with an
encoder-only target; here the objective's own loss, BYOL's normalised one (2 - 2 cos) averaged over
both directions with an encoder-and-projector target, or SimSiam's, as in the papers the section cites.
``mu = 0`` is local-only SSL; the kernels are still shared so that ``train/rad_cka`` (CKA of each
trained client's kernel with ``Kbar(t-1)``) can be compared between the two. With a RAD term, the
client logs it (``mu`` times, mean over its steps) as ``train/loss_rad`` beside the SSL loss
(``train/loss_objective``).

How the RAD enters training with ``mu > 0``: only through the alignment term. Each local SGD step
draws ``rad_batch_size`` RAD rows (stream ``"rad"`` of the client's round generator), forwards the
un-augmented images through the online encoder, projector and predictor in train mode, and adds
``mu * (1 - CKA)`` of their kernel with ``Kbar``'s sub-block; the SSL loss never sees RAD images.
The encoders' GroupNorm keeps no running statistics, so the RAD reaches a client's weights only
through the alignment gradient; with ``model.head_norm: batch`` (BYOL's hidden BatchNorm1d in
projector and predictor, which the shipped scenarios set, as BYOL's reference heads have it) that
forward pass also moves the heads' BatchNorm running statistics, which the eval-mode kernel reads,
and so does the projector kNN monitor (``knn_projector_top1``; the probe and the backbone kNN use the
encoder's features alone), alike in both ``mu > 0`` variants below.
``mu = 0`` never touches the RAD in training, so "aligned vs mu = 0" confounds the alignment with
extra (all-class) training images. The control ``rad_term: ssl`` separates the two:
the same term weight ``mu``, in the same rounds (those with a ``Kbar``), on the same RAD rows drawn
from the same stream at every step, but the term is the objective's own SSL loss on two augmented
views of those rows (augmentations from the separate stream ``"rad-augment"``, so the local batches'
augmentations are those of the other variants) instead of ``1 - CKA`` against ``Kbar``: the client
trains on the RAD images with no alignment and no information from other clients. (A forward pass
of the RAD with no term at all would be exactly ``mu = 0``; two views are needed because an SSL
loss between identical views carries little signal.) ``rad_term: cka`` (default) is Hetero-SSFL.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from methods.base import ClientUpload, Method, ParamError, evaluated_networks
from methods.extension import ClientTerm
from methods.local_training import Workspace, copy_into
from methods.losses.cka import center_kernel, cka_alignment_loss, linear_cka, linear_kernel
from methods.networks import build_networks, make_workspace
from methods.objective_step import train_objective
from methods.params import Params, records
from methods.objectives import Objective, build_objective, draws_two_views, objectives_with, project
from methods.weight_averaging import flat_state
from simulator.augment import to_float
from simulator.context import RoundContext, derive_seed
from simulator.evaluation.metrics import extract_features
from simulator.models import ENCODERS
from simulator.records import POSITIVE_NUMBER, one_of
from simulator.stats import Stats

ALIGNABLE = objectives_with(has_predictor=True)  # Hetero-SSFL aligns the predictor's outputs


@dataclass(frozen=True)
class Tier:
    encoder: str
    fraction: float


def assign_tiers(num_clients: int, fractions: list[float], seed: int) -> np.ndarray:
    """Tier index of each client: the clients in a seeded random order, cut by cumulative fraction."""
    order = np.random.default_rng(derive_seed(seed, "tiers")).permutation(num_clients)
    rank = np.empty(num_clients, dtype=np.int64)
    rank[order] = np.arange(num_clients)
    tiers = np.searchsorted(np.cumsum(fractions), (rank + 0.5) / num_clients, side="right")
    return np.minimum(tiers, len(fractions) - 1)


def represent(online: nn.ModuleDict, images: torch.Tensor) -> torch.Tensor:
    """The representation Hetero-SSFL aligns: the online predictor's output."""
    return online["predictor"](project(online, images))


@torch.no_grad()
def rad_kernel(online: nn.ModuleDict, rad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(representations [L, d] float32, centred unit-norm kernel [L, L] float64) on the RAD, eval mode."""
    network = nn.Sequential(online["encoder"], online["projector"], online["predictor"])
    representations = extract_features(network, rad)
    return representations, normalized_kernel(representations)


def normalized_kernel(representations: torch.Tensor) -> torch.Tensor:
    kernel = center_kernel(linear_kernel(representations.double()))
    return kernel / kernel.norm().clamp_min(1e-12)


@dataclass
class RadBatches(ClientTerm):
    """One client's RAD term of a round: ``mu`` times a loss on ``batch_size`` RAD rows per SGD
    step, drawn from ``generator``."""

    name: ClassVar[str] = "rad"
    workspace: Workspace
    mu: float
    rad: torch.Tensor  # float [L, C, H, W] on the device
    generator: torch.Generator
    batch_size: int

    def rows(self) -> torch.Tensor:
        return torch.randperm(len(self.rad), generator=self.generator)[:self.batch_size].to(self.rad.device)

    def loss(self, embedding):
        return self.mu * self.rad_loss()

    def rad_loss(self) -> torch.Tensor:
        raise NotImplementedError


@dataclass
class Alignment(RadBatches):
    """Hetero-SSFL's term (``rad_term: cka``): ``1 - CKA(K_k, Kbar(t-1))`` on each RAD batch, the
    gradient flowing through the client's predictor outputs; ``kernel`` is a constant."""

    kernel: torch.Tensor  # Kbar(t-1) [L, L] on the device

    def rad_loss(self):
        rows = self.rows()
        return cka_alignment_loss(represent(self.workspace.online, self.rad[rows]), self.kernel[rows][:, rows])


@dataclass
class RadSSL(RadBatches):
    """The control (``rad_term: ssl``): the objective's SSL loss on two augmented views of the RAD rows
    the alignment term would draw, augmentations drawn from ``augment_generator``; no ``Kbar``."""

    objective: Objective
    augment_generator: torch.Generator

    def rad_loss(self):
        images = self.rad[self.rows()]
        space = self.workspace
        views = space.views(images, self.augment_generator, self.objective.num_views)
        return self.objective.rows_loss(self.objective.embed(space.online, space.target, views), None)


@dataclass(frozen=True)
class HeteroSSFLParams(Params):
    objective: str = "byol"
    target_momentum: float = 0.99
    mu: float = 0.5
    rad_size: int = 1000
    rad_batch_size: int = 128
    kernel_weights: str = "uniform"
    rad_term: str = "cka"
    tiers: tuple[Tier, ...] = records(Tier, {"fraction": POSITIVE_NUMBER, "encoder": one_of(ENCODERS)},
                                      distinct="encoder")
    eval_clients_per_tier: int = 2


class HeteroSSFL(Method):
    name = "hetero_ssfl"
    stateful_clients = True
    Params = HeteroSSFLParams

    def __init__(self, scenario, spec):
        super().__init__(scenario, spec)
        self.objective: Objective = build_objective(self.config, scenario, spec.num_classes)
        self.tiers = self.config.tiers or (Tier(scenario["model"]["encoder"], 1.0),)
        self.client_tier = assign_tiers(len(spec.client_sizes), [t.fraction for t in self.tiers], scenario["seed"])

    def client_pool(self, client_id: int) -> str:
        """Clients run in the worker pool named after their tier's encoder (e.g. ``large_cnn``)."""
        return self.tiers[self.client_tier[client_id]].encoder

    @classmethod
    def second_view(cls, config):
        return draws_two_views(config.objective)

    @classmethod
    def param_rules(cls, config, scenario):
        c = config
        return [
            ("objective", c.objective in ALIGNABLE, f"{' or '.join(ALIGNABLE)} (a predictor to align)"),
            ("mu", c.mu >= 0, "a non-negative number"),
            ("rad_size", c.rad_size >= 2, "an integer >= 2"),
            ("rad_batch_size", c.rad_batch_size >= 2, "an integer >= 2"),
            ("rad_batch_size", c.rad_batch_size <= c.rad_size, f"at most method.rad_size ({c.rad_size})"),
            ("target_momentum", 0 <= c.target_momentum <= 1, "a number in [0, 1]"),
            ("kernel_weights", c.kernel_weights in ("uniform", "samples"), "uniform or samples"),
            ("rad_term", c.rad_term in ("cka", "ssl"),
             "cka (Hetero-SSFL's alignment) or ssl (the control: SSL loss on the same RAD batches)"),
            ("eval_clients_per_tier", c.eval_clients_per_tier >= 1, "a positive integer"),
            ("rad_term", not (c.rad_term == "ssl" and not c.mu > 0), "cka with mu = 0 (mu weights the RAD term)"),
            ("tiers", not c.tiers or math.isclose(sum(t.fraction for t in c.tiers), 1.0, abs_tol=1e-6),
             "fractions summing to 1 (empty: every client has model.encoder)"),
        ]

    @classmethod
    def check_data(cls, config, held_out):
        """The RAD must fit in the test images the evaluation leaves out."""
        available = held_out.available()
        if config.rad_size > available:
            raise cls.rad_too_big(available, config.rad_size)

    @classmethod
    def held_out_images(cls, config) -> int:
        """The RAD's images, which every client's alignment term trains on."""
        return config.rad_size

    @staticmethod
    def rad_too_big(available: int, rad_size: int) -> ParamError:
        return ParamError("rad_size", f"expected at most {available} (test images outside eval.test_subset), "
                                      f"got {rad_size}")

    # ---- networks ----------------------------------------------------------------------------
    def client_networks(self, tier: int, client_id: int) -> tuple[nn.ModuleDict, nn.ModuleDict | None]:
        """The initial networks of a client of tier ``tier`` (seeded by run seed and client id)."""
        return build_networks(self.objective, self.scenario, self.spec, derive_seed(self.scenario["seed"], client_id, "init"),
                              encoder=self.tiers[tier].encoder)

    def restore(self, workspace: Workspace, client_state: Any, client_id: int) -> None:
        """Write the client's networks (stored, or initial if it never ran) into the workspace."""
        if client_state is None:
            source = flat_state(*self.client_networks(self.client_tier[client_id], client_id))
        else:
            source = client_state["networks"]
        copy_into(workspace.slots, source)

    def eval_clients(self) -> list[int]:
        """Per tier, the ``eval_clients_per_tier`` clients that train most often over the run (the
        cohorts are a function of the seed, see :class:`simulator.population.Population`), lowest
        ids first among ties. They depend on ``training.rounds``: two budgets of one seed may
        evaluate different clients (different round-0 numbers), so budgets are compared at the
        evaluation rounds of the longer run, not across runs."""
        counts = np.zeros(len(self.client_tier), dtype=np.int64)
        for completed in self.spec.schedule.completed(range(1, self.scenario["training"]["rounds"] + 1)):
            counts[list(completed)] += 1
        chosen = []
        for tier in range(len(self.tiers)):
            members = np.flatnonzero(self.client_tier == tier)
            ranked = sorted(members.tolist(), key=lambda cid: (-counts[cid], cid))
            chosen += ranked[:self.config.eval_clients_per_tier]
        return sorted(chosen)

    # ---- server side -------------------------------------------------------------------------
    def init_state(self):
        try:  # one load of the data set (check_data would load it once more)
            rad = self.spec.held_out.take(self.config.rad_size)
        except ValueError as err:
            raise self.rad_too_big(getattr(err, "available", 0), self.config.rad_size) from None
        return {"rad": rad, "has_rad": torch.zeros(len(self.spec.client_sizes), dtype=torch.bool),
                "kernel_sum": torch.zeros(len(rad), len(rad), dtype=torch.float64), "kernel_weight": 0.0}

    def broadcast(self, state, ctx):
        if state["kernel_weight"] == 0:
            return {}
        return {"kernels": (state["kernel_sum"] / state["kernel_weight"]).float()}

    def client_extra(self, state, client_id, ctx):
        return None if state["has_rad"][client_id] else {"rad": state["rad"]}

    def server_update(self, state, total, records, ctx):
        has_rad = state["has_rad"].clone()
        has_rad[list(ctx.cohort)] = True
        state = {**state, "has_rad": has_rad}
        if total is None:
            return state, {}
        sums = total.total()
        return {**state, "kernel_sum": state["kernel_sum"] + sums["kernels/rad"],
                "kernel_weight": state["kernel_weight"] + sums["kernels/weight"].item()}, {}

    def eval_networks(self, state, load_client_state):
        networks = {}
        for cid in self.eval_clients():
            tier = self.client_tier[cid]
            online, _ = self.client_networks(tier, cid)
            stored = load_client_state(cid)
            if stored is not None:
                online.load_state_dict({k[len("online."):]: v for k, v in stored["networks"].items()
                                        if k.startswith("online.")})
            networks[f"{self.tiers[tier].encoder}/client_{cid}"] = evaluated_networks(online)
        return networks

    # ---- client side -------------------------------------------------------------------------
    def make_workspace(self, device):
        """One preallocated set of networks per tier (any initial values: restored before use)."""
        views = (self.augment_config, self.augment_prime_config)
        return [make_workspace(*self.client_networks(tier, -1), views, device) for tier in range(len(self.tiers))]

    def client_update(self, workspace, broadcast, extra, data, ctx, client_state=None):
        cid = data.client_id
        space = workspace[self.client_tier[cid]]
        self.restore(space, client_state, cid)
        rad = extra["rad"] if client_state is None else client_state["rad"]
        aggregate = broadcast.get("kernels")
        terms = self.rad_terms(space, rad, aggregate, ctx, cid)
        metrics = train_objective(space, self.objective, terms, data, ctx, self.config.target_momentum,
                                  f"client {cid}, method {self.name}/{self.objective.name}")
        representations, kernel = rad_kernel(space.online, rad)
        if aggregate is not None:
            metrics["rad_cka"] = linear_cka(kernel, aggregate.double()).item()
        first = client_state is None
        change = kernel if first else kernel - normalized_kernel(client_state["rad_representations"])
        weight = len(data.labels) if self.config.kernel_weights == "samples" else 1
        upload = Stats.from_tensors({"kernels/rad": change, "kernels/weight": torch.tensor([float(first)])}, weight)
        state = {"networks": {k: v.detach().cpu().clone() for k, v in space.slots.items()},
                 "rad": rad, "rad_representations": representations}
        return ClientUpload(stats=upload, metrics=metrics, client_state=state)

    def rad_terms(self, space: Workspace, rad: torch.Tensor, aggregate: torch.Tensor | None, ctx: RoundContext,
                  cid: int) -> list[RadBatches]:
        """Client ``cid``'s RAD term of this round (none: ``mu = 0``, or no ``Kbar`` yet)."""
        if not self.config.mu > 0 or aggregate is None:
            return []
        images = to_float(rad.to(space.device))
        rows, mu, size = ctx.client_generator(cid, "rad"), self.config.mu, self.config.rad_batch_size
        if self.config.rad_term == "cka":
            return [Alignment(space, mu, images, rows, size, aggregate.to(space.device))]
        return [RadSSL(space, mu, images, rows, size, self.objective, ctx.client_generator(cid, "rad-augment"))]
