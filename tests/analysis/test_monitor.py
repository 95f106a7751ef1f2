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


def test_semi_supervised_runs_also_probe_on_the_labelled_samples_only(synthetic_raw):
    import torch

    from analysis.monitor import evaluate_network, load_eval_data
    from simulator.scenario import resolve
    scenario = resolve({**synthetic_raw, "method": {"name": "fedavg", "objective": "simclr",
                                                    "labelled_fraction": 0.1}})
    data = load_eval_data(scenario)
    assert len(data.labelled_y) == pytest.approx(0.1 * len(data.train_y), abs=8)  # rounding per client
    network = torch.nn.ModuleDict({"encoder": torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 16))})
    metrics = evaluate_network(network, data, scenario)
    assert set(metrics) == {"knn_top1", "linear_top1", "labelled_linear_top1", "align", "unif", "align_unif_score"}
    assert metrics == evaluate_network(network, data, scenario)  # deterministic
    unlabelled = load_eval_data(resolve(synthetic_raw))
    assert unlabelled.labelled_x is None


def test_a_projector_adds_a_knn_on_its_output_of_the_backbone_features(synthetic_raw):
    import torch

    from analysis.evaluate import knn_top1
    from analysis.monitor import evaluate_network, load_eval_data
    from simulator.scenario import resolve
    scenario = resolve({**synthetic_raw, "eval": {"knn_k": 5}})
    data = load_eval_data(scenario)
    torch.manual_seed(0)
    encoder = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 16))
    projector = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    with_projector = evaluate_network(torch.nn.ModuleDict({"encoder": encoder, "projector": projector}),
                                      data, scenario)
    without = evaluate_network(torch.nn.ModuleDict({"encoder": encoder}), data, scenario)
    assert set(with_projector) - set(without) == {"knn_projector_top1"}
    assert without == {k: v for k, v in with_projector.items() if k != "knn_projector_top1"}
    with torch.no_grad():
        project = lambda x: projector(encoder(x.float() / 255))  # noqa: E731
        expected = knn_top1(project(data.train_x), data.train_y, project(data.test_x), data.test_y,
                            data.num_classes, k=5, temperature=scenario["eval"]["knn_temperature"])
    assert with_projector["knn_projector_top1"] == expected
    assert with_projector["knn_projector_top1"] != with_projector["knn_top1"]
