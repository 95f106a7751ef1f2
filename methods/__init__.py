"""Federated methods, one module each; ``METHODS`` maps scenario names to classes."""
from methods.base import DataSpec, Method
from methods.fedavg import FedAvg
from methods.fedsc import FedSC
from methods.hetero_ssfl import HeteroSSFL
from methods.orchestra import Orchestra

METHODS: dict[str, type[Method]] = {cls.name: cls for cls in (FedAvg, FedSC, HeteroSSFL, Orchestra)}


def build_method(scenario, spec: DataSpec) -> Method:
    return METHODS[scenario["method"]["name"]](scenario, spec)
