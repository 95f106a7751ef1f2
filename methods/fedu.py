"""FedU (Zhuang et al., "Collaborative Unsupervised Visual Representation Learning from Decentralized
Data", ICCV 2021), as EasyFL's ``applications/fedssl`` runs it (``--update_predictor dapu``):
divergence-aware predictor update (DAPU).

A returning client starts from the global online encoder and projector, keeps its own target, and
takes the global predictor only when its divergence d (:func:`methods.divergence_aware.divergence`,
measured on its last training) is below ``dapu_threshold`` (reference default 0.4); otherwise it
keeps its own predictor. A predictor is replaced whole, never mixed.

The threshold is an absolute distance, calibrated on the reference's training (5 of 5 clients a
round, 5 local epochs, batch 128, lr 0.032 cosine, its loss twice this one): d grows with the local
steps and the step size, so the same 0.4 splits clients elsewhere under other settings. Under
``scenarios/fedavg/fedu.yaml`` (1 local epoch, batch 64, lr 0.05, 10 of 100 clients) one client of
600 Fashion-MNIST images has d = 0.45 after its first training (0.77 with 5 local epochs), so such
a client keeps its own predictor. Over a whole run of that file only the round-1 trainings are that
far: later ones diverge less, and DAPU gives the global predictor to 96% of the returning clients
(seed 101, its ``train/global_predictor``; RESULTS.md, sixtieth session).

Each round logs ``train/global_predictor`` (the share of the returning clients that took the global
predictor) and ``train/divergence`` (the mean d of the round's trainings).
"""
from __future__ import annotations

from dataclasses import dataclass

from methods.divergence_aware import ONLINE, TARGET, DivergenceAware, DivergenceAwareParams

PREDICTOR = ONLINE + "predictor."


@dataclass(frozen=True)
class FedUParams(DivergenceAwareParams):
    dapu_threshold: float = 0.4


class FedU(DivergenceAware):
    name = "fedu"
    Params = FedUParams

    @classmethod
    def param_rules(cls, config, scenario):
        return [*super().param_rules(config, scenario),
                ("dapu_threshold", config.dapu_threshold >= 0, "a non-negative number")]

    def takes_global_predictor(self, client_state) -> bool:
        """DAPU: the global predictor when the client's last divergence is below the threshold."""
        return client_state["distance"] < self.config.dapu_threshold

    def mix_metrics(self, client_state):
        """``train/global_predictor``: the share of the returning clients that took the global predictor."""
        return {"global_predictor": float(self.takes_global_predictor(client_state))}

    def mix(self, global_weights, client_state, parameters):
        local = client_state["weights"]
        use_global_predictor = self.takes_global_predictor(client_state)
        start = dict(global_weights)
        for name in start:
            if name.startswith(TARGET) or (name.startswith(PREDICTOR) and not use_global_predictor):
                start[name] = local[name]
        return start
