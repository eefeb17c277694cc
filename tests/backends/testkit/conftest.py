"""The exactly-once checks (:mod:`sa_inbox.testing`) run as a user runs them: a test file of
the user's, one test per consumer calling the ``exactly_once`` fixture of the pytest plugin
on the application of :mod:`tests.support.kit_app`, run by pytest in a process of its own
(pytester); each consumer's verdict is read from what pytest prints about its test. Every
consumer is checked once per database: SQLite, PostgreSQL and MariaDB through their sync
drivers, and aiosqlite, asyncpg and aiomysql.

A user's file holds every consumer of one table of cases (:class:`Case`), so pytest starts
once per database and table; the first test that needs a file's run makes it, the others
read it (:func:`user_run`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import async_driver_url, backend_url

ROOT = str(Path(__file__).resolve().parents[3])
SYNC = ("sqlite", "postgresql", "mysql")
ASYNC = ("aiosqlite", "asyncpg", "aiomysql")

#: Seconds one user's run may take (every check of every case, each delivery bounded by the
#: checks' own 60 s timeout).
TIMEOUT = 900

#: The arguments every sa-inbox handler's check takes, and every own consumer's.
HANDLER = (
    'session_factory=Session, inbox=app.inbox, consumer_name="billing", '
    "message=app.payment, state=app.ledger_rows"
)
CONSUMER = "session_factory=Session, message=app.payment, state=app.ledger_rows"

#: The head of the user's test file: their application, a fixture making their tables.
HEAD = """
import pytest
from sa_inbox.testing import Message
from tests.support import kit_app as app
{imports}

@pytest.fixture
def Session():
    return app.setup({url!r})
"""
#: One consumer's test: the fixture called, its report printed (shown by ``-rP``).
TEST = """
def test_{name}(exactly_once, Session):
{before}    print(exactly_once({call}))
"""
HEADER = re.compile(r"^_{3,} (test_\w+) _{3,}$")
SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR) test_user\.py::(test_\w+)")


@dataclass(frozen=True)
class Case:
    """One consumer of the user's, and what pytest must print about it.

    :param name: the test's name (``test_<name>``).
    :param call: the fixture's arguments.
    :param expect: ``fnmatch`` lines that its test's section shows, in order.
    :param before: statements before the call (indented 4).
    :param imports: import lines of the file.
    :param outcome: ``"passed"`` or ``"failed"``.
    """

    name: str
    call: str
    expect: Sequence[str]
    before: str = ""
    imports: str = ""
    outcome: str = "failed"


@dataclass
class UserRun:
    """A user's run: each test's outcome and the lines pytest printed about it."""

    outcomes: dict[str, str]
    sections: dict[str, list[str]]
    output: str


_RUNS: dict[tuple[str, str], UserRun] = {}


def url_for(name: str, tmp_path: object) -> str:
    """The URL of a sync backend or an async driver (skips what is not configured)."""
    if name in SYNC:
        return backend_url(name, tmp_path)
    return async_driver_url(name, tmp_path)


@pytest.fixture(params=SYNC)
def sync_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    request.applymarker(pytest.mark.backend)
    return url_for(request.param, tmp_path)


@pytest.fixture(params=ASYNC)
def async_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    request.applymarker(pytest.mark.backend)
    return url_for(request.param, tmp_path)


@pytest.fixture(params=SYNC + ASYNC)
def any_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    request.applymarker(pytest.mark.backend)
    return url_for(request.param, tmp_path)


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's test imports the application from this repository."""
    monkeypatch.setenv("PYTHONPATH", ROOT)


def user_run(pytester: pytest.Pytester, table: str, url: str, cases: Sequence[Case]) -> UserRun:
    """The run of the user's file holding ``cases`` on ``url``'s database: made by the
    first test that asks (in a pytest process of its own, as the user would run it),
    reused by the others.

    :param table: the cases' table, naming the run with the URL's driver.
    """
    key = (table, sa.make_url(url).drivername)
    if key not in _RUNS:
        imports = "\n".join(dict.fromkeys(c.imports for c in cases if c.imports))
        source = HEAD.format(url=url, imports=imports) + "".join(
            TEST.format(name=c.name, call=c.call, before=c.before) for c in cases
        )
        pytester.makepyfile(test_user=source)
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "-rA", timeout=TIMEOUT
        )
        _RUNS[key] = _parse(result.outlines)
    return _RUNS[key]


def _parse(lines: list[str]) -> UserRun:
    outcomes: dict[str, str] = {}
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        header = HEADER.match(line)
        summary = SUMMARY.match(line)
        if header:
            current = sections.setdefault(header.group(1), [])
        elif summary:
            outcomes[summary.group(2)] = summary.group(1).lower()
            current = None
        elif line.startswith("=") and current is not None:
            current = None
        elif current is not None:
            current.append(line)
    return UserRun(outcomes, sections, "\n".join(lines))


def literal(text: str) -> str:
    """``text`` with fnmatch's brackets made literal (``[mode]`` is no character class)."""
    return "".join({"[": "[[]", "]": "[]]"}.get(c, c) for c in text)


def assert_case(run: UserRun, case: Case) -> None:
    """The case's test ended as expected and its section shows the expected lines."""
    name = f"test_{case.name}"
    assert run.outcomes.get(name) == case.outcome, (
        f"{name}: {run.outcomes.get(name)}, expected {case.outcome}\n{run.output}"
    )
    matcher = pytest.LineMatcher(run.sections.get(name, []))
    matcher.fnmatch_lines(list(case.expect), consecutive=False)
