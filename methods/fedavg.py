"""FedAvg (McMahan et al. 2017) with a self-supervised local objective.

Each sampled client starts from the global networks, trains ``training.local_epochs`` epochs of SGD
on its own data with the objective of ``method.objective`` (SimCLR, spectral contrastive, BYOL,
SimSiam, or supervised cross-entropy as the upper bound) and uploads its networks weighted by its
number of samples. The server averages them (Eq. of FedAvg: w = sum_j n_j w_j / sum_j n_j) and either
takes the average (``server_optimizer: avg``, with server learning rate ``server_lr``:
w <- w + server_lr (avg - w)) or feeds the averaged delta to Adam (``server_optimizer: adam``,
FedAdam of Reddi et al. 2021, the setting of Louizos et al. 2024); the server step moves the online
networks' parameters, buffers and the EMA target take the plain average
(:mod:`methods.weight_averaging`).

Extensions compose with any objective (:mod:`methods.extension`): Federated SimCLR (Louizos et al.
2024) is this method with ``uv: true`` (:class:`methods.uv.UV`: a user-verification loss on both
views, the UV rows in the server state taking the weights' server step), ``labelled_fraction > 0``
their semi-supervised variant (:class:`methods.semi_supervised.SemiSupervised`).

A variant changes one hook (as FedProx does in pfl-research): ``client_objective`` (FedSC's Eq. 5
with the other clients' matrices), or ``start_weights`` / ``next_client_state`` (stateful clients
that start from a mix of the global and their own networks: FedU, FedEMA). A loss term added to
every batch (a proximal term, as FedProx's) is an extension (:mod:`methods.extension`), so that it
composes with any objective and variant.

BYOL's EMA target is global state too: clients receive it, update it as
t <- m t + (1 - m) o after each local step (m = ``target_momentum``) and upload it beside the online
networks, so clients stay stateless (as Orchestra does for its target).

Differences from EasyFL's ``applications/fedssl``, the reference code of the FedAvg-family baselines
(FedU's and FedEMA's own: :mod:`methods.divergence_aware`):

* FedAvg + BYOL shares the target as above. EasyFL's FedBYOL (``--update_encoder online
  --update_predictor global``) trains each client's own target (its server averages the targets and
  sends the average with the model, but a client keeps training the target it had, ``client.py``);
  that rule is FedU's with a ``dapu_threshold`` above every divergence (e.g.
  ``method: {name: fedu, dapu_threshold: 1.0e9}``: global online networks, the client's own target).
* BYOL's loss is the mean of its two directions (:func:`methods.losses.byol.byol_loss`), half of
  EasyFL's (and the BYOL paper's) sum: with SGD, lr ``a`` and weight decay ``b`` here take EasyFL's
  steps at lr ``a / 2`` and weight decay ``2 b``.
* Heads: EasyFL's projectors (and BYOL's and SimSiam's predictors) are 4096 -> 2048 wide with a hidden
  BatchNorm; here widths ``model.hidden_dim`` / ``model.projector_dim`` (512 / 128 by default) and a
  hidden BatchNorm only with ``model.head_norm: batch``, CPU-scale choices.
* SimCLR: EasyFL's temperature is 0.07; here ``temperature`` (default 0.5; the SimCLR scenarios set
  0.2, a choice of this simulator, except ``scaling/benchmark.yaml``, a cost study at the default).
  EasyFL's SimCLR passes both views through its networks as one batch of 2N images, so a BatchNorm
  normalises over both; here each view is a pass of its own (N images), as EasyFL's BYOL and SimSiam
  do. The same without BatchNorm; no shipped SimCLR scenario has one (``model.norm`` /
  ``model.head_norm: batch``).
* Augmentation: EasyFL's, for every baseline (``transform.py``, SimCLR's at s = 1), jitters
  brightness, contrast and saturation by 0.8 and hue by 0.2 (with probability 0.8), crops 8-100% of
  the area and turns an image gray with probability 0.2. The simulator's defaults are milder
  (:class:`simulator.augment.AugmentConfig`): jitter 0.4, that of the BYOL and SimSiam papers'
  augmentations (and of the FedSC reference's, whose spectral loss ``fedavg/spectral.yaml`` runs),
  no hue, crops of 35-100%, no grayscale. The Fashion-MNIST scenarios ``quickstart.yaml``,
  ``cross_device.yaml`` and ``fedavg/{simclr,federated_simclr_adam,simsiam,fedu,spectral}.yaml`` set
  jitter 0.8 whatever the objective, chosen by measurement (``results/regime.md``: with 0.4 each
  missed a learning margin on some seed, with 0.8 each cleared on the seeds of its shipping protocol);
  ``augment.brightness=0.4``, ``augment.contrast=0.4`` restore the papers' strength, and with 0.8,
  ``augment.crop_scale=[0.08,1.0]``, ``augment.grayscale_prob=0.2``, ``augment.hue=0.2``,
  ``augment.jitter_order=random`` (ColorJitter's order) and ``augment.crop_sampler=torchvision``
  (RandomResizedCrop's boxes) give EasyFL's (on grayscale Fashion-MNIST only brightness, contrast
  and the crop act).
* An epoch's last, incomplete batch is trained on (a batch of one sample skipped); EasyFL's loaders
  drop it, which ``training.drop_last: true`` restores. With BatchNorm heads a last batch of a few
  samples is normalised over those few.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from methods.base import ClientUpload, Method
from methods.extension import Extension
from methods.local_training import Workspace, copy_into
from methods.networks import build_networks, global_eval_network, make_workspace
from methods.objective_step import train_objective
from methods.objectives import OBJECTIVES, Objective, build_objective, draws_two_views
from methods.params import ServerOptimizerParams, server_optimizer_rules
from methods.semi_supervised import SemiSupervised, SemiSupervisedParams
from methods.uv import UV, UVParams
from methods.weight_averaging import averaged_weights, initial_state, weight_uploads
from simulator.context import RoundContext, derive_seed
from simulator.stats import Stats

EXTENSIONS: tuple[type[Extension], ...] = (UV, SemiSupervised)  # in the order their networks are built


@dataclass(frozen=True)
class FedAvgParams(SemiSupervisedParams, UVParams, ServerOptimizerParams):
    objective: str = "simclr"
    temperature: float = 0.5
    clip_mu: float = 0.0  # spectral objective: projections clipped to norm sqrt(clip_mu); 0 = unclipped
    target_momentum: float = 0.99


class FedAvg(Method):
    name = "fedavg"
    centralizable = True
    Params = FedAvgParams

    def __init__(self, scenario, spec):
        super().__init__(scenario, spec)
        self.objective: Objective = build_objective(self.config, scenario, spec.num_classes)
        self.extensions = [cls(self.config, scenario, spec) for cls in EXTENSIONS if cls.enabled(self.config)]

    @classmethod
    def param_rules(cls, config, scenario):
        if config.objective not in OBJECTIVES:  # the rules below need the objective
            return [("objective", False, f"one of {', '.join(OBJECTIVES)}")]
        objective = OBJECTIVES[config.objective]
        return [
            *server_optimizer_rules(config),
            ("temperature", config.temperature > 0, "a positive number"),
            ("target_momentum", 0 <= config.target_momentum <= 1, "a number in [0, 1]"),
            ("clip_mu", config.clip_mu >= 0, "a non-negative number"),
            ("clip_mu", config.clip_mu == 0 or objective.name == "spectral",
             "0 with a non-spectral objective (it clips the spectral loss's projections)"),
            *(rule for extension in EXTENSIONS for rule in extension.param_rules(config, objective, scenario)),
        ]

    @classmethod
    def second_view(cls, config):
        return draws_two_views(config.objective)

    @classmethod
    def labelled_train_indices(cls, scenario, partition):
        for extension in EXTENSIONS:
            indices = extension.labelled_train_indices(scenario, partition)
            if indices is not None:
                return indices
        return None

    # ---- networks ----------------------------------------------------------------------------
    def build_networks(self) -> tuple[nn.ModuleDict, nn.ModuleDict | None]:
        """Online (and target) networks, initialised deterministically from the scenario seed."""
        return build_networks(self.objective, self.scenario, self.spec, derive_seed(self.scenario["seed"], "init"),
                              extensions=self.extensions)

    # ---- server side -------------------------------------------------------------------------
    def init_state(self):
        state = initial_state(*self.build_networks())
        for extension in self.extensions:
            state.update(extension.init_state())
        return state

    def broadcast(self, state, ctx):
        payload = {"weights": state["weights"]}
        for extension in self.extensions:
            payload.update(extension.broadcast(state))
        return payload

    def server_update(self, state, total, records, ctx):
        if total is None:
            return state, {}
        mean = total.average()
        for extension in self.extensions:
            state = {**state, **extension.server_update(state, mean)}
        return averaged_weights(state, mean, self.config), {}

    def eval_network(self, state):
        return global_eval_network(self.objective, self.scenario, self.spec, state)

    # ---- client side -------------------------------------------------------------------------
    def make_workspace(self, device):
        parts = {extension.name: extension.make_part(device) for extension in self.extensions}
        return make_workspace(*self.build_networks(), (self.augment_config, self.augment_prime_config), device, parts)

    def client_objective(self, workspace: Workspace, extra: dict[str, Any] | None, ctx: RoundContext) -> Objective:
        """The objective this client trains this round (the method's own here)."""
        return self.objective

    def start_weights(self, workspace: Workspace, global_weights: dict[str, Tensor], client_state: Any,
                      ctx: RoundContext) -> dict[str, Tensor]:
        """The networks a client starts its local training from (the global ones here)."""
        return global_weights

    def next_client_state(self, slots: dict[str, Tensor], start: dict[str, Tensor], client_state: Any,
                          ctx: RoundContext) -> Any:
        """What a stateful client keeps after its local training (nothing here: stateless clients)."""
        return None

    def client_update(self, workspace, broadcast, extra, data, ctx, client_state=None):
        start = self.start_weights(workspace, broadcast["weights"], client_state, ctx)
        copy_into(workspace.slots, start)
        objective = self.client_objective(workspace, extra, ctx)
        terms = [extension.bind(workspace, objective, broadcast, data, ctx) for extension in self.extensions]
        metrics = train_objective(workspace, objective, terms, data, ctx, self.config.target_momentum,
                                  f"client {data.client_id}, method {self.name}/{objective.name}")
        upload = weight_uploads(workspace.slots)
        for term in terms:
            upload.update(term.upload())
        sparse = tuple(key for extension in self.extensions for key in extension.sparse_rows)
        return ClientUpload(stats=Stats.from_tensors(upload, len(data.labels)), metrics=metrics,
                            client_state=self.next_client_state(workspace.slots, start, client_state, ctx),
                            sparse_rows=sparse)
