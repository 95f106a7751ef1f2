import pytest

from simulator.evaluation.monitor import EVALUATED_METRIC, summarize_evaluations
from tests.conftest import LABEL_EFFICIENT_EVAL

pytestmark = pytest.mark.usefixtures("one_thread")  # every test: one torch thread (tests/conftest.py)


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
    # uneven values: the overall value is their mean (0.7), not their median (0.6)
    overall, logged = summarize_evaluations({"a/0": {"knn_top1": 0.5}, "a/1": {"knn_top1": 0.6},
                                            "b/2": {"knn_top1": 1.0}})
    assert overall["knn_top1"] == pytest.approx(0.7) and logged["eval/knn_top1"] == pytest.approx(0.7)


def test_align_and_uniformity_are_scored_on_the_training_images_under_the_scenarios_augmentation(synthetic_raw):
    """Alignment and uniformity (Wang & Isola 2020) of the first 2,000 evaluation training images under
    the scenario's own augmentation (here not the default one), drawn from (seed, "align-uniform"); the
    metric names alone were tested, so the test images or the default augmentation passed."""
    import torch

    from simulator.augment import AugmentConfig, BatchAugment
    from simulator.context import derive_seed
    from simulator.evaluation.align_uniform import align_uniform_score
    from simulator.evaluation.monitor import evaluate_network, load_eval_data
    from simulator.scenario import resolve
    augment = {"crop_scale": [0.6, 1.0], "jitter_prob": 0.0, "flip_prob": 1.0}
    scenario = resolve({**synthetic_raw, "augment": augment})
    data = load_eval_data(scenario)
    assert len(data.train_x) >= 500 and not torch.equal(data.train_x[:500], data.test_x[:500])
    network = torch.nn.ModuleDict({"encoder": torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 16))})
    metrics = evaluate_network(network, data, scenario)

    def score(images, config):
        generator = torch.Generator().manual_seed(derive_seed(scenario["seed"], "align-uniform"))
        return align_uniform_score(network["encoder"], images[:2000], BatchAugment(config), generator)
    expected = score(data.train_x, AugmentConfig.from_scenario(scenario["augment"]))
    assert {k: metrics[k] for k in expected} == expected
    for other in (score(data.test_x, AugmentConfig.from_scenario(scenario["augment"])),
                  score(data.train_x, AugmentConfig())):
        assert other["align"] != expected["align"]


def test_semi_supervised_runs_also_probe_on_the_labelled_samples_only(synthetic_raw):
    import torch

    from simulator.evaluation.monitor import evaluate_network, load_eval_data
    from simulator.scenario import resolve
    scenario = resolve({**synthetic_raw, "method": {"name": "fedavg", "objective": "simclr", "labelled_fraction": 0.1},
                        "eval": {**synthetic_raw["eval"], **LABEL_EFFICIENT_EVAL}})
    data = load_eval_data(scenario)
    assert len(data.labelled_y) == pytest.approx(0.1 * len(data.train_y), abs=8)  # rounding per client
    network = torch.nn.ModuleDict({"encoder": torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 16))})
    metrics = evaluate_network(network, data, scenario)
    assert set(metrics) == {"knn_top1", "linear_top1", "labelled_linear_top1", "align", "unif", "align_unif_score",
                            "knn_top1_1pct", "linear_top1_1pct", "knn_top1_10pct", "linear_top1_10pct"}
    assert metrics == evaluate_network(network, data, scenario)  # deterministic
    assert all(EVALUATED_METRIC.fullmatch(name) for name in metrics)  # the names a claim suite may name
    from simulator.evaluation.metrics import extract_features, linear_probe_top1
    test_f = extract_features(network["encoder"], data.test_x)
    on_labelled = linear_probe_top1(extract_features(network["encoder"], data.labelled_x), data.labelled_y, test_f,
                                    data.test_y, data.num_classes, max_iter=scenario["eval"]["probe_iterations"])
    assert metrics["labelled_linear_top1"] == on_labelled  # the probe of the labelled samples alone
    unlabelled = load_eval_data(resolve(synthetic_raw))
    assert unlabelled.labelled_x is None


