"""Federated methods, one module each; ``METHODS`` maps scenario names to classes."""
from methods.base import DataSpec, Method
from methods.fedavg import FedAvg
from methods.fedema import FedEMA
from methods.fedsc import FedSC
from methods.fedu import FedU
from methods.hetero_ssfl import HeteroSSFL
from methods.orchestra import Orchestra
from methods.rotpred import RotPred

METHODS: dict[str, type[Method]] = {cls.name: cls for cls in (FedAvg, FedSC, HeteroSSFL, Orchestra, RotPred, FedU, FedEMA)}


def build_method(scenario, spec: DataSpec) -> Method:
    return METHODS[scenario["method"]["name"]](scenario, spec)
