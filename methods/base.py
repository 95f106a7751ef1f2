"""The method interface: a federated method is a server step and a client step.

The engine decides where things run; a method only says what flows. Everything here is plain
Python/PyTorch and runs in-process (no Ray), so a client step can be profiled or run on a GPU
machine by itself.

Payloads are dicts keyed by *payload kind* (``"weights"``, ``"correlation"``, ``"centroids"``,
``"representations"``, ``"heads"``...): the engine accounts the bytes of each kind. ``Stats`` keys
are ``"<kind>/<name>"`` for the same reason.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping

import torch
from torch import nn

from methods.params import Params
from simulator.augment import AugmentConfig
from simulator.context import RoundContext
from simulator.records import RecordError, check_records, out_of_float32
from simulator.stats import Stats


@dataclass(frozen=True)
class DataSpec:
    """What a method is handed about the data: what it needs to build its models and, from the
    runtime, the inputs a method may use instead of reading other scenario sections or loading data:
    ``held_out`` (unlabelled server-side images no client holds and no evaluation tests on,
    ``simulator.held_out.HeldOutImages``: ``take(count)``, ``available()``) and ``schedule`` (who
    completes each round, ``simulator.population.CohortSchedule``: ``completed(rounds)``)."""

    channels: int
    image_size: int
    num_classes: int
    client_sizes: tuple[int, ...]
    held_out: Any = None
    schedule: Any = None


@dataclass
class ClientData:
    """One client's partition: only an id and its samples (labels are for supervised objectives)."""

    client_id: int
    images: torch.Tensor  # uint8 [n, C, H, W]
    labels: torch.Tensor  # int64 [n]


@dataclass
class ClientUpload:
    """What one client sends back.

    ``stats``: the summable part (weights x n_j...), reduced by workers and server.
    ``record``: the per-client part the server needs individually (a correlation matrix, local
    centroids, a UV row), keyed by payload kind.
    ``metrics``: small scalars for logging (e.g. ``loss``).
    ``client_state``: new persistent state of a stateful client (written to the client-state store).
    ``sparse_rows``: see :meth:`bytes_by_kind`.
    """

    stats: Stats | None = None
    record: dict[str, Any] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    client_state: Any = None
    sparse_rows: tuple[str, ...] = ()  # stats keys of matrices with one nonzero row: one row is sent

    def bytes_by_kind(self) -> dict[str, int]:
        """Bytes this client would send over the network, per payload kind (float32 tensors); a
        ``sparse_rows`` matrix counts one row (its zero rows are an artefact of summable aggregation)."""
        out: dict[str, int] = {}
        if self.stats is not None:
            for key, value in self.stats.sums.items():
                kind = key.split("/", 1)[0]
                sent = value.shape[1] if key in self.sparse_rows else value.numel()
                out[kind] = out.get(kind, 0) + 4 * sent
        for kind, value in (self.record or {}).items():
            out[kind] = out.get(kind, 0) + payload_nbytes(value)
        return out


def payload_nbytes(obj: Any) -> int:
    """Bytes of the tensors in a nested payload (dicts, lists, tuples of tensors)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, Mapping):
        return sum(payload_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(payload_nbytes(v) for v in obj)
    return 0


def evaluated_networks(online: nn.ModuleDict) -> nn.ModuleDict:
    """The encoder and, where there is one, the projector of ``online`` (see :meth:`Method.eval_network`)."""
    return nn.ModuleDict({name: online[name] for name in ("encoder", "projector") if name in online})


class ParamError(ValueError):
    """A method parameter breaks one of its method's rules: ``method.KEY: expected ..., got ...``."""

    def __init__(self, key: str, message: str):
        super().__init__(f"method.{key}: {message}")
        self.key, self.message = key, message


Rule = tuple[str, bool, str]  # (key, whether the value is acceptable, what is expected)


