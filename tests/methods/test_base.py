"""The method interface (``methods.base``): every method's parameters are checked by
``Method.check_params``, which raises a one-line ``ParamError`` for the first rule a ``method:``
section breaks (also when the method's own rules could not be evaluated on an unknown value); the
bytes a client's upload accounts per payload kind."""
import pytest
import torch

from methods import METHODS
from methods.base import ClientUpload, ParamError
from simulator.records import FLOAT32_MAX
from simulator.stats import Stats


@pytest.mark.parametrize("name", sorted(n for n, m in METHODS.items() if "objective" in m.params))
def test_every_method_with_an_objective_rejects_an_unknown_one_as_a_param_error(name):
    config = {**METHODS[name].params, "objective": "no_such_objective"}
    with pytest.raises(ParamError, match=r"^method.objective: expected .*, got 'no_such_objective'$"):
        METHODS[name].check_params(config, {"training": {"rounds": 10}})


FLOAT_KEYS = sorted((name, key) for name, m in METHODS.items() for key, default in m.params.items()
                    if isinstance(default, float) or (isinstance(default, list) and default
                                                      and all(isinstance(v, float) for v in default)))


@pytest.mark.parametrize("name, key", FLOAT_KEYS, ids=[f"{n}.{k}" for n, k in FLOAT_KEYS])
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_every_float_parameter_rejects_infinity_and_nan(name, key, bad):
    """A method's number that is infinite or NaN is one line, before its rules (which compare it,
    and an infinite learning rate or noise multiplier would pass ``> 0``)."""
    default = METHODS[name].params[key]
    config = {**METHODS[name].params, key: [default[0], bad, *default[2:]] if isinstance(default, list) else bad}
    kind = "finite numbers" if isinstance(default, list) else "a finite number"
    with pytest.raises(ParamError, match=rf"^method.{key}: expected {kind}, got "):
        METHODS[name].check_params(config, {"training": {"rounds": 10}})


@pytest.mark.parametrize("name, key", FLOAT_KEYS, ids=[f"{n}.{k}" for n, k in FLOAT_KEYS])
def test_every_float_parameter_rejects_a_value_past_float32(name, key):
    """Training makes float32 tensors of a method's numbers: 1e300 (a server learning rate of it was
    torch's overflow traceback in the optimiser) is one line, and float32's largest passes this check."""
    default = METHODS[name].params[key]
    with_value = lambda v: {**METHODS[name].params, key: [default[0], v, *default[2:]] if isinstance(default, list) else v}
    with pytest.raises(ParamError, match=rf"^method.{key}: expected a number within float32's range \(at most 3.4e38"):
        METHODS[name].check_params(with_value(-1e300), {"training": {"rounds": 10}})
    try:
        METHODS[name].check_params(with_value(FLOAT32_MAX), {"training": {"rounds": 10, "centralized": False}})
    except ParamError as err:  # only the method's own rules may refuse it
        assert "float32" not in err.message


def test_bytes_by_kind_sums_the_uploads_tensors_per_payload_kind():
    """The bytes a client sends, per payload kind: 4 per summed value (one row of a ``sparse_rows``
    matrix), and each record's tensors at their own element size, however nested."""
    stats = Stats.from_tensors({"weights/a": torch.ones(3, 4), "weights/b": torch.ones(5),
                                "heads/rows": torch.ones(6, 2)}, 10)
    record = {"correlation": torch.ones(4, 4, dtype=torch.float64),
              "centroids": {"local": [torch.ones(2, 3), (torch.ones(3, dtype=torch.float16), "not a tensor")]}}
    upload = ClientUpload(stats=stats, record=record, sparse_rows=("heads/rows",))
    assert upload.bytes_by_kind() == {"weights": 4 * 17, "heads": 4 * 2, "correlation": 8 * 16,
                                      "centroids": 4 * 6 + 2 * 3}
