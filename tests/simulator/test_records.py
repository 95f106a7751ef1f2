"""Lists of records are checked one way: the first problem, in list then field order, named by where it is."""
import pytest
import torch

from simulator.records import (GPU_COUNT, NON_NEGATIVE_NUMBER, POSITIVE_INTEGER, POSITIVE_NUMBER, STRING,
                               RecordError, check_records, one_of)

POOL = {"name": STRING, "count": POSITIVE_INTEGER, "num_cpus": NON_NEGATIVE_NUMBER, "num_gpus": GPU_COUNT}


def pool(**changes):
    return {"name": "a", "count": 1, "num_cpus": 1, "num_gpus": 0, **changes}


def test_a_well_formed_list_comes_back_unchanged():
    items = [pool(), pool(name="b", count=3, num_cpus=0.5, num_gpus=2)]
    assert check_records(items, POOL, distinct="name") is items
    assert check_records([], POOL) == []


@pytest.mark.parametrize("items, options, where, message", [
    ([], {"non_empty": True}, "", "expected a non-empty list of {name, count, num_cpus, num_gpus}, got []"),
    ([pool(), "a"], {}, "[1]", "expected a mapping {name, count, num_cpus, num_gpus}, got 'a'"),
    ([{"name": "a", "count": 1}], {}, "[0]",
     "expected a mapping {name, count, num_cpus, num_gpus}, got {'name': 'a', 'count': 1}"),
    ([{"name": "a", "count": 1, "num_cpus": 1, "num_gpus": 0, "x": 1}], {}, "[0]",
     "expected a mapping {name, count, num_cpus, num_gpus}, got {'name': 'a', 'count': 1, 'num_cpus': 1, "
     "'num_gpus': 0, 'x': 1}"),
    ([pool(count=0, num_cpus=-1)], {}, "[0].count", "expected a positive integer, got 0"),  # field order
    ([pool(count=2.0)], {}, "[0].count", "expected a positive integer, got 2.0"),
    ([pool(count=True)], {}, "[0].count", "expected a positive integer, got True"),
    ([pool(num_cpus=-0.5)], {}, "[0].num_cpus", "expected a non-negative number, got -0.5"),
    ([pool(num_cpus="1")], {}, "[0].num_cpus", "expected a non-negative number, got '1'"),
    ([pool(num_gpus=1.5)], {}, "[0].num_gpus", "expected a fraction <= 1 or a whole number of GPUs, got 1.5"),
    ([pool(name=3)], {}, "[0].name", "expected a string, got 3"),
    ([pool(), pool(name="b"), pool()], {"distinct": "name"}, "[2].name", "expected a value no earlier item has, got 'a'"),
])
def test_the_first_problem_is_named_by_where_it_is(items, options, where, message):
    with pytest.raises(RecordError) as err:
        check_records(items, POOL, **options)
    assert (err.value.where, err.value.message) == (where, message)


def test_repeated_values_pass_without_a_distinct_field():
    assert check_records([pool(), pool()], POOL) == [pool(), pool()]


def test_number_fields_refuse_booleans_and_accept_ints_and_floats():
    assert POSITIVE_NUMBER.accepts(1) and POSITIVE_NUMBER.accepts(0.1)
    assert not POSITIVE_NUMBER.accepts(0) and not POSITIVE_NUMBER.accepts(True) and not POSITIVE_NUMBER.accepts("1")
    assert NON_NEGATIVE_NUMBER.accepts(0) and not NON_NEGATIVE_NUMBER.accepts(False)
    assert GPU_COUNT.accepts(0.25) and GPU_COUNT.accepts(1) and GPU_COUNT.accepts(4.0)
    assert not GPU_COUNT.accepts(2.5) and not GPU_COUNT.accepts(-0.5)


def test_one_of_names_its_choices():
    field = one_of(("small_cnn", "resnet18"))
    assert field.accepts("resnet18") and not field.accepts("vit") and not field.accepts(["resnet18"])
    assert field.expected == "one of small_cnn, resnet18"


@pytest.mark.parametrize("items, where, message", [
    ([pool(name=3, count=0)], "[0].name", "expected a string, got 3"),  # the fields' order, not alphabetical
    ([pool(), pool(count=0)], "[1].count", "expected a positive integer, got 0"),  # a malformed field, then repeats
])
def test_field_problems_come_in_declaration_order_before_a_repeated_value(items, where, message):
    with pytest.raises(RecordError) as err:
        check_records(items, POOL, distinct="name")
    assert (err.value.where, err.value.message) == (where, message)


def test_the_error_text_is_where_then_the_message_or_the_message_alone():
    assert str(RecordError("[2].count", "expected a positive integer, got 0")) == \
        "[2].count: expected a positive integer, got 0"
    message = "expected a non-empty list of {name}, got []"
    assert str(RecordError("", message)) == message


def test_number_fields_refuse_infinities_and_nan():
    for value in (float("inf"), float("-inf"), float("nan")):
        assert not POSITIVE_NUMBER.accepts(value) and not NON_NEGATIVE_NUMBER.accepts(value)
        assert not GPU_COUNT.accepts(value)


def test_out_of_float32_refuses_either_sign_past_the_largest_float32_and_nothing_within():
    from simulator.records import FLOAT32_MAX, out_of_float32
    assert FLOAT32_MAX == torch.finfo(torch.float32).max
    for value in (FLOAT32_MAX, -FLOAT32_MAX, 0.0, 1e38, -1e38):
        assert out_of_float32(value) is None
    for value in (1e39, -1e39, FLOAT32_MAX * (1 + 2**-50)):
        assert out_of_float32(value).startswith("a number within float32's range")
