"""The driver of one run: data, Ray start-up (overlapped), the rounds, evaluation, the run files."""
from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from simulator.evaluation.monitor import raw_pixels, summarize_evaluations
from methods import METHODS
from methods.base import DataSpec
from simulator.context import RoundContext, freeze
from simulator.data.store import PartitionReader, prepare_partition
from simulator.federation import RunFailure, ServerFailure, ServerLost
from simulator.held_out import HeldOutImages
from simulator.population import CohortSchedule, Population
from simulator.progress import Progress
from simulator.provenance import code_version
from simulator.resources import memory_mb, process_numerics, process_start_time
from simulator.scenario import ScenarioError, fraction_suffix
from simulator.runlog import (RunLog, checkpoint_round, latest_checkpoint, new_run_dir, read_checkpoint,
                              restore_client_states, state_mismatch, write_checkpoint, write_summary)


def data_spec(partition_dir: Path, scenario: dict[str, Any]) -> DataSpec:
    """What a method is handed about the data: the partition on disk, the held-out test images,
    the cohort schedule."""
    reader = PartitionReader(partition_dir)
    sizes = tuple(int(s) for s in reader.sizes)
    return DataSpec(reader.channels, reader.image_size, reader.num_classes, sizes, HeldOutImages.of(scenario),
                    CohortSchedule.of(scenario, sizes))


class Stopped(KeyboardInterrupt):
    """SIGINT or SIGTERM reached the driver (raised by the handlers of :func:`stop_signals`);
    ``where``: when it stopped the command, for its last line."""

    def __init__(self, signal_name: str = "SIGINT", where: str = "between two runs"):
        super().__init__(signal_name)
        self.signal_name, self.where = signal_name, where


class RunStopped(Exception):
    """A run stopped by a signal: what it reached, and how to continue it."""

    def __init__(self, signal_name: str, run_dir: Path | None, last_round: int | None, rounds: int):
        self.signal_name, self.run_dir, self.last_round, self.rounds = signal_name, run_dir, last_round, rounds
        reached = ("before its first round" if last_round is None
                   else f"after round {last_round} of {rounds}")
        super().__init__(f"stopped by {signal_name} {reached}; {self.resume_hint()}")

    def resume_hint(self) -> str:
        """How to continue, and from which round: a resume goes on from the newest checkpoint, so
        the rounds played since (all of them where none was written yet) are played again."""
        if self.run_dir is None or not self.run_dir.exists():
            return "nothing was written"
        command = f"resume it with: fedssl run --resume {self.run_dir}"
        checkpoint = latest_checkpoint(self.run_dir)
        if checkpoint is None:
            return f"it has no checkpoint yet (output.checkpoint_every), so a resume starts it over; {command}"
        saved = checkpoint_round(checkpoint)
        if self.last_round is not None and saved < self.last_round:
            return f"its last checkpoint is of round {saved}, the rounds since are played again; {command}"
        return command


