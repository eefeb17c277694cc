#!/usr/bin/env python3
"""Every module of sa_inbox imports, or fails with the one-line extra message; every
``sa-inbox`` command answers ``--help``.

    python scripts/import_matrix.py [--hide-extras] modules [--installed EXTRA] [--require M]
    python scripts/import_matrix.py [--hide-extras] cli        # every command's --help
    python scripts/import_matrix.py [--hide-extras] run ARGS   # sa-inbox ARGS

Run by scripts/check_dist.sh in virtualenvs holding the built wheel (alone, or with one
extra: ``--installed EXTRA`` then fails if a module still asks for it), and by the unit
tests with ``--hide-extras``: a ``sys.meta_path`` finder then refuses every module that an
extra or a database driver installs, as in a bare ``pip install sa-inbox``.

Without greenlet, :mod:`sqlalchemy.ext.asyncio` is refused as well: SQLAlchemy raises its
ImportError only on the first import without greenlet and lets later ones through, so a
module importing it after another module's attempt would pass here and fail alone.

``modules`` prints one line per module (``ok``, ``extra <name>``, or ``FAIL``) and a summary;
``cli`` one line per command. Exit status 1 if any line is a FAIL.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.abc
import importlib.util
import io
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import traceback
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

#: The top-level modules of the database drivers' extras (imported by SQLAlchemy's dialects).
DRIVERS = ("psycopg", "pymysql", "oracledb", "asyncpg", "aiomysql", "aiosqlite")
#: Installed with the extras' packages, imported by sa_inbox in functions only.
OTHERS = ("aiormq", "sqlalchemy_cockroachdb")
#: The message of :class:`sa_inbox.exc.MissingExtra`.
EXTRA_MESSAGE = re.compile(
    r"(?P<module>sa_inbox[\w.]*) needs the '(?P<extra>[\w-]+)' extra: "
    r"pip install 'sa-inbox\[(?P=extra)\]'"
)
ASYNCIO = "sqlalchemy.ext.asyncio"


class Hidden(importlib.abc.MetaPathFinder):
    """Refuses the modules in ``names`` and their submodules, as if not installed."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if (
            fullname in self.names
            or fullname.partition(".")[0] in self.names
            or (ASYNCIO in self.names and fullname.startswith(ASYNCIO + "."))
        ):
            raise ModuleNotFoundError(f"No module named {fullname!r} (hidden)", name=fullname)
        return None


def hidden_names(hide_extras: bool) -> set[str]:
    """The modules to refuse: the extras' and the drivers' if ``hide_extras``, and
    sqlalchemy.ext.asyncio whenever greenlet is refused or not installed."""
    names: set[str] = set()
    if hide_extras:
        from sa_inbox._optional import EXTRAS

        names.update(*EXTRAS.values(), DRIVERS, OTHERS)
    if "greenlet" in names or importlib.util.find_spec("greenlet") is None:
        names.add(ASYNCIO)
    return names


def hide(hide_extras: bool) -> None:
    """Install the :class:`Hidden` finder for :func:`hidden_names`."""
    sys.meta_path.insert(0, Hidden(hidden_names(hide_extras)))


def module_names() -> Iterator[str]:
    """Every module and package under sa_inbox, found on disk (pkgutil), none imported: a
    package that fails to import still has its modules listed."""
    import sa_inbox

    def walk(path: Sequence[str], prefix: str) -> Iterator[str]:
        for info in pkgutil.iter_modules(path, prefix):
            yield info.name
            if info.ispkg:
                yield from walk(
                    [os.path.join(path[0], info.name.rpartition(".")[2])], info.name + "."
                )

    yield "sa_inbox"
    yield from walk(list(sa_inbox.__path__), "sa_inbox.")


def check_module(name: str) -> tuple[str, str]:
    """``("ok", "")``, ``("extra", <extra>)`` or ``("FAIL", <why>)`` for importing ``name``."""
    try:
        importlib.import_module(name)
    except ImportError as exc:
        text = str(exc)
        match = EXTRA_MESSAGE.fullmatch(text)
        if match is None or "\n" in text or type(exc).__name__ != "MissingExtra":
            return "FAIL", "".join(traceback.format_exception_only(exc)).strip()
        if not exc.name:
            return "FAIL", f"{text} (it does not name the missing module)"
        return "extra", match["extra"]
    except Exception as exc:
        return "FAIL", "".join(traceback.format_exception(exc)).strip()
    return "ok", ""


