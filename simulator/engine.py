"""The Ray engine: worker actors simulate clients, the parameter server runs the method's
aggregation (in the driver, or in an actor of its own with ``ray.server: actor``), an evaluator
(a thread of the driver, or an actor with ``ray.evaluator: actor``) measures the encoder while
training goes on.

Per round: the server builds the broadcast once into the object store (plus per-share extras),
each worker simulates its share of the cohort in its preallocated workspace and returns one summed
upload, and the server reduces the worker sums. Only this module imports Ray.
"""
from __future__ import annotations

import ctypes
import logging
import math
import os
import queue
import signal
import socket
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, NoReturn

import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from simulator.evaluation.monitor import evaluate_networks, load_eval_data
from methods import build_method
from methods.base import DataSpec
from simulator.client_store import ClientStateStore, dumps, loads
from simulator.context import RoundContext
from simulator.data.store import PartitionReader, prepare_partition
from simulator.federation import (PartitionMismatch, RunFailure, Server, ServerFailure, ServerLost, WorkerFailure,
                                  WorkerResult, WorkersLost, bytes_down_metrics, prepare_worker_device, route_cohort,
                                  run_passes, simulate_clients, worker_device, worker_pools)
from simulator.resources import memory_mb, pin_thread_count, process_numerics, threads


def start_ray(address: str | None) -> None:
    """Join ``address`` (``auto``: the cluster this machine belongs to) or, for None, start a local
    instance of this run's own (``ray.init()`` alone would join any Ray instance already running on
    the machine); ``$RAY_ADDRESS``, as ``ray job submit`` sets it, is joined. A process already
    connected (a caller's own connection, or a command's earlier run) stays on its instance."""
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    if address is None:
        address = os.environ.get("RAY_ADDRESS", "local")
    # ray.init replaces the SIGTERM handler (with sys.exit); a caller's own handler (the command
    # line's clean stop) is put back, a default one is left to Ray. From another thread it sets
    # none and warns that it does not: the driver's handler stays, so that warning is dropped; but
    # Ray's core worker still installs Abseil's failure handler for SIGTERM in the process (it
    # prints a stack and aborts the driver), so the process's own SIGTERM action is put back.
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if in_main_thread else None
    ray_worker_log = logging.getLogger("ray._private.worker")
    ray_worker_log.addFilter(no_sigterm_warning)
    ray_auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
    ray_auth_log.addFilter(no_token_auth_enabled_notice)
    # A run's own instance starts no idle worker processes ahead: Ray prestarts one per CPU, a run
    # starts its actors' processes itself, and each spare held ~77 MiB and ~0.5 s of a core here.
    # Its workers keep the driver's priority: Ray lowers theirs by 15, so that any process at the
    # driver's (Ray's own, another program) takes a core first and the round waits on the slowed
    # worker (peer bench beside another job: a 5-client share 1.0 s on the actor, 0.62 s on the driver).
    own_instance = ({"_system_config": {"prestart_worker_first_driver": False, "worker_niceness": 0}}
                    if address == "local" else {})
    try:
        with native_signal_action(signal.SIGTERM, restore=not in_main_thread):
            ray.init(address=address, logging_level=logging.WARNING, include_dashboard=False, **own_instance)
    finally:
        ray_worker_log.removeFilter(no_sigterm_warning)
        ray_auth_log.removeFilter(no_token_auth_enabled_notice)
    if callable(previous):
        signal.signal(signal.SIGTERM, previous)


def actor_cpus(scenario: dict) -> float:
    """The CPUs the run's worker actors hold together for the whole run: every slot of every pool but
    the driver's own (``ray.driver_simulates``: the last slot of the first pool without GPUs)."""
    pools = list(worker_pools(scenario).values())
    total = sum(pool["count"] * pool["num_cpus"] for pool in pools)
    driver_pool = next((pool for pool in pools if pool["num_gpus"] == 0), None)
    if scenario["ray"]["driver_simulates"] and driver_pool is not None and driver_pool["count"] > 0:
        total -= driver_pool["num_cpus"]
    return total


def unreachable_address(scenario: dict, timeout: float = 5.0) -> str | None:
    """Why the Ray cluster at ``ray.address`` (``HOST:PORT`` or ``ray://HOST:PORT``) cannot be joined,
    in a line, where nothing accepts a connection there within ``timeout`` seconds; else None
    (``auto``, ``local``, no address, or this process already connected). ``ray.init`` would retry such an
    address for minutes without a word a researcher could act on."""
    address = scenario["ray"]["address"]
    if not address or address in ("auto", "local") or ray.is_initialized():
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return f"expected auto, local, HOST:PORT or ray://HOST:PORT (a Ray cluster's head), got {address!r}"
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        return (f"nothing answers at {host}:{port} ({err.strerror or err}); expected the address of a running "
                f"Ray cluster's head (ray start --head, or ray up cluster.yaml), or auto")
    return None


