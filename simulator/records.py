"""Lists of records in a scenario, checked one way: ``population.speed_tiers``, ``ray.worker_pools``
and Hetero-SSFL's ``method.tiers``.

A record list declares its fields (:class:`Field`: a predicate and what it expects); every item must
be a mapping of exactly those fields, each value passing its field's predicate, one field's values
may be required distinct and the list non-empty. The first problem raises :class:`RecordError`
naming where it is (``[2].count``), which the scenario loader and a method's parameter check turn
into their one line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence


class RecordError(ValueError):
    """A record list's first problem: ``where`` (``""``, ``"[i]"`` or ``"[i].field"``) and the message."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}" if where else message)
        self.where, self.message = where, message


@dataclass(frozen=True)
class Field:
    """One field of a record: ``accepts(value)`` and what it expects, as the error line says it."""

    accepts: Callable[[Any], bool]
    expected: str


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite(value: int | float) -> bool:
    """Whether a number is finite as a float: not inf or NaN, nor an integer past float's range (YAML's
    ``1`` followed by 400 zeros, which ``math.isfinite`` raises OverflowError on)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


# the largest float32: a scenario's float that training or evaluation turns into a tensor must be within it
FLOAT32_MAX = 3.4028234663852886e38


def out_of_float32(value: Any) -> str | None:
    """What is wrong with a float no float32 holds (``expected ..., got ...`` without the value), or None."""
    if isinstance(value, float) and math.isfinite(value) and abs(value) > FLOAT32_MAX:
        return "a number within float32's range (at most 3.4e38 in size: fedssl computes in float32)"
    return None


# finite: a tier's fraction of .inf made every fraction NaN once normalised, its samples_per_second of .inf
# rounds of no time
POSITIVE_NUMBER = Field(lambda v: is_number(v) and is_finite(v) and v > 0, "a positive number")
NON_NEGATIVE_NUMBER = Field(lambda v: is_number(v) and is_finite(v) and v >= 0, "a non-negative number")
POSITIVE_INTEGER = Field(lambda v: type(v) is int and v >= 1, "a positive integer")  # an int, not a bool
STRING = Field(lambda v: isinstance(v, str), "a string")


def is_gpu_count(value: Any) -> bool:
    """A fraction of one GPU, or a whole number of GPUs (Ray places no 1.5 GPUs)."""
    return is_number(value) and is_finite(value) and value >= 0 and (value <= 1 or float(value).is_integer())


GPU_COUNT = Field(is_gpu_count, "a fraction <= 1 or a whole number of GPUs")


def one_of(choices: Sequence[str]) -> Field:
    return Field(lambda v: isinstance(v, str) and v in choices, f"one of {', '.join(choices)}")


def check_records(items: Sequence[Any], fields: Mapping[str, Field], *, distinct: str | None = None,
                  non_empty: bool = False) -> Sequence[Mapping[str, Any]]:
    """``items`` unchanged if every item is a mapping of exactly ``fields`` whose values they accept
    (``distinct``: a field no two items share; ``non_empty``: at least one item); else
    :class:`RecordError` for the first problem, in list order then field order."""
    shape = "{" + ", ".join(fields) + "}"
    if non_empty and not items:
        raise RecordError("", f"expected a non-empty list of {shape}, got []")
    seen = set()
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or set(item) != set(fields):
            raise RecordError(f"[{i}]", f"expected a mapping {shape}, got {item!r}")
        for name, field in fields.items():
            if not field.accepts(item[name]):
                raise RecordError(f"[{i}].{name}", f"expected {field.expected}, got {item[name]!r}")
        if distinct is not None:
            if item[distinct] in seen:
                raise RecordError(f"[{i}].{distinct}", f"expected a value no earlier item has, got {item[distinct]!r}")
            seen.add(item[distinct])
    return items
