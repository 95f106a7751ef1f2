"""``constraints.txt`` pins every distribution that ``pip install -e '.[test]'`` brings, and the
environment the tests run in is the one it pins: a fresh machine (CI's) installs what the tests passed
with, not the newest releases of the day."""
import importlib.metadata as metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as canonical

ROOT = Path(__file__).resolve().parents[1]


def installed_closure(top: str = "fedssl", extras: frozenset[str] = frozenset({"test"})) -> dict[str, str]:
    """Canonical name -> installed version of every distribution ``top[extras]`` requires, directly or
    through another, in this environment (each requirement's marker evaluated here, its extras followed)."""
    found: dict[str, set[str]] = {}
    todo = [(top, set(extras))]
    while todo:
        name, wanted = todo.pop()
        for line in metadata.distribution(name).requires or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not any(
                    requirement.marker.evaluate({"extra": extra}) for extra in wanted or {""}):
                continue
            key = canonical(requirement.name)
            if key not in found or not set(requirement.extras) <= found[key]:
                found[key] = found.get(key, set()) | set(requirement.extras)
                todo.append((requirement.name, found[key]))
    return {key: metadata.version(key) for key in found}


def pins() -> dict[str, tuple[str, bool]]:
    """Canonical name -> (pinned version, whether its line applies in this environment)."""
    pinned = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", line
            applies = requirement.marker is None or requirement.marker.evaluate()
            pinned[canonical(requirement.name)] = (specifier.version, applies)
    return pinned


def test_every_distribution_the_install_brings_is_pinned_at_the_version_installed():
    pinned, closure = pins(), installed_closure()
    assert {"torch", "numpy", "pyarrow", "opacus", "pytest"} <= closure.keys()  # the walk reached them
    unpinned = sorted(f"{name}=={version}" for name, version in closure.items() if name not in pinned)
    assert not unpinned, f"not pinned in constraints.txt: {unpinned}"
    other = sorted(f"{name}: installed {version}, pinned {pinned[name][0]}" for name, version in closure.items()
                   if pinned[name][1] and pinned[name][0] != version)
    assert not other, other


def test_torch_torchvision_and_ray_are_pinned_on_every_python():
    pinned = pins()
    assert {name: pinned[name] for name in ("torch", "torchvision", "ray")} == {
        "torch": ("2.14.1", True), "torchvision": ("0.29.1", True), "ray": ("2.60.0", True)}
