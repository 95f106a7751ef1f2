"""Alignment and uniformity of Orchestra's section 5 (Eq. 5)."""
import math

import pytest
import torch

from simulator.evaluation.align_uniform import align_uniform_score, alignment_uniformity
from simulator.augment import AugmentConfig, BatchAugment
from simulator.models import build_encoder


def test_matches_hand_computation():
    features = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    augmented = torch.tensor([[1.0, 1.0], [0.0, -1.0]])  # cosines 1/sqrt2 and -1
    align = (1 / math.sqrt(2) - 1) / 2
    # s(x, y): 1 with itself, 0 with the other sample; tau = 0.2
    unif = -math.log((math.exp(5) + 1) / 2)
    out = alignment_uniformity(features, augmented, tau=0.2)
    assert out["align"] == pytest.approx(align, rel=1e-9)
    assert out["unif"] == pytest.approx(unif, rel=1e-9)
    assert out["align_unif_score"] == pytest.approx(align + 0.2 * unif, rel=1e-9)


def test_collapse_scores_below_spread_representations():
    spread = torch.eye(8)
    collapsed = torch.ones(8, 8)
    # a collapsed representation aligns perfectly but has the worst uniformity, -1 / tau
    out_collapsed = alignment_uniformity(collapsed, collapsed)
    assert out_collapsed["align"] == pytest.approx(1.0)
    assert out_collapsed["unif"] == pytest.approx(-5.0)
    assert alignment_uniformity(spread, spread)["align_unif_score"] > out_collapsed["align_unif_score"]


def test_chunking_does_not_change_the_result():
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(50, 6, generator=generator), torch.randn(50, 6, generator=generator)
    whole, chunked = alignment_uniformity(a, b), alignment_uniformity(a, b, chunk=7)
    assert whole["unif"] == pytest.approx(chunked["unif"], rel=1e-12)


def test_score_of_an_encoder():
    torch.manual_seed(0)
    encoder = build_encoder("small_cnn", 1, 28)
    images = torch.randint(0, 256, (12, 1, 28, 28), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    identity = BatchAugment(AugmentConfig(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_prob=0.0,
                                          jitter_prob=0.0))
    same = align_uniform_score(encoder, images, identity, torch.Generator().manual_seed(2), batch_size=5)
    assert same["align"] == pytest.approx(1.0, abs=1e-5)
    encoder.train()
    augmented = align_uniform_score(encoder, images, BatchAugment(AugmentConfig()), torch.Generator().manual_seed(2))
    assert augmented["align"] < same["align"] and augmented["unif"] == pytest.approx(same["unif"])
    assert encoder.training  # mode restored


@pytest.mark.parametrize("training", [True, False])
def test_an_encoder_in_train_mode_is_scored_in_eval_mode_and_left_in_its_mode(training):
    """A BatchNorm encoder whose running statistics are not its batches' statistics: the score is
    Eq. 5 of the features normalised with the running statistics (eval mode, by hand), the running
    statistics do not move, and the encoder is left in the mode it came in."""
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (20, 1, 4, 4), dtype=torch.uint8, generator=generator)
    norm = torch.nn.BatchNorm1d(16)
    with torch.no_grad():
        norm.running_mean.copy_(torch.rand(16, generator=generator))
        norm.running_var.copy_(0.01 + 0.2 * torch.rand(16, generator=generator))
        norm.weight.copy_(0.5 + torch.rand(16, generator=generator))
        norm.bias.copy_(torch.randn(16, generator=generator))
    encoder = torch.nn.Sequential(torch.nn.Flatten(), norm).train(training)
    running = (norm.running_mean.clone(), norm.running_var.clone())
    augment = BatchAugment(AugmentConfig())
    scale, shift = norm.weight / (norm.running_var + norm.eps).sqrt(), norm.bias
    by_hand = lambda x: ((x.flatten(1) - norm.running_mean) * scale + shift).detach()  # noqa: E731
    x = images.float() / 255
    replay = torch.Generator().manual_seed(3)  # the views of batches of 8, 8 and 4 images, drawn in turn
    views = torch.cat([augment(batch, replay) for batch in x.split(8)])
    expected = alignment_uniformity(by_hand(x), by_hand(views))
    in_train_mode = alignment_uniformity(*(torch.cat([torch.nn.functional.batch_norm(
        batch.flatten(1), None, None, norm.weight, norm.bias, training=True).detach() for batch in v.split(8)])
        for v in (x, views)))
    assert abs(in_train_mode["align_unif_score"] - expected["align_unif_score"]) > 0.05  # the modes differ here

    score = align_uniform_score(encoder, images, augment, torch.Generator().manual_seed(3), batch_size=8)

    for name in ("align", "unif", "align_unif_score"):
        assert score[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-6)
    assert encoder.training == training and norm.training == training
    assert torch.equal(norm.running_mean, running[0]) and torch.equal(norm.running_var, running[1])


def test_uniformity_is_the_mean_over_samples_of_an_uneven_set():
    """Three samples, two at one point and one orthogonal to it (tau = 0.2): each sample's log-mean of
    exp(s / tau) over all three, L_a = log((2 e^5 + 1) / 3) for the pair, L_b = log((2 + e^5) / 3) for the
    third; Unif = -(2 L_a + L_b) / 3 (a median over samples, or a symmetric pair, gives -L_a)."""
    features = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 0.5]])
    pair, third = math.log((2 * math.exp(5) + 1) / 3), math.log((2 + math.exp(5)) / 3)
    out = alignment_uniformity(features, features, tau=0.2)
    assert out["unif"] == pytest.approx(-(2 * pair + third) / 3, rel=1e-9)
    assert out["align"] == pytest.approx(1.0, rel=1e-9)
