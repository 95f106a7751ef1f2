import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from simulator.evaluation.metrics import (extract_features, finetune, finetune_top1, knn_top1, label_subset, linear_probe_top1,
                                         zero_linear)
from simulator.scenario import KNN_MIN_TEMPERATURE


def tiny_encoder() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Dropout(p=0.5), nn.Linear(12, 5))


def test_extract_features_shape_scaling_and_eval_mode():
    encoder = tiny_encoder()
    images = torch.randint(0, 256, (7, 3, 2, 2), dtype=torch.uint8)

    features = extract_features(encoder, images, batch_size=3)

    assert features.shape == (7, 5) and features.dtype == torch.float32
    assert features.device.type == "cpu"
    # Dropout is inactive (eval mode) and the input is x / 255.
    expected = encoder[2](images.flatten(1).float() / 255)
    torch.testing.assert_close(features, expected.detach())
    assert not features.requires_grad


def test_extract_features_restores_previous_mode():
    encoder = tiny_encoder()
    images = torch.zeros(2, 3, 2, 2, dtype=torch.uint8)
    encoder.train()
    extract_features(encoder, images)
    assert encoder.training and encoder[1].training
    encoder.eval()
    extract_features(encoder, images)
    assert not encoder.training


def test_knn_two_clusters_is_perfect():
    generator = torch.Generator().manual_seed(0)
    centres = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    train_labels = torch.arange(2).repeat(20)
    test_labels = torch.arange(2).repeat(10)
    train = centres[train_labels] + 0.05 * torch.randn(40, 2, generator=generator)
    test = centres[test_labels] + 0.05 * torch.randn(20, 2, generator=generator)
    assert knn_top1(train, train_labels, test, test_labels, num_classes=2, k=5) == 1.0


def test_knn_weighting_decides_the_vote():
    # Query (1, 0). Class 0: one neighbour at cos 1. Class 1: two neighbours at cos 0.8.
    # T = 0.1: votes e^10 vs 2 e^8 -> class 0 (e^2 > 2), although class 1 has the majority.
    # T = 10: votes e^0.1 = 1.11 vs 2 e^0.08 = 2.17 -> class 1.
    bank = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.8, -0.6]])
    bank_labels = torch.tensor([0, 1, 1])
    query = torch.tensor([[1.0, 0.0]])
    assert knn_top1(bank, bank_labels, query, torch.tensor([0]), 2, k=3, temperature=0.1) == 1.0
    assert knn_top1(bank, bank_labels, query, torch.tensor([1]), 2, k=3, temperature=10.0) == 1.0


def test_the_smallest_temperature_a_scenario_may_set_keeps_the_votes_finite():
    """Query (1, 0); class 1 one neighbour at cos 1, class 0 two at cos 0.99: class 1 wins by
    e^(0.01 / T) > 2 at any T below 0.0144. At T = 0.01 both votes are float32's infinity and the tie
    goes to class 0; at the least temperature a scenario may set (0.0113) the weights are finite."""
    bank = torch.tensor([[1.0, 0.0], [0.99, 0.141], [0.99, -0.141]])
    bank_labels, query, truth = torch.tensor([1, 0, 0]), torch.tensor([[1.0, 0.0]]), torch.tensor([1])
    assert knn_top1(bank, bank_labels, query, truth, 2, k=3, temperature=KNN_MIN_TEMPERATURE) == 1.0
    assert knn_top1(bank, bank_labels, query, truth, 2, k=3, temperature=0.01) == 0.0


def test_knn_clips_k_to_bank_size_and_ignores_chunking():
    generator = torch.Generator().manual_seed(1)
    bank = torch.randn(6, 3, generator=generator)
    bank_labels = torch.tensor([0, 1, 2, 0, 1, 2])
    queries = torch.randn(9, 3, generator=generator)
    query_labels = torch.randint(0, 3, (9,), generator=generator)
    clipped = knn_top1(bank, bank_labels, queries, query_labels, 3, k=200)
    assert clipped == knn_top1(bank, bank_labels, queries, query_labels, 3, k=6)
    assert clipped == knn_top1(bank, bank_labels, queries, query_labels, 3, k=200, chunk=2)