class stop_signals:
    """Within the block, SIGINT and SIGTERM raise :class:`Stopped` in the main thread (restored after).

    While a run plays its rounds (:meth:`at_round_ends`) the first signal is only noted: the round
    under way ends, a checkpoint of it is written, and then :class:`Stopped` is raised, so that a
    resume goes on from there (a cluster's preemption, a Ctrl-C). A second signal stops at once.
    A request noted after a run's last round stops the command before its next run (claims, sweeps).

    Python drops an exception raised while a finalizer or a weakref callback runs (it prints "Exception
    ignored in ..." and goes on), and a signal's handler runs wherever the main thread is. So a raised
    stop is also remembered, and raised again where the command checks (each round's end, each run's
    start, the end of the block) until one propagates: a signal always stops the command. Within the
    block, a dropped stop is dropped quietly (:meth:`drop_quietly`, the block's ``sys.unraisablehook``):
    its trace would stand before the command's one last line.
    """

    SIGNALS = ("SIGINT", "SIGTERM")
    received: str | None = None  # the last signal received: Ray may re-raise a bare KeyboardInterrupt
    requested: str | None = None  # a signal noted while rounds were played, not yet acted on
    raised: str | None = None  # a signal whose Stopped was raised at once (and may have been dropped)
    at_round_end = False  # whether the first signal waits for the end of the round under way

    def __enter__(self):
        stop_signals.received = stop_signals.requested = stop_signals.raised = None
        self.saved = {}
        for name in self.SIGNALS:
            number = getattr(signal, name)
            self.saved[number] = signal.signal(number, self.raise_stopped)
        self.unraisable_hook, sys.unraisablehook = sys.unraisablehook, self.drop_quietly
        return self

    def drop_quietly(self, unraisable) -> None:
        """Python's hook for an exception it drops: nothing for a stop (remembered, raised again), the
        hook the block found for any other."""
        if not isinstance(unraisable.exc_value, Stopped):
            self.unraisable_hook(unraisable)

    @staticmethod
    def raise_stopped(number, frame):
        stop_signals.received = signal.Signals(number).name
        if stop_signals.at_round_end and stop_signals.requested is None:
            stop_signals.requested = stop_signals.received
            # os.write, not print: the handler may run inside a write of the progress display
            os.write(2, f"\nfedssl: {stop_signals.received}: stopping at the end of this round, once its "
                        f"checkpoint is written (send it again to stop now)\n".encode())
            return
        stop_signals.raised = stop_signals.received
        raise Stopped(stop_signals.received)

    @staticmethod
    def pending() -> str | None:
        """The signal of a stop not yet acted on: noted during a round, or raised where it was dropped."""
        return stop_signals.requested or stop_signals.raised

    @staticmethod
    def raise_if_requested() -> None:
        """:class:`Stopped` for a signal noted, or raised and dropped, and not yet acted on."""
        if stop_signals.pending() is not None:
            raise Stopped(stop_signals.pending())

    class at_round_ends:
        """The block of a run's rounds: a first signal is noted (see :class:`stop_signals`)."""

        def __enter__(self):
            stop_signals.at_round_end = True

        def __exit__(self, *exc):
            stop_signals.at_round_end = False

    @staticmethod
    def name_of(err: KeyboardInterrupt) -> str:
        """The signal behind ``err``: its own, else the last one received, else SIGINT."""
        return getattr(err, "signal_name", None) or stop_signals.received or "SIGINT"

    def __exit__(self, exc_type, *exc):
        dropped = stop_signals.raised if exc_type is None else None  # the block ended as if no stop came
        stop_signals.requested = stop_signals.raised = None
        for number, handler in self.saved.items():
            signal.signal(number, handler)
        sys.unraisablehook = self.unraisable_hook
        if dropped is not None:
            raise Stopped(dropped, "after the command's last run ended (its results are written)")


class ray_connection_of_the_command:
    """A command runs its runs in this block (``fedssl run``; ``fedssl sweep`` and ``fedssl claim``,
    whose runs share one Ray connection: the first run connects, the next ones reuse it). A
    connection the block made is disconnected at its end, also when a signal stopped it, so that
    Ray's last log lines (its processes stopping) come before the command's own last line instead
    of after it. A connection that existed before the block (a caller's own) stays. Imports no Ray
    where none was started."""

    def __enter__(self):
        self.connected_before = self.connected()
        return self

    def __exit__(self, *exc):
        if not self.connected_before and self.connected():
            sys.modules["simulator.engine"].disconnect_ray()

    @staticmethod
    def connected() -> bool:
        """Asks Ray, not whether the engine ran: a caller's ``ray.init`` before any run is its own."""
        if "ray" not in sys.modules:  # nothing imported Ray, so nothing connected
            return False
        from simulator import engine
        return engine.ray_connected()


def start_federation(scenario: dict[str, Any]):
    """The scenario's executor: Ray actors (``executor: ray``; :func:`simulator.engine.start_federation`
    starts or joins Ray, and may play the first rounds in the driver while a local instance starts)
    or the driver's own process (``executor: in_process``, which never imports Ray); the centralized
    bound always runs there."""
    if scenario["training"]["centralized"]:
        from simulator.centralized import CentralizedFederation
        return CentralizedFederation(scenario)
    if scenario["executor"] == "in_process":
        from simulator.inprocess import InProcessFederation
        return InProcessFederation(scenario)
    from simulator import engine
    return engine.start_federation(scenario)