def test_the_knn_takes_the_scenario_s_temperature(synthetic_raw):
    """Both the whole bank's kNN and the label-efficient one (here 10% of the 500-image bank, two
    draws) vote with weights exp(sim / eval.knn_temperature)."""
    import statistics

    import torch

    from simulator.evaluation.metrics import extract_features, knn_top1, label_subset
    from simulator.evaluation.monitor import evaluate_network, load_eval_data
    from simulator.scenario import resolve
    torch.manual_seed(0)
    network = torch.nn.ModuleDict({"encoder": torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 16))})
    knn, few_labels_knn = {}, {}
    for temperature in (0.1, 10.0):
        scenario = resolve({**synthetic_raw, "eval": {**synthetic_raw["eval"], "knn_temperature": temperature,
                                                      "label_fractions": [0.1], "label_draws": 2}})
        data = load_eval_data(scenario)
        train_f, test_f = (extract_features(network["encoder"], x) for x in (data.train_x, data.test_x))
        metrics = evaluate_network(network, data, scenario)
        knn[temperature], few_labels_knn[temperature] = metrics["knn_top1"], metrics["knn_top1_10pct"]
        assert knn[temperature] == knn_top1(train_f, data.train_y, test_f, data.test_y, data.num_classes,
                                            k=scenario["eval"]["knn_k"], temperature=temperature)
        subsets = [label_subset(data.train_y, 0.1, scenario["seed"], draw) for draw in range(2)]
        assert few_labels_knn[temperature] == pytest.approx(statistics.fmean(
            knn_top1(train_f[rows], data.train_y[rows], test_f, data.test_y, data.num_classes,
                     k=scenario["eval"]["knn_k"], temperature=temperature) for rows in subsets), abs=1e-12)
    assert knn[0.1] != knn[10.0]
    assert few_labels_knn[0.1] != few_labels_knn[10.0]


def test_a_projector_adds_a_knn_on_its_output_of_the_backbone_features(synthetic_raw):
    import torch

    from simulator.evaluation.metrics import knn_top1
    from simulator.evaluation.monitor import evaluate_network, load_eval_data
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
    assert all(EVALUATED_METRIC.fullmatch(name) for name in with_projector)
    assert without == {k: v for k, v in with_projector.items() if k != "knn_projector_top1"}
    with torch.no_grad():
        project = lambda x: projector(encoder(x.float() / 255))  # noqa: E731
        expected = knn_top1(project(data.train_x), data.train_y, project(data.test_x), data.test_y,
                            data.num_classes, k=5, temperature=scenario["eval"]["knn_temperature"])
    assert with_projector["knn_projector_top1"] == expected
    assert with_projector["knn_projector_top1"] != with_projector["knn_top1"]


def two_class_points(n_per_class: int, seed: int):
    """1x2-pixel images whose pixels are the features (a parameter-free encoder): class 0 near
    (150, 100), class 1 near (100, 150), overlapping, so that which rows are drawn matters."""
    import numpy as np
    import torch
    rng = np.random.default_rng(seed)
    labels = np.tile([0, 1], n_per_class)
    centres = np.where(labels[:, None] == 0, [150, 100], [100, 150])
    pixels = np.clip(centres + rng.integers(-55, 56, size=(len(labels), 2)), 0, 255)
    return torch.from_numpy(pixels.astype(np.uint8)).view(-1, 1, 1, 2), torch.from_numpy(labels)