def gaussian_blobs(n_per_class: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    centres = 4.0 * torch.eye(3, 8)
    labels = torch.arange(3).repeat(n_per_class)
    return centres[labels] + 0.5 * torch.randn(len(labels), 8, generator=generator), labels


def test_linear_probe_separates_gaussian_blobs():
    generator = torch.Generator().manual_seed(0)
    train, train_labels = gaussian_blobs(100, generator)
    test, test_labels = gaussian_blobs(100, generator)
    assert linear_probe_top1(train, train_labels, test, test_labels, num_classes=3) == 1.0
    # Standardisation makes the probe indifferent to the scale of the features.
    assert linear_probe_top1(1e3 * train, train_labels, 1e3 * test, test_labels, 3) == 1.0


def test_a_linear_probe_on_one_train_row_predicts_its_class():
    """``eval.train_subset: 1`` (or a label fraction's subset of one row): the row's std was NaN and L-BFGS
    raised RuntimeError (a value that overflowed float), a traceback of fedssl evaluate or of a run's evaluator;
    and torch's "degrees of freedom" warning, a stray line on stderr, is not raised."""
    generator = torch.Generator().manual_seed(0)
    test, test_labels = gaussian_blobs(10, generator)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert linear_probe_top1(test[:1], test_labels[:1], test, test_labels, num_classes=3) == pytest.approx(1 / 3)


def test_linear_probe_is_at_chance_on_random_labels():
    generator = torch.Generator().manual_seed(0)
    train = torch.randn(2000, 16, generator=generator)
    test = torch.randn(2000, 16, generator=generator)
    train_labels = torch.randint(0, 4, (2000,), generator=generator)
    test_labels = torch.randint(0, 4, (2000,), generator=generator)
    accuracy = linear_probe_top1(train, train_labels, test, test_labels, num_classes=4)
    assert accuracy == pytest.approx(0.25, abs=0.05)


def test_float_inputs_pass_unscaled():
    head = torch.nn.Linear(4, 3)
    features = torch.randn(10, 4)
    with torch.no_grad():
        expected = head(features)
    assert torch.allclose(extract_features(head, features, batch_size=3), expected)


def test_knn_normalises_features_of_varied_norms_and_weights_votes_by_exp_sim_over_t():
    # Query (3, 0), norm 3. Class 0: one neighbour (0.5, 0), norm 0.5, cos 1. Class 1: (8, 6) and
    # (8, -6), norm 10, cos 0.8. Votes exp(cos / T): class 0 wins iff e^(1/T) > 2 e^(0.8/T), i.e.
    # iff T < 0.2 / ln 2 = 0.2885. Raw dot products (3 * 0.5 = 1.5 vs 24) would give class 1 for
    # every T; an unnormalised query (sims 3 vs 2.4) would give class 0 at T = 0.3 (e^2 > 2).
    bank = torch.tensor([[0.5, 0.0], [8.0, 6.0], [8.0, -6.0]])
    bank_labels = torch.tensor([0, 1, 1])
    query = torch.tensor([[3.0, 0.0]])
    assert knn_top1(bank, bank_labels, query, torch.tensor([0]), 2, k=3, temperature=0.28) == 1.0
    assert knn_top1(bank, bank_labels, query, torch.tensor([1]), 2, k=3, temperature=0.30) == 1.0
    # k = 1: the single most cosine-similar neighbour, the short one (a dot product picks a long one)
    assert knn_top1(bank, bank_labels, query, torch.tensor([0]), 2, k=1, temperature=0.30) == 1.0
    # the accuracy is the fraction of queries right: a second query, (0, 1), is nearest to class 1
    queries, labels = torch.tensor([[3.0, 0.0], [0.0, 0.1]]), torch.tensor([0, 0])
    assert knn_top1(bank, bank_labels, queries, labels, 2, k=3, temperature=0.28) == 0.5


def imbalanced_blobs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """60, 15 and 15 points of three overlapping 4-d Gaussian blobs (not separable)."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.cat([torch.full((count,), k) for k, count in enumerate((60, 15, 15))])
    centres = torch.tensor([[0.0, 0, 0, 0], [1.5, 0, 0, 0], [0, 1.5, 0, 0]])
    return centres[labels] + torch.randn(len(labels), 4, generator=generator), labels


def newton_probe(features, labels, num_classes, weight_decay):
    """The probe's objective (mean cross-entropy + weight_decay / 2 ||W||^2, bias free, on features
    standardised with the train statistics) minimised by Newton's method in float64 (exact Hessian);
    returns (the predicted classes of new features, the optimum's W [k, d], its b [k])."""
    mean, std = features.mean(0), features.std(0)
    z = ((features - mean) / std).double()
    k, d = num_classes, z.shape[1]

    def objective(theta):
        return F.cross_entropy(z @ theta[:k * d].view(k, d).T + theta[k * d:], labels) + \
            weight_decay / 2 * theta[:k * d].square().sum()

    theta = torch.zeros(k * d + k, dtype=torch.float64)
    ridge = 1e-12 * torch.eye(len(theta), dtype=torch.float64)  # the biases' common shift is free
    for _ in range(30):
        gradient = torch.autograd.functional.jacobian(objective, theta)
        theta = theta - torch.linalg.solve(torch.autograd.functional.hessian(objective, theta) + ridge, gradient)
    weight, bias = theta[:k * d].view(k, d), theta[k * d:]
    return lambda q: (((q - mean) / std).double() @ weight.T + bias).argmax(1), weight, bias


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_linear_probe_is_the_regularised_logistic_regression_optimum(seed, one_thread, monkeypatch):
    # the default probe (weight decay 1e-4) scores as the exact optimum of its objective; a penalty
    # of 1 (the optimum shrinks towards the majority class) would score lower on these data
    train, train_labels = imbalanced_blobs(seed)
    test, test_labels = imbalanced_blobs(seed + 100)

    def accuracy(weight_decay):
        return (newton_probe(train, train_labels, 3, weight_decay)[0](test) == test_labels).double().mean().item()

    assert linear_probe_top1(train, train_labels, test, test_labels, 3) == pytest.approx(accuracy(1e-4), abs=1e-9)
    assert accuracy(1.0) < accuracy(1e-4) - 0.05
    # at a penalty that shapes the optimum, the probe is still that optimum (its bias unpenalised)
    assert linear_probe_top1(train, train_labels, test, test_labels, 3, weight_decay=1.0) == \
        pytest.approx(accuracy(1.0), abs=1e-9)
    # and its parameters are that optimum's, the penalty's 1/2 included: the optimum of
    # weight_decay ||W||^2 (that of a penalty of 2 in the stated objective) is another one
    import simulator.evaluation.metrics as metrics
    probes = []

    def recorded_zero_linear(*args, **kwargs):  # the probe the function fits, kept for a look at it
        probes.append(zero_linear(*args, **kwargs))
        return probes[-1]

    monkeypatch.setattr(metrics, "zero_linear", recorded_zero_linear)
    linear_probe_top1(train, train_labels, test, test_labels, 3, weight_decay=1.0)
    _, weight, bias = newton_probe(train, train_labels, 3, 1.0)
    centred = lambda b: b - b.mean()  # noqa: E731  (a common shift of the biases changes no softmax)
    torch.testing.assert_close(probes[0].weight.double(), weight, rtol=0, atol=1e-3)
    torch.testing.assert_close(centred(probes[0].bias.double()), centred(bias), rtol=0, atol=2e-3)
    assert (newton_probe(train, train_labels, 3, 2.0)[1] - weight).abs().max() > 0.05


def test_linear_probe_is_scored_on_the_held_out_test_set(one_thread):
    # Train: class 0 at -1, class 1 at +1 (the probe predicts the sign; 100% on its own training
    # data). Test (of another size): 3 points at -1 labelled 0 (right), 1 at +1 labelled 1 (right)
    # and 4 at +1 labelled 0 (wrong): 4 of 8 = 0.5.
    train = torch.tensor([[-1.0], [-1.0], [-1.0], [1.0], [1.0], [1.0]])
    train_labels = torch.tensor([0, 0, 0, 1, 1, 1])
    test = torch.tensor([[-1.0]] * 3 + [[1.0]] * 5)
    test_labels = torch.tensor([0, 0, 0, 1, 0, 0, 0, 0])
    assert linear_probe_top1(train, train_labels, test, test_labels, num_classes=2) == 0.5
    assert linear_probe_top1(train, train_labels, train, train_labels, num_classes=2) == 1.0


def test_label_subset_is_stratified_with_the_requested_size():
    # 100, 300 and 5 rows of classes 0, 1, 2 (N = 405), in a shuffled order.
    shuffle = torch.randperm(405, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([0] * 100 + [1] * 300 + [2] * 5)[shuffle]
    count = lambda rows: torch.bincount(labels[rows], minlength=3).tolist()  # noqa: E731
    # 1%: quotas 1, 3, 0.05 -> 1, 3, 0 (round(4.05) = 4 rows), then one row of class 2 at least
    assert count(label_subset(labels, 0.01, seed=0, draw=0)) == [1, 3, 1]
    # 10%: quotas 10, 30, 0.5 -> floors 10, 30, 0; round(40.5) = 41 rows: the largest remainder (class 2) gets one
    assert count(label_subset(labels, 0.1, seed=0, draw=0)) == [10, 30, 1]
    # ties of remainders go to the lower class: 15, 15, 10 rows at 10% -> 1.5, 1.5, 1 -> 4 rows
    tied = torch.tensor([0] * 15 + [1] * 15 + [2] * 10)
    assert torch.bincount(tied[label_subset(tied, 0.1, seed=0, draw=0)]).tolist() == [2, 1, 1]
    # balanced classes: exactly the fraction of every class
    balanced = torch.arange(10).repeat(100)
    assert torch.bincount(balanced[label_subset(balanced, 0.01, 0, 0)]).tolist() == [1] * 10
    assert torch.bincount(balanced[label_subset(balanced, 0.1, 0, 0)]).tolist() == [10] * 10
    assert len(label_subset(balanced, 1.0, 0, 0)) == 1000
    # round(fraction x N), a half up: 30% of three classes of 5 is 4.5 -> 5 rows (quotas 1.5 each: 2, 2, 1)
    fives = torch.tensor([0] * 5 + [1] * 5 + [2] * 5)
    assert torch.bincount(fives[label_subset(fives, 0.3, seed=0, draw=0)]).tolist() == [2, 2, 1]


def test_label_subsets_are_fixed_by_seed_and_draw_differ_between_draws_and_nest():
    labels = torch.arange(10).repeat(100)
    rows = {(seed, draw): label_subset(labels, 0.1, seed, draw) for seed in (0, 1) for draw in range(3)}
    for key, value in rows.items():
        assert torch.equal(value, label_subset(labels, 0.1, *key))  # reproducible
        assert torch.equal(value, value.unique())  # sorted, distinct rows
    assert len({tuple(v.tolist()) for v in rows.values()}) == 6  # every (seed, draw) differs
    for draw in range(3):  # the 1% rows of a draw are among its 10% rows
        small = set(label_subset(labels, 0.01, 0, draw).tolist())
        assert small < set(rows[0, draw].tolist())


def adaptation_task(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """1x4-pixel images whose label is whether pixel 0 is bright."""
    images = torch.randint(0, 256, (n, 1, 1, 4), generator=generator, dtype=torch.uint8)
    return images, (images[:, 0, 0, 0] > 127).long()


def blind_encoder() -> nn.Module:
    """An encoder that ignores pixel 0: its frozen features carry nothing of the label."""
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Flatten(), nn.Linear(4, 8), nn.ReLU())
    with torch.no_grad():
        encoder[1].weight[:, 0] = 0
    return encoder


def test_finetuning_adapts_a_copy_of_the_encoder_and_beats_the_frozen_probe(one_thread):
    generator = torch.Generator().manual_seed(0)
    train_x, train_y = adaptation_task(200, generator)
    test_x, test_y = adaptation_task(500, generator)
    encoder = blind_encoder()
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    features = lambda x: extract_features(encoder, x)  # noqa: E731
    frozen = linear_probe_top1(features(train_x), train_y, features(test_x), test_y, 2)
    assert frozen < 0.6  # the frozen features are blind to the label: chance
    tuned = finetune_top1(encoder, train_x, train_y, test_x, test_y, 2, steps=100, batch_size=32, lr=1e-2, seed=0)
    assert tuned > 0.95
    assert all(torch.equal(v, before[k]) for k, v in encoder.state_dict().items())  # the original is untouched
    model = finetune(encoder, train_x, train_y, 2, steps=100, batch_size=32, lr=1e-2, seed=0)
    assert model[0] is not encoder and model[0][1].weight[:, 0].abs().sum() > 0  # the copy learned to see pixel 0
    assert not model.training
    assert tuned == finetune_top1(encoder, train_x, train_y, test_x, test_y, 2, steps=100, batch_size=32, lr=1e-2,
                                  seed=0)  # deterministic


def test_a_feature_constant_on_the_labelled_samples_is_not_magnified_by_fine_tuning(one_thread):
    # The raw-pixel reference (the encoder a Flatten) with augmentation: a border pixel is 0 on every
    # labelled image, and crops move content into it. Here feature 2 is 0 on every labelled sample and
    # noise of scale 1 after augmentation and at test time; features 0-1 carry the label. Standardised
    # with a divisor of 1e-6 the noise reaches 1e6, its head weight follows the noise and the predictions
    # with it (accuracy about chance); only centred, it stays noise of scale 1 beside the signal.
    generator = torch.Generator().manual_seed(0)

    def task(n, constant_noise):
        labels = torch.randint(0, 2, (n,), generator=generator)
        signal = (2.0 * labels - 1).unsqueeze(1) * torch.tensor([1.0, 1.0]) + 0.3 * torch.randn(n, 2, generator=generator)
        third = torch.zeros(n, 1) if constant_noise else torch.randn(n, 1, generator=generator)
        return torch.cat([signal, third], dim=1), labels

    train_x, train_y = task(100, constant_noise=True)
    test_x, test_y = task(1000, constant_noise=False)

    def noise_in_feature_2(x, gen):
        return x + torch.cat([torch.zeros(len(x), 2), torch.randn(len(x), 1, generator=gen)], dim=1)

    accuracy = finetune_top1(nn.Identity(), train_x, train_y, test_x, test_y, 2, steps=100, batch_size=32, lr=1e-2,
                             seed=0, augment=noise_in_feature_2)
    assert accuracy > 0.95
    model = finetune(nn.Identity(), train_x, train_y, 2, steps=0)
    assert torch.equal(model[2].std, torch.cat([train_x[:, :2].std(dim=0), torch.ones(1)]))  # feature 2 centred only


def test_finetuning_on_one_labelled_row_keeps_every_feature_unscaled_without_a_warning():
    """One labelled row has no spread: each feature is centred on it and divided by 1 (not by its NaN
    Bessel-corrected std, whose computation also printed torch's "degrees of freedom" warning)."""
    train_x = torch.tensor([[0.5, -2.0, 3.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = finetune(nn.Identity(), train_x, torch.tensor([1]), 2, steps=0)
    assert torch.equal(model[2].mean, train_x[0]) and torch.equal(model[2].std, torch.ones(3))


def test_finetuning_with_no_steps_predicts_class_0_everywhere(one_thread):
    # The head starts at zero: equal logits, argmax 0, so accuracy = the share of class 0 in the test set.
    generator = torch.Generator().manual_seed(1)
    train_x, train_y = adaptation_task(50, generator)
    test_x = torch.randint(0, 256, (10, 1, 1, 4), generator=generator, dtype=torch.uint8)
    test_y = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 2])
    assert finetune_top1(blind_encoder(), train_x, train_y, test_x, test_y, 3, steps=0) == 0.3
    logits = extract_features(finetune(blind_encoder(), train_x, train_y, 3, steps=0), test_x)
    assert torch.equal(logits, torch.zeros(10, 3))


def test_probe_and_finetuning_leave_torch_global_generator_as_they_found_it(one_thread):
    # Evaluation runs in a thread beside rounds that seed the global generator to build networks
    # (Hetero-SSFL builds a client's networks at its first round): a draw from it here would change
    # those networks' initial values.
    generator = torch.Generator().manual_seed(2)
    train_x, train_y = adaptation_task(50, generator)
    features = torch.randn(60, 8, generator=generator)
    labels = torch.arange(60) % 3
    encoder = blind_encoder()  # seeds the global generator itself
    torch.manual_seed(123)
    before = torch.get_rng_state()
    linear_probe_top1(features, labels, features, labels, num_classes=3)
    finetune(encoder, train_x, train_y, 2, steps=3, batch_size=8, seed=0)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("n, batch_size, steps", [(50, 16, 3), (20, 8, 6)])
def test_finetuning_is_adam_on_seeded_batches_with_the_copy_in_train_mode(n, batch_size, steps, one_thread):
    """The steps by hand: seeded orders of the n rows, batches taken in turn, x / 255, the head
    standardised with the frozen features' statistics, Adam, the copy in train mode (its BatchNorm
    normalises with the batch's statistics and moves its running ones). 50 rows, 3 batches of 16:
    one order. 20 rows, 6 batches of 8: two batches of each of three orders, the 4 rows left at the
    end of an order never a batch of their own."""
    import copy

    from simulator.evaluation.metrics import Standardise
    train_x, train_y = adaptation_task(n, torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    encoder = nn.Sequential(nn.Flatten(), nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
    model = finetune(encoder, train_x, train_y, 2, steps=steps, batch_size=batch_size, lr=1e-2, seed=5)
    frozen = extract_features(encoder, train_x)
    std = frozen.std(0)
    assert (std == 0).any()  # a unit dead on every sample: only centred
    hand = nn.Sequential(copy.deepcopy(encoder), nn.Flatten(), Standardise(frozen.mean(0), torch.where(std > 0, std, 1)),
                         zero_linear(8, 2))
    optimizer = torch.optim.Adam(hand.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(5)
    per_order = n // batch_size
    orders = [torch.randperm(n, generator=generator) for _ in range(-(-steps // per_order))]
    hand.train()
    for step in range(steps):
        within = step % per_order
        rows = orders[step // per_order][batch_size * within:batch_size * (within + 1)]
        loss = F.cross_entropy(hand(train_x[rows].float() / 255), train_y[rows])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    for (name, value), expected in zip(model.state_dict().items(), hand.state_dict().values()):
        torch.testing.assert_close(value, expected, rtol=0, atol=1e-6, msg=name)
