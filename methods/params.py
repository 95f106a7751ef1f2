"""A method's parameters: one typed, frozen object per method (as pfl-research's ``FedProxParams``).

A method declares ``Params``, a frozen dataclass of its ``method:`` keys with their defaults
(composed from the parts it uses: the server optimiser's, each extension's); the scenario validator
accepts exactly those keys, each of its default's type (:meth:`Params.defaults`), and the method's
``param_rules`` check the values, one way for every method (``Method.check_params``). Lists in a
scenario become tuples; a list of records (Hetero-SSFL's ``tiers``), declared with :func:`records`, is
checked by :func:`simulator.records.check_records` and becomes a tuple of frozen records.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from simulator.records import Field


def _frozen(value: Any) -> Any:
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def _thawed(value: Any) -> Any:
    return [_thawed(v) for v in value] if isinstance(value, (list, tuple)) else value


def records(record_type: type, fields: Mapping[str, Field], *, distinct: str | None = None) -> Any:
    """A parameter holding a list of records, empty by default: a scenario writes mappings of
    ``fields`` (``distinct``: a field no two share), the parameters hold ``record_type(**mapping)``."""
    return dataclasses.field(default=(), metadata={"records": (record_type, fields, distinct)})


@dataclass(frozen=True)
class Params:
    """Base of every method's parameters (none)."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Each key's default, as a scenario writes it (tuples as lists)."""
        out = {}
        for field in dataclasses.fields(cls):
            default = field.default_factory() if field.default is dataclasses.MISSING else field.default
            out[field.name] = _thawed(default)
        return out

    @classmethod
    def record_lists(cls) -> dict[str, tuple[type, Mapping[str, Field], str | None]]:
        """Each list-of-records parameter (:func:`records`): (record type, fields, distinct field)."""
        return {f.name: f.metadata["records"] for f in dataclasses.fields(cls) if "records" in f.metadata}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Params:
        """The parameters of a resolved ``method:`` section (its ``name`` and unknown keys ignored;
        its record lists already checked)."""
        record_lists = cls.record_lists()
        values = {}
        for field in dataclasses.fields(cls):
            if field.name not in config:
                continue
            if field.name in record_lists:
                values[field.name] = tuple(record_lists[field.name][0](**item) for item in config[field.name])
            else:
                values[field.name] = _frozen(config[field.name])
        return cls(**values)


@dataclass(frozen=True)
class ServerOptimizerParams(Params):
    """The server optimiser of weight averaging (:mod:`methods.weight_averaging`)."""

    server_optimizer: str = "avg"
    server_lr: float = 1.0
    server_betas: tuple[float, float] = (0.9, 0.999)
    server_eps: float = 1e-8


SERVER_OPTIMIZERS = ("avg", "adam")


def server_optimizer_rules(config: ServerOptimizerParams) -> list[tuple[str, bool, str]]:
    """The rules of the server optimiser's keys, for the ``param_rules`` of every method that
    averages weights."""
    betas = config.server_betas
    return [
        ("server_optimizer", config.server_optimizer in SERVER_OPTIMIZERS, f"one of {', '.join(SERVER_OPTIMIZERS)}"),
        ("server_lr", config.server_lr > 0, "a positive number"),
        ("server_betas", len(betas) == 2 and all(0 <= b < 1 for b in betas), "two numbers in [0, 1), [beta1, beta2]"),
        ("server_eps", config.server_eps > 0, "a positive number"),
    ]