def own_instance_room(scenario: dict) -> tuple[str, str] | None:
    """Where a Ray run would start a local Ray instance of its own (no ``ray.address``, no
    ``$RAY_ADDRESS``, this process not connected), why its worker actors could never all be placed
    there: the scenario key to change (``ray.worker_pools`` where set, else ``ray.num_workers`` for
    CPUs, ``ray.worker.num_gpus`` for GPUs) and a line; else None. An actor that finds no CPUs left
    waits for them, and its share with it: without ``ray.share_timeout_seconds`` the run would wait
    for ever."""
    if scenario["ray"]["address"] or os.environ.get("RAY_ADDRESS") or ray.is_initialized():
        return None
    from ray._private.utils import get_num_cpus  # the CPUs ray.init gives a local instance by default
    needed = {"CPUs": actor_cpus(scenario),
              "GPUs": sum(pool["count"] * pool["num_gpus"] for pool in worker_pools(scenario).values())}
    here = {"CPUs": get_num_cpus(), "GPUs": torch.cuda.device_count()}  # as Ray counts them, CUDA_VISIBLE_DEVICES too
    short = next((kind for kind in needed if needed[kind] > here[kind]), None)
    if short is None:
        return None
    key = ("ray.worker_pools" if scenario["ray"]["worker_pools"]
           else "ray.num_workers" if short == "CPUs" else "ray.worker.num_gpus")
    return key, (f"expected worker actors that fit the {here[short]} {short} of this machine (the run starts a Ray "
            f"instance of its own), got actors holding {needed[short]:g} {short} for the whole run (the driver's "
            f"own slot holds none); fewer workers or {short} a worker, or a cluster's ray.address")


def seconds_until(deadline: float) -> float | None:
    """``ray.get``'s timeout for a share due at ``deadline`` (``time.monotonic()``; inf: none)."""
    return None if deadline == math.inf else max(0.0, deadline - time.monotonic())


def ray_connected() -> bool:
    """Whether the process is connected to Ray (:class:`simulator.run.ray_connection_of_the_command`)."""
    return ray.is_initialized()


def disconnect_ray() -> None:
    """Disconnects the process from Ray (:class:`simulator.run.ray_connection_of_the_command`)."""
    ray.shutdown()


class native_signal_action:
    """Puts a signal's process-wide action (``sigaction``, not Python's view of it) back as it was
    on entry, where ``restore``: ``signal.signal`` can do it only from the main thread."""

    def __init__(self, number: int, restore: bool):
        self.number, self.restore = number, restore
        self.saved = ctypes.create_string_buffer(512)  # a struct sigaction (152 bytes on Linux), opaque

    def __enter__(self) -> None:
        if self.restore:
            ctypes.CDLL(None).sigaction(self.number, None, self.saved)

    def __exit__(self, *exc) -> None:
        if self.restore:
            ctypes.CDLL(None).sigaction(self.number, self.saved, None)


def no_sigterm_warning(record: logging.LogRecord) -> bool:
    """A log filter: False for Ray's "SIGTERM handler is not set" warning."""
    return "SIGTERM handler is not set" not in record.getMessage()


def no_token_auth_enabled_notice(record: logging.LogRecord) -> bool:
    """A log filter: False for Ray's notice that it enabled token authentication, its default for a
    new local instance (a WARNING line on every run's terminal, about nothing wrong); its warning
    that authentication is disabled stays."""
    return "Token authentication is enabled" not in record.getMessage()


class Worker:
    """Simulates clients one after another in one preallocated workspace; holds no client state."""

    def __init__(self, scenario: dict, pool: dict):
        self.scenario, self.pool = scenario, pool

    def setup(self, spec: DataSpec, partition_dir: str, store: "ray.actor.ActorHandle | None") -> None:
        """``partition_dir``: the driver's partition. A node that lacks it builds its own (partitions
        are deterministic in the seed and the data files, which name the cache entry): one of another
        name was cut from other files, and the worker's first share raises :class:`PartitionMismatch`
        (a setup that raised would leave a starting actor's error unread)."""
        self.mismatch = None
        if not os.path.exists(os.path.join(partition_dir, "meta.json")):
            built = prepare_partition(self.scenario)
            if built.name != Path(partition_dir).name:
                self.mismatch = PartitionMismatch(
                    f"a worker on host {socket.gethostname()} built partition {built.name} from its own data "
                    f"files under dataset.root, where the driver's is {Path(partition_dir).name}: the nodes' data "
                    f"files differ (every node needs the driver's files, or a dataset.cache_dir all nodes share)")
            partition_dir = str(built)
        self.method = build_method(self.scenario, spec)
        self.workspace = self.method.make_workspace(prepare_worker_device(self.pool["num_gpus"], self.scenario))
        self.reader = PartitionReader(partition_dir)
        self.store = store

    def numerics(self) -> str:
        """:func:`simulator.resources.process_numerics` of this worker, on its pool's device."""
        return process_numerics(worker_device(self.pool["num_gpus"]))

    @ray.method(num_returns=2)
    def run(self, broadcast: dict, extras: dict, client_ids: list[int], ctx: RoundContext
            ) -> tuple[int, WorkerResult]:
        """(number of clients simulated, their summed uploads): the small first value lets the
        driver see that the share is done, or that the worker died, without fetching the sums."""
        if self.mismatch is not None:
            raise self.mismatch
        states = None
        died = f"round {ctx.round}: the client-state store died"
        if self.store is not None:
            states = {cid: loads(blob) for cid, blob in ask_store(self.store, "get", client_ids, died).items()}
        result = simulate_clients(self.method, self.workspace, self.reader.client, broadcast, extras,
                                  client_ids, ctx, states)
        if self.store is not None:
            ask_store(self.store, "put", {cid: dumps(s) for cid, s in result.client_states.items()}, died)
            result.client_states = {}
        result.rss_mb = memory_mb()["rss_mb"]
        return len(client_ids), result


@ray.remote
class WorkerActor(Worker):
    """A worker in a process of its own, with the pool's CPUs (and GPU share)."""

    def __init__(self, scenario: dict, pool: dict):
        super().__init__(scenario, pool)
        pin_thread_count(max(1, int(pool["num_cpus"])))

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def memory(self) -> dict[str, float]:
        return memory_mb()