def test_one_percent_knn_and_probe_match_a_hand_computation_per_draw():
    """200 train rows, 100 per class: a 1% draw is one row per class, p0 and p1. The kNN (k clipped
    to 2) predicts the class of the more cosine-similar of the two. The probe on two standardised
    points is symmetric (they are mirror images), so its boundary is the perpendicular bisector in
    standardised space: class 1 iff sum_j (x_j - m_j) / (p1_j - p0_j) > 0 with m = (p0 + p1) / 2."""
    import numpy as np
    import torch

    from simulator.evaluation.metrics import label_subset
    from simulator.evaluation.monitor import EvalData, label_efficient_metrics
    from simulator.scenario import resolve
    train_x, train_y = two_class_points(100, seed=0)
    test_x, test_y = two_class_points(150, seed=1)
    features = lambda x: x.flatten(1).double().numpy() / 255  # noqa: E731
    train, test = features(train_x), features(test_x)
    draws = []
    for draw in range(3):
        rows = label_subset(train_y, 0.01, seed=5, draw=draw).numpy()
        assert sorted(train_y.numpy()[rows]) == [0, 1]
        draws.append([train[rows][train_y.numpy()[rows] == c][0] for c in (0, 1)])
    cos = lambda x, p: x @ p / np.linalg.norm(x, axis=1) / np.linalg.norm(p)  # noqa: E731
    knn_margin = lambda x, p0, p1: cos(x, p1) - cos(x, p0)  # noqa: E731
    probe_margin = lambda x, p0, p1: ((x - (p0 + p1) / 2) / (p1 - p0)).sum(axis=1)  # noqa: E731
    # test points on (or within float error of) a boundary are ties the hand rule does not settle: left out
    clear = np.all([np.abs(margin(test, *p)) > 1e-4 for p in draws for margin in (knn_margin, probe_margin)], axis=0)
    test_x, test_y, test = test_x[clear], test_y[clear], test[clear]
    assert len(test_y) > 250
    truth = test_y.numpy()
    knn_scores = [np.mean((knn_margin(test, *p) > 0) == truth) for p in draws]
    probe_scores = [np.mean((probe_margin(test, *p) > 0) == truth) for p in draws]
    assert len(set(knn_scores)) == 3 and len(set(probe_scores)) == 3  # the draws matter here
    scenario = resolve({"seed": 5, "eval": {"label_fractions": [0.01, 0.1], "label_draws": 3}})
    data = EvalData(train_x, train_y, test_x, test_y, num_classes=2)
    train_f, test_f = (torch.from_numpy(f).float() for f in (train, test))
    metrics = label_efficient_metrics(torch.nn.Flatten(), train_f, test_f, data, scenario)
    assert set(metrics) == {"knn_top1_1pct", "linear_top1_1pct", "knn_top1_10pct", "linear_top1_10pct"}
    assert metrics["knn_top1_1pct"] == pytest.approx(np.mean(knn_scores), abs=1e-12)
    assert metrics["linear_top1_1pct"] == pytest.approx(np.mean(probe_scores), abs=1e-12)
    # the second fraction is the mean over its own three draws (20 rows each), not over every draw so far
    from simulator.evaluation.metrics import knn_top1, linear_probe_top1
    tenth = [label_subset(train_y, 0.1, seed=5, draw=draw) for draw in range(3)]
    eval_cfg = scenario["eval"]
    knn_10 = [knn_top1(train_f[r], train_y[r], test_f, test_y, 2, k=eval_cfg["knn_k"],
                       temperature=eval_cfg["knn_temperature"]) for r in tenth]
    probe_10 = [linear_probe_top1(train_f[r], train_y[r], test_f, test_y, 2, max_iter=eval_cfg["probe_iterations"])
                for r in tenth]
    assert abs(np.mean(knn_10) - np.mean(knn_scores)) > 0.01 and abs(np.mean(probe_10) - np.mean(probe_scores)) > 0.01
    assert metrics["knn_top1_10pct"] == pytest.approx(np.mean(knn_10), abs=1e-12)
    assert metrics["linear_top1_10pct"] == pytest.approx(np.mean(probe_10), abs=1e-12)


