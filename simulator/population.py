"""Cross-device realism: who is sampled, online, drops out, reports late, and how long a round takes.

Everything is drawn from (seed, round) (and per-client traits from the seed alone), so a round's plan
is the same whatever the number of workers or nodes, and is known before any client runs: clients
that are offline, drop out or miss the deadline are not simulated at all (their update is lost).

- availability: client j is online with probability ``p_j`` (``availability`` +- a uniform spread
  of ``availability_spread``, drawn once per client, clipped to [0, 1]: the spread must stay below
  ``availability``, or some clients would never be online), times a diurnal factor
  ``1 + diurnal_amplitude * sin(2 pi round / diurnal_period)``, the product clipped to 1 (so near
  full availability the mean online rate and the cycle's amplitude are below the nominal ones);
  or, with ``availability_trace``, a
  CSV file with columns ``round,client`` listing who is online (rounds wrap around the trace).
- sampling: the server samples the round's cohort among the clients online in that round (they
  have checked in, as in production systems, Flower and FedScale), all of them when fewer are.
- dropout: a sampled client drops out mid-round with probability ``dropout``.
- speed tiers: ``speed_tiers`` is a list of ``{fraction, samples_per_second}`` (fractions summing to
  1; a tier holds its fraction of the clients rounded to the nearest, the clients left over going to
  the largest remainders), fixed per client by the seed; a client's simulated compute time is
  ``n_j * local_epochs / samples_per_second`` times a log-normal jitter (sigma 0.25). With a deadline,
  a slow tier whose median time exceeds it reports only when its jitter is low, and over-selection
  keeps the fastest reports: its clients' data then enters training seldom (``cross_device.yaml``:
  the slowest fifth of the clients makes 2.5% of the reports).
- deadline: clients whose simulated time exceeds ``deadline_seconds`` are late (dropped).
- over-selection: ``ceil(clients_per_round * (1 + over_selection))`` clients are sampled; the
  first ``clients_per_round`` to report are kept, as production cross-device systems do.
- round time: the last kept report's time; a round short of ``clients_per_round`` reports in which a
  sampled client has not reported closes at the deadline (the server cannot tell a dropped client from
  a slow one), or without a deadline at its last report; one in which every sampled client reported
  (fewer online than ``clients_per_round``) closes at its last report, there being none to wait for.
"""
from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from simulator.context import derive_seed


@dataclass(frozen=True)
class RoundPlan:
    sampled: tuple[int, ...]     # the cohort the server picked among the online clients; all receive the round
    dropped: tuple[int, ...]
    late: tuple[int, ...]
    completed: tuple[int, ...]   # the cohort whose updates count (sorted ids)
    simulated_seconds: float     # when the server closes the round
    online: int                  # clients online in the whole population this round

    def counts(self) -> dict[str, float]:
        return {"clients/online": float(self.online),
                "clients/sampled": float(len(self.sampled)),
                # the sampled clients, all online: the name kept from when offline ones could be sampled
                "clients/available": float(len(self.sampled)),
                "clients/dropped": float(len(self.dropped)), "clients/late": float(len(self.late)),
                "clients/reporting": float(len(self.completed)),
                "time/simulated_round_seconds": self.simulated_seconds}


@dataclass(frozen=True)
class AvailabilityTrace:
    """The online clients of rounds 0..``length``-1 of a trace (rounds it lists no client in are absent
    from ``online``: a round number as large as a timestamp costs nothing), repeated over the run."""

    length: int
    online: Mapping[int, frozenset[int]]

    def online_at(self, round_index: int) -> frozenset[int]:
        return self.online.get(round_index % self.length, frozenset())


def read_trace(path: str) -> AvailabilityTrace:
    """Online clients per round from a ``round,client`` CSV; read once per version of the file (a
    trace edited between the runs of a sweep or a claim is read again)."""
    status = os.stat(path)
    return read_trace_version(path, status.st_mtime_ns, status.st_size)


