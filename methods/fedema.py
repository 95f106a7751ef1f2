"""FedEMA (Zhuang et al., "Divergence-aware Federated Self-Supervised Learning", ICLR 2022), as EasyFL's
``applications/fedssl`` runs it (``--update_encoder dynamic_ema_online --update_predictor
dynamic_dapu --auto_scaler y``).

A returning client k starts from ``w = (1 - mu) w_global + mu w_k`` for every parameter of the online
encoder, projector and predictor, with ``mu = min(lambda_k d_k, 1)`` (d_k: its divergence,
:func:`methods.divergence_aware.divergence`), keeps its own target, and takes the server's buffers
(BatchNorm statistics, where there are any). ``lambda_k`` is fixed at the client's second
participation to ``tau / d_k`` (``ema_tau``, the README's 0.7; so mu = tau then), unless
``ema_scaler`` > 0 fixes it for every client.

Partial participation: a returning client mixes in its own networks from its last training however
long ago that was (with 10 of 100 clients a round, about ten rounds). EasyFL runs FedEMA under
random selection with ``--update_encoder selective_ema --update_predictor selective_ema``: a client
mixes only when it trained in the previous round and otherwise starts from the global networks, its
target copied from the global online ones (as at a first participation). ``selective: true``
restores that rule (default false: the rule of EasyFL's README runs, which take every client every
round, where the two rules agree).

Each round logs ``train/ema_mu`` (the mean mu of the clients that mixed) and ``train/divergence`` (the
mean d of the round's trainings).
"""
from __future__ import annotations

from dataclasses import dataclass

from methods.divergence_aware import ONLINE, DivergenceAware, DivergenceAwareParams


@dataclass(frozen=True)
class FedEMAParams(DivergenceAwareParams):
    ema_tau: float = 0.7
    ema_scaler: float = 0.0  # > 0: lambda for every client instead of tau / d
    selective: bool = False  # EasyFL's selective_ema: mix only after training in the previous round


class FedEMA(DivergenceAware):
    name = "fedema"
    Params = FedEMAParams

    @classmethod
    def param_rules(cls, config, scenario):
        return [*super().param_rules(config, scenario),
                ("ema_tau", config.ema_tau > 0, "a positive number"),
                ("ema_scaler", config.ema_scaler >= 0, "a non-negative number (0: tau / d at the second round)")]

    def scaler(self, client_state) -> float:
        """lambda_k: fixed by ``ema_scaler``, else kept from the client's second participation."""
        if self.config.ema_scaler > 0:
            return self.config.ema_scaler
        return client_state.get("scaler") or self.config.ema_tau / max(client_state["distance"], 1e-12)

    def blend(self, client_state) -> float:
        """mu = min(lambda_k d_k, 1), the weight of the client's own networks."""
        return min(self.scaler(client_state) * client_state["distance"], 1.0)

    def mix_metrics(self, client_state):
        """``train/ema_mu``: the mean weight mu of the returning clients' own networks in their start."""
        return {"ema_mu": self.blend(client_state)}

    def starts_afresh(self, client_state, ctx):
        """``selective``: a client that did not train in the previous round starts from the global
        networks (target included), as at its first participation."""
        return self.config.selective and client_state["round"] != ctx.round - 1

    def mix(self, global_weights, client_state, parameters):
        mu, local = self.blend(client_state), client_state["weights"]
        start = dict(global_weights)
        for name in start:
            if name in parameters:
                start[name] = (1 - mu) * global_weights[name] + mu * local[name]
            elif not name.startswith(ONLINE):  # the target stays the client's own
                start[name] = local[name]
        return start

    def next_client_state(self, slots, start, client_state, ctx):
        state = super().next_client_state(slots, start, client_state, ctx)
        if client_state is not None:  # lambda_k is set from the distance of the first participation
            state["scaler"] = self.scaler(client_state)
        return state
