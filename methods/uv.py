"""The user-verification (UV) head of Federated SimCLR (Louizos et al. 2024, section 2.1).

A client-ID classifier over ALL clients: a bias-free linear layer with unit-norm inputs and unit-norm
weight rows (a cosine classifier) on top of a UV projector (an MLP on the backbone features, trained
and averaged like the other networks). Row ``k`` belongs to client ``k``.

Where the rows live: the server holds the [num_clients x d] matrix in its state and broadcasts it
(payload kind ``"heads"``). A client trains only its own row (the others stay fixed during its local
training, so it must find its own cluster centre away from the others' centres), keeps it unit norm
by projecting it back onto the sphere after every SGD step, and uploads it as a per-client record
(kind ``"heads"``). The server writes each participant's row back as is: rows are neither averaged
nor fed to the server optimiser, since no other client updates that row (Algorithm 1 of the paper
puts phi through Adam with the averaged deltas; with one client per row that would only rescale
the row's update by the cohort size). Rows of clients not sampled keep their last value.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from methods.losses.uv import uv_loss
from simulator.context import derive_seed


def initial_rows(num_clients: int, dim: int, seed: int) -> Tensor:
    """Random unit-norm rows (Gaussian directions), deterministic in the run seed."""
    generator = torch.Generator().manual_seed(derive_seed(seed, "uv-rows"))
    return F.normalize(torch.randn(num_clients, dim, generator=generator), dim=1)


def write_back_rows(rows: Tensor, records: dict[int, dict]) -> Tensor:
    """A copy of ``rows`` where every reporting client's row is the one it uploaded."""
    rows = rows.clone()
    for client_id, record in records.items():
        rows[client_id] = record["heads"]
    return rows


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
