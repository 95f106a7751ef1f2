"""The one local loop (``methods.local_training``): epochs, batches, hooks, logged parts, the lr
schedule, the EMA rule and the non-finite guard, on a toy parameter whose steps are computed by hand."""
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from methods.local_training import LocalStep, MomentumSGD, ema_update, local_lr, train_local_epochs
from simulator.context import RoundContext, freeze

TRAINING = {"local_epochs": 2, "batch_size": 4, "lr": 0.1, "lr_schedule": "constant", "momentum": 0.0,
            "weight_decay": 0.0, "grad_clip_norm": 0.0, "drop_last": False}


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

    step = LocalStep(loss, [w], before_forward=[lambda: calls.append("before 1"), lambda: calls.append("before 2")],
                     after_step=[lambda: calls.append("after 1"), lambda: calls.append("after 2")])  # every hook, in order
    generator = torch.Generator().manual_seed(3)
    metrics = train_local_epochs(step, 10, generator, torch.device("cpu"), context(), "client 0")
    # 10 samples in batches of 4: 4, 4, 2 per epoch (a batch of one would be skipped), two epochs
    assert [len(rows) for rows in seen] == [4, 4, 2] * 2
    assert sorted(sum(seen[:3], [])) == list(range(10)) and sorted(sum(seen[3:], [])) == list(range(10))
    assert seen[:3] != seen[3:]  # a fresh order per epoch
    assert calls == ["before 1", "before 2", "forward", "after 1", "after 2"] * 6
    expected_w, losses = 0.0, []
    for rows in seen:
        total = float(x[rows].sum())
        losses.append(expected_w * total)
        expected_w -= 0.1 * total
    assert w.item() == pytest.approx(expected_w)
    assert metrics["loss"] == pytest.approx(sum(losses) / 6)
    assert metrics["part"] == pytest.approx((4 + 4 + 2) * 2 / 6)


@pytest.mark.parametrize("momentum, weight_decay, grad_clip_norm", [(0.9, 0.0, 0.0), (0.0, 0.05, 0.0),
                                                                    (0.5, 0.05, 5.0)])
def test_the_loop_steps_with_training_s_momentum_weight_decay_and_clip(momentum, weight_decay, grad_clip_norm):
    """``training.momentum``, ``weight_decay`` and ``grad_clip_norm`` reach the loop's optimiser (the
    test above runs without them): loss(rows) = w * sum(x[rows]), SGD written out, the gradient
    clipped before the weight decay is added (as torch's clip then ``SGD.step``)."""
    x = torch.arange(1.0, 11.0)
    w = torch.nn.Parameter(torch.tensor(0.5))
    seen = []

    def loss(rows):
        seen.append(rows.tolist())
        return w * x[rows].sum(), {}

    train_local_epochs(LocalStep(loss, [w]), 10, torch.Generator().manual_seed(3), torch.device("cpu"),
                       context(momentum=momentum, weight_decay=weight_decay, grad_clip_norm=grad_clip_norm),
                       "client 0")
    expected, buffer = 0.5, None
    for rows in seen:
        grad = float(x[rows].sum())  # at least 1 + 2 = 3: a clip norm of 5 clips most steps
        if grad_clip_norm:
            grad = min(grad, grad_clip_norm)
        direction = grad + weight_decay * expected
        buffer = direction if buffer is None else momentum * buffer + direction
        expected -= 0.1 * buffer
    assert len(seen) == 6 and w.item() == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_a_batch_of_one_sample_is_skipped_and_no_step_logs_nothing():
    w = torch.nn.Parameter(torch.ones(()))
    step = LocalStep(lambda rows: (w * len(rows), {}), [w])
    metrics = train_local_epochs(step, 1, torch.Generator().manual_seed(0), torch.device("cpu"), context(), "c")
    assert metrics == {} and w.item() == 1.0


@pytest.mark.parametrize("num_samples, batch_size, sizes", [(10, 4, [4, 4]), (10, 5, [5, 5]), (3, 4, [])])
def test_drop_last_skips_every_incomplete_batch(num_samples, batch_size, sizes):
    # training.drop_last (the reference codes' data loaders): only complete batches, also none at all
    seen = []
    w = torch.nn.Parameter(torch.ones(()))
    step = LocalStep(lambda rows: (seen.append(len(rows)) or w * len(rows), {}), [w])
    metrics = train_local_epochs(step, num_samples, torch.Generator().manual_seed(0), torch.device("cpu"),
                                 context(local_epochs=1, batch_size=batch_size, drop_last=True), "c")
    assert seen == sizes
    assert (metrics == {}) == (not sizes)
    seen.clear()  # without it the last batch is trained on
    train_local_epochs(step, num_samples, torch.Generator().manual_seed(0), torch.device("cpu"),
                       context(local_epochs=1, batch_size=batch_size), "c")
    assert seen == sizes + ([num_samples % batch_size] if num_samples % batch_size else [])


