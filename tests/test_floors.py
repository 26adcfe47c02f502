"""The floors of `docs/architecture.md`, kept: every `inaemu.*` import in every module (at the
top, inside a function or under `TYPE_CHECKING`, all read from the source with `ast`) goes to
the importer's own package or to a package on a lower floor, and no modules import each other
in a circle. `FLOORS` states the rule once; the document's table must say the same."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Bottom up. A package may import its own modules and those of packages on floors below its
# own: never a package on its own floor or above. examples/ (scripts for the commands, shipped
# in the package) is the top floor; bench/ and tests/ stand above all of them and may import
# any.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("p4",),
    ("topology",),
    ("collectives", "common"),
    ("hostlib",),
    ("controller", "runs", "softswitch"),
    ("embedded", "mininet", "sim"),
    ("conformance",),
    ("cli",),
    ("examples",),
)

FLOOR = {package: n for n, packages in enumerate(FLOORS) for package in packages}


def module_files() -> dict[str, Path]:
    """Every module of the package, by its `inaemu.*` name (a package by its own name)."""
    out = {}
    for package in FLOOR:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(("inaemu", *parts))] = path
    return out


def imported(module: str, path: Path, modules: set[str]) -> Iterator[tuple[int, str]]:
    """(line, module) for every `inaemu.*` module that `module` imports anywhere in its
    source. `from P import N` names module P.N if there is one, else P; importing a submodule
    is not counted as importing its parent packages."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importer's package
                here = module.split(".")[: None if is_package else -1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, *([base] if base else [])])
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            if name == "inaemu" or name.startswith("inaemu."):
                yield node.lineno, name


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported inaemu module: line of the first such import}."""
    files = module_files()
    modules = set(files)
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        edges = graph.setdefault(module, {})
        for line, name in imported(module, path, modules):
            if name != module:
                edges.setdefault(name, line)
    return graph


def package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def test_every_folder_of_the_namespace_is_on_a_floor() -> None:
    links = {p.name for p in (ROOT / "inaemu").iterdir() if p.is_symlink()}
    assert links == set(FLOOR), "inaemu/'s links and FLOORS name different folders"


def test_imports_go_down() -> None:
    files = module_files()
    wrong = []
    for module, edges in import_graph().items():
        for name, line in edges.items():
            here, there = package(module), package(name)
            if there == here:
                continue
            if there not in FLOOR or FLOOR[there] >= FLOOR[here]:
                where = files[module].relative_to(ROOT)
                wrong.append(f"{where}:{line}: {module} imports {name}")
    assert not wrong, "imports that do not go to a lower floor:\n" + "\n".join(sorted(wrong))


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for peer in edges:
                if peer not in graph:
                    continue
                if peer not in index:
                    index[peer] = low[peer] = len(index)
                    stack.append(peer)
                    on_stack.add(peer)
                    work.append((peer, iter(graph[peer])))
                    break
                if peer in on_stack:
                    low[node] = min(low[node], index[peer])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def test_circles_are_found() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1, "d": 1}, "d": {}, "e": {"e": 1}}
    assert circles(graph) == [["a", "b", "c"]]


def test_no_modules_import_each_other_in_a_circle() -> None:
    found = circles(import_graph())
    assert not found, "modules that import each other round a circle:\n" + "\n".join(
        ", ".join(c) for c in found
    )


def documented_floors() -> tuple[tuple[str, ...], ...]:
    """The floors table of docs/architecture.md ("| 0 | `p4` | ..."), bottom up."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("\n## Floors", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\| (\d+) \| ([^|]+) \|", line)
        if m:
            rows[int(m[1])] = tuple(re.findall(r"`(\w+)/`", m[2]))
    return tuple(rows[n] for n in sorted(rows))


def test_the_architecture_document_states_the_same_floors() -> None:
    assert documented_floors() == FLOORS
