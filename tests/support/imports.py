"""The imports of sa_inbox's modules, read from the source with :mod:`ast`: every import
counts, at module level, under ``if TYPE_CHECKING:`` and inside functions."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import sa_inbox

PACKAGE = Path(sa_inbox.__file__).parent


def package_modules() -> dict[str, tuple[Path, bool]]:
    """Every module of sa_inbox by dotted name: its path, and whether it is a package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute name of ``from <node.module> import …`` in ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def imported(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Every name ``tree`` imports, absolute: ``from a import b`` gives ``a.b`` (module ``b``
    of package ``a``, or name ``b`` of module ``a``: :func:`module_graph` resolves it)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            yield from (f"{base}.{alias.name}" for alias in node.names)


def module_graph() -> dict[str, set[str]]:
    """Module -> the sa_inbox modules it imports (a name resolves to its longest module)."""
    modules = package_modules()

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, (path, is_package) in modules.items():
        names = imported(ast.parse(path.read_text()), module, is_package)
        graph[module] = {owner(n) for n in names if n.startswith("sa_inbox")} - {None, module}
    return graph  # type: ignore[return-value]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found
