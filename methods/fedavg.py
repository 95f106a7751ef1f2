"""FedAvg (McMahan et al. 2017) with a self-supervised local objective.

Each sampled client starts from the global networks, trains ``training.local_epochs`` epochs of SGD
on its own data with the objective of ``method.objective`` (SimCLR, spectral contrastive, BYOL,
SimSiam, or supervised cross-entropy as the upper bound) and uploads its networks weighted by its
number of samples. The server averages them (Eq. of FedAvg: w = sum_j n_j w_j / sum_j n_j) and either
takes the average (``server_optimizer: avg``, with server learning rate ``server_lr``:
w <- w + server_lr (avg - w)) or feeds the averaged delta to Adam (``server_optimizer: adam``,
FedAdam of Reddi et al. 2021, the setting of Louizos et al. 2024).

Federated SimCLR (Louizos et al. 2024) is this method with ``uv: true``: a user-verification loss
(weight ``uv_weight``) on both views of any objective with two views (see ``methods.uv``); the server
also holds the UV rows (payload kind ``"heads"``), which take the same server step as the weights on
the averaged row deltas and are then renormalised (Algorithm 1 of the paper). ``labelled_fraction > 0``
is their semi-supervised variant (``methods.semi_supervised``): a fixed fraction of each client's
samples is labelled, their loss is computed within each class, and a linear label classifier on the
backbone features adds its cross-entropy on both views.

BYOL's EMA target is global state too: clients receive it, update it as
t <- m t + (1 - m) o after each local step (m = ``target_momentum``) and upload it beside the online
networks, so clients stay stateless (as Orchestra does for its target).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

from methods.base import ClientData, ClientUpload, Method, evaluated_networks
from methods.objectives import OBJECTIVES, Objective
from methods.semi_supervised import labelled_mask, semi_supervised_loss
from methods.server_optimizer import adam_step
from methods.uv import ROWS_KEY, UVHead, UVUpload, initial_rows, server_step_rows
from simulator.augment import AugmentConfig, BatchAugment, to_float
from simulator.context import RoundContext, derive_seed
from simulator.models import build_encoder, mlp
from simulator.stats import Stats


@dataclass
class Workspace:
    """A worker's preallocated networks, restored in place for every client."""

    online: nn.ModuleDict
    target: nn.ModuleDict | None
    slots: dict[str, torch.Tensor]  # flat name -> tensor of the networks' state, written in place
    augment: BatchAugment
    device: torch.device
    uv_head: UVHead | None  # the client-ID classifier when ``uv`` is on


