"""FedU (``methods.fedu``): a returning client takes the global predictor only below ``dapu_threshold``
(its own otherwise), keeps its own target, and takes the global encoder and projector."""
import pytest
import torch

from simulator.federation import Server
from tests.methods.test_divergence_aware import at, make, participate


@pytest.mark.parametrize("head_norm", ["none", "batch"])
@pytest.mark.parametrize("distance, global_predictor", [(0.39, True), (0.4, False), (0.41, False)])
def test_fedu_takes_the_global_predictor_only_below_its_threshold(synthetic_raw, distance, global_predictor, head_norm):
    # strictly below: a divergence equal to the threshold keeps the client's own predictor, as EasyFL's
    # ``_DAPU_predictor_usage`` (``distance < dapu_threshold``: global, else local)
    # with head_norm batch the heads' BatchNorm statistics go with their networks, as EasyFL swaps
    # whole modules: the predictor's with the predictor, the target's stay the client's, the online
    # encoder's and projector's are the server's
    scenario, method = make(synthetic_raw, "fedu", head_norm, dapu_threshold=0.4)
    state = Server(method).state
    first = participate(method, scenario, state, 1, None).client_state
    returning = {**first, "distance": distance}
    start = method.start_weights(method.make_workspace(torch.device("cpu")), state["weights"], returning,
                                 at(scenario, 2))
    for name, value in start.items():
        if name.startswith("online.predictor."):
            expected = state["weights"][name] if global_predictor else first["weights"][name]
        elif name.startswith("target."):
            expected = first["weights"][name]  # the client's own target
        else:
            expected = state["weights"][name]  # encoder and projector: always the global ones
        assert torch.equal(value, expected), name
    assert not torch.equal(state["weights"]["online.predictor.0.weight"], first["weights"]["online.predictor.0.weight"])
    # logged beside the loss (train/global_predictor, the share of returning clients that took it; train/divergence)
    upload = participate(method, scenario, state, 2, returning)
    assert upload.metrics["global_predictor"] == float(global_predictor)
    assert upload.metrics["divergence"] == upload.client_state["distance"] > 0
    statistics = [name for name in start if name.endswith("running_mean")]
    assert len(statistics) == (3 if head_norm == "batch" else 0)  # online projector and predictor, target projector
    for name in statistics:  # the client's statistics differ from the server's: each check can fail
        assert not torch.equal(state["weights"][name], first["weights"][name]), name


def test_a_negative_dapu_threshold_is_a_one_line_error(synthetic_raw):
    with pytest.raises(ValueError, match=r"^<scenario>: method.dapu_threshold: expected a non-negative number, "
                                         r"got -0.1$"):
        make(synthetic_raw, "fedu", dapu_threshold=-0.1)
    make(synthetic_raw, "fedu", dapu_threshold=0.0)  # 0: never the global predictor


def test_fedu_s_default_threshold_is_easyfl_s(synthetic_raw):
    """EasyFL's ``applications/fedssl/main.py``: ``--dapu_threshold`` defaults to 0.4 (``fedavg/fedu.yaml``
    leaves it at the default)."""
    _, method = make(synthetic_raw, "fedu")
    assert method.config.dapu_threshold == 0.4