def modules(installed: str | None, required: Sequence[str]) -> int:
    failed, tally = 0, Counter[str]()
    for name in module_names():
        status, detail = check_module(name)
        if status == "extra" and detail == installed:
            status, detail = "FAIL", f"asks for the {installed!r} extra, which is installed"
        tally[status if status != "extra" else f"needs [{detail}]"] += 1
        failed += status == "FAIL"
        print(f"{status:5} {name}" + (f": {detail}" if detail else ""))
    for name in required:  # what the extra itself installs (a driver, greenlet)
        try:
            importlib.import_module(name)
            print(f"ok    {name} (required)")
        except Exception as exc:
            failed += 1
            print(f"FAIL  {name} (required): {type(exc).__name__}: {exc}")
    import sa_inbox

    where = Path(sa_inbox.__file__).parent
    summary = ", ".join(f"{n} {what}" for what, n in sorted(tally.items()))
    print(f"import matrix ({where}): {summary}")
    return 1 if failed else 0


def command_paths() -> Iterator[list[str]]:
    """The argument path of every command and group of ``sa-inbox``, the root first."""
    import click

    from sa_inbox.cli import main

    def walk(command: click.Command, path: list[str]) -> Iterator[list[str]]:
        yield path
        if isinstance(command, click.Group):
            for name, sub in sorted(command.commands.items()):
                yield from walk(sub, [*path, name])

    yield from walk(main, [])


def entry_point(hide_extras: bool) -> list[str]:
    """How to run ``sa-inbox`` in a process of its own: the virtualenv's entry point script,
    or (optional modules hidden) this script's ``run`` with the same finder."""
    if hide_extras:
        return [sys.executable, __file__, "--hide-extras", "run"]
    script = Path(sys.executable).with_name("sa-inbox")
    found = script if script.exists() else shutil.which("sa-inbox")
    if found is None:
        raise SystemExit("no sa-inbox entry point next to this interpreter nor on PATH")
    return [str(found)]


def help_in_process(path: list[str]) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``sa-inbox <path> --help``, run by click here."""
    from sa_inbox.cli import main as sa_inbox

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            sa_inbox.main([*path, "--help"], prog_name="sa-inbox")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception:
            code, _ = 1, err.write(traceback.format_exc())
    return code, out.getvalue(), err.getvalue()


def cli(hide_extras: bool) -> int:
    """The entry point in a process of its own (``--help``, ``--version``), then every
    command's ``--help`` in this process (each parses its own arguments afresh)."""
    failed = 0

    def report(line: str, code: int, out: str, err: str, expected: str) -> None:
        nonlocal failed
        if code == 0 and out.startswith(expected) and not err:
            print(f"ok    {line}")
        else:
            failed += 1
            print(f"FAIL  {line}: exit {code}\n{err.strip()}")

    for flag, expected in (("--help", "Usage: "), ("--version", "sa-inbox, version ")):
        done = subprocess.run(
            [*entry_point(hide_extras), flag], capture_output=True, text=True, timeout=120
        )
        report(
            f"sa-inbox {flag} (entry point)", done.returncode, done.stdout, done.stderr, expected
        )
    for path in command_paths():
        report(" ".join(["sa-inbox", *path, "--help"]), *help_in_process(path), "Usage: ")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    hide_extras = argv[:1] == ["--hide-extras"]
    argv = argv[hide_extras:]
    if argv[:1] == ["run"]:  # sa-inbox ARGS..., as the entry point would run them
        hide(hide_extras)
        from sa_inbox.cli import main as sa_inbox

        sa_inbox.main(argv[1:], prog_name="sa-inbox")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    modules_parser = sub.add_parser("modules")
    modules_parser.add_argument("--installed", metavar="EXTRA", help="no module may ask for it")
    modules_parser.add_argument("--require", metavar="MODULE", action="append", default=[])
    sub.add_parser("cli")
    options = parser.parse_args(argv)
    hide(hide_extras)
    if options.what == "modules":
        return modules(options.installed, options.require)
    return cli(hide_extras)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