def run_scenario(scenario: dict[str, Any], out: str | None = None, progress: bool = True,
                 resume_dir: str | None = None) -> tuple[Path, dict]:
    """Run a resolved scenario (or continue the run in ``resume_dir`` from its newest checkpoint);
    returns the run directory and its summary. A Ray connection the run made stays
    (:class:`ray_connection_of_the_command` ends it)."""
    stop_signals.raise_if_requested()  # a signal noted after the last round of the command's previous run
    start = time.time()
    prepared: dict[str, Any] = {}

    def prepare():  # overlaps data loading and partitioning with Ray's start-up
        try:
            prepared["dir"] = prepare_partition(scenario)
        except BaseException as err:  # re-raised in the driver thread
            prepared["error"] = err

    loader = threading.Thread(target=prepare, daemon=True)
    loader.start()
    run_dir, loop = None, None
    try:
        federation = start_federation(scenario)
    except KeyboardInterrupt as err:
        raise RunStopped(stop_signals.name_of(err), None, None, scenario["training"]["rounds"]) from None
    try:
        loader.join()
        if "error" in prepared:
            raise prepared["error"]
        partition_dir = prepared["dir"]
        spec = data_spec(partition_dir, scenario)
        run_dir = Path(resume_dir) if resume_dir else new_run_dir(out, scenario)
        client_state_dir = run_dir / "client_state" if METHODS[scenario["method"]["name"]].stateful_clients else None
        federation.setup(spec, str(partition_dir), str(client_state_dir) if client_state_dir else None)
        checkpoint = latest_checkpoint(run_dir) if resume_dir else None
        resumed = None
        if resume_dir and checkpoint is None:  # killed before its first checkpoint: start over
            for partial in ("tensorboard", "client_state", "metrics.parquet"):
                shutil.rmtree(run_dir / partial, ignore_errors=True)
                if (run_dir / partial).is_file():
                    (run_dir / partial).unlink()
        if checkpoint is not None:
            resumed = read_checkpoint(checkpoint)
            if client_state_dir is not None:
                restore_client_states(checkpoint, client_state_dir)
            federation.restore(resumed["state"])
        loop = RunLoop(federation, scenario, run_dir, client_state_dir, start, resumed,
                       PartitionReader(partition_dir).heterogeneity)
        try:
            return run_dir, loop.run(progress)
        except RunFailure as err:
            checkpoint = latest_checkpoint(run_dir)
            err.last_checkpoint = str(checkpoint) if checkpoint else None
            err.run_dir = str(run_dir)
            raise
    except KeyboardInterrupt as err:
        last_round = loop.last_round if loop is not None else None
        raise RunStopped(stop_signals.name_of(err), run_dir, last_round,
                         scenario["training"]["rounds"]) from None
    finally:
        leaving_with = sys.exc_info()[1]  # the run's own stop or failure, where it ends with one
        try:
            federation.shutdown()
        except KeyboardInterrupt:  # a second signal while the actors stop (or Ray still starts)
            if leaving_with is None:
                raise
            # the run's line (the round reached, how to resume) stays the command's last


def check_checkpoint_fits(initial_state: dict[str, Any], saved: dict[str, Any], checkpoint: Path) -> None:
    """Raise ``ScenarioError`` naming ``checkpoint``'s ``state.pt`` and the key where its state does not fit
    ``initial_state``, the method's for the run's scenario (a ``scenario.yaml`` edited after the run: the
    state would be a traceback when copied into networks of other widths)."""
    if (mismatch := state_mismatch(initial_state, saved["state"])) is not None:
        key, what = mismatch
        raise ScenarioError(str(checkpoint / "state.pt"), key, f"{what}: the run's scenario.yaml describes other "
                                                                f"networks than this checkpoint holds (was it edited?)")


def first_round(scenario: dict[str, Any]) -> int:
    """0 for a method with a setup round (every client, before training), else 1."""
    method = METHODS[scenario["method"]["name"]]
    return 0 if method.has_setup_round(method.Params.from_config(scenario["method"])) else 1