class WorkerInDriver:
    """A worker slot simulated by the driver itself (``ray.driver_simulates``, the default): the
    driver would otherwise sit idle through the round, so the run needs one process fewer. Its
    share runs after the actors' shares are submitted, with the pool's thread count, on copies of
    the broadcast and extras read back from the object store, as an actor's would be; exact sums
    and per-client randomness make its results those of an actor."""

    def __init__(self, scenario: dict, pool: dict):
        self.worker = Worker(scenario, pool)

    def setup(self, spec: DataSpec, partition_dir: str, store: "ray.actor.ActorHandle | None") -> None:
        self.worker.setup(spec, partition_dir, store)

    def run(self, broadcast: ray.ObjectRef, extras: ray.ObjectRef, client_ids: list[int], ctx: RoundContext
            ) -> WorkerResult:
        try:
            broadcast, extras = ray.get([broadcast, extras])
        except ray.exceptions.RayActorError:  # the parameter-server actor died before handing them out
            raise ServerLost(f"round {ctx.round}: the parameter server died") from None
        try:
            with threads(self.worker.pool["num_cpus"]):
                result = self.worker.run(broadcast, extras, client_ids, ctx)[1]
            result.rss_mb = 0.0  # the driver's memory is memory/driver_rss_mb, not a worker's
            return result
        except FloatingPointError as err:
            raise WorkerFailure(str(err)) from None


class StoreLost(RunFailure):
    """The client-state store's actor died (killed, out of memory): the run stops; a resume starts a
    new store from the last checkpoint's client states."""


def ask_store(store: "ray.actor.ActorHandle", call: str, argument: Any, died: str) -> Any:
    """The client-state store's answer to ``call(argument)``; a store that died raises
    :class:`StoreLost` with the line ``died`` (not Ray's error, which would read as the death of the
    worker or server that asked)."""
    try:
        return ray.get(getattr(store, call).remote(argument))
    except ray.exceptions.RayActorError:
        raise StoreLost(died) from None


def raise_run_failure(err: "ray.exceptions.RayTaskError") -> NoReturn:
    """Raises the :class:`RunFailure` a Ray task raised (a dead store, a server step's line) as itself,
    not Ray's wrapper and its trace; any other task error as it came."""
    if isinstance(err.cause, RunFailure):
        raise err.cause from None
    raise err


class SumsLost(RunFailure):
    """A share's sums were lost before the server step fetched them: with their node, whose
    workers' shares are simulated again; with every worker alive, the run stops (resumable)."""


class ParameterServer:
    """The parameter server: global state and the method's server step."""

    def __init__(self, scenario: dict):
        self.scenario = scenario

    def setup(self, spec: DataSpec, store: "ray.actor.ActorHandle | None") -> None:
        self.server = Server(build_method(self.scenario, spec))
        self.store = store

    def payload(self, ctx: RoundContext, shares: list[list[int]]):
        broadcast, extras, bytes_down = self.server.payload(ctx, shares)
        return (broadcast, bytes_down, *extras)

    def aggregate(self, ctx: RoundContext, bytes_down, *results: WorkerResult) -> dict[str, float]:
        return {**self.server.aggregate(ctx, list(results)), **bytes_down_metrics(bytes_down)}

    def bytes_down_without_reports(self, ctx: RoundContext) -> dict[str, int]:
        return dict(self.server.bytes_down_without_reports(ctx))

    def eval_networks(self) -> dict[str, torch.nn.ModuleDict]:
        """The networks to evaluate; a method that evaluates its clients' own networks (Hetero-SSFL)
        reads their states from the store, and a store that died raises :class:`StoreLost` (not Ray's
        error, which read as the death of the server that called it)."""
        def load_client_state(cid: int):
            if self.store is None:
                return None
            blob = ask_store(self.store, "get", [cid], "the client-state store died while the server gathered "
                             "the clients' networks to evaluate").get(cid)
            return None if blob is None else loads(blob)
        return self.server.eval_networks(load_client_state)

    def state(self) -> dict:
        return self.server.state

    def restore(self, state: dict) -> None:
        self.server.state = state

    def memory(self) -> dict[str, float]:
        return memory_mb()


class Evaluator:
    """kNN and linear-probe evaluation, single-threaded so its results do not depend on the host."""

    def __init__(self, scenario: dict):
        pin_thread_count(1)
        self.scenario = scenario
        self.data = load_eval_data(scenario)

    def evaluate(self, networks: dict[str, torch.nn.ModuleDict]) -> dict[str, dict[str, float]]:
        return evaluate_networks(networks, self.data, self.scenario)

    def memory(self) -> dict[str, float]:
        return memory_mb()


ServerActor = ray.remote(ParameterServer)
EvaluatorActor = ray.remote(Evaluator)
StoreActor = ray.remote(ClientStateStore)


