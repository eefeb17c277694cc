"""The import contracts of ``pyproject.toml`` ([tool.importlinter], run by ``lint-imports``):
kept by sa_inbox, and broken by a cycle that only a late import closes.

``lint-imports`` runs in a child process: it configures logging for the whole process
(``logging.config.dictConfig``, which disables every logger already made)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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


def lint_imports(cwd: Path, *path: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports --no-cache`` in ``cwd``, ``path`` first on its import path (and the
    repository, for the custom contract type)."""
    command = Path(sys.executable).parent / "lint-imports"
    pythonpath = os.pathsep.join(map(str, [*path, ROOT]))
    return subprocess.run(
        [str(command), "--no-cache"],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": pythonpath},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_sa_inbox_keeps_its_import_contracts() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("closed", [True, False])
def test_a_cycle_closed_inside_a_function_or_type_checking_breaks_the_contract(
    tmp_path: Path, closed: bool
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
    result = lint_imports(tmp_path, tmp_path)
    assert result.returncode == (1 if closed else 0), result.stdout + result.stderr
    assert ("cyclepkg.a -> cyclepkg.b" in result.stdout) is closed
