"""The one local loop (``methods.local_training``): epochs, batches, hooks, logged parts, the lr
schedule, the EMA rule and the non-finite guard, on a toy parameter whose steps are computed by hand."""
import math

import pytest
import torch

from methods.local_training import LocalStep, ema_update, local_lr, train_local_epochs
from simulator.context import RoundContext, freeze

TRAINING = {"local_epochs": 2, "batch_size": 4, "lr": 0.1, "lr_schedule": "constant", "momentum": 0.0,
            "weight_decay": 0.0, "grad_clip_norm": 0.0}


def context(round_index=1, rounds=4, **training):
    return RoundContext(round_index, rounds, (0,), 0, freeze({"training": {**TRAINING, **training}}))


def test_epochs_batches_hooks_and_logged_parts_against_a_hand_computation():
    # loss(rows) = w * sum(x[rows]) with x = 1..10: SGD moves w by -lr * sum(x[rows]) per step
    x = torch.arange(1.0, 11.0)
    w = torch.nn.Parameter(torch.zeros(()))
    calls, seen = [], []

    def loss(rows):
        seen.append(rows.tolist())
        calls.append("forward")
        return w * x[rows].sum(), {"part": torch.tensor(float(len(rows)))}

    step = LocalStep(loss, [w], before_forward=[lambda: calls.append("before")],
                     after_step=[lambda: calls.append("after")])
    generator = torch.Generator().manual_seed(3)
    metrics = train_local_epochs(step, 10, generator, torch.device("cpu"), context(), "client 0")
    # 10 samples in batches of 4: 4, 4, 2 per epoch (a batch of one would be skipped), two epochs
    assert [len(rows) for rows in seen] == [4, 4, 2] * 2
    assert sorted(sum(seen[:3], [])) == list(range(10)) and sorted(sum(seen[3:], [])) == list(range(10))
    assert seen[:3] != seen[3:]  # a fresh order per epoch
    assert calls == ["before", "forward", "after"] * 6
    expected_w, losses = 0.0, []
    for rows in seen:
        total = float(x[rows].sum())
        losses.append(expected_w * total)
        expected_w -= 0.1 * total
    assert w.item() == pytest.approx(expected_w)
    assert metrics["loss"] == pytest.approx(sum(losses) / 6)
    assert metrics["part"] == pytest.approx((4 + 4 + 2) * 2 / 6)


def test_a_batch_of_one_sample_is_skipped_and_no_step_logs_nothing():
    w = torch.nn.Parameter(torch.ones(()))
    step = LocalStep(lambda rows: (w * len(rows), {}), [w])
    metrics = train_local_epochs(step, 1, torch.Generator().manual_seed(0), torch.device("cpu"), context(), "c")
    assert metrics == {} and w.item() == 1.0


def test_cosine_schedule_and_non_finite_guard():
    assert local_lr(context(round_index=2, rounds=4, lr_schedule="cosine")) == pytest.approx(
        0.1 * 0.5 * (1 + math.cos(math.pi * context(2, 4).progress)))
    assert local_lr(context(round_index=2, rounds=4)) == 0.1
    w = torch.nn.Parameter(torch.ones(()))
    step = LocalStep(lambda rows: (w * float("nan"), {}), [w])
    with pytest.raises(FloatingPointError, match=r"round 1, client 7, method m: loss is nan"):
        train_local_epochs(step, 4, torch.Generator(), torch.device("cpu"), context(), "client 7, method m")


def test_ema_update_is_the_byol_rule():
    online = torch.nn.ModuleDict({"encoder": torch.nn.Linear(2, 2)})
    target = torch.nn.ModuleDict({"encoder": torch.nn.Linear(2, 2)})
    before = target["encoder"].weight.detach().clone()
    ema_update(target, online, 0.9)
    assert torch.allclose(target["encoder"].weight, 0.9 * before + 0.1 * online["encoder"].weight)
