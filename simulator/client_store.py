"""Per-client persistent state (models of Hetero-SSFL, FedU, FedEMA clients) on disk.

Workers stay stateless: before simulating a client they read its state from the store, afterwards
they write the new state back. One file per client, written atomically, so memory does not grow
with the population or the number of rounds, and a killed run never leaves a torn file.

Writes are staged: what a worker puts is read back (by ``get``, by checkpoints) only once the
driver commits the pass, after the server step received every share's sums. A client simulated
again because its worker died (or its node, with the sums) after putting its state therefore starts
from the state it started the round with, and the run ends where a run without the fault does.
"""
from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch

from simulator.runlog import atomic_write


class ClientStateStore:
    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.staging = self.directory / "staged"

    def path(self, client_id: int) -> Path:
        return self.directory / f"client_{client_id:06d}.pt"

    def get(self, client_ids: list[int]) -> dict[int, bytes]:
        """Committed serialised states of the clients that have one (absent: the client never ran)."""
        return {cid: self.path(cid).read_bytes() for cid in client_ids if self.path(cid).exists()}

    def put(self, states: dict[int, bytes]) -> None:
        """Stage new states (a later put of the same client replaces its staged state)."""
        self.staging.mkdir(parents=True, exist_ok=True)  # a resumed run re-creates the store's directory
        for cid, blob in states.items():
            atomic_write(self.staging / self.path(cid).name, lambda p, blob=blob: p.write_bytes(blob))

    def commit(self) -> None:
        """Make every staged state the client's state (one atomic rename per client)."""
        for staged in sorted(self.staging.glob("client_*.pt")):
            os.replace(staged, self.directory / staged.name)


def dumps(state: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def loads(blob: bytes) -> Any:
    return torch.load(io.BytesIO(blob), weights_only=False)
