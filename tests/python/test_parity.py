"""Python mirrors the JVM core module for module (CONTRIBUTING.md, Layout).

Both sides are read as source, nothing imported: the JVM's public top-level classes, objects and
traits per Scala file (``private`` and ``private[...]`` ones skipped) under ``jvm/core`` and the
cloud stores, and Python's public classes and functions per module under ``python/osqueue``.
``Foo.scala`` in ``osqueue/<pkg>/`` is ``<pkg>/foo.py`` (snake_case; the cloud stores' own JVM
packages ``store/gcs``, ``store/azure`` sit flat in Python's ``store/``), and a class keeps its
name. Every difference must be explained, once, in ``tests/golden/parity.json`` (both sides named,
and why); an explanation that no longer matches a difference fails too.

Besides the explanations, three rules hold everywhere (``parity.json`` "rules"): a JVM
``FooException`` is Python's ``FooError``; a class nested in a JVM object or trait (a sealed
hierarchy's cases) may be a top-level Python class of the same file; and a Python module's
public functions are the methods of its JVM file's object (``object BatchCodec { def encode }``
is ``batch_codec.encode_batch``), so a Python module with functions needs a public JVM object.
"""

from __future__ import annotations

import ast
import json
import pathlib
import re
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "osqueue"
JVM_SOURCES = {
    # JVM source root -> the package prefix its files take on the Python side.
    ROOT / "jvm" / "core" / "src" / "main" / "scala" / "osqueue": "",
    ROOT / "jvm" / "gcs" / "src" / "main" / "scala" / "osqueue" / "store" / "gcs": "store/",
    ROOT / "jvm" / "azure" / "src" / "main" / "scala" / "osqueue" / "store" / "azure": "store/",
}
# What Python mirrors: the core packages and the top-level files beside them. The Spark wrapper,
# the jar finder, the CLI and the Python data source are Python's own (the JVM's are jvm/spark and
# tools/; spark_source mirrors the connector's roles, not the core).
PYTHON_OWN = {"__init__.py", "__main__.py", "_jar.py", "_spark_lines.py", "_version.py", "spark.py"}
PYTHON_OWN_DIRS = {"cli", "jars", "spark_source"}
PARITY = ROOT / "tests" / "golden" / "parity.json"

# A top-level declaration at the start of a line: modifiers, then class/object/trait and a name.
# `private ...` / `private[pkg] ...` never match (the modifier is not among these).
_SCALA_TOP = re.compile(r"^(?:(?:final|sealed|abstract|case|implicit)\s+)*(class|object|trait)\s+(\w+)(.*)")
# One level in (two spaces): the cases of a sealed hierarchy, held in the companion object.
_SCALA_NESTED = re.compile(r"^  (?:(?:final|sealed|abstract|case|implicit)\s+)*(class|object|trait)\s+(\w+)")
# A CamelCase module-level assignment is a type alias (``CasOutcome = Written | PreconditionFailed``).
_CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$")


@dataclass
class JvmFile:
    types: set[str]  # public top-level classes, traits and value objects (``object SystemClock extends Clock``)
    objects: set[str]  # public objects (their methods are Python's module functions)
    nested: set[str]  # classes and objects one level in


@dataclass
class PyModule:
    types: set[str]  # public classes and CamelCase aliases
    functions: set[str]


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def jvm_file(text: str) -> JvmFile:
    classes: set[str] = set()
    objects: set[str] = set()
    values: set[str] = set()
    nested: set[str] = set()
    for line in text.splitlines():
        top = _SCALA_TOP.match(line)
        if top:
            kind, name, rest = top.groups()
            if kind != "object":
                classes.add(name)
            else:
                objects.add(name)
                if " extends " in f" {rest}":
                    values.add(name)
        inner = _SCALA_NESTED.match(line)
        if inner:
            nested.add(inner.group(2))
    # An object without a class or trait of its name and extending nothing is a namespace of
    # functions and constants (``object BatchCodec``, ``object MetricNames``): Python's module level.
    return JvmFile(classes | values, objects, nested)


