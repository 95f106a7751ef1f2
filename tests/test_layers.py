"""The import graph of ``simulator/``, ``methods/`` and ``analysis/``: no circle, ``analysis/`` (offline
reports) imported only by the command line, Ray imported only by the engine, ``methods/`` built only
on the simulator's building blocks (never on the engine, the run or the evaluation loop above it), no
import by name at run time (``importlib.import_module``, ``__import__``), which the graph could not
see. Imports inside functions count: a lazy import is still a dependency."""
import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("simulator", "methods", "analysis")
# the command line sits above everything: it may import the offline reports
REPORT_USERS = {"simulator.cli"}
RAY_USERS = {"simulator.engine"}
# what a method's client and server steps are made of; the rest of simulator/ (the engine, the run,
# the evaluation loop) sits above methods/ and imports them
METHOD_BUILDING_BLOCKS = {"simulator", "simulator.context", "simulator.augment", "simulator.models",
                          "simulator.stats", "simulator.records", "simulator.data", "simulator.data.partition", "simulator.evaluation",
                          "simulator.evaluation.metrics"}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files(root: Path = REPO) -> dict[str, Path]:
    """Every module of the three packages under ``root``, by dotted name."""
    return {module_name(p, root): p for package in PACKAGES for p in sorted((root / package).rglob("*.py"))}


def fake_tree(root: Path, files: dict[str, str]) -> Path:
    """The three packages under ``root``, holding ``files`` (relative path -> source)."""
    for package in PACKAGES:
        (root / package).mkdir()
    for name, source in files.items():
        (root / name).write_text(source)
    return root


def import_graph(root: Path = REPO) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module -> the tree's modules it imports, module -> the top-level packages it imports)."""
    files = source_files(root)
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
    edges, externals = import_graph(fake_tree(tmp_path, {
        "simulator/__init__.py": "", "simulator/a.py": "def f():\n    from simulator.b import g\n",
        "simulator/b.py": "from . import a\nimport ray\n", "methods/c.py": "from simulator import a\n"}))
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


def test_methods_import_only_the_simulator_s_building_blocks():
    edges, _ = import_graph()
    offenders = sorted(f"{name} -> {target}" for name, targets in edges.items() if name.split(".")[0] == "methods"
                       for target in targets if target.split(".")[0] == "simulator"
                       and target not in METHOD_BUILDING_BLOCKS)
    assert offenders == []


def dynamic_imports(root: Path = REPO) -> list[str]:
    """``file:line`` of every call of ``importlib.import_module``, ``import_module`` or ``__import__``."""
    found = []
    for path in source_files(root).values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if called in ("import_module", "__import__"):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_nothing_is_imported_by_name_at_run_time(tmp_path):
    fake_tree(tmp_path, {"methods/m.py": "import importlib\n\ndef f():\n    return importlib.import_module('ray')\n",
                         "analysis/a.py": "x = __import__('simulator.engine')\n"})
    assert sorted(dynamic_imports(tmp_path)) == ["analysis/a.py:1", "methods/m.py:4"]
    assert dynamic_imports() == []
