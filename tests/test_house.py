"""The house rules of agent/gpucheck (docs/architecture.md), read from the source: what may import what,
no private name used across modules, small files, and each fact defined in one place."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "agent" / "gpucheck"
MAX_LINES = 400

# package (first name under gpucheck) -> the packages it may import. The foundation modules
# (model, versions, files, process, config, profile_dirs, profiles, skus, references, cli_types, netbench, slurm,
# drain_rule, breaker, redact) import only each other; `main` is the one place that knows both command lines.
FOUNDATION = {"model", "versions", "files", "process", "config", "profile_dirs", "profiles", "skus", "references",
              "netbench", "slurm", "drain_rule", "breaker", "redact", "__init__"}
MAY_IMPORT: dict[str, set[str]] = {
    **{name: FOUNDATION for name in FOUNDATION},
    "cli_types": FOUNDATION,
    "parsers": {"parsers"},
    "node": FOUNDATION | {"node", "parsers"},
    "report": FOUNDATION | {"report"},
    "workloads": FOUNDATION | {"workloads"},
    "gpuwork": {"gpuwork"},  # runs in a child process per GPU: the standard library, CuPy, NumPy, pynvml only
    "cluster": FOUNDATION | {"cluster", "cli_types", "history", "kubernetes", "parsers", "report", "workloads"},
    "cli": FOUNDATION | {"cli_types", "node", "parsers", "report", "stopped_run", "tell"},
    "tell": FOUNDATION | {"kubernetes"},
    "kubernetes": FOUNDATION | {"kubernetes"},
    "stopped_run": FOUNDATION | {"node", "report", "tell"},
    "kept_cli": FOUNDATION | {"cli_types", "node"},
    "history": FOUNDATION | {"history", "cli_types", "report"},  # report: how a count or a figure is written
    "rma": FOUNDATION | {"rma", "cli_types", "history", "node", "report"},
    # cli: gpucheck node's parser reads --daily-args; kubernetes: the Jobs of --kubernetes
    "schedule": FOUNDATION | {"schedule", "cli_types", "cli", "kubernetes"},
    "slurm_cli": FOUNDATION | {"cli_types"},
    # history: how a report names a GPU; tell: the scheduler that holds the node (Slurm, Kubernetes)
    "repair": FOUNDATION | {"repair", "history", "node", "report", "rma", "tell"},
    "watch": FOUNDATION | {"watch", "cli_types", "node", "parsers", "repair", "report", "tell"},
    "main": FOUNDATION | {"cli", "cli_types", "cluster", "history", "kept_cli", "rma", "schedule", "slurm_cli",
             "watch"},
    "__main__": {"main"},
}


def modules() -> Iterator[tuple[str, Path]]:
    """(dotted name, path) of every module of the package; the checks/ link holds no code."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        yield ".".join(("gpucheck", *parts)), path


def resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute dotted name an ImportFrom refers to."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports(module: str, path: Path) -> Iterator[tuple[str, str | None, int]]:
    """(imported gpucheck module, imported name or None, line) for each import, module level or not."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gpucheck"):
                    yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            target = resolve(module, path, node)
            if target.startswith("gpucheck"):
                for alias in node.names:
                    yield target, alias.name, node.lineno


def top(dotted: str) -> str:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imported_modules(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """Every gpucheck module an import statement brings in (`from . import x` brings in the module x)."""
    known = {name.removesuffix(".__init__") for name, _ in modules()}
    for target, name, line in imports(module, path):
        yield (f"{target}.{name}" if name and f"{target}.{name}" in known else target), line


def layer_violations(module: str, path: Path) -> list[str]:
    mine = top(module)
    allowed = MAY_IMPORT.get(mine)
    if allowed is None:
        return [f"{module}: a new top-level module: add it to MAY_IMPORT and docs/architecture.md"]
    return [f"{module}:{line} imports {target}" for target, line in imported_modules(module, path)
            if target != "gpucheck" and top(target) not in allowed | {mine}]  # bare gpucheck: __version__


def test_packages_import_only_what_the_architecture_allows():
    wrong = [v for module, path in modules() for v in layer_violations(module, path)]
    assert not wrong, "\n".join(wrong)


def test_a_layer_violation_is_caught(tmp_path):
    path = tmp_path / "gpu.py"
    path.write_text("from ..cluster import fanout\nfrom ..model import Result\n")
    assert layer_violations("gpucheck.node.gpu", path) == ["gpucheck.node.gpu:1 imports gpucheck.cluster.fanout"]


def test_cli_and_cluster_do_not_import_each_other():
    crossing = []
    for module, path in modules():
        for target, line in imported_modules(module, path):
            if (module == "gpucheck.cli" and target.startswith("gpucheck.cluster")) or (
                    module.startswith("gpucheck.cluster") and target in ("gpucheck.cli", "gpucheck.main")):
                crossing.append(f"{module}:{line} imports {target}")
    assert not crossing, "\n".join(crossing)


def private(name: str | None) -> bool:
    return bool(name) and name.startswith("_") and not name.startswith("__")


def private_uses(module: str, path: Path) -> list[str]:
    """`from x import _y` and `x._y` on an imported gpucheck module. A package's own private module
    (parsers/_common.py) may be imported by its siblings: the module is private, its names are not."""
    tree = ast.parse(path.read_text(), str(path))
    found, aliases = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and resolve(module, path, node).startswith("gpucheck"):
            for alias in node.names:
                if private(alias.name):
                    found.append(f"{module}:{node.lineno} imports {alias.name}")
                aliases.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            aliases |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("gpucheck")}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and private(node.attr) and isinstance(node.value, ast.Name)
                and node.value.id in aliases):
            found.append(f"{module}:{node.lineno} uses {node.value.id}.{node.attr}")
    return found


def test_no_module_uses_a_private_name_of_another():
    found = [u for module, path in modules() for u in private_uses(module, path)]
    assert not found, "\n".join(found)


def test_a_private_use_is_caught(tmp_path):
    path = tmp_path / "ssh.py"
    path.write_text("from . import fanout\nfrom .schedule import _pairs\n\n\n"
                    "def f(h):\n    return fanout._connection(h)\n")
    assert private_uses("gpucheck.cluster.ssh", path) == [
        "gpucheck.cluster.ssh:2 imports _pairs", "gpucheck.cluster.ssh:6 uses fanout._connection"]


@pytest.mark.parametrize("module,path", list(modules()), ids=lambda v: str(v).rsplit("/", 1)[-1])
def test_file_is_small(module: str, path: Path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{module}: {lines} lines (split it by job; the house keeps files under {MAX_LINES})"


# ---------------------------------------------------------------- no import circles

LAB = Path(__file__).resolve().parents[1] / "lab"


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, anywhere in it (in a function, under TYPE_CHECKING:
    a circle there is still two modules that need each other). A package is its __init__."""
    files = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        files[".".join((package, *(parts[:-1] if parts[-1] == "__init__" else parts)))] = path
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        own = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = own.split(".")[: len(own.split(".")) - node.level + 1] if node.level else []
                target = ".".join([*base, node.module] if node.module else base)
                targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in files else target for a in node.names]
            else:
                continue
            for target in targets:
                while target not in files and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in files and target != name:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other, directly or round a loop (Tarjan's strongly connected
    components of more than one module), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


@pytest.mark.parametrize("root,package", [(PACKAGE, "gpucheck"), (LAB, "lab")], ids=["agent", "lab"])
def test_no_import_circles(root: Path, package: str):
    found = circles(import_graph(root, package))
    assert not found, "modules that import each other (move what both need into a third):\n" + "\n".join(
        " <-> ".join(group) for group in found)


