import itertools

import pytest
import torch

from simulator.stats import Stats, sum_stats


def uploads(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [Stats.from_tensors({"weights/w": torch.randn(50, generator=g) * 10 ** (i % 4 - 2)}, weight=i + 1)
            for i in range(n)]


def test_average_is_the_weighted_mean():
    a = Stats.from_tensors({"x": torch.tensor([1.0, 2.0])}, weight=1)
    b = Stats.from_tensors({"x": torch.tensor([4.0, -1.0])}, weight=3)
    assert torch.allclose((a + b).average()["x"], torch.tensor([13 / 4, -1 / 4]))
    assert (a + b).weight == 4
    assert torch.allclose((a + b).total()["x"].float(), torch.tensor([13.0, -1.0]))


def test_sum_is_bitwise_independent_of_grouping_and_order():
    items = uploads()
    reference = sum_stats(items).average()["weights/w"]
    for perm in itertools.islice(itertools.permutations(items), 50):
        grouped = sum_stats([sum_stats(perm[:2]), sum_stats(perm[2:5]), sum_stats(perm[5:])])
        assert torch.equal(grouped.average()["weights/w"], reference)


def test_none_is_skipped_and_empty_sum_is_none():
    a = Stats.from_tensors({"x": torch.ones(2)}, weight=2)
    assert sum_stats([None, a, None]).weight == 2
    assert sum_stats([None]) is None


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="positive int"):
        Stats.from_tensors({"x": torch.ones(1)}, weight=0)
    with pytest.raises(OverflowError, match="'x'"):
        Stats.from_tensors({"x": torch.tensor([float("nan")])}, weight=1)
    with pytest.raises(OverflowError, match="too large"):
        Stats.from_tensors({"x": torch.tensor([1e7])}, weight=1)
    with pytest.raises(ValueError, match="keys"):
        Stats.from_tensors({"x": torch.ones(1)}, 1) + Stats.from_tensors({"y": torch.ones(1)}, 1)


def test_the_overflow_check_names_the_first_bad_tensor_among_several():
    tensors = {"a": torch.ones(3), "b": torch.tensor([1.0, float("inf")]), "c": torch.tensor([1e7])}
    with pytest.raises(OverflowError, match="'b'"):
        Stats.from_tensors(tensors, weight=1)


def test_a_sum_that_could_wrap_around_in_int64_raises():
    # each client at about 2**19.5 x 1 (fixed point 2**51.5, under the per-client limit 2**52):
    # 2**11.5 (2896) of them could reach 2**63
    near_limit = Stats.from_tensors({"x": torch.tensor([741455.0, -1.0])}, weight=1)
    total = sum_stats([near_limit] * 2000)  # 2000 * 2**51.5 < 2**63: exact
    assert total.total()["x"][0].item() == 2000 * 741455.0
    with pytest.raises(OverflowError, match="too large to sum exactly"):
        sum_stats([near_limit] * 3000)


def test_sums_move_between_devices_unchanged():
    a = Stats.from_tensors({"x": torch.tensor([0.1, -2.5])}, weight=3)
    moved = a.to("meta")
    assert moved.weight == 3 and moved.sums["x"].device.type == "meta" and a.sums["x"].device.type == "cpu"


def test_an_upload_is_left_as_it_was():
    """The fixed-point scaling works in place on its own copy: a float64 upload (no conversion, so
    no new tensor of its own) and a float32 one keep their values, and the sums are the same."""
    upload = {"rows": torch.tensor([0.25, -1.5], dtype=torch.float64), "w": torch.tensor([0.5, 2.0])}
    kept = {name: tensor.clone() for name, tensor in upload.items()}
    stats = Stats.from_tensors(upload, weight=3)
    assert all(torch.equal(upload[name], kept[name]) for name in upload)
    assert torch.equal(stats.sums["rows"], torch.tensor([0.75, -4.5], dtype=torch.float64).mul(2**32).long())


def test_the_limits_are_those_documented_to_the_last_half_unit():
    """A client's |value| x weight must stay below 2**20 (2**52 in fixed point): 1.5e6 is refused,
    1e6 is not. A client's bound counts its rounding: 2048 clients each at 2**52 - 0.5 in fixed point
    round to 2**52 each, exactly 2**63 together, one past int64: refused, not wrapped around."""
    Stats.from_tensors({"x": torch.tensor([1e6])}, weight=1)
    with pytest.raises(OverflowError, match="too large"):
        Stats.from_tensors({"x": torch.tensor([1.5e6])}, weight=1)
    edge = Stats.from_tensors({"x": torch.tensor([2.0**20 - 2.0**-33], dtype=torch.float64)}, weight=1)
    assert edge.sums["x"].item() == 2**52
    with pytest.raises(OverflowError, match="too large to sum exactly"):
        sum_stats([edge] * 2048)


