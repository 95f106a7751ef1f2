"""The user-verification (UV) head of Federated SimCLR (Louizos et al. 2024, section 2.1).

A client-ID classifier over ALL clients: a bias-free linear layer with unit-norm inputs and unit-norm
weight rows (a cosine classifier) on top of a UV projector (an MLP on the backbone features, trained
and averaged like the other networks). Row ``k`` belongs to client ``k``.

Where the rows live: the server holds the [num_clients x d] matrix phi in its state and broadcasts
it (payload kind ``"heads"``). A client trains only its own row (the others stay fixed during its
local training, so it must find its own cluster centre away from the others' centres) and keeps it
unit norm by projecting it back onto the sphere after every SGD step.

Server step (Algorithm 1 of the paper: theta AND phi go through the server optimiser): each client
uploads the delta of its row as a [num_clients x d] matrix whose only nonzero row is its own
(``ROWS_KEY``, weighted by its sample count like the weights), so the aggregation stays a ``Stats``
sum; the average over the reporting clients is phi's pseudo-gradient (with a minus sign), rows of
clients that did not report getting delta 0. It takes the same server step as the other weights:
``phi + server_lr * mean_delta`` (``server_optimizer: avg``), or Adam with its own moments carried
across rounds (``adam``; a row whose client did not report still moves by its first moment, as Adam
on the whole of phi does). The unit-norm constraint is then re-applied to every row (neither step
keeps rows on the sphere). As in the paper, a client's row therefore moves by its share of the
cohort's average, not by its whole local delta; the paper averages uniformly over the cohort, this
weights by sample count like the other weights. The bytes accounted for a client are one row
(``ClientUpload.sparse_rows``): the zero rows are an artefact of summable aggregation, not traffic.

:class:`UV` is this as an extension (:mod:`methods.extension`): ``method.uv: true`` adds it to any
objective with two views of a method that allows extensions, ``uv_weight`` times the UV loss of both
views on the UV projector's outputs added to the objective's loss.

Differences from the paper (no public reference code was found), besides the sample-count weights
above:

* Contrastive term: SimCLR's NT-Xent (:mod:`methods.losses.nt_xent`: symmetric, the negatives drawn
  from both views), where Eq. 3 writes a one-directional InfoNCE whose negatives come from the other
  view only; the paper names its method SimCLR.
* Temperature: the paper gives none (Eq. 3's critic is left open); the UV scenarios set 0.2, a
  choice of this simulator. It sets how strongly the contrastive gradient weighs against the UV
  loss, whose cosine logits lie in [-1, 1] with no temperature.
* With labels (``labelled_fraction > 0``, :mod:`methods.semi_supervised`), the UV term covers every
  row of the batch, labelled ones included, as Eq. 13 writes; Algorithm 2 (Appendix C) applies it
  to the unlabelled rows only (about 10% more rows in the ``_semi10`` scenarios).
* The CIFAR scenarios' colour distortion jitters hue by 0.1 (Appendix A) in the simulator's fixed
  order, with its uniform-area crops: the paper does not say how its crops and jitter order are
  drawn (``augment.jitter_order: random`` and ``crop_sampler: torchvision`` give torchvision's).
* SimSiam's heads: Appendix A puts a GroupNorm in the SimSiam projector ("before the hidden layer")
  and predictor, as in its encoder. The Fashion-MNIST SimSiam scenarios keep SimSiam's own hidden
  BatchNorm1d (Chen & He 2021, ``model.head_norm: batch``), chosen before the ``group`` value existed;
  their kept runs and margins are BatchNorm's. ``model.head_norm: group`` gives a GroupNorm on the
  hidden layer of both heads, after its Linear and before its ReLU, where BatchNorm sits (the paper
  does not place it more exactly; a GroupNorm on the projector's input is not offered). With it the
  label-skew SimSiam files, with and without UV, did not learn on two seeds (``results/uv.md``), as
  the paper's own SimSiam numbers suggest.
* Projector width: Appendix A's projectors have a hidden layer of 2048 units (128 outputs), as the
  CIFAR scenarios set; the Fashion-MNIST scenarios keep ``model.hidden_dim`` 512, a CPU-scale choice.
* Rotation skew (covariate and joint shift; the partition's, not the method's): Appendix A draws each
  client's bins from "a Dirichlet distribution with alpha=0.1" and says each client "receives one or
  two bins", which is Dir(0.01) per bin (alpha times the bins' prior, as the paper does for labels).
  ``partition.rotation_alpha`` is a per-bin concentration: the CIFAR scenarios set 0.01; the
  Fashion-MNIST ones keep 0.1 (about five bins a client, a milder shift), so that their kept runs stay
  current; ``--set partition.rotation_alpha=0.01`` gives the paper's (``results/uv.md``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from methods.extension import ClientTerm, Extension
from methods.losses.uv import uv_loss
from methods.params import Params, ServerOptimizerParams
from methods.server_optimizer import server_step
from simulator.context import derive_seed
from simulator.models import mlp

ROWS_KEY = "heads/uv_rows"  # the Stats key of a client's row delta (payload kind "heads")


def initial_rows(num_clients: int, dim: int, seed: int) -> Tensor:
    """Random unit-norm rows (Gaussian directions), deterministic in the run seed."""
    generator = torch.Generator().manual_seed(derive_seed(seed, "uv-rows"))
    return F.normalize(torch.randn(num_clients, dim, generator=generator), dim=1)


def server_step_rows(rows: Tensor, mean_delta: Tensor, opt_state: dict | None, config: ServerOptimizerParams
                     ) -> tuple[Tensor, dict | None]:
    """The rows after the server step (:func:`methods.server_optimizer.server_step`, as the encoder
    takes it) on the averaged row deltas ``mean_delta`` ([num_clients x d], zero for clients that did
    not report), renormalised to unit norm; returns (rows, optimiser state)."""
    stepped, opt_state = server_step({"uv_rows": rows}, {"uv_rows": mean_delta}, opt_state, config)
    return F.normalize(stepped["uv_rows"], dim=1), opt_state


class UVHead(nn.Module):
    """The cosine client-ID classifier as one client trains it: fixed rows of the other clients
    (a buffer) and the client's own row (the only parameter)."""

    def __init__(self, num_clients: int, dim: int):
        super().__init__()
        self.register_buffer("rows", torch.zeros(num_clients, dim))
        self.own_row = nn.Parameter(torch.zeros(dim))
        self.client_id = 0

    @torch.no_grad()
    def load(self, rows: Tensor, client_id: int) -> None:
        """Take the server's rows and train row ``client_id`` from now on."""
        self.rows.copy_(rows)
        self.own_row.copy_(rows[client_id])
        self.client_id = client_id

    def weights(self) -> Tensor:
        """All rows, the client's own one being the trainable parameter."""
        own = (torch.arange(len(self.rows), device=self.rows.device) == self.client_id).unsqueeze(1)
        return torch.where(own, self.own_row.unsqueeze(0), self.rows)

    def loss(self, u1: Tensor, u2: Tensor) -> Tensor:
        """The UV loss of both views' UV-projector outputs (Eq. 6)."""
        return uv_loss(u1, u2, self.weights(), self.client_id)

    @torch.no_grad()
    def project_row(self) -> None:
        """Back onto the unit sphere after an SGD step (the paper's unit-norm constraint)."""
        self.own_row.copy_(F.normalize(self.own_row, dim=0))

    @torch.no_grad()
    def delta_matrix(self) -> Tensor:
        """[num_clients x d] on the CPU: the own row's change since :meth:`load` in the client's row,
        zeros elsewhere (what the client uploads under ``ROWS_KEY``)."""
        delta = torch.zeros(self.rows.shape, dtype=self.rows.dtype)
        delta[self.client_id] = (self.own_row - self.rows[self.client_id]).cpu()
        return delta


