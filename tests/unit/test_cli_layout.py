"""The command line is one package, ``sa_inbox/cli/``: the library never imports it, and the
exit codes and the could-not-run error exist once, in ``sa_inbox.cli._common``."""

from __future__ import annotations

import ast
from pathlib import Path

import click

import sa_inbox
from sa_inbox.cli import _common, main

PACKAGE = Path(sa_inbox.__file__).parent
CLI = PACKAGE / "cli"


def _imported_modules(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved)."""
    # sa_inbox/bench/db.py and sa_inbox/bench/__init__.py are both in package sa_inbox.bench
    package = ".".join(path.relative_to(PACKAGE.parent).parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            names.add(name)
            names.update(f"{name}.{alias.name}" for alias in node.names)
    return names


def _imports_the_cli(path: Path) -> bool:
    names = _imported_modules(path)
    return any(name == "sa_inbox.cli" or name.startswith("sa_inbox.cli.") for name in names)


def test_nothing_outside_the_cli_package_imports_it() -> None:
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if CLI not in path.parents and _imports_the_cli(path)
    ]
    assert offenders == []


def test_the_former_cli_modules_are_gone() -> None:
    for name in ("cli.py", "cli_engine.py", "worker_cli.py", "retention_cli.py", "alembic_cli.py"):
        assert not (PACKAGE / name).exists(), name
    assert not (PACKAGE / "bench" / "cli.py").exists()


def test_exit_codes_and_the_error_class_are_defined_once() -> None:
    defined = {}
    for path in CLI.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.startswith("EXIT_"):
                        defined.setdefault(target.id, []).append(path.name)
            if isinstance(node, ast.ClassDef) and any(
                ast.unparse(base) == "click.ClickException" for base in node.bases
            ):
                defined.setdefault("ClickException subclasses", []).append(path.name)
    assert set(defined.pop("ClickException subclasses")) <= {"_common.py", "store.py"}
    assert all(files == ["_common.py"] for files in defined.values()), defined
    assert (_common.EXIT_OK, _common.EXIT_USAGE, _common.EXIT_ERROR) == (0, 2, 3)
    assert _common.CannotRun("x").exit_code == _common.EXIT_ERROR


def test_every_command_is_registered() -> None:
    assert isinstance(main, click.Group)
    assert sorted(main.commands) == [
        "alembic", "bench", "chaos", "console", "dead-letters", "demo", "outbox", "partitions",
        "purge", "relay", "stats", "store", "worker",
    ]  # fmt: skip