class FedAvg(Method):
    name = "fedavg"
    params = {
        "objective": "simclr",
        "temperature": 0.5,
        "clip_mu": 0.0,  # spectral objective: projections clipped to norm sqrt(clip_mu); 0 = unclipped
        "target_momentum": 0.99,
        "server_optimizer": "avg",
        "server_lr": 1.0,
        "server_betas": [0.9, 0.999],
        "server_eps": 1e-8,
        "uv": False,
        "uv_weight": 1.0,
        "labelled_fraction": 0.0,
    }

    def __init__(self, scenario, spec):
        super().__init__(scenario, spec)
        # a subclass that does not offer some of FedAvg's keys (UV, labelled fraction...) gets
        # their defaults, which leave those features off
        self.config = {**FedAvg.params, **self.config}
        objective_cls = OBJECTIVES[self.config["objective"]]
        self.objective: Objective = objective_cls(self.config, scenario["model"], spec.num_classes)
        self.augment_config = AugmentConfig.from_scenario(scenario["augment"])

    @classmethod
    def param_rules(cls, config, scenario):
        c = {**FedAvg.params, **config}
        objective = OBJECTIVES[c["objective"]]
        return [
            ("uv", not c["uv"] or objective.num_views == 2, f"false with objective {objective.name} (one view)"),
            ("clip_mu", c["clip_mu"] >= 0, "a non-negative number"),
            ("uv_weight", c["uv_weight"] >= 0, "a non-negative number"),
            ("labelled_fraction", 0 <= c["labelled_fraction"] <= 1, "a fraction in [0, 1]"),
            ("labelled_fraction", not (c["labelled_fraction"] > 0 and objective.uses_labels),
             f"0 with objective {objective.name} (it uses every label)"),
        ]

    # ---- networks ----------------------------------------------------------------------------
    def build_networks(self) -> tuple[nn.ModuleDict, nn.ModuleDict | None]:
        """Online (and target) networks, initialised deterministically from the scenario seed."""
        torch.manual_seed(derive_seed(self.scenario["seed"], "init"))
        model = self.scenario["model"]
        encoder = build_encoder(model["encoder"], self.spec.channels, self.spec.image_size, model["norm"])
        online = self.objective.build(encoder)
        if self.config["uv"]:
            online["uv_projector"] = mlp(encoder.out_dim, model["hidden_dim"], model["projector_dim"])
        if self.config["labelled_fraction"] > 0:
            online["label_classifier"] = nn.Linear(encoder.out_dim, self.spec.num_classes)
        target = None
        if self.objective.uses_target:
            target = copy.deepcopy(nn.ModuleDict({k: online[k] for k in ("encoder", "projector")}))
            target.requires_grad_(False)
        return online, target

    @staticmethod
    def flat_state(online: nn.Module, target: nn.Module | None) -> dict[str, torch.Tensor]:
        state = {f"online.{k}": v for k, v in online.state_dict().items()}
        if target is not None:
            state.update({f"target.{k}": v for k, v in target.state_dict().items()})
        return state

    # ---- server side -------------------------------------------------------------------------
    def init_state(self):
        online, target = self.build_networks()
        weights = {k: v.detach().clone() for k, v in self.flat_state(online, target).items()}
        trainable = [f"online.{k}" for k, _ in online.named_parameters()]
        state = {"weights": weights, "trainable": trainable, "server_opt": None}
        if self.config["uv"]:
            num_clients = len(self.spec.client_sizes)
            state["uv_rows"] = initial_rows(num_clients, self.scenario["model"]["projector_dim"], self.scenario["seed"])
            state["uv_opt"] = None  # the server Adam's state of the UV rows
        return state

    def broadcast(self, state, ctx):
        if self.config["uv"]:
            return {"weights": state["weights"], "heads": state["uv_rows"]}
        return {"weights": state["weights"]}

    def server_update(self, state, total, records, ctx):
        if total is None:
            return state, {}
        mean = total.average()
        if self.config["uv"]:
            rows, uv_opt = server_step_rows(state["uv_rows"], mean[ROWS_KEY], state["uv_opt"],
                                            self.config["server_optimizer"], self.config["server_lr"],
                                            tuple(self.config["server_betas"]), self.config["server_eps"])
            state = {**state, "uv_rows": rows, "uv_opt": uv_opt}
        averaged = {k.split("/", 1)[1]: v for k, v in mean.items() if k.startswith("weights/")}
        weights = dict(state["weights"])
        for name, value in averaged.items():
            weights[name] = value.to(weights[name].dtype)
        if self.config["server_optimizer"] == "adam":
            trainable = state["trainable"]
            stepped, opt_state = adam_step(
                {k: state["weights"][k] for k in trainable}, {k: averaged[k] for k in trainable},
                state["server_opt"], self.config["server_lr"], tuple(self.config["server_betas"]),
                self.config["server_eps"])
            weights.update(stepped)
            state = {**state, "server_opt": opt_state}
        elif self.config["server_lr"] != 1.0:
            lr = self.config["server_lr"]
            for k in state["trainable"]:
                weights[k] = state["weights"][k] + lr * (averaged[k] - state["weights"][k])
        return {**state, "weights": weights}, {}

    def eval_network(self, state):
        model = self.scenario["model"]
        online = self.objective.build(build_encoder(model["encoder"], self.spec.channels, self.spec.image_size,
                                                    model["norm"]))
        network = evaluated_networks(online)
        online_weights = {k[len("online."):]: v for k, v in state["weights"].items() if k.startswith("online.")}
        network.load_state_dict({k: v for k, v in online_weights.items() if k.split(".")[0] in network})
        return network

    # ---- client side -------------------------------------------------------------------------
    def make_workspace(self, device):
        online, target = self.build_networks()
        online.to(device)
        if target is not None:
            target.to(device)
        uv_head = None
        if self.config["uv"]:
            uv_head = UVHead(len(self.spec.client_sizes), self.scenario["model"]["projector_dim"]).to(device)
        return Workspace(online, target, self.flat_state(online, target),
                         BatchAugment(self.augment_config), device, uv_head)

    def local_lr(self, ctx: RoundContext) -> float:
        training = ctx.hparams["training"]
        if training["lr_schedule"] == "cosine":
            return training["lr"] * 0.5 * (1 + math.cos(math.pi * ctx.progress))
        return training["lr"]

    def client_update(self, workspace, broadcast, extra, data, ctx, client_state=None):
        with torch.no_grad():
            for name, slot in workspace.slots.items():
                slot.copy_(broadcast["weights"][name])
        if workspace.uv_head is not None:
            workspace.uv_head.load(broadcast["heads"], data.client_id)
        loss = self.train_locally(workspace, data, ctx)
        upload = {f"weights/{k}": v for k, v in workspace.slots.items()}
        if workspace.uv_head is None:
            return ClientUpload(stats=Stats.from_tensors(upload, len(data.labels)), metrics={"loss": loss})
        upload[ROWS_KEY] = workspace.uv_head.delta_matrix()
        return UVUpload(stats=Stats.from_tensors(upload, len(data.labels)), metrics={"loss": loss})

    def train_locally(self, workspace: Workspace, data: ClientData, ctx: RoundContext) -> float:
        """Local SGD epochs on the client's data; returns the mean training loss."""
        training = ctx.hparams["training"]
        online, target, device = workspace.online, workspace.target, workspace.device
        online.train()
        parameters = list(online.parameters())
        if workspace.uv_head is not None:
            parameters.append(workspace.uv_head.own_row)
        optimizer = torch.optim.SGD(parameters, lr=self.local_lr(ctx),
                                    momentum=training["momentum"], weight_decay=training["weight_decay"])
        generator = ctx.client_generator(data.client_id)
        images = to_float(data.images.to(device))
        labels = data.labels.to(device)
        n, batch_size = len(labels), training["batch_size"]
        fraction = self.config["labelled_fraction"]
        labelled = labelled_mask(ctx.seed, data.client_id, n, fraction).to(device) if fraction > 0 else None
        momentum = self.config["target_momentum"]
        losses = []
        for _ in range(training["local_epochs"]):
            order = torch.randperm(n, generator=generator).to(device)
            for start in range(0, n, batch_size):
                batch = order[start:start + batch_size]
                if len(batch) < 2:
                    continue
                views = [workspace.augment(images[batch], generator) for _ in range(self.objective.num_views)]
                loss = self.batch_loss(workspace, views, labels[batch],
                                       None if labelled is None else labelled[batch])
                if not torch.isfinite(loss):
                    raise FloatingPointError(
                        f"round {ctx.round}, client {data.client_id}, method {self.name}/"
                        f"{self.objective.name}: loss is {loss.item()}")
                sgd_step(optimizer, loss, parameters, training["grad_clip_norm"])
                if workspace.uv_head is not None:
                    workspace.uv_head.project_row()
                if target is not None:
                    ema_update(target, online, momentum)
                losses.append(loss.detach())
        return torch.stack(losses).mean().item() if losses else float("nan")

    def batch_loss(self, workspace: Workspace, views: list[torch.Tensor], labels: torch.Tensor,
                   labelled: torch.Tensor | None) -> torch.Tensor:
        """The objective's loss (semi-supervised when ``labelled`` marks the labelled rows), plus
        ``uv_weight`` times the UV loss of both views when ``uv`` is on."""
        online = workspace.online
        embedding = self.objective.embed(online, workspace.target, views)
        if labelled is None:
            loss = self.objective.rows_loss(embedding, labels)
        else:
            loss = semi_supervised_loss(self.objective, embedding, labels, labelled, online["label_classifier"])
        if workspace.uv_head is not None:
            u1, u2 = (online["uv_projector"](h) for h in embedding["features"])
            loss = loss + self.config["uv_weight"] * workspace.uv_head.loss(u1, u2)
        return loss


def sgd_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor, parameters: list[torch.Tensor],
             grad_clip_norm: float) -> None:
    """One optimiser step on ``loss``; the gradients' joint l2 norm first clipped to ``grad_clip_norm``
    when it is positive (``training.grad_clip_norm``, as FedSC's reference code clips at 3)."""
    optimizer.zero_grad(set_to_none=True)
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
