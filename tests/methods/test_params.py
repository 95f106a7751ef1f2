"""A method's parameters are checked one way, by its ``param_rules``, also when a method is built
from a scenario that never went through the scenario loader."""
import dataclasses

import pytest

from methods import METHODS
from methods.base import ParamError
from methods.params import ServerOptimizerParams


@pytest.mark.parametrize("name", sorted(n for n, m in METHODS.items() if issubclass(m.Params, ServerOptimizerParams)))
def test_every_weight_averaging_method_rejects_an_unknown_server_optimizer(name):
    config = {**METHODS[name].params, "server_optimizer": "sgd"}
    with pytest.raises(ParamError, match=r"^method.server_optimizer: expected one of avg, adam, got 'sgd'$"):
        METHODS[name].check_params(config, {"training": {"rounds": 10}})


def test_a_list_of_records_becomes_frozen_records_and_is_written_back_as_mappings():
    from methods.hetero_ssfl import HeteroSSFL, Tier
    tiers = [{"fraction": 0.25, "encoder": "narrow_cnn"}, {"fraction": 0.75, "encoder": "small_cnn"}]
    config = HeteroSSFL.Params.from_config({**HeteroSSFL.params, "tiers": tiers})
    assert config.tiers == (Tier("narrow_cnn", 0.25), Tier("small_cnn", 0.75))
    assert HeteroSSFL.params["tiers"] == [] and HeteroSSFL.Params.record_lists()["tiers"][0] is Tier
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.tiers[0].fraction = 1.0


def test_a_malformed_record_is_a_param_error_before_any_record_is_built():
    from methods.hetero_ssfl import HeteroSSFL
    config = {**HeteroSSFL.params, "objective": "byol", "tiers": [{"fraction": 1.0, "encoder": "vit", "extra": 1}]}
    with pytest.raises(ParamError, match=r"^method.tiers\[0\]: expected a mapping \{fraction, encoder\}, got "):
        HeteroSSFL.check_params(config, {"training": {"rounds": 10}})


def test_a_list_in_a_scenario_becomes_a_tuple_of_the_frozen_parameters():
    """``server_betas: [0.8, 0.9]`` (YAML's list) is held as a tuple: parameters are immutable and
    hashable, and ``defaults`` writes the tuple back as the list a scenario holds."""
    config = ServerOptimizerParams.from_config({"server_betas": [0.8, 0.9]})
    assert config.server_betas == (0.8, 0.9) and isinstance(config.server_betas, tuple)
    assert hash(config) == hash(ServerOptimizerParams(server_betas=(0.8, 0.9)))
    assert ServerOptimizerParams.defaults()["server_betas"] == [0.9, 0.999]
