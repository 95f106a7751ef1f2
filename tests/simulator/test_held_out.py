"""The held-out images handed to methods (Hetero-SSFL's RAD): test images outside the evaluation's
test subset, in test-split order, never more than there are."""
import pytest
import torch

from methods.base import ParamError
from methods.hetero_ssfl import HeteroSSFL
from simulator.evaluation.monitor import load_eval_data
from simulator.held_out import HeldOutImages, TooFewHeldOut
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


def rows_of(images, split):
    """The index in ``split`` of each image (each found exactly once)."""
    matches = (images.flatten(1)[:, None, :] == split.flatten(1)[None, :, :]).all(-1)
    assert (matches.sum(1) == 1).all()
    return matches.int().argmax(1).tolist()


@pytest.mark.parametrize("seed", [3, 11])
def test_held_out_images_are_the_test_rows_the_evaluation_leaves_out_for_any_seed(synthetic_raw, seed):
    """Compared by index in the scenario's own test split (not by pixels alone: the synthetic images
    depend on the seed, so images of another seed's split would overlap no evaluated image either):
    the held-out ones are the first 50 rows outside the 300 evaluated, in test-split order."""
    scenario = resolve({**synthetic_raw, "seed": seed, "eval": {"test_subset": 300}})
    split = load_eval_data(resolve({**synthetic_raw, "seed": seed})).test_x  # eval.test_subset null: all 500
    evaluated = set(rows_of(load_eval_data(scenario).test_x, split))
    assert len(split) == 500 and len(evaluated) == 300
    outside = [i for i in range(500) if i not in evaluated]
    assert rows_of(HeldOutImages.of(scenario).take(50), split) == outside[:50]


def test_with_every_test_image_evaluated_none_is_held_out_and_the_rad_is_refused_before_a_run(synthetic_raw):
    """eval.test_subset null evaluates on the whole test split: no image is left for the RAD, and
    Hetero-SSFL's check_data (run before anything starts) refuses it, rather than take() mid-run."""
    scenario = resolve(synthetic_raw)
    assert scenario["eval"]["test_subset"] is None
    held_out = HeldOutImages.of(scenario)
    assert held_out.available() == 0
    with pytest.raises(TooFewHeldOut, match=r"^only 0 test images lie outside eval.test_subset=None, 1 asked for$"):
        held_out.take(1)
    params = HeteroSSFL.Params.from_config({"name": "hetero_ssfl", "rad_size": 16, "rad_batch_size": 8})
    with pytest.raises(ParamError, match=r"^method.rad_size: expected at most 0 \(test images outside "
                                         r"eval.test_subset\), got 16$"):
        HeteroSSFL.check_data(params, held_out)
