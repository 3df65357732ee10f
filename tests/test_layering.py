"""`common/` reaches a family only through `common.family.Family`: no module of it imports a
family package (`captioner`, `seq2seq`, any package beside `common/` with a `family.py`), and no
import cycle runs through `common` and a family.

The imports are read with `ast`, not by importing: top-level ones and those inside functions,
`import x`, `from x import y`, relative ones, and the module names given as strings to
`importlib.import_module`, `__import__`, `find_spec` and `Registry.declare`.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The packages whose modules make the import graph.
PACKAGES = ("common", "captioner", "seq2seq")
#: Calls whose first argument (`Registry.declare`: second) names a module to import.
IMPORTING_CALLS = {"import_module": 0, "__import__": 0, "find_spec": 0, "declare": 1}


def families() -> tuple[str, ...]:
    """The family packages: those beside `common/` with a `family.py`."""
    return tuple(sorted(p.parent.name for p in REPO.glob("*/family.py")
                        if p.parent.name != "common" and (p.parent / "__init__.py").is_file()))


def modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Module name -> its file, for every module of `packages` (a package by its
    `__init__.py`)."""
    found = {}
    for package in packages:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imported_names(name: str, path: Path,
                   calls: dict[str, int] = IMPORTING_CALLS) -> Iterator[tuple[int, str]]:
    """`(line, module name)` for every import in the module `name` (file `path`), at any depth:
    a `from m import x` gives `m.x` (which is `m` itself unless `x` is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}" if alias.name != "*" else base
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            position = calls.get(called)
            if position is None:
                continue
            args = list(node.args)
            if called == "declare":
                args += [k.value for k in node.keywords if k.arg == "module"]
            if len(args) > position and isinstance(args[position], ast.Constant) \
                    and isinstance(args[position].value, str):
                yield node.lineno, args[position].value


def top_package(module: str) -> str:
    return module.split(".")[0]


def test_common_imports_no_family():
    """Not one import of a family in `common/`, however written."""
    family_packages = families()
    assert {"captioner", "seq2seq"} <= set(family_packages)  # the walk sees the families
    found = []
    for name, path in modules(("common",)).items():
        for line, target in imported_names(name, path):
            if top_package(target) in family_packages:
                found.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert not found, "common/ imports a family:\n" + "\n".join(found)


def import_graph(calls: dict[str, int] = IMPORTING_CALLS) -> dict[str, set[str]]:
    """Module -> the modules of `PACKAGES` that importing it runs (the imported module, or
    the package `from package import name` reads, and the packages above it)."""
    known = modules()
    graph = {}
    for name, path in known.items():
        edges = set()
        for _line, target in imported_names(name, path, calls):
            parts = target.split(".")
            while parts and ".".join(parts) not in known:  # `m.function` -> `m`
                parts.pop()
            for i in range(1, len(parts) + 1):  # the packages run first
                if ".".join(parts[:i]) != name:
                    edges.add(".".join(parts[:i]))
        graph[name] = edges
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components of `graph` (iterative)."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    components.append(component)
    return components


def shortest_path(graph: dict[str, set[str]], start: str, goals: set[str],
                  within: set[str]) -> list[str]:
    """The shortest path from `start` to the nearest of `goals` (not `start` itself) inside
    `within`, breadth first."""
    before = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node] & within):
            if child in goals:
                path = [child, node]
                while before[path[-1]] is not None:
                    path.append(before[path[-1]])
                return path[::-1]
            if child not in before:
                before[child] = node
                queue.append(child)
    return []


def mixed_cycles(graph: dict[str, set[str]]) -> list[str]:
    """One cycle, as `a -> b -> ... -> a`, for each strongly connected set of modules that
    holds both a `common` module and a family module."""
    family_packages = set(families())
    cycles = []
    for component in strongly_connected(graph):
        ours = sorted(m for m in component if top_package(m) == "common")
        theirs = {m for m in component if top_package(m) in family_packages}
        if ours and theirs:
            there = shortest_path(graph, ours[0], theirs, component)
            back = shortest_path(graph, there[-1], {ours[0]}, component)
            cycles.append(" -> ".join(there + back[1:]))
    return cycles


def test_the_cycle_finder_finds_a_cycle_through_common_and_a_family():
    """The check below can fail: a made-up graph with such a cycle is reported."""
    graph = {"common.a": {"common.b"}, "common.b": {"seq2seq.x"}, "seq2seq.x": {"common.a"},
             "seq2seq.y": {"seq2seq.z"}, "seq2seq.z": {"seq2seq.y"}, "common.c": set()}
    assert mixed_cycles(graph) == ["common.a -> common.b -> seq2seq.x -> common.a"]


def test_no_import_cycle_runs_through_common_and_a_family():
    graph = import_graph()
    assert "common.family" in graph and "common.config" in graph["captioner.family"]
    cycles = mixed_cycles(graph)
    assert not cycles, "import cycles through common/ and a family:\n" + "\n".join(cycles)


def test_every_family_is_found_by_its_name_and_an_unknown_name_is_one_line():
    """`common.family.family_named` is how `common/` reaches a family it knows by name (a
    prepared folder's, a run's): each package beside `common/` with a `family.py`."""
    from common.errors import UserError
    from common.family import Family, family_named, family_names

    assert family_names() == families()
    for name in families():
        family = family_named(name)
        assert isinstance(family, Family) and family.name == name
        assert set(family.prepared_layout().vocabularies.values()) <= set(
            family.vocabulary_files(family.config_class()))
    with pytest.raises(UserError, match=r"unknown family 'robot'; expected one of: "
                                        r"captioner, seq2seq$"):
        family_named("robot")


def common_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one `common` module, counting only the imports
    between them that a file writes (not a module's import of the packages above it, which
    Python runs first and which may import the module back: a package's `__init__`)."""
    inner = {name: {t for t in targets if top_package(t) == "common"
                    and not name.startswith(t + ".")}
             for name, targets in graph.items() if top_package(name) == "common"}
    return [sorted(c) for c in strongly_connected(inner) if len(c) > 1]


def test_the_common_cycle_finder_finds_a_cycle_but_not_a_package_init():
    graph = {"common.a": {"common.b"}, "common.b": {"common.a"},
             "common.p": {"common.p.x"}, "common.p.x": {"common.p"}}
    assert common_cycles(graph) == [["common.a", "common.b"]]


def test_no_import_cycle_between_files_of_common():
    """No two files of `common/` import each other, at any depth, even inside functions
    (issue 46 item 6: `cli` and `runner` did). A registry's declaration of the module that
    fills it (`Registry.declare`) is not an import: that module is imported when a name is
    looked up, and imports the registry back by design."""
    lazy_declarations_aside = {k: v for k, v in IMPORTING_CALLS.items() if k != "declare"}
    graph = import_graph(lazy_declarations_aside)
    assert "common.options" in graph["common.runner"]
    cycles = common_cycles(graph)
    assert not cycles, "import cycles inside common/:\n" + "\n".join(map(" <-> ".join, cycles))
