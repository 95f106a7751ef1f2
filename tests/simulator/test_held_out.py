"""The held-out images handed to methods (Hetero-SSFL's RAD): test images outside the evaluation's
test subset, in test-split order, never more than there are."""
import pytest
import torch

from simulator.evaluation.monitor import load_eval_data
from simulator.held_out import HeldOutImages
from simulator.scenario import resolve


def test_held_out_images_are_disjoint_from_the_evaluated_ones(synthetic_raw):
    scenario = resolve({**synthetic_raw, "eval": {"test_subset": 300}})
    held_out = HeldOutImages.of(scenario)
    assert held_out.available() == 200  # 500 synthetic test images, 300 evaluated
    images = held_out.take(200).flatten(1)
    tested = load_eval_data(scenario).test_x.flatten(1)
    assert len(images) == 200 and images.dtype == torch.uint8
    assert not (images[:, None, :] == tested[None, :, :]).all(-1).any()
    assert torch.equal(held_out.take(20), held_out.take(200)[:20])  # the first ones, in order
    with pytest.raises(ValueError, match=r"only 200 test images lie outside eval.test_subset=300, 201 asked for"):
        held_out.take(201)
