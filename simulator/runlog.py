"""A run's directory: resolved scenario, metrics (Parquet + TensorBoard), summary, checkpoints.

Every file is written atomically (temporary sibling, then ``os.replace``), so a reader or a killed
run never sees a half-written file.
"""
from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq
import torch
import yaml


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def new_run_dir(out: str | None, scenario: dict) -> Path:
    """``out`` if given (it must not hold files), else ``<output.dir>/<name>-<timestamp>``."""
    if out is None:
        base = Path(scenario["output"]["dir"]) / f"{scenario['name']}-{datetime.now():%Y%m%d-%H%M%S}"
        run_dir, n = base, 1
        while run_dir.exists():
            run_dir, n = base.with_name(f"{base.name}-{n}"), n + 1
    else:
        run_dir = Path(out)
        if run_dir.exists() and any(run_dir.iterdir()):
            raise FileExistsError(f"{run_dir}: output directory is not empty; choose another --out")
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(run_dir / "scenario.yaml",
                 lambda p: p.write_text(yaml.safe_dump(scenario, sort_keys=False)))
    return run_dir


class RunLog:
    """Long-format metrics (round, name, value, wall time) to Parquet and TensorBoard."""

    SCHEMA = pa.schema([("round", pa.int32()), ("name", pa.string()), ("value", pa.float64()),
                        ("wall_seconds", pa.float64())])

    def __init__(self, run_dir: Path, start: float):
        from torch.utils.tensorboard import SummaryWriter
        self.run_dir = run_dir
        self.start = start
        self.rows: list[tuple[int, str, float, float]] = []
        self.writer = SummaryWriter(str(run_dir / "tensorboard"))

    def log(self, round_index: int, metrics: dict[str, float]) -> None:
        wall = time.time() - self.start
        for name, value in sorted(metrics.items()):
            self.rows.append((round_index, name, float(value), wall))
            self.writer.add_scalar(name, value, round_index)

    def flush(self) -> None:
        self.writer.flush()
        columns = list(zip(*self.rows)) if self.rows else [[], [], [], []]
        table = pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, self.SCHEMA)],
                                     schema=self.SCHEMA)
        atomic_write(self.run_dir / "metrics.parquet", lambda p: pq.write_table(table, p))

    def close(self) -> None:
        self.flush()
        self.writer.close()


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    atomic_write(run_dir / "summary.json", lambda p: p.write_text(json.dumps(summary, indent=2) + "\n"))


def write_checkpoint(run_dir: Path, round_index: int, state: dict[str, Any], keep: int = 2) -> None:
    """``checkpoints/round_NNNNN.pt`` with the global state; only the newest ``keep`` are kept."""
    directory = run_dir / "checkpoints"
    directory.mkdir(exist_ok=True)
    atomic_write(directory / f"round_{round_index:05d}.pt",
                 lambda p: torch.save({"round": round_index, "state": state}, p))
    for old in sorted(directory.glob("round_*.pt"))[:-keep]:
        old.unlink()