def test_cosine_schedule_and_non_finite_guard():
    # round 2 of 4 starts a quarter of the way through training: lr 0.1 x (1 + cos(pi / 4)) / 2
    assert local_lr(context(round_index=2, rounds=4, lr_schedule="cosine")) == pytest.approx(
        0.1 * 0.5 * (1 + math.cos(math.pi / 4)))
    assert local_lr(context(round_index=1, rounds=4, lr_schedule="cosine")) == pytest.approx(0.1)  # first round
    assert local_lr(context(round_index=2, rounds=4)) == 0.1
    for bad in ("nan", "inf", "-inf"):  # an infinite loss too: its step would make the weights inf or NaN
        w = torch.nn.Parameter(torch.ones(()))
        step = LocalStep(lambda rows: (w * float(bad), {}), [w])
        with pytest.raises(FloatingPointError, match=rf"round 1, client 7, method m: loss is {bad}$"):
            train_local_epochs(step, 4, torch.Generator(), torch.device("cpu"), context(), "client 7, method m")
        assert w.item() == 1.0  # raised before any step


def test_ema_update_is_the_byol_rule():
    online = torch.nn.ModuleDict({"encoder": torch.nn.Linear(2, 2)})
    target = torch.nn.ModuleDict({"encoder": torch.nn.Linear(2, 2)})
    before = target["encoder"].weight.detach().clone()
    ema_update(target, online, 0.9)
    assert torch.allclose(target["encoder"].weight, 0.9 * before + 0.1 * online["encoder"].weight)


@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.9, 0.0), (0.9, 5e-4), (0.0, 1e-3)])
def test_momentum_sgd_is_bitwise_torch_sgd(momentum, weight_decay):
    """Five steps on a small network, one parameter left without a gradient: every parameter equal
    bit for bit to ``torch.optim.SGD``'s, and a hand computation of the first two momentum steps."""
    def network():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3),
                                   torch.nn.Linear(3, 3))
    ours, theirs = network(), network()
    frozen = [*ours[3].parameters(), *theirs[3].parameters()]  # in the optimiser, never in the loss
    optimizers = (MomentumSGD(list(ours.parameters()), lr=0.07, momentum=momentum, weight_decay=weight_decay),
                  torch.optim.SGD(list(theirs.parameters()), lr=0.07, momentum=momentum, weight_decay=weight_decay))
    before = ours[0].weight.detach().clone()
    grads = []
    for step in range(5):
        x = torch.randn(16, 5, generator=torch.Generator().manual_seed(step))
        for net, optimizer in zip((ours, theirs), optimizers):
            optimizer.zero_grad()
            net[:3](x).pow(2).mean().backward()
            if net is ours:
                grads.append(net[0].weight.grad.clone())
            optimizer.step()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.equal(a, b), name
    assert all(p.grad is None for p in frozen) and torch.equal(ours[3].weight, network()[3].weight)
    # by hand: d_t = g_t + wd w_{t-1}; b_1 = d_1, b_2 = m b_1 + d_2; w_t = w_{t-1} - lr b_t
    ours2 = network()
    w1 = before - 0.07 * (grads[0] + weight_decay * before)
    b1 = grads[0] + weight_decay * before
    w2 = w1 - 0.07 * (momentum * b1 + grads[1] + weight_decay * w1)
    replay = MomentumSGD([ours2[0].weight], lr=0.07, momentum=momentum, weight_decay=weight_decay)
    for g in grads[:2]:
        ours2[0].weight.grad = g.clone()
        replay.step()
    assert torch.allclose(ours2[0].weight, w2, atol=1e-6)


def test_a_momentum_step_runs_a_few_operations_whatever_the_number_of_parameters():
    """Each of the step's operations covers all parameters at once (``torch._foreach_*``): a GPU
    then launches a handful of kernels a step, not four per tensor. Counted at torch's dispatcher,
    for networks of 2 and of 40 tensors, on a step after the first (which makes the momentum buffers)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            return func(*args, **(kwargs or {}))

    counts = []
    for layers in (1, 20):
        net = torch.nn.Sequential(*[torch.nn.Linear(3, 3) for _ in range(layers)])
        optimizer = MomentumSGD(list(net.parameters()), lr=0.1, momentum=0.9, weight_decay=5e-4)
        for _ in range(2):
            optimizer.zero_grad()
            net(torch.ones(2, 3)).sum().backward()
            with Count() as count:
                optimizer.step()
        counts.append(count.ops)
    assert counts[0] == counts[1] <= 6, counts


def test_a_client_step_does_not_import_torch_dynamo():
    """torch.optim's first optimiser imports torch._dynamo (2.4 s on 2 cores); the local loop must not."""
    code = """
import sys, torch
from methods.local_training import LocalStep, train_local_epochs
from simulator.context import RoundContext, freeze
training = {"local_epochs": 1, "batch_size": 4, "lr": 0.1, "lr_schedule": "constant", "momentum": 0.9,
            "weight_decay": 1e-4, "grad_clip_norm": 1.0, "drop_last": False}
w = torch.nn.Parameter(torch.ones(3))
step = LocalStep(lambda rows: ((w * rows.float().unsqueeze(1)).pow(2).sum(), {}), [w])
ctx = RoundContext(1, 2, (0,), 0, freeze({"training": training}))
train_local_epochs(step, 8, torch.Generator().manual_seed(0), torch.device("cpu"), ctx, "client 0")
assert not torch.equal(w, torch.ones(3))
print("DYNAMO" if "torch._dynamo" in sys.modules else "NO DYNAMO")
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["NO", "DYNAMO"]
