"""The import graph of ``simulator/``, ``methods/`` and ``analysis/``: no circle, ``analysis/`` (offline
reports) imported only by the command line, Ray imported only by the engine. Imports inside
functions count: a lazy import is still a dependency."""
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("simulator", "methods", "analysis")
# the command line sits above everything: it may import the offline reports
REPORT_USERS = {"simulator.cli"}
RAY_USERS = {"simulator.engine"}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = REPO) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module -> the tree's modules it imports, module -> the top-level packages it imports)."""
    files = {module_name(p, root): p for package in PACKAGES for p in (root / package).rglob("*.py")}
    edges, externals = {}, {}
    for name, path in files.items():
        targets, tops = set(), set()
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".")[:len(name.split(".")) - node.level + is_package]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module
                found = [module] + [f"{module}.{alias.name}" for alias in node.names]
            else:
                continue
            tops.update(f.split(".")[0] for f in found)
            targets.update(f for f in found if f in files and f != name)
        edges[name], externals[name] = targets, tops
    return edges, externals


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read_with_lazy_and_relative_imports(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "simulator" / "__init__.py").write_text("")
    (tmp_path / "simulator" / "a.py").write_text("def f():\n    from simulator.b import g\n")
    (tmp_path / "simulator" / "b.py").write_text("from . import a\nimport ray\n")
    (tmp_path / "methods" / "c.py").write_text("from simulator import a\n")
    edges, externals = import_graph(tmp_path)
    assert edges == {"simulator": set(), "simulator.a": {"simulator.b"}, "simulator.b": {"simulator", "simulator.a"},
                     "methods.c": {"simulator", "simulator.a"}}
    assert circles(edges) == [["simulator.a", "simulator.b"]]
    assert "ray" in externals["simulator.b"]


def test_no_import_circle():
    edges, _ = import_graph()
    assert circles(edges) == []


def test_offline_reports_are_imported_only_by_the_command_line():
    edges, _ = import_graph()
    offenders = sorted(f"{name} -> {target}" for name, targets in edges.items() for target in targets
                       if target.split(".")[0] == "analysis" and name.split(".")[0] != "analysis"
                       and name not in REPORT_USERS)
    assert offenders == []


def test_ray_is_imported_only_by_the_engine():
    _, externals = import_graph()
    assert sorted(name for name, tops in externals.items() if "ray" in tops) == sorted(RAY_USERS)
