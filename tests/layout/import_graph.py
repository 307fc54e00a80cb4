"""The import graph of perfci's packages, read from the source with :mod:`ast` (nothing is imported).

Every ``import`` and ``from ... import`` counts, at module level or inside a function: a lazy
import is still a dependency. Importing ``a.b.c`` also runs ``a`` and ``a.b``, so a module depends
on the packages above what it imports too. Strings (``import_module("...")``, Celery's
``include=``) are not edges: they name a module without depending on it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "perfci_core": ROOT / "core" / "perfci_core",
    "perfci_agent": ROOT / "agents" / "perfci_agent",
    "perfci_server": ROOT / "server" / "perfci_server",
    "perfci_cli": ROOT / "cli" / "perfci_cli",
}


def module_files() -> dict[str, Path]:
    """Module name -> source file, for every module of the four packages."""
    modules = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_names(module: str, path: Path) -> Iterable[str]:
    """Absolute dotted names this module imports (for ``from X import y``: ``X.y`` and ``X``)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def graph() -> dict[str, set[str]]:
    """Module -> the modules it depends on: those of the four packages, and the top-level names
    of everything else (``numpy``, ``sqlalchemy``, ``json``)."""
    files = module_files()
    edges: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = set()
        for name in imported_names(module, path):
            parts = name.split(".")
            if parts[0] not in PACKAGES:
                targets.add(parts[0])
                continue
            # the module itself (when `name` is an attribute, its module) and every package above it
            for end in range(1, len(parts) + 1):
                prefix = ".".join(parts[:end])
                if prefix in files:
                    targets.add(prefix)
        # a module's own packages run before it, always: not a dependency worth a circle
        targets -= {".".join(module.split(".")[:end]) for end in range(1, module.count(".") + 2)}
        edges[module] = targets
    return edges


def cycles_through(start: str, edges: dict[str, set[str]]) -> list[list[str]]:
    """One shortest import path back to ``start`` from each of its direct imports that has one."""
    found = []
    for first in sorted(edges.get(start, ())):
        previous: dict[str, str | None] = {first: None}
        queue = [first]
        while queue:
            node = queue.pop(0)
            if node == start:
                path = [node]
                while previous[path[-1]] is not None:
                    path.append(previous[path[-1]])
                found.append([start, *reversed(path)])
                break
            for nxt in sorted(edges.get(node, ())):
                if nxt not in previous:
                    previous[nxt] = node
                    queue.append(nxt)
    return found


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Groups of modules that import each other, directly or around a circle (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in edges:
                continue  # outside the four packages
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


if __name__ == "__main__":
    edges = graph()
    print(f"{len(edges)} modules, {sum(len(t) for t in edges.values())} imports")
    for package in PACKAGES:
        others = sorted({t.split(".")[0] for m, ts in edges.items() if m.split(".")[0] == package for t in ts} - {package})
        print(f"{package} imports: {', '.join(others)}")
    print("circles through perfci_server.celery_app:", cycles_through("perfci_server.celery_app", edges) or "none")
    groups = strongly_connected(edges)
    print("modules in circles:", groups or "none")