def test_label_efficient_metrics_use_each_draws_subset_of_the_eval_train_subset(synthetic_raw):
    """On the synthetic data with eval.train_subset = 1000: 10% is 100 of those 1,000 rows; each
    metric is the mean over the draws of the kNN / probe / fine-tuning (with the light augmentation:
    crops of 80-100% of the area, the scenario's flips, no colour) on that draw's rows. The probe's
    iterations, the fine-tuning's learning rate and the flip probability are the scenario's (none
    of them its default here)."""
    import statistics

    import torch

    from simulator.evaluation.metrics import extract_features, finetune_top1, knn_top1, label_subset, linear_probe_top1
    from simulator.evaluation.monitor import evaluate_network, load_eval_data
    from simulator.augment import AugmentConfig, BatchAugment
    from simulator.context import derive_seed
    from simulator.scenario import resolve
    scenario = resolve({**synthetic_raw, "eval": {"knn_k": 5, "train_subset": 1000, "test_subset": 100,
                                                  "label_fractions": [0.1], "label_draws": 2, "finetune_steps": 10,
                                                  "finetune_batch_size": 16, "finetune_augment": True,
                                                  "probe_iterations": 2, "finetune_lr": 0.01},
                        "augment": {"flip_prob": 1.0}})
    data = load_eval_data(scenario)
    assert len(data.train_y) == 1000
    torch.manual_seed(0)
    encoder = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 16))
    metrics = evaluate_network(torch.nn.ModuleDict({"encoder": encoder}), data, scenario)
    assert "finetune_top1_10pct" in metrics and all(EVALUATED_METRIC.fullmatch(name) for name in metrics)
    train_f, test_f = extract_features(encoder, data.train_x), extract_features(encoder, data.test_x)
    expected = {"knn_top1_10pct": [], "linear_top1_10pct": [], "finetune_top1_10pct": []}
    for draw in range(2):
        rows = label_subset(data.train_y, 0.1, scenario["seed"], draw)
        assert len(rows) == 100 and len(data.train_y[rows].unique()) == 10
        labels = data.train_y[rows]
        expected["knn_top1_10pct"].append(knn_top1(train_f[rows], labels, test_f, data.test_y, 10, k=5))
        expected["linear_top1_10pct"].append(linear_probe_top1(train_f[rows], labels, test_f, data.test_y, 10,
                                                               max_iter=2))
        expected["finetune_top1_10pct"].append(finetune_top1(
            encoder, data.train_x[rows], labels, data.test_x, data.test_y, 10, steps=10, batch_size=16,
            lr=0.01, seed=derive_seed(scenario["seed"], "finetune", 0.1, draw),
            augment=BatchAugment(AugmentConfig(crop_scale=(0.8, 1.0), flip_prob=1.0, jitter_prob=0.0))))
    for name, values in expected.items():
        assert metrics[name] == pytest.approx(statistics.fmean(values), abs=1e-12)
    assert metrics["knn_top1_10pct"] != metrics["knn_top1"]  # the whole bank is another protocol
    # eval.label_knn_k: the few-label kNN's own k (the whole bank's kNN keeps knn_k)
    own_k = evaluate_network(torch.nn.ModuleDict({"encoder": encoder}), data,
                             resolve({**synthetic_raw, "eval": {**scenario["eval"], "label_knn_k": 2, "finetune_steps": 0}}))
    two = [knn_top1(train_f[label_subset(data.train_y, 0.1, scenario["seed"], d)],
                    data.train_y[label_subset(data.train_y, 0.1, scenario["seed"], d)], test_f, data.test_y, 10, k=2)
           for d in range(2)]
    assert own_k["knn_top1_10pct"] == pytest.approx(statistics.fmean(two), abs=1e-12) and two != expected["knn_top1_10pct"]
    assert own_k["knn_top1"] == metrics["knn_top1"]
    # fine-tuning is off by default; the label-efficient probe and kNN are on, at 1% and 10%
    default = evaluate_network(torch.nn.ModuleDict({"encoder": encoder}), data,
                               resolve({**synthetic_raw, "eval": {"knn_k": 5, "train_subset": 1000}}))
    assert {m for m in default if "pct" in m} == {"knn_top1_1pct", "linear_top1_1pct",
                                                  "knn_top1_10pct", "linear_top1_10pct"}


def test_the_raw_pixel_reference_is_the_protocol_on_the_images_themselves():
    """Two train images, one per class (p0, p1), and 300 test images of :func:`two_class_points`: on
    the raw pixels the kNN (k clipped to 2) predicts the class of the more cosine-similar of the two
    and the probe on two standardised points the side of their perpendicular bisector in
    standardised space (see the test above): each counted by hand."""
    import numpy as np

    from simulator.evaluation.monitor import EvalData, evaluate_networks, raw_pixels
    from simulator.scenario import resolve
    train_x, train_y = two_class_points(1, seed=0)
    test_x, test_y = two_class_points(150, seed=1)
    p0, p1 = train_x.flatten(1).double().numpy() / 255
    test = test_x.flatten(1).double().numpy() / 255
    cos = lambda x, p: x @ p / np.linalg.norm(x, axis=1) / np.linalg.norm(p)  # noqa: E731
    knn_margin, probe_margin = cos(test, p1) - cos(test, p0), ((test - (p0 + p1) / 2) / (p1 - p0)).sum(axis=1)
    clear = (np.abs(knn_margin) > 1e-4) & (np.abs(probe_margin) > 1e-4)  # ties the hand rule does not settle
    truth = test_y.numpy()[clear]
    knn_hand, probe_hand = np.mean((knn_margin[clear] > 0) == truth), np.mean((probe_margin[clear] > 0) == truth)
    assert len(truth) > 280 and knn_hand != probe_hand and 0.5 < min(knn_hand, probe_hand) < 1
    scenario = resolve({"seed": 5, "eval": {"label_fractions": []},
                        "augment": {"crop_scale": [1.0, 1.0], "flip_prob": 0.0}})
    data = EvalData(train_x, train_y, test_x[clear], test_y[clear], num_classes=2)
    metrics = evaluate_networks(raw_pixels(), data, scenario)["global"]
    assert metrics["knn_top1"] == pytest.approx(knn_hand, abs=1e-12)
    assert metrics["linear_top1"] == pytest.approx(probe_hand, abs=1e-12)


