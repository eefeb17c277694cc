"""A consumer's start (sa_inbox.brokers.startup.Readiness.start / start_async): the rule that
tells a database that is down from a setup that is wrong, on scripted checks and probes and
a fake clock (the real outages at start are tests/backends/outages).

* a configuration error is raised at once, nothing probed;
* a failure that looks like an outage, with the database down, is waited out (one
  WARNING naming the database's host:port, one INFO) and the check runs again;
* the same failure twice in a row while the database answers is raised: an error that only
  looks like an outage is the setup's;
* a stop during the wait returns False.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import sessionmaker

from sa_inbox import Inbox
from sa_inbox.backoff import Backoff
from sa_inbox.brokers.startup import Readiness
from sa_inbox.exc import MissingTable
from sa_inbox.outage import OutageGate, database_of

URL = "postgresql+psycopg://billing:secret@db.example.internal:6543/payments"
ASYNC_URL = "postgresql+asyncpg://billing:secret@db.example.internal:6543/payments"


@dataclass
class Script:
    """What each check raises in turn (None: passes), and how many probes fail first."""

    checks: list[BaseException | None]
    probe_failures: int = 0
    checked: int = 0
    probed: int = 0

    def check(self) -> None:
        outcome = self.checks[min(self.checked, len(self.checks) - 1)]
        self.checked += 1
        if outcome is not None:
            raise outcome

    def probe(self) -> None:
        self.probed += 1
        if self.probed <= self.probe_failures:
            raise ConnectionRefusedError(111, "Connection refused")


@dataclass(frozen=True)
class ScriptedReadiness(Readiness):
    """A Readiness whose check and probe follow a :class:`Script` (no database)."""

    script: Script = field(default_factory=lambda: Script([None]))

    def check(self) -> None:
        self.script.check()

    async def check_async(self) -> None:
        self.script.check()


class Session:
    """What the gate's probe opens: a session whose query follows the script's probes."""

    def __init__(self, script: Script) -> None:
        self.script = script

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    def execute(self, statement: object) -> Any:
        self.script.probe()
        return self._done() if self.asynchronous else None

    asynchronous = False

    async def _done(self) -> None:
        pass


def readiness(script: Script, *, asynchronous: bool = False) -> ScriptedReadiness:
    """A readiness on a factory bound to :data:`URL` (never connected) whose sessions'
    queries follow ``script``."""
    if asynchronous:
        engine: Any = create_async_engine(ASYNC_URL)
        factory: Any = async_sessionmaker(engine)
    else:
        factory = sessionmaker(sa.create_engine(URL))

    def make() -> Session:
        session = Session(script)
        session.asynchronous = asynchronous
        return session

    scripted = _Factory(factory, make)  # the factory's bind, the scripted sessions
    return ScriptedReadiness(
        "Consumer()", scripted, Inbox(sa.MetaData()), None, asynchronous, script=script
    )


class _Factory:
    """``factory``'s bind (``kw``), ``make``'s sessions."""

    def __init__(self, factory: Any, make: Callable[[], Session]) -> None:
        self.kw = factory.kw
        self.make = make

    def __call__(self) -> Session:
        return self.make()


def gate(stopped_after: int | None = None) -> tuple[OutageGate, list[float]]:
    """A gate that never really sleeps (its waits recorded); it reports a stop from the
    ``stopped_after``-th wait on."""
    waits: list[float] = []

    def sleep(seconds: float) -> bool:
        waits.append(seconds)
        return stopped_after is not None and len(waits) >= stopped_after

    return OutageGate("billing", backoff=Backoff(base=0.5, maximum=2.0), sleep=sleep), waits


def start(ready: ScriptedReadiness, outage: OutageGate) -> bool:
    """``start()``, or ``start_async()`` with the gate's sleep made ``async``."""
    if not ready.asynchronous:
        return ready.start(outage)
    sleep = outage.sleep
    assert sleep is not None

    async def sleep_async(seconds: float) -> bool:
        return bool(sleep(seconds))

    outage.sleep = sleep_async
    return asyncio.run(ready.start_async(outage))


OUTAGE = ConnectionRefusedError(111, "Connection refused")


@pytest.mark.parametrize("asynchronous", [False, True], ids=["start", "start_async"])
def test_a_configuration_error_is_raised_at_once(asynchronous: bool) -> None:
    script = Script([MissingTable("no table inbox_processed_messages")])
    outage, waits = gate()
    with pytest.raises(MissingTable):
        start(readiness(script, asynchronous=asynchronous), outage)
    assert (script.checked, script.probed, waits) == (1, 0, [])


@pytest.mark.parametrize("asynchronous", [False, True], ids=["start", "start_async"])
def test_an_outage_is_waited_out_then_the_check_runs_again(
    asynchronous: bool, caplog: pytest.LogCaptureFixture
) -> None:
    script = Script([OUTAGE, None], probe_failures=3)
    outage, waits = gate()
    with caplog.at_level(logging.INFO, logger="sa_inbox.outage"):
        assert start(readiness(script, asynchronous=asynchronous), outage) is True
    assert script.checked == 2 and script.probed == 4 and len(waits) == 3
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "the database at db.example.internal:6543/payments cannot be reached" in (
        warning.getMessage()
    )
    assert "secret" not in warning.getMessage()
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["start", "start_async"])
def test_two_outage_like_failures_while_the_database_answers_are_raised(
    asynchronous: bool,
) -> None:
    """The probe gets through at once both times: the failure is not an outage."""
    script = Script([OUTAGE, OUTAGE, None])
    outage, waits = gate()
    with pytest.raises(ConnectionRefusedError):
        start(readiness(script, asynchronous=asynchronous), outage)
    assert (script.checked, script.probed, waits) == (2, 1, [])


@pytest.mark.parametrize("asynchronous", [False, True], ids=["start", "start_async"])
def test_one_outage_like_failure_while_the_database_answers_runs_the_check_again(
    asynchronous: bool,
) -> None:
    script = Script([OUTAGE, None])
    outage, _ = gate()
    assert start(readiness(script, asynchronous=asynchronous), outage) is True
    assert (script.checked, script.probed) == (2, 1)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["start", "start_async"])
def test_a_stop_during_the_wait_returns_false(asynchronous: bool) -> None:
    script = Script([OUTAGE, None], probe_failures=100)
    outage, waits = gate(stopped_after=2)
    assert start(readiness(script, asynchronous=asynchronous), outage) is False
    assert script.checked == 1 and len(waits) == 2


def test_database_of_names_host_port_and_name_never_the_password() -> None:
    assert database_of(sessionmaker(sa.create_engine(URL))) == "db.example.internal:6543/payments"
    assert database_of(async_sessionmaker(create_async_engine(ASYNC_URL))) == (
        "db.example.internal:6543/payments"
    )
    default_port = sa.create_engine("mysql+pymysql://u:p@mariadb/shop")
    assert database_of(sessionmaker(default_port)) == "mariadb:3306/shop"
    assert database_of(sessionmaker(sa.create_engine("sqlite:////tmp/x.db"))) == "/tmp/x.db"
    assert database_of(lambda: None) is None
