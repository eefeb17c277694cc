"""A bare ``pip install sa-inbox``: every module imports, or fails with one line naming the
extra to install (sa_inbox._optional), and the sync broker adapters need no greenlet.

The optional packages are hidden from a subprocess by scripts/import_matrix.py's
``sys.meta_path`` finder (every extra's and driver's modules, greenlet and
sqlalchemy.ext.asyncio included); scripts/check_dist.sh runs the same matrix in
virtualenvs holding only the built wheel.
"""

from __future__ import annotations

import ast
import pickle
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import sa_inbox
from sa_inbox._optional import EXTRAS, import_optional_dependency, optional_dependencies
from sa_inbox.exc import ConfigurationError, MissingExtra
from tests.support.cli import run_hiding

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "scripts" / "import_matrix.py"
PACKAGE = Path(sa_inbox.__file__).parent

#: The extras that declare greenlet: the async drivers' and asyncio's, and every extra with
#: an asyncio adapter (its AsyncSession needs it). SQLAlchemy 2.1 does not install it.
GREENLET_EXTRAS = {
    "asyncio", "asyncpg", "aiomysql", "aiosqlite", "rabbitmq", "redis", "nats", "faststream",
    "kafka",
    "sqs",
}  # fmt: skip


def matrix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(MATRIX), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def pyproject_extras() -> dict[str, list[Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        extra: [Requirement(r) for r in requirements]
        for extra, requirements in project["optional-dependencies"].items()
    }


def test_every_module_imports_or_names_its_extra_without_the_extras() -> None:
    done = matrix("--hide-extras", "modules")
    assert done.returncode == 0, done.stdout + done.stderr
    status = {}
    for line in done.stdout.splitlines()[:-1]:  # the last line is the summary
        word, rest = line.split(None, 1)
        name, _, detail = rest.partition(": ")
        status[name] = detail if word == "extra" else word
    assert len(status) > 150
    always = ["sa_inbox", "sa_inbox.cli", "sa_inbox.brokers", "sa_inbox.demo", "sa_inbox.store"]
    always += ["sa_inbox.chaos.drivers", "sa_inbox.bench.async_layer", "sa_inbox.outbox"]
    assert {name: status[name] for name in always} == dict.fromkeys(always, "ok")
    assert status["sa_inbox.brokers.rabbitmq"] == "rabbitmq"
    assert status["sa_inbox.brokers.rabbitmq.blocking"] == "rabbitmq"
    assert status["sa_inbox.asyncio"] == "asyncio"
    assert status["sa_inbox.alembic"] == "alembic"
    assert status["sa_inbox.hooks.prometheus"] == "prometheus"
    named = set(status.values()) - {"ok"}
    assert named == set(EXTRAS) - {"bench"}, "bench imports matplotlib in functions only"


def test_the_sync_broker_adapters_do_not_import_sqlalchemy_asyncio() -> None:
    """[mysql,rabbitmq,redis] without greenlet: the sync adapters import and run without
    sqlalchemy.ext.asyncio (it stays unimported); the async ones need it only for the
    AsyncSession their caller brings."""
    done = run_hiding(
        {"greenlet", "sqlalchemy.ext.asyncio"},
        "from sa_inbox.brokers import rabbitmq, redis\n"
        "rabbitmq.Consumer, rabbitmq.AsyncConsumer, redis.Consumer, redis.AsyncConsumer\n"
        "import sa_inbox.brokers.celery, sa_inbox.chaos.drivers.rabbitmq\n"
        "import sa_inbox.chaos.drivers.redis, sa_inbox.outbox.publisher\n"
        "print(sorted(m for m in sys.modules if m.startswith('sqlalchemy.ext.asyncio')))\n",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"


def test_a_missing_dependency_is_one_line_naming_the_extra() -> None:
    with pytest.raises(MissingExtra) as caught:
        import_optional_dependency("sa_inbox_no_such_client", extra="redis", module="sa_inbox.x")
    error = caught.value
    assert str(error) == "sa_inbox.x needs the 'redis' extra: pip install 'sa-inbox[redis]'"
    assert isinstance(error, ImportError) and isinstance(error, ConfigurationError)
    # the dependency's ModuleNotFoundError is not shown above the line that names the extra
    assert error.__cause__ is None and error.__suppress_context__
    assert (error.module, error.extra, error.name) == (
        "sa_inbox.x",
        "redis",
        "sa_inbox_no_such_client",
    )
    again = pickle.loads(pickle.dumps(error))
    assert (str(again), again.extra, again.name) == (str(error), "redis", error.name)


def test_the_block_runs_only_when_its_modules_import() -> None:
    ran = []
    with (
        pytest.raises(MissingExtra),
        optional_dependencies("sa_inbox.x", "nats", "json", "no_such"),
    ):
        ran.append(True)
    assert ran == []
    with optional_dependencies("sa_inbox.x", "nats", "json"):
        ran.append(True)
    assert ran == [True]


def test_an_error_inside_an_installed_dependency_is_raised_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client whose own dependency is missing is a broken install, not a missing extra."""
    (tmp_path / "sa_inbox_broken_client.py").write_text("import sa_inbox_its_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as caught:
        import_optional_dependency("sa_inbox_broken_client", extra="redis", module="sa_inbox.x")
    assert not isinstance(caught.value, MissingExtra)
    assert caught.value.name == "sa_inbox_its_dependency"


def _call_sites() -> list[tuple[str, str, list[str]]]:
    """(file:line, extra, modules) of every optional_dependencies / import_optional_dependency
    call in sa_inbox."""
    sites = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            args = [a.value for a in node.args if isinstance(a, ast.Constant)]
            keywords = {
                k.arg: k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)
            }
            where = f"{path.relative_to(PACKAGE)}:{node.lineno}"
            if node.func.id == "optional_dependencies" and path.name != "_optional.py":
                sites.append((where, args[0], args[1:]))
            elif node.func.id == "import_optional_dependency" and path.name != "_optional.py":
                sites.append((where, keywords["extra"], args[:1]))
    return sites


def test_every_call_site_names_modules_its_extra_installs() -> None:
    sites = _call_sites()
    assert len(sites) > 15
    for where, extra, modules in sites:
        assert modules, where
        assert all(m.partition(".")[0] in EXTRAS[extra] for m in modules), (where, extra, modules)


def test_the_extras_table_matches_pyproject() -> None:
    """Each module of :data:`EXTRAS` comes from a package that extra lists in pyproject.toml,
    and greenlet is declared by exactly the extras that need it."""
    extras = pyproject_extras()
    providers = packages_distributions()
    for extra, modules in EXTRAS.items():
        listed = {canonicalize_name(r.name) for r in extras[extra]}
        for module in modules:
            given_by = {canonicalize_name(d) for d in providers.get(module, [])}
            assert given_by & listed, f"[{extra}] does not install {module} ({given_by})"
    with_greenlet = {
        extra
        for extra, requirements in extras.items()
        if extra != "test" and any(r.name == "greenlet" for r in requirements)
    }
    assert with_greenlet == GREENLET_EXTRAS
    assert {e for e, modules in EXTRAS.items() if "greenlet" in modules} <= GREENLET_EXTRAS
