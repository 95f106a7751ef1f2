"""Per-client persistent state (models of Hetero-SSFL, FedU, FedEMA clients) on disk.

Workers stay stateless: before simulating a client they read its state from the store, afterwards
they write the new state back. One file per client, written atomically, so memory does not grow
with the population or the number of rounds, and a killed run never leaves a torn file.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from simulator.runlog import atomic_write


class ClientStateStore:
    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def path(self, client_id: int) -> Path:
        return self.directory / f"client_{client_id:06d}.pt"

    def get(self, client_ids: list[int]) -> dict[int, bytes]:
        """Serialised states of the clients that have one (absent: the client never ran)."""
        return {cid: self.path(cid).read_bytes() for cid in client_ids if self.path(cid).exists()}

    def put(self, states: dict[int, bytes]) -> None:
        for cid, blob in states.items():
            atomic_write(self.path(cid), lambda p, blob=blob: p.write_bytes(blob))

    def nbytes(self) -> int:
        return sum(p.stat().st_size for p in self.directory.glob("client_*.pt"))


def dumps(state: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def loads(blob: bytes) -> Any:
    return torch.load(io.BytesIO(blob), weights_only=False)