def traffic_and_speed(rows: list[tuple[int, str, float, float]]) -> dict[str, float]:
    """Bytes up/down (totals, a setup round's included; per round, over the training rounds 1..T
    only, so that a method with a setup round of every client is not charged it per round),
    steady-state speed (rounds after the first), and the driver's largest resident memory sampled
    over the rounds (this run's samples, unlike VmHWM, the process's lifetime peak; but a driver that
    runs several scenarios, as a sweep does, may still hold memory its earlier runs took, so a later
    run can read a little higher than alone: 788 MiB alone, 823 third in a sweep)."""
    totals: dict[str, float] = {"bytes_up": 0.0, "bytes_down": 0.0}
    seconds, samples, rounds, driver_rss, training_bytes = 0.0, 0.0, set(), 0.0, 0.0
    for round_index, name, value, _ in rows:
        if name == "memory/driver_rss_mb":
            driver_rss = max(driver_rss, value)
        direction = name.split("/", 1)[0]
        if direction in totals:
            totals[direction] += value
            training_bytes += value if round_index >= 1 else 0.0
        if round_index >= 2 and name == "time/round_seconds":
            seconds += value
            rounds.add(round_index)
        if round_index >= 2 and name == "train/samples":
            samples += value
    all_rounds = max(1, len({r for r, n, _, _ in rows if n == "time/round_seconds" and r >= 1}))
    return {**totals, "bytes_per_round": training_bytes / all_rounds,
            "steady_seconds_per_round": seconds / len(rounds) if rounds else None,
            "steady_samples_per_second": samples / seconds if seconds else None,
            "driver_rss_mb_max": driver_rss}


def headline_tags(scenario: dict[str, Any]) -> list[str]:
    """The metrics a run is compared by (TensorBoard's HParams table): the evaluations, label-efficient
    ones included, and the training loss."""
    tags = ["eval/linear_top1", "eval/knn_top1"]
    for fraction in scenario["eval"]["label_fractions"]:
        suffix = fraction_suffix(fraction)
        tags += [f"eval/linear_top1_{suffix}", f"eval/knn_top1_{suffix}"]
    return tags + ["train/loss"]


