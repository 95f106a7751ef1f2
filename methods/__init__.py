"""Federated methods, one module each; ``METHODS`` maps scenario names to classes."""
from methods.base import DataSpec, Method
from methods.fedavg import FedAvg
from methods.fedsc import FedSC

METHODS: dict[str, type[Method]] = {cls.name: cls for cls in (FedAvg, FedSC)}


def build_method(scenario, spec: DataSpec) -> Method:
    return METHODS[scenario["method"]["name"]](scenario, spec)
