"""The round, without Ray: cohort sampling, worker shares, a worker's client loop, the server step.

``simulator.engine`` places these pieces on Ray actors; they are plain Python so that the same
round can run in one process (profiling, tests, a GPU machine without Ray).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np
import torch

from methods.base import ClientData, Method, payload_nbytes
from simulator.context import RoundContext
from simulator.resources import cuda_determinism
from simulator.stats import Stats, sum_stats


class RunFailure(RuntimeError):
    """A run that cannot go on; ``last_checkpoint`` (set by the driver) is where a resume starts.
    ``resumable``: whether resuming may succeed (the cause may have passed: lost processes), or
    would fail again (a failed client step)."""

    last_checkpoint: str | None = None
    run_dir: str | None = None
    resumable = True


class WorkerFailure(RunFailure):
    """A client step raised (e.g. a non-finite loss): the message names round, client and method."""

    resumable = False


class PartitionMismatch(RunFailure):
    """A worker on another node built its clients' partition from its own data files, and those
    are not the driver's (another cache entry): its clients would train other data. Resuming fails
    the same way until every node holds the same files (or shares the partition cache)."""

    resumable = False


class ServerLost(RuntimeError):
    """The parameter-server actor died; the run loop restarts it from the newest checkpoint."""


class ServerFailure(RunFailure):
    """The parameter server died and could not be restarted (its checkpoint cannot be read, or it
    kept dying)."""


class WorkersLost(RunFailure):
    """The workers of a pass kept dying or hanging, replaced each time, past the engine's limit of
    restarts per pass; the run can be resumed from its last checkpoint (the cause may have passed)."""


def worker_device(num_gpus: float) -> torch.device:
    return torch.device("cuda" if num_gpus > 0 and torch.cuda.is_available() else "cpu")


def prepare_worker_device(num_gpus: float, scenario: dict) -> torch.device:
    """:func:`worker_device`, with the scenario's ``ray.cuda_deterministic`` applied to this process
    when it is a GPU (:func:`simulator.resources.cuda_determinism`; a CPU's runs repeat as they are)."""
    device = worker_device(num_gpus)
    if device.type == "cuda":
        cuda_determinism(scenario["ray"]["cuda_deterministic"])
    return device


def worker_pools(scenario: dict) -> dict[str, dict]:
    """``ray.worker_pools`` by name, or one pool of ``ray.num_workers`` workers like ``ray.worker``."""
    if scenario["ray"]["worker_pools"]:
        return {pool["name"]: pool for pool in scenario["ray"]["worker_pools"]}
    worker = scenario["ray"]["worker"]
    return {"default": {"name": "default", "count": scenario["ray"]["num_workers"], **worker}}


def split_cohort(cohort: tuple[int, ...], sizes: np.ndarray, num_workers: int) -> list[list[int]]:
    """Shares of the cohort with balanced sample counts (longest first, to the lightest worker).

    Sums are exact (``Stats``), so which worker simulates which client does not change results.
    """
    shares: list[list[int]] = [[] for _ in range(num_workers)]
    load = [0] * num_workers
    for cid in sorted(cohort, key=lambda c: (-int(sizes[c]), c)):
        lightest = min(range(num_workers), key=lambda w: (load[w], w))
        shares[lightest].append(cid)
        load[lightest] += int(sizes[cid])
    return [sorted(share) for share in shares if share]


def route_cohort(cohort: tuple[int, ...], sizes, pool_of_client, pool_sizes: dict[str, int]
                 ) -> list[tuple[str, int, list[int]]]:
    """(pool, worker slot in the pool, share) for each non-empty share: every client goes to the
    pool ``pool_of_client(cid)`` names (the first pool when it names none or an unknown one) and each
    pool's clients are balanced over its workers. Exact sums make the routing invisible in results."""
    first = next(iter(pool_sizes))
    by_pool: dict[str, list[int]] = {name: [] for name in pool_sizes}
    for cid in cohort:
        pool = pool_of_client(cid)
        by_pool[pool if pool in pool_sizes else first].append(cid)
    return [(pool, slot, share) for pool, members in by_pool.items()
            for slot, share in enumerate(split_cohort(tuple(members), sizes, pool_sizes[pool]))]


@dataclass
class WorkerResult:
    """What a worker sends back for its share: the sum of its clients' uploads and their records."""

    stats: Stats | None = None
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    bytes_up: Counter = field(default_factory=Counter)
    client_states: dict[int, Any] = field(default_factory=dict)
    samples: int = 0
    rss_mb: float = 0.0  # the worker actor's resident memory after its share (0: simulated by the driver)


def simulate_clients(method: Method, workspace: Any, load_client, broadcast: dict[str, Any],
                     extras: dict[int, Any], client_ids: list[int], ctx: RoundContext,
                     client_states: dict[int, Any] | None = None) -> WorkerResult:
    """Run the client step of each client in turn in the worker's workspace and pre-aggregate. A
    client whose training diverged (a non-finite loss, or an upload too large for exact sums) raises
    ``FloatingPointError`` naming round, client and method, which the engine turns into the run's
    :class:`WorkerFailure`."""
    result = WorkerResult()
    total = None  # a running sum, on the workspace's device until the end
    for cid in client_ids:
        images, labels = load_client(cid)
        result.samples += len(labels)
        state = (client_states or {}).get(cid)
        try:
            upload = method.client_update(workspace, broadcast, extras.get(cid),
                                          ClientData(cid, images, labels), ctx, state)
        except OverflowError as err:  # its upload is past the exact sums' range: as a non-finite loss would
            raise FloatingPointError(f"round {ctx.round}, client {cid}, method {method.name}: {err}; its local "
                                     f"training diverged (try a smaller training.lr)") from None
        try:
            total = sum_stats([total, upload.stats])
        except OverflowError as err:  # the share's sum would pass int64 (simulator.stats)
            raise FloatingPointError(f"round {ctx.round}, client {cid}, method {method.name}: {err}") from None
        if upload.record is not None:
            result.records[cid] = upload.record
        if upload.client_state is not None:
            result.client_states[cid] = upload.client_state
        result.metrics[cid] = upload.metrics
        result.bytes_up.update(upload.bytes_by_kind())
    result.stats = total.to("cpu") if total is not None else None
    return result


def bytes_down_metrics(bytes_down: Mapping[str, int]) -> dict[str, float]:
    """``bytes_down/<kind>`` metrics of a pass's bytes sent down per kind."""
    return {f"bytes_down/{kind}": float(value) for kind, value in bytes_down.items()}


def run_passes(method: Method, run_phase: Callable[[RoundContext], dict[str, float]], ctx: RoundContext
               ) -> dict[str, float]:
    """A round: ``run_phase`` for each pass of ``method.phases`` in order, the round's metrics
    merged over the passes (:func:`add_phase_metrics`)."""
    metrics: dict[str, float] = {}
    for phase in method.phases(ctx.round):
        metrics = add_phase_metrics(metrics, run_phase(replace(ctx, phase=phase)))
    return metrics


def add_phase_metrics(metrics: dict[str, float], phase_metrics: dict[str, float]) -> dict[str, float]:
    """A round's metrics after one more pass: traffic (``bytes_*``) adds up, the rest is the later
    pass's."""
    merged = dict(metrics)
    for name, value in phase_metrics.items():
        merged[name] = merged.get(name, 0.0) + value if name.startswith("bytes_") else value
    return merged


class Server:
    """The method's server step and the global state; what the parameter-server actor runs."""

    def __init__(self, method: Method):
        self.method = method
        self.state = method.init_state()

    def broadcast_bytes(self, ctx: RoundContext, broadcast: dict) -> Counter:
        """The bytes of ``broadcast`` sent down per kind: to every online client (the cohort and the
        ``ctx.unreported``), once per round (in its first pass)."""
        if ctx.phase != self.method.phases(ctx.round)[0]:
            return Counter()
        receivers = len(ctx.cohort) + len(ctx.unreported)
        return Counter({kind: payload_nbytes(v) * receivers for kind, v in broadcast.items()})

    def client_extras(self, ctx: RoundContext, clients) -> tuple[dict[int, Any], Counter]:
        """What only each of ``clients`` receives (e.g. Hetero-SSFL's RAD with a client's first
        round), and its bytes per kind."""
        extras, sent = {}, Counter()
        for cid in clients:
            extra = self.method.client_extra(self.state, cid, ctx)
            if extra is not None:
                extras[cid] = extra
                sent.update({kind: payload_nbytes(v) for kind, v in extra.items()})
        return extras, sent

    def bytes_down_without_reports(self, ctx: RoundContext) -> Counter:
        """The bytes sent down in a pass whose cohort is empty (every online client dropped out or
        was late): the broadcast and their own parts still reached them."""
        sent = self.broadcast_bytes(ctx, self.method.broadcast(self.state, ctx))
        sent.update(self.client_extras(ctx, ctx.unreported)[1])
        return sent

    def payload(self, ctx: RoundContext, shares: list[list[int]]) -> tuple[dict, list[dict[int, Any]], Counter]:
        """The broadcast, each share's per-client extras, and the bytes sent down per kind (the
        ``ctx.unreported`` clients' extras included: they received them too)."""
        broadcast = self.method.broadcast(self.state, ctx)
        bytes_down = self.broadcast_bytes(ctx, broadcast)
        extras = []
        for share in shares:
            share_extras, sent = self.client_extras(ctx, share)
            bytes_down.update(sent)
            extras.append(share_extras)
        bytes_down.update(self.client_extras(ctx, ctx.unreported)[1])
        return broadcast, extras, bytes_down

    def aggregate(self, ctx: RoundContext, results: list[WorkerResult]) -> dict[str, float]:
        """Reduce the workers' sums, apply the server step; returns the round's metrics. Shares whose
        sums together would pass the exact sums' range raise :class:`WorkerFailure`, as one share's
        own sum does in its worker (:func:`simulate_clients`), however the cohort was split."""
        try:
            total = sum_stats(r.stats for r in results)
        except OverflowError as err:  # the shares' sums would pass int64 together (simulator.stats)
            raise WorkerFailure(f"round {ctx.round}, method {self.method.name}: {err}") from None
        records = {cid: rec for r in results for cid, rec in sorted(r.records.items())}
        records = dict(sorted(records.items()))
        self.state, metrics = self.method.server_update(self.state, total, records, ctx)
        client_metrics = {cid: m for r in results for cid, m in r.metrics.items()}
        names = sorted({name for m in client_metrics.values() for name in m})
        for name in names:
            values = [client_metrics[c][name] for c in sorted(client_metrics) if name in client_metrics[c]]
            metrics[f"train/{name}"] = float(np.mean(values))
        bytes_up = Counter()
        for r in results:
            bytes_up.update(r.bytes_up)
        for kind, value in bytes_up.items():
            metrics[f"bytes_up/{kind}"] = float(value)
        metrics["clients/completed"] = float(len(client_metrics))
        metrics["memory/workers_rss_mb"] = float(sum(r.rss_mb for r in results))
        metrics["train/samples"] = float(sum(r.samples for r in results) * ctx.hparams["training"]["local_epochs"])
        return metrics

    def eval_networks(self, load_client_state) -> dict[str, torch.nn.ModuleDict]:
        return self.method.eval_networks(self.state, load_client_state)
