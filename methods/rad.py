"""The Representation Alignment Dataset (RAD) of Hetero-SSFL: unlabeled images held by the server.

The partitioners hand every training image to some client, so the RAD is taken from the test split,
from the images the evaluation does NOT test on: the evaluator tests on the seeded subset
``eval.test_subset`` of the test split (:func:`simulator.data.datasets.seeded_subset`), and the RAD is the first
``rad_size`` test images outside that subset. No client holds them and no reported accuracy is
measured on them.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from methods.base import ParamError
from simulator.context import derive_seed
from simulator.data.datasets import scenario_dataset, seeded_subset


def rad_indices(num_test: int, test_subset: int | None, seed: int, rad_size: int) -> torch.Tensor:
    """Indices of the RAD in the test split: the first ``rad_size`` outside the evaluation's subset."""
    everything = torch.arange(num_test)
    evaluated, _ = seeded_subset(everything, everything, test_subset, derive_seed(seed, "eval-test"))
    outside = everything[~torch.isin(everything, evaluated)]
    if rad_size > len(outside):
        raise ParamError("rad_size", f"expected at most {len(outside)} (test images outside "
                                     f"eval.test_subset={test_subset}), got {rad_size}")
    return outside[:rad_size]


def rad_test_images(scenario: Mapping[str, Any], rad_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the test split's images, the RAD's indices in it); raises ParamError when it does not fit."""
    data = scenario_dataset(scenario["dataset"], scenario["seed"])
    return data.test_x, rad_indices(len(data.test_y), scenario["eval"]["test_subset"], scenario["seed"], rad_size)


def load_rad(scenario: Mapping[str, Any], rad_size: int) -> torch.Tensor:
    """The RAD images, uint8 [rad_size, C, H, W] (labels are never read)."""
    images, rows = rad_test_images(scenario, rad_size)
    return images[rows].clone()