def test_the_evaluation_cache_evaluates_again_whatever_its_key_holds_changes(synthetic_raw, monkeypatch):
    """A hit needs the same data tensors, eval/augment settings and seed, network structure and state."""
    import copy
    import dataclasses

    import torch

    from simulator.evaluation import monitor
    from simulator.scenario import resolve
    scenario = resolve(synthetic_raw)
    data = monitor.load_eval_data(scenario)
    torch.manual_seed(0)
    network = torch.nn.ModuleDict({"encoder": torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 16))})
    evaluated = []
    real = monitor.evaluate_network
    monkeypatch.setattr(monitor, "evaluate_network", lambda *args: evaluated.append(1) or real(*args))
    cache = monitor.EvaluationCache()
    first = cache.evaluate_networks({"global": network}, data, scenario)
    assert first == {"global": real(network, data, scenario)} and len(evaluated) == 1
    same_data = monitor.load_eval_data(scenario)  # loaded again: equal tensors, another object
    assert cache.evaluate_networks({"a": network, "b": network}, same_data, scenario) == {"a": first["global"],
                                                                                         "b": first["global"]}
    assert len(evaluated) == 1
    test_x = data.test_x.clone()
    test_x[0, 0, 0, 0] ^= 1  # one pixel of one test image
    other_network = copy.deepcopy(network)
    with torch.no_grad():
        other_network["encoder"][1].bias[0] += 1e-6
    wider = torch.nn.ModuleDict({"encoder": torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 16),
                                                                torch.nn.ReLU())})
    wider.load_state_dict(network.state_dict())  # same state, another structure
    changes = [({"global": network}, dataclasses.replace(data, test_x=test_x), scenario),
               ({"global": network}, data, {**scenario, "seed": scenario["seed"] + 1}),
               ({"global": network}, data, {**scenario, "eval": {**scenario["eval"], "knn_k": 7}}),
               ({"global": network}, data, {**scenario, "augment": {**scenario["augment"], "flip_prob": 0.0}}),
               ({"global": other_network}, data, scenario), ({"global": wider}, data, scenario)]
    for count, (networks, changed_data, changed_scenario) in enumerate(changes, start=2):
        cache.evaluate_networks(networks, changed_data, changed_scenario)
        assert len(evaluated) == count


def test_align_and_uniformity_take_the_first_two_thousand_training_images():
    """2,100 training images (one-pixel-high strips, pixels as the features): Align and Unif are
    those of the first 2,000 under the scenario's augmentation, drawn from (seed, "align-uniform"),
    not of all of them nor of fewer (the other tests' banks hold at most 2,000 images)."""
    import torch

    from simulator.augment import AugmentConfig, BatchAugment
    from simulator.context import derive_seed
    from simulator.evaluation.align_uniform import align_uniform_score
    from simulator.evaluation.monitor import EvalData, evaluate_network
    from simulator.scenario import resolve
    generator = torch.Generator().manual_seed(0)
    train_x = torch.randint(0, 256, (2100, 1, 1, 6), dtype=torch.uint8, generator=generator)
    train_x[2000:] = 255  # the images past 2,000 change both terms
    data = EvalData(train_x, torch.arange(2100) % 2, train_x[:40], torch.arange(40) % 2, num_classes=2)
    scenario = resolve({"seed": 3, "eval": {"label_fractions": [], "knn_k": 5}, "augment": {"jitter_prob": 0.5}})
    metrics = evaluate_network(torch.nn.ModuleDict({"encoder": torch.nn.Flatten()}), data, scenario)

    def score(count):
        generator = torch.Generator().manual_seed(derive_seed(3, "align-uniform"))
        return align_uniform_score(torch.nn.Flatten(), train_x[:count], BatchAugment(AugmentConfig.from_scenario(
            scenario["augment"])), generator)
    expected = score(2000)
    assert {name: metrics[name] for name in expected} == expected
    for other in (score(2100), score(1000)):
        assert other["unif"] != expected["unif"] and other["align"] != expected["align"]