class UVTerm(ClientTerm):
    """The UV extension bound to one client: its head (rows loaded) and the UV projector."""

    name = "uv"

    def __init__(self, head: UVHead, projector: nn.Module, weight: float):
        self.head, self.projector, self.weight = head, projector, weight

    def parameters(self):
        return [self.head.own_row]

    def loss(self, embedding):
        u1, u2 = (self.projector(h) for h in embedding["features"])
        return self.weight * self.head.loss(u1, u2)

    def after_step(self):
        self.head.project_row()

    def upload(self):
        return {ROWS_KEY: self.head.delta_matrix()}


@dataclass(frozen=True)
class UVParams(Params):
    uv: bool = False
    uv_weight: float = 1.0


class UV(Extension):
    """User verification (``method.uv``, weight ``method.uv_weight``): the UV projector among the
    online networks, the rows phi in the server state (``uv_rows``, Adam's ``uv_opt``), broadcast as
    payload kind ``"heads"``, each client training its own row."""

    name = "uv"
    Params = UVParams
    sparse_rows = (ROWS_KEY,)

    @classmethod
    def enabled(cls, config):
        return config.uv

    @classmethod
    def param_rules(cls, config, objective, scenario):
        return [
            ("uv", not config.uv or objective.num_views == 2, f"false with objective {objective.name} (one view)"),
            ("uv_weight", config.uv_weight >= 0, "a non-negative number"),
            ("uv", not (config.uv and scenario["training"]["centralized"]),
             "false with training.centralized (one client: no client to tell apart)"),
        ]

    def add_networks(self, online, feature_dim):
        model = self.scenario["model"]
        online["uv_projector"] = mlp(feature_dim, model["hidden_dim"], model["projector_dim"])

    def init_state(self):
        rows = initial_rows(len(self.spec.client_sizes), self.scenario["model"]["projector_dim"], self.scenario["seed"])
        return {"uv_rows": rows, "uv_opt": None}  # uv_opt: the server Adam's state of the rows

    def broadcast(self, state):
        return {"heads": state["uv_rows"]}

    def server_update(self, state, mean):
        rows, uv_opt = server_step_rows(state["uv_rows"], mean[ROWS_KEY], state["uv_opt"], self.config)
        return {"uv_rows": rows, "uv_opt": uv_opt}

    def make_part(self, device):
        return UVHead(len(self.spec.client_sizes), self.scenario["model"]["projector_dim"]).to(device)

    def bind(self, workspace, objective, broadcast, data, ctx):
        head = workspace.parts[self.name]
        head.load(broadcast["heads"], data.client_id)
        return UVTerm(head, workspace.online["uv_projector"], self.config.uv_weight)
