"""cluster.yaml passes Ray's own cluster-launcher validation (what `ray up` runs before starting)."""
from pathlib import Path

import yaml
from ray.autoscaler._private.commands import prepare_config
from ray.autoscaler._private.util import validate_config

CLUSTER_YAML = Path(__file__).resolve().parents[1] / "cluster.yaml"


def test_cluster_yaml_validates_with_ray():
    config = prepare_config(yaml.safe_load(CLUSTER_YAML.read_text()))
    validate_config(config)
    node_types = config["available_node_types"]
    assert node_types[config["head_node_type"]]["resources"].get("GPU", 0) == 0
    assert any(t["resources"].get("GPU", 0) >= 1 for t in node_types.values())
    assert any("scripts/setup.sh" in c for c in config["setup_commands"])


def test_a_broken_cluster_yaml_is_rejected():
    import jsonschema
    import pytest
    config = yaml.safe_load(CLUSTER_YAML.read_text())
    config["available_node_types"]["head"]["min_workers"] = "many"
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(config))
