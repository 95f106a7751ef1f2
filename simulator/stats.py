"""Summable client uploads (aggregation as a sum, as in pfl-research's ``stats.py``).

A client turns what it uploads into ``Stats``: named tensors multiplied by an integer weight
(usually its number of samples). Workers add up their clients' ``Stats`` and the server adds up the
workers' sums; only then is the average taken. The sums are kept in fixed point (int64, 2**-32
resolution), so addition is exact and associative: 1, 2 or N workers, in any order, give bitwise the
same average. Each client's quantisation is a function of that client alone.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

FIXED_POINT_BITS = 32
_SCALE = float(2**FIXED_POINT_BITS)
_LIMIT = 2.0**52  # per client: leaves room for 2**11 clients at the limit in an int64 sum
_SUM_LIMIT = 2.0**63  # an int64 sum; a sum whose bound reaches it could wrap around silently


class Stats:
    """Weighted sums of named tensors; ``a + b`` adds, ``average()`` divides by the summed weight.
    ``bound``: the summed clients' largest fixed-point magnitudes, a bound on every entry of the sums,
    so that an addition that could wrap around in int64 raises instead."""

    __slots__ = ("sums", "weight", "bound")

    def __init__(self, sums: dict[str, torch.Tensor], weight: int, bound: float):
        self.sums = sums
        self.weight = weight
        self.bound = bound

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, torch.Tensor], weight: int) -> "Stats":
        """``weight`` x each tensor in fixed point, computed where the tensors are (a GPU client's
        sums stay on its GPU until :meth:`to`; the arithmetic is exact, so the device does not change
        a bit), with one overflow check per device."""
        if not isinstance(weight, int) or weight <= 0:
            raise ValueError(f"Stats weight must be a positive int, got {weight!r}")
        scaled = {name: tensor.detach().to(torch.float64, copy=True).mul_(weight * _SCALE)
                  for name, tensor in tensors.items()}
        names_by_device: dict[torch.device, list[str]] = {}
        for name, value in scaled.items():
            names_by_device.setdefault(value.device, []).append(name)
        bound = 0.0
        for names in names_by_device.values():  # one check per device (a UV row may sit on the CPU)
            # NaN or inf where not finite; one transfer per device, read for the check and the bound
            largest = torch.stack([scaled[n].abs().max() for n in names]).cpu()
            too_large = ~torch.isfinite(largest) | (largest >= _LIMIT)
            if too_large.any():
                raise OverflowError(
                    f"upload {names[int(too_large.nonzero()[0])]!r} is not finite or too large for exact "
                    f"aggregation (max |value| x weight must stay below 2**20)")
            bound = max(bound, float(largest.max()))
        return cls({name: v.round_().to(torch.int64) for name, v in scaled.items()}, weight, bound + 0.5)

    def to(self, device: str | torch.device) -> "Stats":
        """The same sums on ``device``."""
        return Stats({k: v.to(device) for k, v in self.sums.items()}, self.weight, self.bound)

    def __add__(self, other: "Stats | None") -> "Stats":
        if other is None:
            return self
        if self.sums.keys() != other.sums.keys():
            raise ValueError(f"cannot add Stats with keys {sorted(self.sums)} and {sorted(other.sums)}")
        bound = self.bound + other.bound
        if bound >= _SUM_LIMIT:
            raise OverflowError(f"uploads of {self.weight + other.weight} weight too large to sum exactly: the sum "
                                f"of their clients' largest |value| x weight could pass 2**31 (int64 fixed "
                                f"point); fewer clients per sum or smaller uploads")
        return Stats({k: self.sums[k] + other.sums[k] for k in self.sums}, self.weight + other.weight, bound)

    __radd__ = __add__

    def average(self) -> dict[str, torch.Tensor]:
        """The weighted mean of every tensor, as float32."""
        return {k: v.to(torch.float64).div_(_SCALE * self.weight).to(torch.float32) for k, v in self.sums.items()}

    def total(self) -> dict[str, torch.Tensor]:
        """The weighted sum of every tensor, as float64."""
        return {k: v.to(torch.float64).div_(_SCALE) for k, v in self.sums.items()}


def sum_stats(items) -> Stats | None:
    """Sum an iterable of ``Stats`` (``None`` entries are skipped); ``None`` if there are none."""
    total = None
    for item in items:
        if item is not None:
            total = item if total is None else total + item
    return total
