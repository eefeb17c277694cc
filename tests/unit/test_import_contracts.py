"""The import contracts of ``pyproject.toml`` ([tool.importlinter], run by ``lint-imports``):
kept by sa_inbox, and broken by a cycle that only a late import closes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from importlinter.cli import lint_imports

from tests.support.import_contracts import cycles

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
[tool.importlinter]
root_packages = ["cyclepkg"]
contract_types = ["acyclic_modules: tests.support.import_contracts.AcyclicModulesContract"]

[[tool.importlinter.contracts]]
name = "no cycle"
type = "acyclic_modules"
packages = ["cyclepkg"]
"""


def test_sa_inbox_keeps_its_import_contracts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert lint_imports(config_filename="pyproject.toml", no_cache=True, no_logo=True) == 0


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("closed", [True, False])
def test_a_cycle_closed_inside_a_function_or_type_checking_breaks_the_contract(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closed: bool
) -> None:
    """a imports b inside a function, b imports c under TYPE_CHECKING, c imports a (or not)."""
    package = tmp_path / "cyclepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from . import b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n"
    )
    (package / "c.py").write_text("from . import a\n" if closed else "")
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(CONFIG))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = lint_imports(config_filename="pyproject.toml", no_cache=True, no_logo=True)
    assert code == (1 if closed else 0)