class ServerInDriver:
    """The parameter server in the driver's process (``ray.server: driver``, the default): one torch
    process fewer and one actor fewer to start. It runs single-threaded, as the actor does (Ray gives
    an actor without CPUs one thread), so both hosts give bitwise the same results. It dies only with
    the driver, so there is nothing to heal (a killed driver's run resumes from its checkpoint)."""

    def __init__(self, scenario: dict):
        self.host = ParameterServer(scenario)

    def setup(self, spec: DataSpec, store: "ray.actor.ActorHandle | None") -> None:
        self.host.setup(spec, store)

    def payload(self, ctx: RoundContext, shares: list[list[int]]) -> tuple[ray.ObjectRef, dict, list[ray.ObjectRef]]:
        """(the broadcast, put once into the object store, the bytes sent down, each share's extras)."""
        with threads(1):
            broadcast, extras, bytes_down = self.host.server.payload(ctx, shares)
        return ray.put(broadcast), bytes_down, [ray.put(share_extras) for share_extras in extras]

    def bytes_down_without_reports(self, ctx: RoundContext) -> dict[str, int]:
        with threads(1):
            return self.host.bytes_down_without_reports(ctx)

    def aggregate(self, ctx: RoundContext, bytes_down: dict, results: list[ray.ObjectRef | WorkerResult]
                  ) -> dict[str, float]:
        """``results``: each share's sums, in the object store or (the driver's own share) here."""
        try:
            uploads = [result if isinstance(result, WorkerResult) else ray.get(result) for result in results]
        except ray.exceptions.ObjectLostError:
            raise SumsLost(f"round {ctx.round}: a share's sums were lost") from None
        with threads(1):
            return self.host.aggregate(ctx, bytes_down, *uploads)

    def eval_networks(self) -> ray.ObjectRef:
        """A snapshot of the networks to evaluate, in the object store (the evaluator reads it there)."""
        with threads(1):
            return ray.put(self.host.eval_networks())

    def state(self) -> dict:
        return self.host.state()

    def restore(self, state: dict) -> None:
        self.host.restore(state)

    @staticmethod
    def alive() -> bool:
        return True

    @staticmethod
    def peak_mb() -> float:
        """Counted in the driver's own figure."""
        return 0.0

    def kill(self) -> None:
        pass


class ServerInActor:
    """The parameter server in an actor on the driver's node (``ray.server: actor``): a server process
    that dies (killed, out of memory) is replaced and the run goes on from the latest checkpoint."""

    def __init__(self, scenario: dict, on_driver_node: NodeAffinitySchedulingStrategy):
        self.actor = ServerActor.options(num_cpus=0, scheduling_strategy=on_driver_node).remote(scenario)

    def setup(self, spec: DataSpec, store: "ray.actor.ActorHandle | None") -> None:
        self.actor.setup.remote(spec, store)

    def payload(self, ctx: RoundContext, shares: list[list[int]]) -> tuple[ray.ObjectRef, ray.ObjectRef, list[ray.ObjectRef]]:
        broadcast, bytes_down, *extras = self.actor.payload.options(num_returns=len(shares) + 2).remote(ctx, shares)
        return broadcast, bytes_down, extras

    def aggregate(self, ctx: RoundContext, bytes_down: ray.ObjectRef, results: list[ray.ObjectRef | WorkerResult]
                  ) -> dict[str, float]:
        try:
            return ray.get(self.actor.aggregate.remote(ctx, bytes_down, *results))
        except ray.exceptions.RayActorError:
            raise ServerLost(f"round {ctx.round}: the parameter server died") from None
        except ray.exceptions.ObjectLostError:  # an argument, a share's sums (Ray >= 2.9 raises the cause's type)
            raise SumsLost(f"round {ctx.round}: a share's sums were lost") from None
        except ray.exceptions.RayTaskError as err:  # the server step's own failure: its line, not the actor's trace
            raise_run_failure(err)

    def bytes_down_without_reports(self, ctx: RoundContext) -> dict[str, int]:
        try:
            return ray.get(self.actor.bytes_down_without_reports.remote(ctx))
        except ray.exceptions.RayActorError:
            raise ServerLost(f"round {ctx.round}: the parameter server died") from None

    def eval_networks(self) -> ray.ObjectRef:
        """The networks as they are when the call reaches the server (calls run in order)."""
        return self.actor.eval_networks.remote()

    def state(self) -> dict:
        try:
            return ray.get(self.actor.state.remote())
        except ray.exceptions.RayActorError:
            raise ServerLost("the parameter server died") from None

    def restore(self, state: dict) -> None:
        try:
            ray.get(self.actor.restore.remote(state))
        except ray.exceptions.RayActorError:
            raise ServerLost("the parameter server died") from None

    def alive(self) -> bool:
        try:
            ray.get(self.actor.memory.remote())
            return True
        except ray.exceptions.RayActorError:
            return False

    def peak_mb(self) -> float:
        return ray.get(self.actor.memory.remote())["peak_mb"]

    def kill(self) -> None:
        ray.kill(self.actor)


class EvaluatorInDriver:
    """Evaluations in a thread of the driver (``ray.evaluator: driver``, the default), one after
    another, while the rounds go on: no process of its own (a torch process holds ~580 MiB before
    any data). The thread runs torch single-threaded (with OpenMP the thread count is per thread,
    so the driver's own worker slot keeps its own), as the actor does: bitwise the same metrics.
    It is a daemon thread: a stopped run does not wait for an evaluation in flight; ``kill`` ends it
    (with the evaluation data it holds), so that a command's later runs do not pile threads up."""

    restarts = 0  # it dies only with the driver

    def __init__(self, scenario: dict):
        self.scenario, self.data = scenario, None
        self.queue: queue.Queue = queue.Queue()
        threading.Thread(target=self.serve, name="fedssl-evaluator", daemon=True).start()

    def serve(self) -> None:
        pin_thread_count(1)
        while (job := self.queue.get()) is not None:
            networks, future = job
            if future.set_running_or_notify_cancel():
                try:
                    if self.data is None:
                        self.data = load_eval_data(self.scenario)
                    if isinstance(networks, ray.ObjectRef):
                        try:
                            networks = ray.get(networks)
                        except ray.exceptions.RayActorError:
                            raise ServerLost("the parameter server died before handing out networks to "
                                             "evaluate") from None
                        except ray.exceptions.RayTaskError as err:  # the server's own failure (StoreLost)
                            raise_run_failure(err)
                    future.set_result(evaluate_networks(networks, self.data, self.scenario))
                except BaseException as err:  # handed to the caller of result()
                    future.set_exception(err)

    def submit(self, networks: "ray.ObjectRef | dict[str, torch.nn.ModuleDict]") -> Future:
        """``networks``: in the object store, or (the in-process rounds') a snapshot of the driver's own."""
        future: Future = Future()
        self.queue.put((networks, future))
        return future

    @staticmethod
    def ready(evaluation: Future) -> bool:
        return evaluation.done()

    @staticmethod
    def result(evaluation: Future) -> dict[str, dict[str, float]]:
        return evaluation.result()

    @staticmethod
    def peak_mb() -> float:
        """Counted in the driver's own figure."""
        return 0.0

    def kill(self) -> None:
        """Cancels the evaluations not yet started; the thread ends after the one in flight."""
        while not self.queue.empty():
            if (job := self.queue.get_nowait()) is not None:
                job[1].cancel()
        self.queue.put(None)


