"""A method's parameters are checked one way, by its ``param_rules``, also when a method is built
from a scenario that never went through the scenario loader."""
import pytest

from methods import METHODS
from methods.base import ParamError
from methods.params import ServerOptimizerParams


@pytest.mark.parametrize("name", sorted(n for n, m in METHODS.items() if issubclass(m.Params, ServerOptimizerParams)))
def test_every_weight_averaging_method_rejects_an_unknown_server_optimizer(name):
    config = {**METHODS[name].params, "server_optimizer": "sgd"}
    with pytest.raises(ParamError, match=r"^method.server_optimizer: expected one of avg, adam, got 'sgd'$"):
        METHODS[name].check_params(config, {"training": {"rounds": 10}})