def small_eval_data():
    """40 train and 20 test one-pixel-high strips of six pixels, two classes."""
    import torch

    from simulator.evaluation.monitor import EvalData
    pixels = torch.randint(0, 256, (60, 1, 1, 6), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    return EvalData(pixels[:40], torch.arange(40) % 2, pixels[40:], torch.arange(20) % 2, num_classes=2)


def test_the_evaluation_cache_hands_out_copies_of_its_results():
    """Two labels of one network, and a later hit, each get their own dict: a caller that edits one
    (adds a metric, rounds a value) changes neither the other nor what the cache gives next."""
    import torch

    from simulator.evaluation.monitor import EvaluationCache, evaluate_network
    from simulator.scenario import resolve
    scenario = resolve({"seed": 1, "eval": {"label_fractions": [], "knn_k": 5}})
    data, network = small_eval_data(), torch.nn.ModuleDict({"encoder": torch.nn.Flatten()})
    expected = evaluate_network(network, data, scenario)
    cache = EvaluationCache()
    first = cache.evaluate_networks({"a": network, "b": network}, data, scenario)
    first["a"]["knn_top1"], first["a"]["extra"] = -1.0, 0.0
    assert first["b"] == expected
    assert cache.evaluate_networks({"c": network}, data, scenario) == {"c": expected}


def test_the_evaluation_data_key_holds_each_tensor_s_shape_and_dtype_and_the_class_count():
    """Data whose tensors hold the same bytes in another shape or dtype, or that names another class
    count, is other data: its settings key differs."""
    import dataclasses

    import torch

    from simulator.evaluation.monitor import EvaluationCache
    from simulator.scenario import resolve
    scenario = resolve({"seed": 1})
    data = small_eval_data()
    variants = [data, dataclasses.replace(data, train_x=data.train_x.view(40, 1, 6, 1)),
                dataclasses.replace(data, test_x=data.test_x.view(torch.int8)),
                dataclasses.replace(data, num_classes=3)]
    keys = {EvaluationCache().settings_key(variant, scenario) for variant in variants}
    assert len(keys) == len(variants)


def test_the_metric_names_of_fractional_label_percentages_are_evaluated_names():
    """A label fraction of 0.5% or 12.5% names its metrics ``knn_top1_0p5pct``, ``finetune_top1_12p5pct``:
    names a claim suite may name (the other tests' fractions are whole percentages)."""
    from simulator.scenario import fraction_suffix
    for fraction in (0.005, 0.125):
        for name in ("knn_top1", "linear_top1", "finetune_top1"):
            assert EVALUATED_METRIC.fullmatch(f"{name}_{fraction_suffix(fraction)}")
    assert not EVALUATED_METRIC.fullmatch("knn_top1_0p5") and not EVALUATED_METRIC.fullmatch("knn_projector_top1_1pct")


def test_the_evaluation_data_are_the_seeded_train_subset_and_the_labelled_rows_of_the_whole_train_set(synthetic_raw):
    """``eval.train_subset`` rows of the train set drawn from (seed, "eval-train"); a semi-supervised
    run's labelled samples are the method's labelled indices of the whole train set, not of that
    subset (the other semi-supervised test keeps the whole set, where the two coincide)."""
    import torch

    from methods import METHODS
    from simulator.context import derive_seed
    from simulator.data.datasets import scenario_dataset, seeded_subset
    from simulator.data.partition import build_partition
    from simulator.evaluation.monitor import load_eval_data
    from simulator.scenario import resolve
    scenario = resolve({**synthetic_raw, "method": {"name": "fedavg", "objective": "simclr", "labelled_fraction": 0.1},
                        "eval": {**synthetic_raw["eval"], "train_subset": 1000}})
    data = load_eval_data(scenario)
    full = scenario_dataset(scenario["dataset"], scenario["seed"])
    train_x, train_y = seeded_subset(full.train_x, full.train_y, 1000, derive_seed(scenario["seed"], "eval-train"))
    assert torch.equal(data.train_x, train_x) and torch.equal(data.train_y, train_y) and len(full.train_y) > 1000
    rows = METHODS["fedavg"].labelled_train_indices(scenario, lambda: build_partition(scenario, full.train_y.numpy()))
    assert len(rows) > 100 and rows.max() >= 1000
    assert torch.equal(data.labelled_x, full.train_x[rows]) and torch.equal(data.labelled_y, full.train_y[rows])