class EvaluatorInActor:
    """Evaluations in an actor on the driver's node (``ray.evaluator: actor``): a process of its
    own, replaced if it dies (the evaluation is submitted again)."""

    MAX_RESTARTS_PER_EVALUATION = 3

    def __init__(self, scenario: dict, on_driver_node: NodeAffinitySchedulingStrategy):
        self.scenario, self.on_driver_node = scenario, on_driver_node
        self.actor = self.new_actor()
        self.restarts = 0

    def new_actor(self) -> "ray.actor.ActorHandle":
        return EvaluatorActor.options(num_cpus=0, scheduling_strategy=self.on_driver_node).remote(self.scenario)

    def submit(self, networks: ray.ObjectRef) -> tuple[ray.ObjectRef, ray.ObjectRef, "ray.actor.ActorHandle"]:
        return networks, self.actor.evaluate.remote(networks), self.actor

    @staticmethod
    def ready(evaluation: tuple[ray.ObjectRef, ray.ObjectRef, "ray.actor.ActorHandle"]) -> bool:
        return bool(ray.wait([evaluation[1]], timeout=0)[0])

    def result(self, evaluation: tuple[ray.ObjectRef, ray.ObjectRef, "ray.actor.ActorHandle"]
               ) -> dict[str, dict[str, float]]:
        """The result (waits for it). A dead evaluator is replaced and the evaluation submitted
        again (to its replacement, without a second replacement, where an earlier evaluation queued
        on the same dead actor already replaced it); networks lost with a dead parameter server raise
        ServerLost."""
        networks, result, actor = evaluation
        for attempt in range(self.MAX_RESTARTS_PER_EVALUATION + 1):
            try:
                return ray.get(result)
            except ray.exceptions.RayActorError:
                try:
                    ray.get(networks)
                except ray.exceptions.RayActorError:
                    raise ServerLost("the parameter server died before handing out networks to evaluate") from None
                if attempt == self.MAX_RESTARTS_PER_EVALUATION:
                    raise
                if actor is self.actor:  # this evaluation's actor died: replace it
                    ray.kill(self.actor)
                    self.actor = self.new_actor()
                    self.restarts += 1
                actor = self.actor
                result = actor.evaluate.remote(networks)
            except ray.exceptions.RayTaskError as err:  # the server's own failure (StoreLost), handed on
                raise_run_failure(err)

    def peak_mb(self) -> float:
        return ray.get(self.actor.memory.remote())["peak_mb"]

    def kill(self) -> None:
        ray.kill(self.actor)


def start_federation(scenario: dict) -> "RayFederation | RoundsWhileRayStarts":
    """The Ray federation of ``scenario``: Ray started (or joined) here, in the calling thread, then
    its actors; or, where this run starts a local Ray instance of its own and the driver can play a
    round alone (``ray.while_starting: driver``), :class:`RoundsWhileRayStarts`. The connection
    outlives the run (a command's later runs reuse it); :class:`simulator.run.ray_connection_of_the_command`
    ends it."""
    pools = worker_pools(scenario).values()
    address = scenario["ray"]["address"] or os.environ.get("RAY_ADDRESS")
    if (scenario["ray"]["while_starting"] == "driver" and not ray.is_initialized() and address is None
            and scenario["ray"]["evaluator"] == "driver" and all(pool["num_gpus"] == 0 for pool in pools)):
        return RoundsWhileRayStarts(scenario)
    start_ray(scenario["ray"]["address"])
    return RayFederation(scenario)