def py_module(text: str) -> PyModule:
    types: set[str] = set()
    functions: set[str] = set()
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            types.add(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            functions.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            types |= {t.id for t in targets if isinstance(t, ast.Name) and _CAMEL.match(t.id)}
    return PyModule(types, functions)


def jvm_side() -> dict[str, JvmFile]:
    """Python module path (``format/batch_codec.py``) -> what its JVM file declares."""
    out: dict[str, JvmFile] = {}
    for root, prefix in JVM_SOURCES.items():
        for path in sorted(root.rglob("*.scala")):
            rel = path.relative_to(root)
            module = prefix + "/".join([*rel.parts[:-1], snake(path.stem) + ".py"])
            assert module not in out, f"two JVM files map to {module}"
            out[module] = jvm_file(path.read_text(encoding="utf-8"))
    return out


def python_side() -> dict[str, PyModule]:
    out: dict[str, PyModule] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.name == "__init__.py" or (len(rel.parts) == 1 and rel.name in PYTHON_OWN):
            continue
        if rel.parts[0] in PYTHON_OWN_DIRS:
            continue
        out[rel.as_posix()] = py_module(path.read_text(encoding="utf-8"))
    return out


def python_name(jvm_name: str) -> str:
    return jvm_name[: -len("Exception")] + "Error" if jvm_name.endswith("Exception") else jvm_name


def differences(jvm: dict[str, JvmFile], python: dict[str, PyModule]) -> set[tuple[str | None, str | None]]:
    """Each unexplained-until-proven difference as (jvm side, python side): ``module`` for a whole
    file, ``module:Name`` for a class, object or function; None for the side that lacks it."""
    found: set[tuple[str | None, str | None]] = set()
    for module in sorted(set(jvm) | set(python)):
        j, p = jvm.get(module), python.get(module)
        if j is None or p is None:
            found.add((module if j else None, module if p else None))
            continue
        expected = {python_name(t) for t in j.types}
        allowed = expected | {python_name(t) for t in j.nested}
        for name in sorted(expected - p.types):
            found.add((f"{module}:{name}", None))
        for name in sorted(p.types - allowed):
            found.add((None, f"{module}:{name}"))
        if p.functions and not j.objects:
            for name in sorted(p.functions):
                found.add((None, f"{module}:{name}()"))
    return found


def covers(jvm: str | None, python: str | None) -> set[tuple[str | None, str | None]]:
    return {(jvm, None), (None, python)} if jvm and python else {(jvm, python)}


def explanations() -> list[dict[str, str | None]]:
    entries: list[dict[str, str | None]] = json.loads(PARITY.read_text(encoding="utf-8"))["explained"]
    return entries


def test_every_difference_between_the_jvm_and_python_layouts_is_explained() -> None:
    # An entry naming both sides (a rename or a move) explains the two differences it causes.
    explained = {key for e in explanations() for key in covers(e["jvm"], e["python"])}
    found = differences(jvm_side(), python_side())
    unexplained = sorted(found - explained, key=str)
    assert not unexplained, (
        "Python and the JVM differ here (mirror the other side, or explain it in tests/golden/parity.json "
        f"with both sides and a reason): {unexplained}"
    )
    stale = sorted(explained - found, key=str)
    assert not stale, f"parity.json explains differences that are gone (remove them): {stale}"


def test_every_explanation_names_both_sides_and_gives_a_reason() -> None:
    entries = explanations()
    for e in entries:
        assert set(e) == {"jvm", "python", "reason"}, e
        assert e["jvm"] or e["python"], e
        assert e["reason"] and len(e["reason"]) > 20, e
    pairs = [(e["jvm"], e["python"]) for e in entries]
    assert len(pairs) == len(set(pairs)), "an explanation is listed twice"


def test_the_scan_sees_both_sides() -> None:
    jvm, python = jvm_side(), python_side()
    assert "CasLoop" in jvm["queue/cas_loop.py"].types
    assert "ManifestStore" not in jvm["queue/cas_loop.py"].types
    assert "GcsStore" in jvm["store/gcs_store.py"].types
    assert "CasLoop" in python["queue/cas_loop.py"].types
    assert "decode_batch" in python["format/batch_codec.py"].functions
    assert "InvalidConfigError" in python["errors.py"].types


@pytest.mark.parametrize(
    "scala,declared",
    [
        ("final class A(x: Int) {\n  def f = 1\n}", {"A"}),
        ("private object Hidden {\n}\nprivate[store] object AlsoHidden", set()),
        ("sealed trait T\nobject T {\n  final case class C(x: Int) extends T\n}", {"T"}),
        ("object Codec {\n  def encode(x: Int): Int = x\n}", set()),
        ("object SystemClock extends Clock {\n}", {"SystemClock"}),
        ("final class WriteHandle private[producer] (x: Int)", {"WriteHandle"}),
    ],
)
def test_the_scala_scan_keeps_public_top_level_declarations_only(scala: str, declared: set[str]) -> None:
    assert jvm_file(scala).types == declared


def test_a_stray_public_class_on_either_side_is_a_difference() -> None:
    jvm, python = jvm_side(), python_side()
    jvm["format/batch_codec.py"].types.add("StrayCodec")  # as if BatchCodec.scala declared a class StrayCodec
    python["format/manifest.py"].types.add("StrayEntry")
    found = differences(jvm, python)
    assert ("format/batch_codec.py:StrayCodec", None) in found
    assert (None, "format/manifest.py:StrayEntry") in found
    python["gc/garbage_collector.py"].functions.add("collect_everything")
    assert (None, "gc/garbage_collector.py:collect_everything()") in differences(jvm, python)


def test_no_module_is_over_600_lines() -> None:
    # One small file per role (CONTRIBUTING.md): a module past this wants splitting by role.
    sizes = {
        p.relative_to(PACKAGE).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
        for p in PACKAGE.rglob("*.py")
    }
    assert {m: n for m, n in sizes.items() if n > 600} == {}
