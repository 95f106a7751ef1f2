import pytest

from analysis.monitor import summarize_evaluations


def test_a_global_encoder_is_logged_as_is():
    overall, logged = summarize_evaluations({"global": {"knn_top1": 0.5, "linear_top1": 0.6}})
    assert overall == {"knn_top1": 0.5, "linear_top1": 0.6}
    assert logged == {"eval/knn_top1": 0.5, "eval/linear_top1": 0.6}


def test_per_client_encoders_get_group_mean_std_and_overall_mean():
    overall, logged = summarize_evaluations({
        "small/client_0": {"knn_top1": 0.5}, "small/client_1": {"knn_top1": 0.7},
        "large/client_2": {"knn_top1": 0.9}})
    assert overall["knn_top1"] == pytest.approx(0.7)
    assert logged["eval/small/knn_top1_mean"] == pytest.approx(0.6)
    assert logged["eval/small/knn_top1_std"] == pytest.approx(0.1)
    assert logged["eval/large/knn_top1_std"] == 0.0
    assert logged["eval/small/client_1/knn_top1"] == 0.7
    assert logged["eval/knn_top1"] == pytest.approx(0.7)
