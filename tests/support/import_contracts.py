"""An import-linter contract type the built-in ones do not have: no import cycle between
modules (``acyclic_modules``).

Its graph is import-linter's (grimp's): every import counts, at module level, under ``if
TYPE_CHECKING:`` and inside functions, since a cycle broken only by a late import is still
one concern depending on another and back. The built-in ``acyclic_siblings`` contract
squashes each package into one node, so it also refuses two packages that import each
other from different modules; ``pyproject.toml`` uses it inside each feature package, this
one over the whole of ``sa_inbox``.
"""

from __future__ import annotations

import grimp
from importlinter import Contract, ContractCheck, fields, output

__all__ = ["AcyclicModulesContract", "cycles"]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted.

    :param graph: module -> the modules it imports.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
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


class AcyclicModulesContract(Contract):
    """No module of ``packages`` imports, directly or through others, a module that imports
    it back.

    Options: ``packages``, the packages whose modules are checked (each with its
    descendants).
    """

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        roots = tuple(self.packages)  # type: ignore[call-overload]
        inside = {
            m for m in graph.modules if m in roots or m.startswith(tuple(f"{r}." for r in roots))
        }
        imports = {m: graph.find_modules_directly_imported_by(m) & inside for m in inside}
        found = cycles(imports)
        described = [[f"{m} -> {', '.join(sorted(imports[m] & set(c)))}" for m in c] for c in found]
        return ContractCheck(kept=not found, warnings=None, metadata={"cycles": described})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for number, cycle in enumerate(check.metadata["cycles"], 1):
            output.print_error(f"Cycle {number}:", bold=True)
            for line in cycle:
                output.indent_cursor()
                output.print_error(line)
            output.new_line()
