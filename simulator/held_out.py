"""Server-side unlabelled images (Hetero-SSFL's RAD): test-split images that no client holds (the
partitioners hand every training image to some client) and on which no reported accuracy is
measured (the evaluation tests on the seeded subset ``eval.test_subset`` of the test split,
:func:`simulator.data.datasets.seeded_subset`); the first ``count`` test images outside that subset.

The runtime hands a :class:`HeldOutImages` to the methods (``DataSpec.held_out``), so a method never
reads the data set or the evaluation's settings itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from simulator.context import derive_seed
from simulator.data.datasets import scenario_dataset, seeded_subset

EVAL_TEST_STREAM = "eval-test"  # the evaluation's stream for its test subset (simulator.evaluation.monitor)


class TooFewHeldOut(ValueError):
    """More held-out images asked for than there are (``available`` of them)."""

    def __init__(self, available: int, message: str):
        super().__init__(message)
        self.available = available


@dataclass(frozen=True)
class HeldOutImages:
    """The held-out test images of a scenario: its data set, its seed, the evaluation's test subset."""

    name: str
    root: str | None
    download: bool
    train_subset: int | None
    seed: int
    test_subset: int | None

    @classmethod
    def of(cls, scenario: Mapping[str, Any]) -> HeldOutImages:
        data = scenario["dataset"]
        return cls(data["name"], data["root"], data["download"], data.get("train_subset"), scenario["seed"],
                   scenario["eval"]["test_subset"])

    def _test_split(self) -> torch.Tensor:
        config = {"name": self.name, "root": self.root, "download": self.download, "train_subset": self.train_subset}
        return scenario_dataset(config, self.seed).test_x

    def _evaluated(self, num_test: int) -> torch.Tensor:
        everything = torch.arange(num_test)
        evaluated, _ = seeded_subset(everything, everything, self.test_subset, derive_seed(self.seed, EVAL_TEST_STREAM))
        return evaluated

    def _outside(self, num_test: int) -> torch.Tensor:
        everything = torch.arange(num_test)
        return everything[~torch.isin(everything, self._evaluated(num_test))]

    def tested_among_first(self, count: int, evaluation: HeldOutImages) -> int:
        """How many of the first ``count`` held-out images (those :meth:`take` gives) the evaluation
        of ``evaluation``'s test subset tests on (another ``eval.test_subset``: ``fedssl evaluate``)."""
        num_test = len(self._test_split())
        return int(torch.isin(self._outside(num_test)[:count], evaluation._evaluated(num_test)).sum())

    def available(self) -> int:
        """How many test images the evaluation leaves out."""
        return len(self._outside(len(self._test_split())))

    def take(self, count: int) -> torch.Tensor:
        """The first ``count`` held-out images, uint8 [count, C, H, W]; ValueError when fewer exist."""
        test_x = self._test_split()
        outside = self._outside(len(test_x))
        if count > len(outside):
            raise TooFewHeldOut(len(outside), f"only {len(outside)} test images lie outside "
                                f"eval.test_subset={self.test_subset}, {count} asked for")
        return test_x[outside[:count]].clone()
