"""The library's import graph, read from the sources with `ast` (nothing imported): no module
imports itself through others, no part of the package (a subpackage, or a top-level module)
imports another that imports it back, no module imports the package's `__init__`, and the
library never imports the programs (`trainers`).

Data flows one way (STYLE.md): special ids and config -> layers (with their cache) -> model
-> decoding -> models, export; text -> tokenizers is one way too. The deprecated aliases'
shims (a moved module's former name, `layers/_renamed.py`'s former layer names) are left out:
they go in the next release.

`python -m tests.test_import_graph` prints the cycles and the parts' edges."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.doctests import DEPRECATED_MODULES

PACKAGE = Path(__file__).resolve().parent.parent / "keras_transformer"
ROOT = "keras_transformer"
SHIMS = {f"{ROOT}.{name}" for name in DEPRECATED_MODULES} | {f"{ROOT}.layers._renamed"}


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known) -> set[str]:
    """The modules of ours (and `trainers...`) that module `name` imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()

    def add(target: str) -> None:
        while target and target not in known and not target.startswith("trainers"):
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in (ROOT, "trainers"):
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            if base.split(".")[0] not in (ROOT, "trainers"):
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                add(full if full in known else base)
    return found


def graph() -> dict[str, set[str]]:
    """module -> the modules it imports, the shims left out."""
    known = modules()
    return {
        name: imports(name, path, known) - SHIMS
        for name, path in known.items()
        if name not in SHIMS
    }


def part(name: str) -> str | None:
    """The top-level part of the package a module belongs to (`layers` for
    `keras_transformer.layers.cache`), None for the package's `__init__`."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def parts_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    parts: dict[str, set[str]] = {}
    for name, targets in edges.items():
        if part(name) is None:
            continue
        parts.setdefault(part(name), set())
        parts[part(name)] |= {part(t) for t in targets if part(t) not in (None, part(name))}
    return parts


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read_from_every_module():
    edges = graph()
    assert "keras_transformer.layers.attention" in edges
    assert "keras_transformer.layers.cache" in edges["keras_transformer.layers.attention"]
    assert "keras_transformer.special_ids" in edges["keras_transformer.text"]


def test_the_checks_find_a_cycle_where_there_is_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_through_others():
    assert cycles(graph()) == []


def test_no_part_of_the_package_imports_one_that_imports_it_back():
    assert cycles(parts_graph(graph())) == []


def test_no_module_imports_the_package_itself_or_the_programs():
    for name, targets in graph().items():
        if name == ROOT:
            continue
        assert ROOT not in targets, f"{name} imports the package's __init__"
        assert not any(t.startswith("trainers") for t in targets), f"{name} imports trainers"


if __name__ == "__main__":
    edges = graph()
    print("module cycles:", cycles(edges))
    print("part cycles:", cycles(parts_graph(edges)))
    for name, targets in sorted(parts_graph(edges).items()):
        print(f"{name} -> {', '.join(sorted(targets))}")