class Method:
    """Base class of federated methods. Subclasses set ``name`` and ``Params``.

    ``Params`` (:mod:`methods.params`) is the frozen dataclass of the method-specific scenario keys
    (under ``method:``) with their defaults; ``params`` is its defaults as a scenario writes them,
    which the scenario validator accepts besides ``name``, each of its default's type.
    ``param_rules`` states what values are acceptable; ``check_params`` applies them, one way for
    every method, when a scenario is resolved (before anything runs) and when a method is built.
    The method's ``config`` is its ``Params`` object.
    """

    name: ClassVar[str]
    Params: ClassVar[type[Params]] = Params
    params: ClassVar[dict[str, Any]] = {}
    stateful_clients: ClassVar[bool] = False
    centralizable: ClassVar[bool] = False  # ``training.centralized`` may train it on the union of the data

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.params = cls.Params.defaults()

    @classmethod
    def has_setup_round(cls, config: Params) -> bool:
        """Whether the run starts with round 0, a setup round of every client before any training,
        under the method's parameters ``config`` (none here)."""
        return False

    def __init__(self, scenario: Mapping[str, Any], spec: DataSpec):
        self.scenario = scenario
        self.spec = spec
        self.check_params(scenario["method"], scenario)
        self.config = self.Params.from_config(scenario["method"])
        self.augment_config = AugmentConfig.from_scenario(scenario["augment"])  # the clients' views (T)
        # a second view's (T', of a method that draws one: :meth:`second_view`): augment_prime's keys changed
        self.augment_prime_config = AugmentConfig.from_scenario({**scenario["augment"], **scenario["augment_prime"]})

    @classmethod
    def second_view(cls, config: Params) -> bool:
        """Whether local training augments a second view of a sample, T' (``augment_prime``), beside
        T (``augment``) under the method's parameters ``config`` (not here)."""
        return False

    @classmethod
    def param_rules(cls, config: Params, scenario: Mapping[str, Any]) -> list[Rule]:
        """The rules of this method's parameters, in the order they are checked (none here)."""
        return []

    @classmethod
    def check_data(cls, config: Params, held_out: Any) -> None:
        """Raise :class:`ParamError` for a parameter ``config`` holds that does not fit the data
        (checked before a run starts, once the data are at hand; none here); ``held_out`` as in
        :class:`DataSpec`."""

    @classmethod
    def held_out_images(cls, config: Params) -> int:
        """How many of the held-out test images (``DataSpec.held_out``) the method trains on (none here)."""
        return 0

    @classmethod
    def labelled_train_indices(cls, scenario: Mapping[str, Any], partition: Callable[[], Any]) -> Any:
        """Sorted train-set indices of the only labels the method's clients see (a semi-supervised
        run's labelled subset, an array), on which the evaluator then trains its probe; None: all
        labels. ``partition()`` builds the run's client partition."""
        return None

    @classmethod
    def check_params(cls, config: Mapping[str, Any], scenario: Mapping[str, Any]) -> None:
        """Raise :class:`ParamError` for the first malformed record list, then for the first rule the
        ``method:`` section ``config`` breaks."""
        for key, (_, fields, distinct) in cls.Params.record_lists().items():
            try:
                check_records(config.get(key, ()), fields, distinct=distinct)
            except RecordError as err:
                raise ParamError(key + err.where, err.message) from None
        for key in cls.Params.defaults():  # no method's number is infinite or NaN (the rules compare finite ones)
            value = config.get(key)
            numbers = value if isinstance(value, (list, tuple)) else [value]
            if any(isinstance(v, float) and not math.isfinite(v) for v in numbers):
                expected = "finite numbers" if numbers is value else "a finite number"
                raise ParamError(key, f"expected {expected}, got {value!r}")
            if (too_large := next(filter(None, map(out_of_float32, numbers)), None)) is not None:
                raise ParamError(key, f"expected {too_large}, got {value!r}")
        for key, ok, expected in cls.param_rules(cls.Params.from_config(config), scenario):
            if not ok:
                raise ParamError(key, f"expected {expected}, got {config[key]!r}")

    def phases(self, round_index: int) -> tuple[str, ...]:
        """The passes of a round, in order: ``("train",)``, or ``("share", "train")`` for a method
        whose clients first upload records (e.g. FedSC's correlation matrices) that the server takes
        in before any of them trains; the setup round may be ``("share",)``. Every pass runs the
        same cohort; a client receives each broadcast kind once per round."""
        return ("train",)

    # ---- server side -------------------------------------------------------------------------
    def init_state(self) -> dict[str, Any]:
        """The global state before the first round (deterministic in the scenario seed)."""
        raise NotImplementedError

    def broadcast(self, state: dict[str, Any], ctx: RoundContext) -> dict[str, Any]:
        """What every client of the round receives, keyed by payload kind."""
        raise NotImplementedError

    def client_extra(self, state: dict[str, Any], client_id: int, ctx: RoundContext) -> dict[str, Any] | None:
        """What only this client receives (e.g. FedSC's aggregate of the other clients' correlation
        matrices), or ``None``."""
        return None

    def server_update(self, state: dict[str, Any], total: Stats | None,
                      records: dict[int, dict[str, Any]], ctx: RoundContext
                      ) -> tuple[dict[str, Any], dict[str, float]]:
        """The next global state from the round's summed uploads and per-client records.

        ``total`` is ``None`` when no client completed the round. Returns (state, metrics).
        """
        raise NotImplementedError

    def eval_network(self, state: dict[str, Any]) -> nn.ModuleDict:
        """The networks to evaluate: ``"encoder"``, whose backbone features are evaluated (kNN,
        linear probe), and, where the objective has one, ``"projector"``, on whose output of those
        features a second kNN runs (``knn_projector_top1``, the FedSC reference code's monitor)."""
        raise NotImplementedError

    def eval_networks(self, state: dict[str, Any], load_client_state: Callable[[int], Any]
                      ) -> dict[str, nn.ModuleDict]:
        """Networks to evaluate (as :meth:`eval_network` gives them), by label: ``"global"``, or
        ``"<group>/<name>"`` for per-client models (e.g. ``"small_cnn/client_7"``), which are
        reported per label, as mean and spread per group, and as the mean over all.
        ``load_client_state(cid)`` reads the client-state store (``None`` for a client that never ran)."""
        return {"global": self.eval_network(state)}

    def client_pool(self, client_id: int) -> str | None:
        """The worker pool (``ray.worker_pools`` name) that should simulate this client, e.g. the
        pool with the bigger GPU share for clients with the bigger model; None: the first pool."""
        return None

    # ---- client side -------------------------------------------------------------------------
    def make_workspace(self, device: torch.device) -> Any:
        """Preallocated models and buffers a worker reuses for every client it simulates."""
        raise NotImplementedError

    def client_update(self, workspace: Any, broadcast: dict[str, Any], extra: dict[str, Any] | None,
                      data: ClientData, ctx: RoundContext, client_state: Any = None) -> ClientUpload:
        """One client's local work for the round: a plain function of its inputs."""
        raise NotImplementedError
