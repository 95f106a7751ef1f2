"""The frozen per-round context every client step and server step receives."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np
import torch


def derive_seed(*parts: int | float | str) -> int:
    """A 63-bit seed that depends only on ``parts`` (e.g. run seed, round, client id). A numpy scalar
    counts as the Python number it equals (``np.int64(3)`` as ``3``): a client id taken from an array
    gives the seed its ``int`` gives, though the two print differently."""
    plain = tuple(part.item() if isinstance(part, np.generic) else part for part in parts)
    digest = hashlib.blake2b(repr(plain).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def freeze(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only view of a nested mapping and of the mappings nested in it (a list value, such as
    ``augment.crop_scale``, is the scenario's own list: read it, never write it)."""
    return MappingProxyType({k: freeze(v) if isinstance(v, Mapping) else v
                             for k, v in mapping.items()})


@dataclass(frozen=True)
class RoundContext:
    """What a round is: its number, its cohort, the hyper-parameters and the run seed.

    Round 0 is the setup round (methods that need one); training rounds are 1..num_rounds.
    ``hparams`` is the read-only resolved scenario (``hparams["training"]["lr"]``...). ``phase`` is
    the pass of the round (``Method.phases``): ``"share"``, in which the cohort only uploads records
    computed on the current global model, or ``"train"``. ``unreported``: the clients that received
    the round's broadcast but do not report (they dropped out, were late, or finished after the
    clients wanted, :class:`simulator.population.RoundPlan`); nobody simulates them, only the
    downlink's byte count includes them (the broadcast and what only they receive).
    """

    round: int
    num_rounds: int
    cohort: tuple[int, ...]
    seed: int
    hparams: Mapping[str, Any]
    phase: str = "train"
    unreported: tuple[int, ...] = ()

    def client_seed(self, client_id: int, stream: str = "train") -> int:
        return derive_seed(self.seed, self.round, client_id, stream)

    def client_generator(self, client_id: int, stream: str = "train") -> torch.Generator:
        """The client's random stream for this round: a function of (seed, round, client id)."""
        return torch.Generator().manual_seed(self.client_seed(client_id, stream))

    @property
    def progress(self) -> float:
        """Fraction of training done at the start of this round, in [0, 1)."""
        return max(self.round - 1, 0) / max(self.num_rounds, 1)
