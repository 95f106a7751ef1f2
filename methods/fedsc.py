"""FedSC (Jing et al., "FedSC: Provable Federated Self-supervised Learning with Spectral Contrastive
Objective over Non-i.i.d. Data", ICML 2024): FedAvg with the spectral contrastive objective plus
shared correlation matrices, so that each client also contrasts against the other clients' data.

Algorithm 1, in this engine's rounds and passes (``phases``):

- Round 0 (setup round, every client, a "share" pass only): client j computes ``R~_j`` with
  DP-CalR (Algorithm 2, :mod:`methods.privacy`) on the initial model and uploads it as a per-client
  record of payload kind ``"correlation"``; no training. With round 1 this is Algorithm 1's t = 1:
  round 1's cohort trains against these matrices, taken on the same initial weights. When the
  schedule starts later (``method.share_from_round`` > 0), the run has no round 0.
- Rounds t >= 1 that share (``method.share_from_round + k * method.share_every``; round 1 only
  if the setup round did not) start with a "share" pass: each sampled client computes ``R~_j``
  from the received global weights and uploads it; the server keeps each client's last matrix and
  the weighted sum ``R~ = sum_j q_j R~_j``, updated incrementally
  (``R~ <- R~ - q_j R~_j_old + q_j R~_j_new``); a client that is not sampled keeps its stale matrix.
  Then the "train" pass: each sampled client trains E local epochs on Eq. 5
  (:func:`methods.losses.fedsc.fedsc_local_objective`) against
  ``Rbar_{-j} = (R~ - q_j R~_j) / (1 - q_j)``, the aggregate of the OTHER clients' last matrices
  (this round's fresh ones for the co-sampled clients), received from the server (payload kind
  ``"correlation"``) and held constant. Weights are averaged as in FedAvg. Before a client's first
  share its matrix is absent and the aggregate is over the clients that have one; with no other
  matrix yet, the client trains plain SC.

One clip bound mu, ``method.clip_mu`` (default 4, the reference code's ``mu`` of
``config/spec.yaml``), governs both of its uses, as in the reference code, where the client's single
``self.mu`` clips the representations of the loss (``Client_SPEC.loss``) and of the shared matrix
(``Client_SPECshare.compCOV``): DP-CalR clips each representation to norm ``sqrt(mu)``
(Algorithm 2's NormClip, which bounds the sensitivity), and the training loss is Eq. 5 on the same
clipped representations (HaoChen et al.'s clip, the same option as FedAvg+SC's spectral objective).
``method.share_clip_mu`` > 0 overrides the bound of DP-CalR only (default 0: ``clip_mu``); the one
use for it is the paper's Eq. 5 as written, unclipped (``clip_mu: 0``), whose shared matrices still
need a bound, so that ``clip_mu: 0`` requires an explicit ``share_clip_mu``.

alpha decays linearly from ``alpha_start`` to ``alpha_end`` over the rounds (Appendix C: 1 -> 0.2,
``alpha = alpha_start + (alpha_end - alpha_start) (t - 1) / T`` as in the reference code); with
alpha = 1 the client update is FedAvg+SC's, bit for bit.

DP: ``noise_sigma`` > 0 adds N(0, noise_sigma^2) as the paper does (fixed sigma, the epsilon then
depends on n_j); ``target_epsilon`` > 0 instead derives each client's sigma from the noise
multiplier that keeps ``(target_epsilon, delta)`` after sharing in EVERY sharing round (the worst
case of partial participation), so sigma_j = multiplier * sqrt(2) mu / n_j. Each client's epsilon
counts only the rounds in which it shared; the server logs ``privacy/epsilon_max`` (and
``summary/privacy_epsilon_max`` for the run summary) every round.

Where this differs from the paper and its reference code (ShusenJing/FedSC_ICML2024), on purpose:

- Loss scale: Eq. 5 as the paper writes it; the reference code's loss is exactly twice that
  (``-2 Tr(R+) + alpha ||R||^2 + 2 (1 - alpha) Tr(R Rbar)``). Equal steps need twice its lr, half
  its gradient clip (3 -> 1.5) and half its weight decay (SGD adds the decay to the gradient):
  ``cifar10_paper.yaml`` takes lr 0.06, clip 1.5, decay 2.5e-4 for the reference's 0.03, 3, 5e-4;
  the Fashion-MNIST scenarios take lr 0.03 with the clip 1.5 and the default decay 5e-4, i.e. the
  reference at lr 0.015 with decay 1e-3.
- Views of DP-CalR: ``share_views`` = V = 5, the paper's (section 7.1). The reference's ``compCOV``
  runs 5 passes over its two-view data loader, i.e. 10 views per sample; V is a scenario choice.
- Weighting: Algorithm 1's ``q_j`` (client sizes) for ``R~`` and ``Rbar_{-j}``, and FedAvg's
  size-weighted mean of the weights; the reference takes unweighted means (``(sum - R_j) / (J - 1)``,
  ``average_weights``) and Algorithm 1's line 23 ``1/|J^t|``: the same where every client holds as
  many samples, as in its splits and in the one-class-per-client Fashion-MNIST scenarios here
  (6,000 images each).
- Round 0: a share-only pass of every client, then round 1's sampled cohort trains (Algorithm 1,
  t = 1). The reference's first round makes every client share AND train, even with partial
  participation.
- Noise: off unless asked for (``noise_sigma`` / ``target_epsilon``). The reference always adds
  Gaussian noise of standard deviation ``0.0052 / 10 * 2`` to every entry (not symmetrised, as here),
  in its non-private runs too (``compCOV(cov_noise=...)`` every round).
- Privacy accounting: the sensitivity is ``sqrt(2) mu / n_j`` (replace-one, :mod:`methods.privacy`)
  where Proposition 6.6 uses ``mu / n_j``, and epsilon comes from the RDP accountant, never looser
  than Proposition 6.6's closed form.
- Projector normalisation, in the shipped Fashion-MNIST scenarios only: ``model.head_norm: batch``
  puts a BatchNorm1d after the projector's hidden layer (as BYOL's); the reference's projector has
  none (``head_norm: none``, the key's default and ``cifar10_paper.yaml``'s). On 2 CPU cores and
  30 rounds, no FedSC or FedAvg+SC run without it beat its random round-0 network on backbone kNN
  (lrs 0.01 to 0.06, alpha schedules, 100 clients); with it and lr 0.03 (the reference's 0.015 on
  Eq. 5's scale) every arm of the FedSC claims did on the search seed (``results/regime.md``). The
  running statistics are averaged with the weights, and DP-CalR's eval mode uses them. A consequence
  found in the sixty-second session: with the BatchNorm the projections' norms are about 4 (median
  4.40 at initialisation; 3.9-4.4 after rounds 1-3 of ``fmnist_partial.yaml``), above the clip's
  ``sqrt(mu)`` = 2, so the clip binds on 99.3-100% of them (on none at initialisation without it,
  median 1.46, nor in the reference's Fixup ResNet-20 x8 and head, 1.32, on Fashion-MNIST as 32x32 RGB):
  every projection of the loss and of DP-CalR
  has norm 2, ``Tr(R_j) = mu``, and the loss trained is Eq. 5 on fixed-norm projections (a
  cosine-like spectral loss), where the paper's analysis takes ``mu`` above every squared norm
  (Theorem 6.10) so that the clip never binds. The FedSC claims of ``results/fedsc.md`` were run with
  it, for both arms.

- DP schedule (the DP scenarios): they share every 2nd round from the start with delta 1e-5, and
  sigma is set for a client that shares in every sharing round. Table 6 of the paper shares only
  from the middle or late rounds of T = 200: every round after 100 (SVHN) or 150 (CIFAR-10 at
  epsilon 3), every 2nd round after 100 (the other CIFAR-10 and all CIFAR-100 rows), with delta 1e-2
  or 1e-4, and Appendix C scales sigma with the participation ratio; fewer shares need less noise
  (e.g. half as many: a noise multiplier about 0.7 times as large). ``share_from_round`` sets a late
  start; the shipped ones are more pessimistic than the paper's protocol.
- Encoder: ``cifar10_paper.yaml`` runs a ResNet-18 with BatchNorm; the paper's Fixup ResNet-20 x8
  has no normalisation, so there DP-CalR's eval mode computes the same function as training.
- Training views: two per sample (SimCLR-style pairs), as the reference trains (``num_aug = 2``);
  the paper's section 5.2 writes 2V views per batch and section 7.1 sets V = 2, i.e. four.
- Augmentation: by default no hue jitter, a fixed jitter order and uniform-area crops (the
  reference: torchvision's RandomResizedCrop and ColorJitter(0.4, 0.4, 0.4, 0.1) in random order);
  ``augment.hue: 0.1``, ``jitter_order: random`` and ``crop_sampler: torchvision`` restore the
  reference's, as ``scenarios/fedsc/cifar10_paper.yaml`` sets them (on grayscale Fashion-MNIST
  hue and saturation do not act).
- Cosine lr (``training.lr_schedule: cosine``): here each round's lr is the formula's,
  ``lr (1 + cos(pi (t - 1) / T)) / 2``. The reference reads ``CosineAnnealingLR.get_lr()`` between
  ``step()`` calls, which applies torch's recursive form once more: below the formula from round 2
  on (x0.985 at mid-run, x0.963 at three quarters and x0.25 in the last round with T = 200; 0.990 of
  the formula's summed lr), so ``cifar10_paper.yaml``'s "lr 0.03 with cosine decay" is the nominal
  schedule, not the reference's exact steps.
- CPU scale (the Fashion-MNIST scenarios): E = 1 (section 7.1: 5), T = 30, batch B = 128 (section
  7.1: 512; B enters the batch bias of Theorem 6.10), the small CNN with GroupNorm (the paper's
  Fixup ResNet-20 x8), hidden width 512 and H = 128 (the reference: 1024 and 512; H enters DP-CalR's
  error as H^2 sigma^2), and crops of 80-100% in the partial-participation scenarios, 35-100% (the
  simulator's default) in the full-participation ones (the reference's 20-100%; ``results/fedsc.md``,
  amendment).

As in the reference: DP-CalR runs the networks in eval mode, alpha = ``1 - 0.8 (t - 1) / T``, the
projector is a two-layer MLP (``model.hidden_dim``, ``model.projector_dim``; 1024 and 512 there),
and the co-sampled clients share on the round's global weights before anyone trains.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from methods.base import ClientData, ClientUpload
from methods.fedavg import FedAvg, FedAvgParams
from methods.local_training import Workspace, copy_into
from methods.losses.fedsc import fedsc_local_objective_parts
from methods.losses.spectral import norm_clip
from methods.objectives import Spectral, project
from methods.privacy import add_gaussian_noise, correlation_sensitivity, noise_multiplier_for, rdp_epsilon
from simulator.augment import to_float
from simulator.context import RoundContext


class FedSCSpectral(Spectral):
    """Eq. 5 for one client and round: alpha and ``Rbar_{-j}`` bound at construction."""

    loss_parts = ("loss_objective", "loss_inter_client")

    def __init__(self, base: Spectral, others_correlation: torch.Tensor | None, alpha: float):
        super().__init__(base.config, base.model_config, base.num_classes)
        self.others_correlation = others_correlation
        self.alpha = alpha

    def rows_loss(self, embedding, labels, rows=None):
        return self.rows_loss_parts(embedding, labels, rows)[0]

    def rows_loss_parts(self, embedding, labels, rows=None):
        """Eq. 5 (:func:`methods.losses.fedsc.fedsc_local_objective`) and its two parts: the plain
        spectral contrastive loss (``loss_objective``, FedAvg+SC's loss) and the inter-client correction
        ``(1 - alpha) (Tr(R_j Rbar_{-j}) - ||R_j||_F^2 / 2)`` (``loss_inter_client``; 0 before another
        client's matrix exists, when the loss is plain SC)."""
        if self.others_correlation is None:
            plain = super().rows_loss(embedding, labels, rows)
            return plain, {"loss_objective": plain.detach(), "loss_inter_client": torch.zeros_like(plain.detach())}
        z1, z2 = self.clipped_projections(embedding, rows)
        plain, correction = fedsc_local_objective_parts(z1, z2, self.others_correlation, self.alpha)
        return plain + correction, {"loss_objective": plain.detach(), "loss_inter_client": correction.detach()}


@dataclass(frozen=True)
class FedSCParams(FedAvgParams):
    objective: str = "spectral"
    clip_mu: float = 4.0  # mu of the loss AND of DP-CalR (the reference code's one mu)
    alpha_start: float = 1.0
    alpha_end: float = 0.2
    share_views: int = 5
    share_clip_mu: float = 0.0  # > 0: DP-CalR's mu instead of clip_mu (needed when clip_mu is 0)
    noise_sigma: float = 0.0
    target_epsilon: float = 0.0
    delta: float = 1e-5
    share_from_round: int = 0
    share_every: int = 1


class FedSC(FedAvg):
    name = "fedsc"
    @classmethod
    def has_setup_round(cls, config):
        """Round 0 shares every client's matrix when the schedule starts there (none otherwise)."""
        return config.share_from_round == 0
    centralizable = False  # with one client no matrix of others exists: fedavg with objective spectral
    Params = FedSCParams

    def __init__(self, scenario, spec):
        super().__init__(scenario, spec)
        sizes = torch.tensor(spec.client_sizes, dtype=torch.float64)
        self.client_weights = sizes / sizes.sum()  # q_j
        self.planned_shares = sum(self.shares_in(r) for r in range(scenario["training"]["rounds"] + 1))
        self.noise_multiplier = None  # sigma / sensitivity, when derived from a target epsilon
        if self.config.target_epsilon > 0:
            self.noise_multiplier = noise_multiplier_for(self.config.target_epsilon, self.config.delta,
                                                         self.planned_shares)

    @classmethod
    def param_rules(cls, config, scenario):
        c, rounds = config, scenario["training"]["rounds"]
        return [
            ("objective", c.objective == "spectral", "spectral"),
            *super().param_rules(config, scenario),
            ("alpha_start", 0 <= c.alpha_start <= 1, "a number in [0, 1]"),
            ("alpha_end", 0 <= c.alpha_end <= 1, "a number in [0, 1]"),
            ("share_views", c.share_views >= 1, "a positive integer"),
            ("share_clip_mu", c.share_clip_mu >= 0, "a non-negative number (0: method.clip_mu)"),
            ("share_clip_mu", (c.share_clip_mu or c.clip_mu) > 0,
             "a positive number when method.clip_mu is 0 (DP-CalR's NormClip needs a bound)"),
            ("noise_sigma", c.noise_sigma >= 0, "a non-negative number"),
            # Opacus's search for the noise multiplier resolves epsilon to 0.01, which float64 cannot past
            # ~1e13 (it never ends); by 1e6 the noise multiplier is 0.0035, noise that protects nothing
            ("target_epsilon", 0 <= c.target_epsilon <= 1e6, "a number in [0, 1e6] (0: no target)"),
            ("target_epsilon", c.noise_sigma == 0 or c.target_epsilon == 0,
             "0 when method.noise_sigma is set (give one of them)"),
            ("delta", 0 < c.delta < 1, "a number in (0, 1)"),
            ("share_from_round", 0 <= c.share_from_round <= rounds, f"a round in [0, {rounds}]"),
            ("share_every", c.share_every >= 1, "a positive integer"),
        ]

    @property
    def share_mu(self) -> float:
        """DP-CalR's clip bound mu: ``share_clip_mu`` where set, else the loss's ``clip_mu``."""
        return self.config.share_clip_mu or self.config.clip_mu

    # ---- schedules ---------------------------------------------------------------------------
    def scheduled(self, round_index: int) -> bool:
        """The sharing schedule: from ``share_from_round``, every ``share_every`` rounds (Appendix C
        shares every 2nd round from the middle or late rounds)."""
        start, every = self.config.share_from_round, self.config.share_every
        return round_index >= start and (round_index - start) % every == 0

    def shares_in(self, round_index: int) -> bool:
        """Whether the clients of this round upload a correlation matrix: the schedule, except round
        1 after a setup round that shared, whose matrices were taken on the same initial weights."""
        return self.scheduled(round_index) and not (round_index == 1 and self.scheduled(0))

    def phases(self, round_index: int) -> tuple[str, ...]:
        """Round 0 (played only when the schedule starts there) only shares; a sharing round shares
        before it trains."""
        if round_index == 0:
            return ("share",)
        return ("share", "train") if self.shares_in(round_index) else ("train",)

    def alpha(self, ctx: RoundContext) -> float:
        start, end = self.config.alpha_start, self.config.alpha_end
        return start + (end - start) * ctx.progress

    def private(self) -> bool:
        return self.config.noise_sigma > 0 or self.config.target_epsilon > 0

    def noise_std(self, num_samples: int) -> float:
        """sigma of client j's Gaussian noise (0 without DP)."""
        if self.noise_multiplier is not None:
            return self.noise_multiplier * correlation_sensitivity(self.share_mu, num_samples)
        return self.config.noise_sigma

    def epsilon(self, client_id: int, shares: int) -> float:
        sensitivity = correlation_sensitivity(self.share_mu, self.spec.client_sizes[client_id])
        return rdp_epsilon(self.noise_std(self.spec.client_sizes[client_id]) / sensitivity, shares,
                           self.config.delta)

    # ---- server side -------------------------------------------------------------------------
    def init_state(self):
        state = super().init_state()
        dim, clients = self.scenario["model"]["projector_dim"], len(self.spec.client_sizes)
        state["correlations"] = torch.zeros(clients, dim, dim)  # each client's last R~_j
        state["shared"] = torch.zeros(clients, dtype=torch.int64)  # times each client shared
        state["correlation_sum"] = torch.zeros(dim, dim, dtype=torch.float64)  # sum_j q_j R~_j
        state["correlation_mass"] = 0.0  # sum of q_j over clients with a matrix
        return state

    def client_extra(self, state, client_id, ctx):
        """``Rbar_{-j}``: the q-weighted mean of the other clients' last matrices (None if none)."""
        has_matrix = state["shared"] > 0
        if ctx.phase == "share" or not torch.cat([has_matrix[:client_id], has_matrix[client_id + 1:]]).any():
            return None
        total, mass = state["correlation_sum"], state["correlation_mass"]
        if has_matrix[client_id]:
            q = self.client_weights[client_id]
            total = total - q * state["correlations"][client_id].double()
            mass = mass - q.item()
        return {"correlation": (total / mass).float()}

    def server_update(self, state, total, records, ctx):
        state, metrics = super().server_update(state, total, records, ctx)
        correlations, shared = state["correlations"].clone(), state["shared"].clone()
        correlation_sum, mass = state["correlation_sum"].clone(), state["correlation_mass"]
        for cid, record in records.items():
            if "correlation" not in record:
                continue
            q = self.client_weights[cid]
            if shared[cid] > 0:
                correlation_sum -= q * correlations[cid].double()
            else:
                mass += q.item()
            correlations[cid] = record["correlation"]
            correlation_sum += q * correlations[cid].double()
            shared[cid] += 1
        state = {**state, "correlations": correlations, "shared": shared,
                 "correlation_sum": correlation_sum, "correlation_mass": mass}
        metrics["fedsc/alpha"] = self.alpha(ctx)
        metrics["fedsc/clients_with_matrix"] = float((shared > 0).sum())
        if self.private():
            epsilon_max = max(self.epsilon(cid, int(n)) for cid, n in enumerate(shared))
            metrics["privacy/epsilon_max"] = epsilon_max
            metrics["summary/privacy_epsilon_max"] = epsilon_max
            metrics["privacy/shares_max"] = float(shared.max())
        return state, metrics

    # ---- client side -------------------------------------------------------------------------
    def client_update(self, workspace, broadcast, extra, data, ctx, client_state=None):
        if ctx.phase == "share":
            copy_into(workspace.slots, broadcast["weights"])
            return ClientUpload(record={"correlation": self.shared_correlation(workspace, data, ctx)})
        return super().client_update(workspace, broadcast, extra, data, ctx)

    def client_objective(self, workspace, extra, ctx):
        """Eq. 5 against ``Rbar_{-j}`` (received in ``extra``; plain SC before any other matrix exists)."""
        others = None if extra is None else extra["correlation"].to(workspace.device)
        return FedSCSpectral(self.objective, others, self.alpha(ctx))

    @torch.no_grad()
    def shared_correlation(self, workspace: Workspace, data: ClientData, ctx: RoundContext) -> torch.Tensor:
        """DP-CalR (Algorithm 2) on the networks in the workspace: V augmented views per sample,
        representations clipped to norm sqrt(mu), averaged z z^T, plus Gaussian noise."""
        online, device = workspace.online, workspace.device
        online.eval()
        generator = ctx.client_generator(data.client_id, "correlation")
        images = to_float(data.images.to(device))
        views, mu = self.config.share_views, self.share_mu
        batch_size = ctx.hparams["training"]["batch_size"]
        dim = self.scenario["model"]["projector_dim"]
        total = torch.zeros(dim, dim, dtype=torch.float64, device=device)
        for start in range(0, len(images), batch_size):
            batch = images[start:start + batch_size]
            for _ in range(views):
                z = norm_clip(project(online, workspace.augment(batch, generator)), mu).double()
                total += z.T @ z
        matrix = total / (len(images) * views)
        sigma = self.noise_std(len(images))
        if sigma > 0:
            matrix = add_gaussian_noise(matrix, sigma, generator)
        return matrix.float().cpu()