@lru_cache(maxsize=8)
def read_trace_version(path: str, mtime_ns: int, size: int) -> AvailabilityTrace:
    """:func:`read_trace` of the file as it is at ``mtime_ns`` and ``size`` (the cache's key)."""
    online: dict[int, set[int]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            online.setdefault(int(row["round"]), set()).add(int(row["client"]))
    if not online:
        raise ValueError(f"{path}: availability trace has no rows (expected columns round,client)")
    if min(online) < 0:
        raise ValueError(f"{path}: round {min(online)} is negative")
    return AvailabilityTrace(max(online) + 1, {r: frozenset(clients) for r, clients in online.items()})


class Population:
    """Per-client traits (availability, speed tier) fixed by the seed, and each round's plan."""

    def __init__(self, population: Mapping[str, Any], local_epochs: int, sizes: tuple[int, ...], seed: int):
        self.config, self.local_epochs, self.seed = population, local_epochs, seed
        self.sizes = np.asarray(sizes)
        n = len(sizes)
        traits = np.random.default_rng(derive_seed(seed, "population"))
        spread = population["availability_spread"]
        self.availability = np.clip(population["availability"] + spread * traits.uniform(-1, 1, n), 0, 1)
        tiers = population["speed_tiers"]
        fractions = np.array([t["fraction"] for t in tiers], dtype=float)
        quotas = fractions / fractions.sum() * n  # the fractions sum to 1 (the scenario checks it)
        counts = np.floor(quotas).astype(int)
        # the clients left over go to the largest remainders (Hamilton's method; the first tier among equals)
        counts[np.argsort(counts - quotas, kind="stable")[: n - counts.sum()]] += 1
        tier_of_rank = np.repeat(np.arange(len(tiers)), counts)
        self.speed = np.array([t["samples_per_second"] for t in tiers], dtype=float)[
            tier_of_rank[np.argsort(traits.permutation(n))]]
        trace = population["availability_trace"]
        self.trace = read_trace(str(Path(trace).expanduser())) if trace else None

    def online_probability(self, round_index: int) -> np.ndarray:
        amplitude, period = self.config["diurnal_amplitude"], self.config["diurnal_period"]
        return np.clip(self.availability * (1 + amplitude * math.sin(2 * math.pi * round_index / period)), 0, 1)

    def plan(self, round_index: int) -> RoundPlan:
        """Round 0 (a method's setup round) takes every client, online and on time."""
        n, cfg = len(self.sizes), self.config
        if round_index == 0:
            everyone = tuple(range(n))
            return RoundPlan(everyone, (), (), everyone, 0.0, n)
        online = self.online_clients(round_index)
        rng = np.random.default_rng(derive_seed(self.seed, round_index, "cohort"))
        wanted = cfg["clients_per_round"]
        # 100 * 1.1 is 110; an over-selection past every online client (even 1e308, whose product is inf) takes them all
        size = math.ceil(round(min(wanted * (1 + cfg["over_selection"]), len(online)), 9))
        sampled = np.sort(rng.choice(online, size=size, replace=False))
        stays = rng.random(len(sampled)) >= cfg["dropout"]
        seconds = (self.sizes[sampled] * self.local_epochs / self.speed[sampled]
                   * np.exp(0.25 * rng.standard_normal(len(sampled))))
        deadline = cfg["deadline_seconds"]
        on_time = seconds <= deadline if deadline is not None else np.ones(len(sampled), dtype=bool)
        reporting = np.flatnonzero(stays & on_time)
        first = reporting[np.argsort(seconds[reporting], kind="stable")][:wanted]
        if len(first) < wanted and deadline is not None and len(reporting) < len(sampled):
            closes = float(deadline)
        else:
            closes = float(seconds[first].max()) if len(first) else 0.0
        as_ids = lambda idx: tuple(int(c) for c in np.sort(sampled[idx]))
        return RoundPlan(tuple(int(c) for c in sampled), as_ids(~stays), as_ids(stays & ~on_time), as_ids(first),
                         closes, len(online))

    def online_clients(self, round_index: int) -> np.ndarray:
        """The ids online in round ``round_index`` (sorted): the trace's, or each client with its
        probability, drawn from (seed, round) apart from the cohort's draws."""
        if self.trace is not None:
            return np.array(sorted(self.trace.online_at(round_index)), dtype=np.int64)
        draws = np.random.default_rng(derive_seed(self.seed, round_index, "online")).random(len(self.sizes))
        return np.flatnonzero(draws < self.online_probability(round_index))


@dataclass(frozen=True)
class CohortSchedule:
    """Who completes each round (a function of the seed, :meth:`Population.plan`): handed to the
    methods that need it (``DataSpec.schedule``), so none replays the population itself."""

    population: Mapping[str, Any]
    local_epochs: int
    sizes: tuple[int, ...]
    seed: int

    @classmethod
    def of(cls, scenario: Mapping[str, Any], sizes: tuple[int, ...]) -> CohortSchedule:
        return cls(dict(scenario["population"]), scenario["training"]["local_epochs"], tuple(sizes), scenario["seed"])

    def completed(self, rounds: range) -> list[tuple[int, ...]]:
        """The completing clients of each round in ``rounds``."""
        population = Population(self.population, self.local_epochs, self.sizes, self.seed)
        return [population.plan(r).completed for r in rounds]
