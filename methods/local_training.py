"""The one local training loop every method's client step runs (as pfl-research's
``do_multiple_epochs_of``, fed a step): epochs of mini-batch SGD over a client's samples, a method
giving only what differs, its loss on a batch and its per-step hooks (an EMA target, a UV row put
back on the sphere, a memory of projections).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
from torch import Tensor, nn

from simulator.augment import BatchAugment
from simulator.context import RoundContext

@dataclass
class Workspace:
    """A worker's preallocated networks, restored in place for every client it simulates."""

    online: nn.ModuleDict
    target: nn.ModuleDict | None
    slots: dict[str, Tensor]  # flat name -> tensor of the networks' state, written in place
    augment: BatchAugment  # a sample's (first) view, T
    augment_prime: BatchAugment  # its second view, T', where the method draws one (Method.second_view)
    device: torch.device
    parts: dict[str, Any] = field(default_factory=dict)  # extensions' client-side modules, by name

    def views(self, images: Tensor, generator: torch.Generator, count: int) -> list[Tensor]:
        """``count`` (1 or 2) augmented views of ``images``, drawn in order from ``generator``: T, then T'."""
        return [augment(images, generator) for augment in (self.augment, self.augment_prime)[:count]]


# A batch's loss and the named parts to log beside it (the loop logs them detached), from the batch's sample rows.
BatchLoss = Callable[[Tensor], tuple[Tensor, dict[str, Tensor]]]


@dataclass
class LocalStep:
    """What a method trains locally: the loss of a batch (``loss(rows)``, ``rows`` the batch's
    positions in the client's data, on the device) over ``parameters``, with hooks run before each
    forward pass and after each optimiser step, in order."""

    loss: BatchLoss
    parameters: list[Tensor]
    before_forward: list[Callable[[], None]] = field(default_factory=list)
    after_step: list[Callable[[], None]] = field(default_factory=list)


def local_lr(ctx: RoundContext) -> float:
    """The round's local learning rate: ``training.lr``, cosine-decayed over the run when
    ``training.lr_schedule`` is ``cosine``."""
    training = ctx.hparams["training"]
    if training["lr_schedule"] == "cosine":
        return training["lr"] * 0.5 * (1 + math.cos(math.pi * ctx.progress))
    return training["lr"]


def train_local_epochs(step: LocalStep, num_samples: int, generator: torch.Generator, device: torch.device,
                       ctx: RoundContext, who: str) -> dict[str, float]:
    """``training.local_epochs`` epochs of SGD (``training``'s lr schedule, momentum, weight decay,
    gradient clipping, batch size) over ``num_samples`` samples in a fresh random order per epoch
    drawn from ``generator``; a batch of one sample is skipped (batch statistics need two), and with
    ``training.drop_last`` every incomplete batch (as the reference codes' data loaders do: EasyFL's
    and Orchestra's; a client with fewer samples than a batch then takes no step). Returns
    the mean of the loss (``"loss"``) and of each logged part over the steps that ran (none: empty).
    A non-finite loss raises ``FloatingPointError`` naming ``who``."""
    training = ctx.hparams["training"]
    optimizer = MomentumSGD(step.parameters, lr=local_lr(ctx), momentum=training["momentum"],
                            weight_decay=training["weight_decay"])
    batch_size = training["batch_size"]
    smallest = max(2, batch_size) if training["drop_last"] else 2
    logged: dict[str, list[Tensor]] = {"loss": []}
    for _ in range(training["local_epochs"]):
        order = torch.randperm(num_samples, generator=generator).to(device)
        for start in range(0, num_samples, batch_size):
            rows = order[start:start + batch_size]
            if len(rows) < smallest:
                continue
            for hook in step.before_forward:
                hook()
            loss, parts = step.loss(rows)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"round {ctx.round}, {who}: loss is {loss.item()}")
            sgd_step(optimizer, loss, step.parameters, training["grad_clip_norm"])
            for hook in step.after_step:
                hook()
            logged["loss"].append(loss.detach())
            for name, value in parts.items():
                logged.setdefault(name, []).append(value.detach())
    return {name: torch.stack(values).mean().item() for name, values in logged.items() if values}


class MomentumSGD:
    """SGD with momentum and weight decay (dampening 0, no Nesterov): ``torch.optim.SGD``'s update
    written out, bitwise its step (pinned in ``tests/methods/test_local_training.py``). Each of its
    operations runs on all parameters at once (``torch._foreach_*``, as torch.optim's default on a
    GPU): a handful of kernel launches a step instead of four per tensor, the same arithmetic per
    element (on a CPU the same kernels, one tensor after another). Not ``torch.optim``: its first
    optimiser imports ``torch._dynamo`` (2.4 s of every worker process's first round on these cores),
    which a client step never uses. Parameters without a gradient are left alone, as torch does."""

    def __init__(self, parameters: list[Tensor], lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        self.parameters, self.lr, self.momentum, self.weight_decay = list(parameters), lr, momentum, weight_decay
        self.buffers: list[Tensor | None] = [None] * len(self.parameters)

    def zero_grad(self) -> None:
        for parameter in self.parameters:
            parameter.grad = None

    @torch.no_grad()
    def step(self) -> None:
        stepped = [i for i, parameter in enumerate(self.parameters) if parameter.grad is not None]
        if not stepped:
            return
        parameters = [self.parameters[i] for i in stepped]
        grads = [parameter.grad for parameter in parameters]
        if self.weight_decay != 0:
            grads = torch._foreach_add(grads, parameters, alpha=self.weight_decay)
        if self.momentum != 0:
            carried = [k for k, i in enumerate(stepped) if self.buffers[i] is not None]
            if carried:
                buffers = [self.buffers[stepped[k]] for k in carried]
                torch._foreach_mul_(buffers, self.momentum)
                torch._foreach_add_(buffers, [grads[k] for k in carried], alpha=1)
            for k, i in enumerate(stepped):
                if self.buffers[i] is None:
                    self.buffers[i] = grads[k].detach().clone()
            grads = [self.buffers[i] for i in stepped]
        torch._foreach_add_(parameters, grads, alpha=-self.lr)


def sgd_step(optimizer: MomentumSGD, loss: Tensor, parameters: list[Tensor],
             grad_clip_norm: float) -> None:
    """One optimiser step on ``loss``; the gradients' joint l2 norm first clipped to ``grad_clip_norm``
    when it is positive (``training.grad_clip_norm``, as FedSC's reference code clips at 3)."""
    optimizer.zero_grad()
    loss.backward()
    if grad_clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(parameters, grad_clip_norm)
    optimizer.step()


@torch.no_grad()
def ema_update(target: nn.ModuleDict, online: nn.ModuleDict, momentum: float) -> None:
    """t <- m t + (1 - m) o for every parameter of the target (BYOL, Grill et al. 2020, Eq. 1)."""
    for name, module in target.items():
        for t, o in zip(module.parameters(), online[name].parameters()):
            t.mul_(momentum).add_(o, alpha=1 - momentum)


def copy_into(slots: Mapping[str, Tensor], source: Mapping[str, Tensor]) -> None:
    """Restore preallocated networks in place: every slot takes ``source``'s tensor of its name."""
    with torch.no_grad():
        for name, slot in slots.items():
            slot.copy_(source[name])
