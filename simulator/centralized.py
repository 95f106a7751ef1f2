"""The centralized upper bound (``training.centralized: true``): the scenario's method and objective
trained on the union of its clients' data, in-process, with the federated run's sample budget.

The population is planned as in the federated run (same seed, same clients, dropout, deadlines);
in round r, where the federated cohort's completing clients hold ``S_r`` samples, one client that
holds the union of every client's data (as written in the partition: rotations included) trains
``training.local_epochs`` epochs on a random ``S_r`` of them (drawn from (seed, round)). It thus
has the federated run's sample budget (``train/samples``, round by round) without the federation's
heterogeneity: where an incomplete last batch is skipped (one sample; under ``training.drop_last`` up
to a batch), each federated client skips its own and the one client only one, so it steps on a few
more samples. Its server step is the method's with one client (FedAvg: the client's networks,
through the server optimiser), and its downlink (``bytes_down/*``) is what that client receives: the
federated plan's dropouts and late clients receive nothing here.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from methods.base import DataSpec
from simulator.context import RoundContext, derive_seed
from simulator.data.store import PartitionReader
from simulator.inprocess import InProcessFederation


class UnionReader:
    """The one client of a centralized run: the union of a partition's clients, of which
    :meth:`draw` picks the round's subset that ``client(0)`` then returns."""

    def __init__(self, partition: PartitionReader):
        parts = [partition.client(cid) for cid in range(partition.num_clients)]
        self.images = torch.cat([images for images, _ in parts])
        self.labels = torch.cat([labels for _, labels in parts])
        self.rows = torch.arange(len(self.labels))

    def draw(self, size: int, seed: int, round_index: int) -> None:
        generator = torch.Generator().manual_seed(derive_seed(seed, round_index, "centralized"))
        self.rows = torch.randperm(len(self.labels), generator=generator)[:size]

    def client(self, cid: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[self.rows], self.labels[self.rows]


class CentralizedFederation(InProcessFederation):
    """:class:`simulator.inprocess.InProcessFederation` with one client holding every client's data.

    ``spec`` stays the federated one (the run loop plans the federated population from it); the
    method sees one client of the union's size."""

    def setup(self, spec: DataSpec, partition_dir: str, client_state_dir: str | None) -> None:
        union = UnionReader(PartitionReader(partition_dir))
        super().setup(replace(spec, client_sizes=(len(union.labels),)), partition_dir, client_state_dir)
        self.federated_sizes = spec.client_sizes
        self.spec, self.reader = spec, union

    def run_round(self, ctx: RoundContext) -> dict[str, float]:
        budget = sum(self.federated_sizes[cid] for cid in ctx.cohort)
        self.reader.draw(budget, ctx.seed, ctx.round)
        # the federated plan's dropouts are not receivers here: the one client alone gets the broadcast
        return super().run_round(replace(ctx, cohort=(0,) if budget else (), unreported=()))
