"""The package's import graph: each module imports what it uses at its top (never inside a function,
where an import hides a cycle until a call runs it), the modules form no cycle, and no module imports
another's private names (a shared name is public where it is defined). ``if TYPE_CHECKING:`` imports
are annotations only and are left out. Importing ``osqueue.a.b`` runs ``osqueue/a/__init__.py``
first, so a package's re-exports count as edges of the graph."""

from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass, field

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "python" / "osqueue"


@dataclass
class Module:
    name: str
    is_package: bool
    imports: set[str] = field(default_factory=set)  # module-level: modules and packages named
    nested: list[str] = field(default_factory=list)  # "line: module" imported inside a def or class
    private: list[str] = field(default_factory=list)  # "module.name" private names imported


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def scan(name: str, source: str, known: set[str], is_package: bool = False) -> Module:
    """What module ``name`` imports from the package (names in ``known``)."""
    module = Module(name, is_package)
    package = name if is_package else name.rpartition(".")[0]

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:
                    visit(other, nested)
                continue
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - child.level + 1] + ([base] if base else []))
                for alias in child.names:
                    target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                    record(child, target, nested)
                    if (
                        target == base
                        and base in known
                        and alias.name.startswith("_")
                        and not alias.name.startswith("__")
                    ):
                        module.private.append(f"{base}.{alias.name}")
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    record(child, alias.name, nested)
            visit(child, nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)))

    def record(node: ast.stmt, target: str, nested: bool) -> None:
        if target.split(".")[0] != "osqueue" or target not in known:
            return
        if nested:
            module.nested.append(f"{node.lineno}: {target}")
        else:
            module.imports.add(target)

    visit(ast.parse(source), False)
    return module


def modules() -> dict[str, Module]:
    paths = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        paths[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    known = set(paths)
    return {n: scan(n, p.read_text(encoding="utf-8"), known, pkg) for n, (p, pkg) in paths.items()}


def graph(found: dict[str, Module]) -> dict[str, set[str]]:
    """Module -> the modules importing it runs: each one named and the packages above it, except the
    packages above the importer (those are already being imported when it runs)."""

    def above(name: str) -> set[str]:
        parts = name.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts))}

    edges: dict[str, set[str]] = {}
    for name, module in found.items():
        runs = set().union(*({t} | above(t) for t in module.imports)) if module.imports else set()
        edges[name] = {t for t in runs if t in found} - {name} - above(name)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
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
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return out


def test_no_module_imports_a_package_module_inside_a_function() -> None:
    nested = {name: m.nested for name, m in modules().items() if m.nested}
    assert nested == {}, "import these at the top of the module (a cycle? move the shared piece)"


def test_the_modules_form_no_import_cycle() -> None:
    assert cycles(graph(modules())) == []


def test_no_module_imports_another_modules_private_name() -> None:
    found = {f"{name}: {p}" for name, m in modules().items() for p in m.private}
    assert found == set(), "make the name public where it is defined, or move it"


def test_the_scan_sees_a_nested_import_a_cycle_and_a_private_name() -> None:
    known = {"osqueue", "osqueue.a", "osqueue.a.x", "osqueue.a.y", "osqueue.b"}
    x = scan("osqueue.a.x", "from osqueue.a.y import Y\ndef f():\n    from osqueue.b import B\n", known)
    y = scan(
        "osqueue.a.y",
        "from typing import TYPE_CHECKING\nfrom .x import _X\nif TYPE_CHECKING:\n    import osqueue.b\n",
        known,
    )
    b = scan("osqueue.b", "import osqueue.a.x\n", known)
    assert x.imports == {"osqueue.a.y"} and x.nested == ["3: osqueue.b"]
    assert y.imports == {"osqueue.a.x"} and y.private == ["osqueue.a.x._X"]
    assert b.imports == {"osqueue.a.x"}
    a = scan("osqueue.a", "from osqueue.a.x import X\n", known, is_package=True)
    edges = graph({m.name: m for m in (x, y, b, a)})
    assert edges["osqueue.b"] == {"osqueue.a.x", "osqueue.a"}  # importing osqueue.a.x runs osqueue/a/__init__.py
    assert cycles(edges) == [["osqueue.a.x", "osqueue.a.y"]]


def test_the_top_level_is_the_user_api_and_each_name_is_in_its_layer() -> None:
    import osqueue
    from osqueue import consumer, errors, producer

    assert set(osqueue.__all__) == {
        "__version__",
        "jar_path",
        "Producer",
        "WriteHandle",
        "DurableWrite",
        "Consumer",
        "ConsumedBatch",
        "FetchHandle",
        "ErrorKind",
        "OsqueueError",
        "InvalidConfigError",
        "FencedError",
        "ResumePointError",
        "StoreError",
        "ConflictRetriesExhaustedError",
        "AmbiguousCommitError",
        "QueueFullError",
        "CorruptSpoolError",
        "DataLossError",  # a Consumer raises it (fail_on_data_loss) and passes it to on_data_loss: users catch it
    }, "the user API grows only with a reason: the layers are osqueue.format, .store, .queue, .gc, .metrics"
    layers = [vars(m) for m in (consumer, errors, producer)]
    for name in osqueue.__all__:
        if name not in ("__version__", "jar_path"):
            assert any(layer.get(name) is getattr(osqueue, name) for layer in layers), name