def test_a_circle_is_caught(tmp_path):
    """A planted circle through a relative import, one through a lazy import and one of three modules."""
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("from .sub import b\n")
    (tmp_path / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    (tmp_path / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import x\n")
    (tmp_path / "d.py").write_text("from .e import y\n")
    (tmp_path / "e.py").write_text("import pkg.c\n")
    (tmp_path / "ok.py").write_text("from . import a\nfrom .sub.b import f\n")
    assert circles(import_graph(tmp_path, "pkg")) == [["pkg.a", "pkg.sub.b"], ["pkg.c", "pkg.d", "pkg.e"]]


# ---------------------------------------------------------------- each fact in one place

def outermost_literals(tree: ast.AST) -> Iterator[ast.AST]:
    """Tuple/list/set/dict displays not nested in another one."""
    displays = (ast.Tuple, ast.List, ast.Set, ast.Dict)

    def walk(node: ast.AST) -> Iterator[ast.AST]:
        if isinstance(node, displays):
            yield node
            return
        for child in ast.iter_child_nodes(node):
            yield from walk(child)

    yield from walk(tree)


def places_listing(words: set[str], at_least: int) -> list[str]:
    """module:line of each collection literal holding `at_least` of `words` as string constants."""
    found = []
    for module, path in modules():
        for literal in outermost_literals(ast.parse(path.read_text())):
            strings = {n.value for n in ast.walk(literal) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            if len(strings & words) >= at_least:
                found.append(f"{module}:{literal.lineno}")
    return found


def test_stage_names_are_listed_once():
    from gpucheck.cluster.stages.order import STAGE_NAMES

    assert len(STAGE_NAMES) >= 6
    assert len(places_listing(set(STAGE_NAMES), 3)) == 1, places_listing(set(STAGE_NAMES), 3)


def test_cluster_framework_names_are_listed_once():
    names = {"tf-horovod", "torch", "tf-ps"}
    assert len(places_listing(names, 3)) == 1, places_listing(names, 3)


def test_node_framework_names_are_listed_once():
    names = {"tensorflow", "torch", "horovod"}
    assert len(places_listing(names, 3)) == 1, places_listing(names, 3)


def test_the_order_of_statuses_is_defined_once():
    ranked = []
    for module, path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):  # Status -> a number is a ranking (Status -> a word is a label)
                keys = [k for k in node.keys if isinstance(k, ast.Attribute) and isinstance(k.value, ast.Name)
                        and k.value.id == "Status"]
                ranks = all(isinstance(v, ast.Constant) and isinstance(v.value, int) for v in node.values)
                if len(keys) >= 3 and ranks:
                    ranked.append(f"{module}:{node.lineno}")
    assert ranked == [f"gpucheck.model:{model_severity_line()}"]


def model_severity_line() -> int:
    for node in ast.walk(ast.parse((PACKAGE / "model.py").read_text())):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SEVERITY" for t in node.targets):
            return node.lineno
    raise AssertionError("model.SEVERITY is gone")


def functions_with(predicate) -> list[str]:
    found = []
    for module, path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and predicate(node):
                found.append(f"{module}.{node.name}")
    return found


def constants(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def calls(node: ast.AST, dotted: str) -> bool:
    owner, name = dotted.split(".")
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == name
               and isinstance(n.func.value, ast.Name) and n.func.value.id == owner for n in ast.walk(node))


def test_one_mpirun_command_builder():
    builders = functions_with(lambda f: {"mpirun", "-np"} <= constants(f))
    assert builders == ["gpucheck.workloads.launch.mpirun_command"]


def test_one_atomic_writer():
    assert functions_with(lambda f: calls(f, "os.replace")) == ["gpucheck.files.write_atomically"]


def test_one_remote_timeout_wrapper_and_one_tail():
    wrappers = functions_with(lambda f: any("timeout -k" in c for c in constants(f)))
    assert wrappers == ["gpucheck.cluster.ssh.client.limited"]
    assert functions_with(lambda f: f.name == "tail") == ["gpucheck.cluster.ssh.result.tail"]