class RoundsWhileRayStarts:
    """The first rounds in the driver's process while Ray starts (``ray.while_starting: driver``,
    the default): starting a local Ray instance takes seconds (~4.4 s on 2 cores) that the driver
    would otherwise wait through. A thread starts Ray and the actors; until they are there, each
    round is the in-process executor's (:mod:`simulator.inprocess`, bitwise the Ray engine's
    rounds); at the first round boundary after, the server state moves into the Ray federation
    (as a resumed run's checkpoint does) and the rounds go on there. The client-state store is the
    same directory on both sides; evaluations run in one evaluator thread of the driver throughout.
    So the results are bitwise those of ``ray.while_starting: wait``."""

    evaluator_restarts = 0  # the evaluator thread dies only with the driver

    def __init__(self, scenario: dict):
        from simulator.inprocess import InProcessFederation
        self.scenario = scenario
        self.current: "InProcessFederation | RayFederation" = InProcessFederation(scenario)
        self.rounds_while_ray_started = 0
        self.evaluator: EvaluatorInDriver | None = None
        self.started: Future = Future()  # the Ray federation, once Ray and its actors are there
        threading.Thread(target=self.start_ray_federation, name="fedssl-ray-start", daemon=True).start()

    def start_ray_federation(self) -> None:
        """Runs in its own thread, which then stays alive: Ray's processes die with the thread that
        started them."""
        try:
            start_ray(None)
            self.started.set_result(RayFederation(self.scenario))
        except BaseException as err:  # raised in the driver's thread, at the switch
            self.started.set_exception(err)
        threading.Event().wait()

    def setup(self, spec: DataSpec, partition_dir: str, client_state_dir: str | None) -> None:
        self.spec, self.setup_args = spec, (spec, partition_dir, client_state_dir)
        self.current.setup(*self.setup_args)

    def run_round(self, ctx: RoundContext) -> dict[str, float]:
        if not isinstance(self.current, RayFederation):
            if self.started.done():
                self.switch()
            else:
                self.rounds_while_ray_started += 1
        return self.current.run_round(ctx)

    MAX_SERVER_RESTARTS_AT_SWITCH = 3

    def switch(self) -> None:
        """The rounds go on in the Ray federation, from the in-process server's state. A parameter
        server actor that dies before it holds that state is replaced and given it (the state is the
        driver's: no round is played again)."""
        federation = self.started.result()
        federation.setup(*self.setup_args)
        state = self.current.state()
        while True:
            try:
                federation.restore(state)
                break
            except ServerLost as lost:
                if federation.server_restarts >= self.MAX_SERVER_RESTARTS_AT_SWITCH:
                    raise ServerFailure(f"{lost} as the rounds moved to Ray; it kept dying "
                                        f"({federation.server_restarts} restarts)") from None
                federation.replace_server()
        self.current = federation

    @property
    def worker_restarts(self) -> int:
        return self.current.worker_restarts

    @property
    def server_restarts(self) -> int:
        return self.current.server_restarts

    def replace_server(self) -> None:
        self.current.replace_server()

    def networks_now(self):
        return self.current.networks_now()

    def submit_eval(self, networks=None) -> Future:
        if self.evaluator is None:
            self.evaluator = EvaluatorInDriver(self.scenario)
        return self.evaluator.submit(networks if networks is not None else self.networks_now())

    def ready(self, evaluation: Future) -> bool:
        return self.evaluator.ready(evaluation)

    def result(self, evaluation: Future) -> dict[str, dict[str, float]]:
        return self.evaluator.result(evaluation)

    def state(self) -> dict:
        return self.current.state()

    def restore(self, state: dict) -> None:
        self.current.restore(state)

    def peak_memory_mb(self) -> dict[str, float]:
        return self.current.peak_memory_mb()

    def worker_nodes(self) -> int:
        return self.current.worker_nodes()

    def pool_numerics(self) -> dict[str, set[str]]:
        return self.current.pool_numerics()

    def shutdown(self) -> None:
        """Waits for Ray to be up (a Ray instance half started is not left behind), then stops the actors."""
        if self.evaluator is not None:
            self.evaluator.kill()
        try:
            federation = self.started.result()
        except Exception:
            return
        federation.shutdown()