def test_a_large_negative_upload_is_as_refused_as_a_large_positive_one():
    """The limit is on |value| x weight: -1.5e6 (and -5e5 x weight 3) is refused like +1.5e6, and a
    negative-only upload's bound is its magnitude (2**20 x 2**32, plus half a unit of rounding)."""
    for tensor, weight in ((torch.tensor([-1.5e6, 1.0]), 1), (torch.tensor([-5e5]), 3)):
        with pytest.raises(OverflowError, match="'x' is not finite or too large"):
            Stats.from_tensors({"x": tensor}, weight=weight)
    assert Stats.from_tensors({"x": torch.tensor([-2.0**20 + 1, -1.0])}, weight=1).bound == (2**20 - 1) * 2**32 + 0.5


def test_a_sum_moved_to_another_device_keeps_its_overflow_bound():
    """A worker moves its sum to the CPU before the server adds the workers' sums: the bound goes
    along, so 3000 near-limit clients (see above) summed across workers still raise."""
    near_limit = Stats.from_tensors({"x": torch.tensor([741455.0, -1.0])}, weight=1)
    moved = near_limit.to("cpu")
    assert moved.bound == near_limit.bound == 741455 * 2**32 + 0.5
    workers = [sum_stats([near_limit] * 1500).to("cpu") for _ in range(2)]
    assert workers[0].bound == 1500 * (741455 * 2**32 + 0.5)
    with pytest.raises(OverflowError, match="too large to sum exactly"):
        sum_stats(workers)


def test_an_upload_at_exactly_the_documented_limit_is_refused():
    """|value| x weight must stay *below* 2**20: 2**20 itself (and 2**19 x weight 2) is refused,
    the float just under it is not."""
    for value, weight in ((2.0**20, 1), (-(2.0**20), 1), (2.0**19, 2)):
        with pytest.raises(OverflowError, match="too large"):
            Stats.from_tensors({"x": torch.tensor([value], dtype=torch.float64)}, weight=weight)
    Stats.from_tensors({"x": torch.tensor([2.0**20 - 2.0**-20], dtype=torch.float64)}, weight=1)


@pytest.mark.parametrize("left, right", [({"x"}, {"x", "y"}), ({"x", "y"}, {"x"}), ({"x"}, {"y"})])
def test_sums_of_different_names_are_refused_whichever_side_has_more(left, right):
    """A name only one side has is neither dropped nor kept from that side alone: the addition raises."""
    a = Stats.from_tensors({name: torch.ones(2) for name in sorted(left)}, 1)
    b = Stats.from_tensors({name: torch.ones(2) for name in sorted(right)}, 2)
    with pytest.raises(ValueError, match="cannot add Stats with keys"):
        a + b
    with pytest.raises(ValueError, match="cannot add Stats with keys"):
        sum_stats([b, a])


def test_weights_scale_each_client_once_and_the_mean_divides_by_the_summed_weight():
    """Hand-computed: clients 0.5 (weight 2), -1.25 (weight 4), 3.0 (weight 1) sum to
    1 - 5 + 3 = -1 over weight 7 (not 3 clients): mean -1/7; the total is the weighted sum, -1."""
    stats = [Stats.from_tensors({"x": torch.tensor([v])}, w) for v, w in ((0.5, 2), (-1.25, 4), (3.0, 1))]
    total = sum_stats(stats)
    assert total.weight == 7
    assert total.sums["x"].tolist() == [-(2**32)]
    assert total.total()["x"].tolist() == [-1.0]
    assert total.average()["x"].tolist() == [torch.tensor(-1 / 7, dtype=torch.float32).item()]


@pytest.mark.parametrize("weight", [1.5, 2.0, -1, "2"])
def test_a_weight_that_is_not_a_positive_int_is_refused(weight):
    """A fractional (or float) weight would make the summed weight, and so the mean's divisor, a float."""
    with pytest.raises(ValueError, match="positive int"):
        Stats.from_tensors({"x": torch.ones(1)}, weight=weight)