class RunLoop:
    """The rounds, evaluations and checkpoints of a run; writes the run files.

    Everything needed to continue lives in the checkpoint: the server state (global model,
    server-side per-client memory), the metrics so far, the evaluations, and a snapshot of the
    client-state store. Client randomness derives from (seed, round, client id), so a resumed run
    ends bitwise where an uninterrupted one does.
    """

    runs_in_this_process = 0  # a process's later runs (a sweep's, a claim's) start long after its launch

    def __init__(self, federation, scenario: dict[str, Any], run_dir: Path, client_state_dir: Path | None,
                 start: float, resumed: dict[str, Any] | None, partition: dict[str, float] | None = None):
        self.federation, self.scenario, self.run_dir = federation, scenario, run_dir
        self.partition = partition  # its heterogeneity (Partition.heterogeneity), for the summary
        self.first_in_process = RunLoop.runs_in_this_process == 0
        RunLoop.runs_in_this_process += 1
        self.client_state_dir = client_state_dir
        resumed = resumed or {}
        self.elapsed_before = resumed.get("elapsed", 0.0)
        self.start = start - self.elapsed_before
        self.evals: dict[int, dict[str, float]] = resumed.get("evals", {})
        self.time_to_round1 = resumed.get("time_to_round1")
        self.launch_to_round1 = resumed.get("launch_to_round1")
        self.next_round = resumed["round"] + 1 if resumed else first_round(scenario)
        self.last_round = resumed["round"] if resumed else None  # the last round whose server step is done
        self.log = RunLog(run_dir, self.start, resumed.get("rows"), purge_step=self.next_round if resumed else None)
        if not resumed:
            self.log.log_scenario(scenario, headline_tags(scenario))
        # the numerics of every session that computed part of this run (a resumed run may have
        # begun on another machine): carried in the checkpoints, the summary names them all
        self.numerics: set[str] = set(resumed.get("numerics", ()))
        self.pool_numerics: dict[str, set[str]] = {}  # this session's, per worker pool (mixed_pools_note)
        # likewise the code of every session (simulator.provenance): a resume under a later commit is said
        self.code: list[str] = sorted(set(resumed.get("code", ())) | {code_version()})
        self.eval_enabled = scenario["eval"]["enabled"]
        self.hparams = freeze(scenario)
        self.pending: dict[int, Any] = {}
        # the raw-pixel reference (simulator.evaluation.monitor.raw_pixels): evaluated once, beside round 0
        self.pixels: dict[str, float] | None = resumed.get("pixels")
        self.pixels_pending: Any = None
        self.checkpointed: int | None = None  # the round of this session's newest checkpoint
        # the round-0 networks are taken now and evaluated after round 1, not to slow the start
        self.initial_networks = federation.networks_now() if self.eval_enabled and 0 not in self.evals else None

    def numerics_so_far(self) -> list[str]:
        """The numerics of this session's processes (the driver, which hosts or sits beside the server
        and the evaluator, and those of each worker pool: the federation's ``pool_numerics``) and of
        the sessions before a resume, sorted."""
        for pool, numerics in self.federation.pool_numerics().items():
            self.pool_numerics.setdefault(pool, set()).update(numerics)
        self.numerics.update({process_numerics(), *(n for numerics in self.pool_numerics.values() for n in numerics)})
        return sorted(self.numerics)

    def collect_evals(self, wait: bool) -> None:
        for done in sorted(self.pending):
            if wait or self.federation.ready(self.pending[done]):
                self.evals[done], logged = summarize_evaluations(self.federation.result(self.pending.pop(done)))
                self.log.log(done, logged)
        if self.pixels_pending is not None and (wait or self.federation.ready(self.pixels_pending)):
            self.pixels, _ = summarize_evaluations(self.federation.result(self.pixels_pending))
            self.pixels_pending = None
            self.log.log(0, {f"reference/pixels/{m}": v for m, v in self.pixels.items()})

    def checkpoint(self, round_index: int) -> None:
        self.checkpointed = round_index
        self.collect_evals(wait=True)
        write_checkpoint(self.run_dir, round_index, {
            "state": self.federation.state(), "rows": self.log.rows, "evals": self.evals, "pixels": self.pixels,
            "time_to_round1": self.time_to_round1, "launch_to_round1": self.launch_to_round1,
            "elapsed": time.time() - self.start, "numerics": self.numerics_so_far(), "code": self.code},
            self.client_state_dir)

    def play_round(self, r: int, population: Population, display: Progress) -> None:
        """Round ``r``: the federation's round, its log, the evaluations due, a checkpoint if due."""
        scenario, federation = self.scenario, self.federation
        rounds, eval_every = scenario["training"]["rounds"], scenario["eval"]["every"]
        plan = population.plan(r)
        began = time.time()
        metrics = federation.run_round(RoundContext(r, rounds, plan.completed, scenario["seed"], self.hparams,
                                                    unreported=tuple(sorted(set(plan.sampled) - set(plan.completed)))))
        self.last_round = r
        metrics.update({"time/round_seconds": time.time() - began, **plan.counts(),
                        "memory/driver_rss_mb": memory_mb()["rss_mb"]})
        self.log.log(r, metrics)
        if r == 1:
            self.time_to_round1 = time.time() - self.start
            launched = process_start_time()
            self.launch_to_round1 = (time.time() - launched if launched and not self.elapsed_before
                                     and self.first_in_process else None)
        if self.initial_networks is not None and r >= 1:
            self.pending[0] = federation.submit_eval(self.initial_networks)
            self.initial_networks = None
        if (self.eval_enabled and scenario["eval"]["pixel_reference"] and r >= 1 and self.pixels is None
                and self.pixels_pending is None):
            self.pixels_pending = federation.submit_eval(raw_pixels())
        if self.eval_enabled and r >= 1 and (r % eval_every == 0 or r == rounds):
            self.pending[r] = federation.submit_eval()
        self.collect_evals(wait=False)
        if r >= 1 and (r % scenario["output"]["checkpoint_every"] == 0 or r == rounds):
            self.checkpoint(r)
        self.log.flush()
        display.show(r, metrics, self.evals[max(self.evals)] if self.evals else {}, max(self.evals, default=None))

    def heal_until_alive(self, lost: ServerLost) -> int:
        """:meth:`heal`, again where the new server dies too while it is being restored (a
        ``ServerFailure`` once it has been replaced ``MAX_SERVER_RESTARTS`` times)."""
        while True:
            try:
                return self.heal(lost)
            except ServerLost as again:
                lost = again

    def heal(self, lost: ServerLost) -> int:
        """A new parameter server from the newest checkpoint (or from the start, where there is
        none yet), the client-state store and the logs rewound with it; returns the round to play
        next. The rounds since are played again and, deterministic, give the fault-free result."""
        checkpoint = latest_checkpoint(self.run_dir)
        if self.federation.server_restarts >= self.MAX_SERVER_RESTARTS:
            raise ServerFailure(f"{lost}; it kept dying ({self.federation.server_restarts} restarts)")
        payload = None
        if checkpoint is not None:
            try:
                payload = read_checkpoint(checkpoint)
            except (OSError, ScenarioError) as err:
                raise ServerFailure(f"{lost} and its checkpoint {checkpoint} cannot be read ({err})") from None
        self.federation.replace_server()
        self.pending.clear()
        self.pixels_pending = None
        if payload is None:  # no checkpoint yet: from the beginning
            if self.client_state_dir is not None:
                shutil.rmtree(self.client_state_dir, ignore_errors=True)
                self.client_state_dir.mkdir(parents=True)
            self.log.rewind([], purge_step=0)
            self.log.log_scenario(self.scenario, headline_tags(self.scenario))
            self.evals, self.pixels = {}, None
            self.initial_networks = self.federation.networks_now() if self.eval_enabled else None
            self.last_round = None
            return first_round(self.scenario)
        self.federation.restore(payload["state"])
        if self.client_state_dir is not None:
            restore_client_states(checkpoint, self.client_state_dir)
        self.log.rewind(payload["rows"], purge_step=payload["round"] + 1)
        self.evals = dict(payload["evals"])
        self.pixels = payload.get("pixels")
        self.last_round = payload["round"]
        return payload["round"] + 1

    MAX_SERVER_RESTARTS = 3

    def stop_after(self, r: int) -> None:
        """A signal came during round ``r``: checkpoint it (unless that was due anyway), then stop."""
        if self.checkpointed != r:
            self.checkpoint(r)
        self.log.flush()
        stop_signals.raise_if_requested()

    def run(self, progress: bool) -> dict:
        scenario, federation = self.scenario, self.federation
        rounds = scenario["training"]["rounds"]
        display = Progress(rounds, progress, first_round=self.next_round, elapsed_before=self.elapsed_before)
        population = Population(scenario["population"], scenario["training"]["local_epochs"],
                                federation.spec.client_sizes, scenario["seed"])
        r = self.next_round
        with stop_signals.at_round_ends():
            while True:
                try:
                    while r <= rounds:
                        self.play_round(r, population, display)
                        if r < rounds and stop_signals.pending() is not None:
                            self.stop_after(r)
                        r += 1
                    self.collect_evals(wait=True)
                    break
                except ServerLost as lost:
                    r = self.heal_until_alive(lost)
        self.log.close()
        summary = {"name": scenario["name"], "method": scenario["method"]["name"],
                   "initial": self.evals.get(0), "final": self.evals[max(self.evals)] if self.evals else None,
                   "pixels": self.pixels, "partition": self.partition,
                   "rounds_completed": rounds, "wall_seconds": time.time() - self.start,
                   "seconds_to_end_of_round_1": self.time_to_round1,
                   "seconds_from_launch_to_end_of_round_1": self.launch_to_round1,
                   "worker_restarts": federation.worker_restarts, "server_restarts": federation.server_restarts,
                   "evaluator_restarts": federation.evaluator_restarts, "worker_nodes": federation.worker_nodes(),
                   "numerics": self.numerics_so_far(), "code": self.code,
                   "rounds_while_ray_started": federation.rounds_while_ray_started,
                   "peak_memory_mb": federation.peak_memory_mb(), **traffic_and_speed(self.log.rows)}
        # a method's server metrics named "summary/<key>" land in the summary (the latest value)
        summary.update({name.removeprefix("summary/"): value for _, name, value, _ in
                        sorted(self.log.rows, key=lambda row: row[0]) if name.startswith("summary/")})
        write_summary(self.run_dir, summary)
        note = mixed_pools_note(self.pool_numerics)
        if note:
            print(f"fedssl: note: {self.run_dir}: {note}", file=sys.stderr, flush=True)
        return summary


def mixed_pools_note(pool_numerics: dict[str, set[str]]) -> str | None:
    """What a run whose clients of one worker pool were simulated with different numerics (nodes of
    two kinds, or a cap set in some processes only) must be told: which process simulated which client
    (the number of workers, their placement) decided its results, so another run need not repeat them
    bitwise; None where each pool computed one way."""
    mixed = [f"{pool}: {'; '.join(sorted(numerics))}" for pool, numerics in sorted(pool_numerics.items())
             if len(numerics) > 1]
    if not mixed:
        return None
    return (f"the clients of a worker pool were simulated with different numerics ({' / '.join(mixed)}), so "
            f"the results depend on which process simulated which client (the number of workers, where Ray "
            f"placed them), and another run need not repeat them bitwise (README, \"On a Ray cluster\")")