class RayFederation:
    """Actors of one run and the round protocol between them.

    Actors are created first (their processes start and import while the driver prepares the
    data), then ``setup`` hands them the data; calls queue in order, so nothing waits in between.
    ``shutdown`` stops the run's actors and leaves the Ray connection to its command
    (:class:`simulator.run.ray_connection_of_the_command`).
    """

    MAX_WORKER_RESTARTS_PER_PASS = 3  # a round of FedSC (two passes) may restart up to twice this
    rounds_while_ray_started = 0  # see RoundsWhileRayStarts

    def __init__(self, scenario: dict):
        self.scenario = scenario
        # the global state, the evaluator and the client store stay on the driver's node; workers spread
        self.on_driver_node = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self.server = self.new_server()
        self.evaluator = None  # created at the first evaluation, so it does not slow the start
        self.pools = worker_pools(scenario)
        self.worker_pool = [name for name, pool in self.pools.items() for _ in range(pool["count"])]
        driver_slot = self.driver_slot()
        self.slots = [WorkerInDriver(scenario, self.pools[name]) if i == driver_slot else self.new_worker(name)
                      for i, name in enumerate(self.worker_pool)]
        self.booting: dict[int, ray.ObjectRef] = {}  # actor slot -> its setup call, until that returns
        self.store = None
        self.worker_restarts = self.server_restarts = 0

    def driver_slot(self) -> int | None:
        """The worker slot the driver simulates (``ray.driver_simulates``): the last of the first pool
        whose workers take no GPU (the driver holds none), or None."""
        if not self.scenario["ray"]["driver_simulates"]:
            return None
        for name, pool in self.pools.items():
            if pool["num_gpus"] == 0:
                return max(i for i, p in enumerate(self.worker_pool) if p == name)
        return None

    @property
    def workers(self) -> list["ray.actor.ActorHandle"]:
        """The worker actors (every slot but the driver's)."""
        return [slot for slot in self.slots if not isinstance(slot, WorkerInDriver)]

    def new_server(self) -> ServerInDriver | ServerInActor:
        if self.scenario["ray"]["server"] == "actor":
            return ServerInActor(self.scenario, self.on_driver_node)
        return ServerInDriver(self.scenario)

    def replace_server(self) -> None:
        """A new parameter server in its initial state (the run loop restores a checkpoint into it)."""
        self.server.kill()
        self.server = self.new_server()
        self.server.setup(self.spec, self.store)
        self.server_restarts += 1

    def new_worker(self, pool: str) -> "ray.actor.ActorHandle":
        resources = self.pools[pool]
        return WorkerActor.options(num_cpus=resources["num_cpus"], num_gpus=resources["num_gpus"],
                                   scheduling_strategy="SPREAD").remote(self.scenario, resources)

    def setup(self, spec: DataSpec, partition_dir: str, client_state_dir: str | None) -> None:
        """``client_state_dir``: where the store of a method with stateful clients keeps them."""
        self.spec, self.partition_dir = spec, partition_dir
        self.method = build_method(self.scenario, spec)  # the driver's copy: routing and phases
        if client_state_dir is not None:
            self.store = StoreActor.options(num_cpus=0, scheduling_strategy=self.on_driver_node).remote(client_state_dir)
        self.server.setup(spec, self.store)
        for index, slot in enumerate(self.slots):
            if isinstance(slot, WorkerInDriver):
                slot.setup(spec, partition_dir, self.store)
            else:
                self.booting[index] = slot.setup.remote(spec, partition_dir, self.store)

    def stand_in(self, index: int) -> WorkerInDriver | None:
        """The driver's own slot, when slot ``index`` is an actor of the same pool still starting
        up (its process importing torch): the driver simulates that share too, so a round does not
        wait for a process start. Exact sums and client randomness keep the results the same."""
        if index in self.booting and ray.wait([self.booting[index]], timeout=0)[0]:
            del self.booting[index]
        if index not in self.booting:
            return None
        pool = self.worker_pool[index]
        return next((slot for i, slot in enumerate(self.slots)
                     if isinstance(slot, WorkerInDriver) and self.worker_pool[i] == pool), None)

    def wait_started(self, index: int, timeout: float) -> None:
        """Until slot ``index``'s actor has started (its setup returned), for at most ``timeout``
        seconds; one that died while starting fails its next call, which replaces it, and one still
        starting after ``timeout`` (hung, or never scheduled) gets its share anyway, whose own timeout
        then kills and replaces it."""
        if index in self.booting and ray.wait([self.booting[index]], timeout=timeout)[0]:
            try:
                ray.get(self.booting.pop(index))
            except ray.exceptions.RayActorError:
                pass

    def replace_worker(self, index: int) -> None:
        """A dead worker's replacement (on any node with room); its share is simulated again."""
        self.slots[index] = self.new_worker(self.worker_pool[index])
        self.booting[index] = self.slots[index].setup.remote(self.spec, self.partition_dir, self.store)
        self.worker_restarts += 1

    def run_round(self, ctx: RoundContext) -> dict[str, float]:
        """Simulate the round's cohort and apply the server step, pass by pass (``Method.phases``);
        returns the round's metrics (traffic summed over the passes)."""
        return run_passes(self.method, self.run_phase, ctx)

    def run_phase(self, ctx: RoundContext) -> dict[str, float]:
        """One pass of the cohort: client steps on the workers, then the server step.

        A share whose worker dies (killed process, out of memory, lost node), or has not returned it
        ``ray.share_timeout_seconds`` after its submission (a hung worker, killed; a worker still
        starting gets as long again to start first), is simulated again on a new worker, and so is
        a share whose sums were lost with their node after it returned, before the server step
        fetched them; client randomness and exact sums make the result the same as without fault,
        and the client-state store takes the pass's states only once the server step has them all.
        """
        in_pool = {name: [i for i, p in enumerate(self.worker_pool) if p == name] for name in self.pools}
        routes = route_cohort(ctx.cohort, self.spec.client_sizes, self.method.client_pool,
                              {name: len(members) for name, members in in_pool.items()})
        if not routes:  # nobody reports; the online clients received the broadcast all the same
            return {"clients/completed": 0.0, **bytes_down_metrics(self.server.bytes_down_without_reports(ctx))}
        shares = [share for _, _, share in routes]
        worker_of = [in_pool[pool][slot] for pool, slot, _ in routes]
        runner = [self.stand_in(index) or self.slots[index] for index in worker_of]
        broadcast, bytes_down, extras = self.server.payload(ctx, shares)
        timeout = self.scenario["ray"]["share_timeout_seconds"]
        deadline: dict[int, float] = {}

        def submit(i: int) -> tuple["ray.ObjectRef", "ray.ObjectRef"]:
            if timeout is not None:  # a share's time counts from its submission to a started worker
                self.wait_started(worker_of[i], timeout)
            deadline[i] = time.monotonic() + (timeout if timeout is not None else math.inf)
            return self.slots[worker_of[i]].run.remote(broadcast, extras[i], shares[i], ctx)

        submitted = {i: submit(i) for i in range(len(shares)) if not isinstance(runner[i], WorkerInDriver)}
        in_driver = {i: runner[i].run(broadcast, extras[i], shares[i], ctx)  # while the actors work
                     for i in range(len(shares)) if i not in submitted}
        restarts = 0

        def simulate_again(failed: list[int]) -> None:
            nonlocal restarts
            if restarts == self.MAX_WORKER_RESTARTS_PER_PASS:
                raise WorkersLost(f"round {ctx.round}: workers kept dying or hanging (ray.share_timeout_seconds: "
                                  f"{timeout}); given up after {restarts} restarts in one pass")
            restarts += 1
            for i in failed:
                self.replace_worker(worker_of[i])
            for i in failed:
                submitted[i] = submit(i)

        while True:
            while failed := self.failed_shares(ctx, submitted, worker_of, deadline):
                simulate_again(failed)
            try:
                metrics = self.server.aggregate(ctx, bytes_down, [in_driver[i] if i in in_driver else submitted[i][1]
                                                                  for i in range(len(shares))])
                break
            except SumsLost as lost:
                dead = [i for i in submitted if not self.worker_alive(worker_of[i])]
                if not dead:  # not a lost node: nothing to simulate again
                    raise SumsLost(f"{lost}, though every worker lives") from None
                simulate_again(dead)
        if self.store is not None:
            ray.get(self.store.commit.remote())
        return metrics

    def failed_shares(self, ctx: RoundContext, submitted: dict[int, tuple], worker_of: list[int],
                      deadline: dict[int, float]) -> list[int]:
        """Waits for each submitted share's status; returns the shares whose worker died or hung (a
        hung worker is killed)."""
        failed = []
        for i, (status, _) in submitted.items():
            try:
                ray.get(status, timeout=seconds_until(deadline[i]))
            except ray.exceptions.GetTimeoutError:  # a hung worker (stopped, deadlocked): killed, replaced
                ray.kill(self.slots[worker_of[i]], no_restart=True)
                failed.append(i)
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as err:
                if not self.server.alive():  # the share's broadcast came from the lost server
                    self.settle(submitted, worker_of, deadline)
                    raise ServerLost(f"round {ctx.round}: the parameter server died") from None
                if isinstance(err, ray.exceptions.RayActorError):
                    failed.append(i)
                elif isinstance(getattr(err, "cause", None), FloatingPointError):
                    raise WorkerFailure(str(err.cause)) from None
                else:  # the share's own failure (StoreLost) as itself
                    raise_run_failure(err)
        return failed

    def settle(self, submitted: dict[int, tuple], worker_of: list[int], deadline: dict[int, float]) -> None:
        """Waits until no submitted share runs any more (a hung worker is killed), whatever each
        ended with: the run then rewinds the client-state store to its checkpoint, and a share still
        running could stage its clients' states after the rewind, into the rounds played again."""
        for i, (status, _) in submitted.items():
            try:
                ray.get(status, timeout=seconds_until(deadline[i]))
            except ray.exceptions.GetTimeoutError:
                ray.kill(self.slots[worker_of[i]], no_restart=True)
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError):
                pass

    def worker_alive(self, index: int) -> bool:
        try:
            ray.get(self.slots[index].node_id.remote())
            return True
        except ray.exceptions.RayActorError:
            return False

    def peak_memory_mb(self) -> dict[str, float]:
        """Peak resident memory of the driver (with the server and the worker slot it hosts), the server
        and evaluator actors and all worker actors."""
        workers = self.ask_live_workers("memory").values()
        evaluator = self.evaluator.peak_mb() if self.evaluator else 0.0
        return {"driver": memory_mb()["peak_mb"], "server": self.server.peak_mb(),
                "evaluator": evaluator, "workers": sum(w["peak_mb"] for w in workers)}

    def worker_nodes(self) -> int:
        """How many nodes the (live) workers run on."""
        return len(set(self.ask_live_workers("node_id").values()))

    def pool_numerics(self) -> dict[str, set[str]]:
        """Per worker pool, the distinct numerics (:func:`simulator.resources.process_numerics`) of
        the processes that simulate its clients: the driver, where it holds one of its slots, and its
        live actors (:meth:`ask_live_workers`). More than one: which process simulated which client (the
        number of workers, their placement) decides the results (:func:`simulator.run.mixed_pools_note`)."""
        pools: dict[str, set[str]] = {name: set() for name in self.pools}
        for index, slot in enumerate(self.slots):
            if isinstance(slot, WorkerInDriver):
                pools[self.worker_pool[index]].add(slot.worker.numerics())
        for index, numerics in self.ask_live_workers("numerics").items():
            pools[self.worker_pool[index]].add(numerics)
        return pools

    def ask_live_workers(self, method: str) -> dict[int, Any]:
        """Every worker actor's answer to ``method`` by its slot, but a worker lost since its last share
        (its replacement comes with the next round that gives it a share): a worker can die between
        rounds, while a checkpoint or the summary asks the workers how they run."""
        asked = {index: getattr(slot, method).remote() for index, slot in enumerate(self.slots)
                 if not isinstance(slot, WorkerInDriver)}
        answers = {}
        for index, answer in asked.items():
            try:
                answers[index] = ray.get(answer)
            except ray.exceptions.RayActorError:
                pass
        return answers

    def networks_now(self) -> ray.ObjectRef:
        """The networks to evaluate, as they are now."""
        return self.server.eval_networks()

    @property
    def evaluator_restarts(self) -> int:
        return self.evaluator.restarts if self.evaluator else 0

    def new_evaluator(self) -> EvaluatorInDriver | EvaluatorInActor:
        if self.scenario["ray"]["evaluator"] == "actor":
            return EvaluatorInActor(self.scenario, self.on_driver_node)
        return EvaluatorInDriver(self.scenario)

    def submit_eval(self, networks: ray.ObjectRef | dict | None = None):
        """Evaluate ``networks`` (default: the current ones) in the background; returns a handle
        for :meth:`ready` and :meth:`result`."""
        if self.evaluator is None:
            self.evaluator = self.new_evaluator()  # created at the first evaluation, not to slow the start
        if isinstance(networks, dict):  # the driver's own (the raw-pixel reference)
            networks = ray.put(networks)
        return self.evaluator.submit(networks if networks is not None else self.networks_now())

    def state(self) -> dict:
        return self.server.state()

    def restore(self, state: dict) -> None:
        self.server.restore(state)

    def ready(self, evaluation) -> bool:
        """Whether a submitted evaluation has finished."""
        return self.evaluator.ready(evaluation)

    def result(self, evaluation) -> dict[str, dict[str, float]]:
        """A submitted evaluation's result (waits for it)."""
        return self.evaluator.result(evaluation)

    def shutdown(self) -> None:
        self.server.kill()
        if self.evaluator is not None:
            self.evaluator.kill()
        for actor in [*self.workers, getattr(self, "store", None)]:
            if actor is not None:
                ray.kill(actor)
