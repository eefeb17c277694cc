"""The SQS adapter's crash, asyncio and misuse tests against the live moto server.

A real consumer process is SIGKILLed after its commit and before its delete: the message
shows again after the visibility timeout, counted, and a second process skips it as a
duplicate. The asyncio consumer runs on aiosqlite, asyncpg and aiomysql. A consumer set up
wrongly is refused before any SQL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from aiobotocore.session import get_session
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from sa_inbox import ConfigurationError
from sa_inbox.brokers import Disposition, Settlement
from sa_inbox.brokers.sqs import AsyncConsumer, Consumer, client_options
from sa_inbox.exc import AsyncHandlerError, InvalidArgument, InvalidSessionFactory
from tests.backends.brokers.payments import pay, pay_async
from tests.backends.brokers.sqs_support import Queues, queues, sqs_client
from tests.conftest import broker_url
from tests.support.app import CONSUMER, App, fresh_app
from tests.support.options import with_options

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[3]
CHILD = "tests.backends.brokers.sqs_child"
DUPLICATES = [("pay-1", "10.00"), ("pay-2", "5.00"), ("pay-1", "10.00"), ("pay-2", "5.00")]


@pytest.fixture
def sqs_url() -> str:
    return broker_url("sqs")


@pytest.fixture
def client(sqs_url: str) -> Any:
    return sqs_client(sqs_url)


@pytest.fixture
def q(client: Any) -> Iterator[Queues]:
    yield from queues(client)


@pytest.fixture
def aio_app(aio_url: str) -> Iterator[App]:
    """The app's schema made through the sync driver of ``aio_url``'s database."""
    yield from fresh_app(aio_url)


# -- a consumer process SIGKILLed between its commit and its delete -------------------------


def child(db_url: str, sqs_url: str, q: Queues, mode: str, *extra: str) -> list[str]:
    """Runs the consumer process to its end (exit or SIGKILL) and returns its lines."""
    process = subprocess.run(
        [sys.executable, "-m", CHILD, db_url, sqs_url, q.name, q.dead_name, mode, *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    expected = 0 if mode == "deliver" else -signal.SIGKILL
    assert process.returncode == expected, process.stderr
    return process.stdout.splitlines()


def crash_after_commit(app: App, q: Queues, db_url: str, sqs_url: str, *extra: str) -> None:
    q.send([("pay-1", "42.00")])
    assert child(db_url, sqs_url, q, "crash-after-commit", *extra) == [
        "processed 1",
        "COMMITTED",
    ]
    assert app.ledger_rows("pay-1") == 1, "committed before the kill"
    assert q.counts() == (0, 1) or q.counts() == (1, 0), "never deleted"
    # the child's visibility timeout is 1 s: the next receive gets it, counted
    assert child(db_url, sqs_url, q, "deliver", *extra) == ["duplicate 2"]
    assert (app.ledger_rows(), app.inbox_rows(), app.balance(1)) == (1, 1, Decimal("42.00"))
    assert q.counts() == (0, 0)


def test_killed_after_commit_before_delete_comes_back_and_is_skipped(
    url: str, app: App, q: Queues, sqs_url: str
) -> None:
    crash_after_commit(app, q, url, sqs_url)


def test_async_killed_after_commit_before_delete_comes_back_and_is_skipped(
    aio_url: str, aio_app: App, q: Queues, sqs_url: str
) -> None:
    crash_after_commit(aio_app, q, aio_url, sqs_url, "async")


# -- the asyncio consumer -------------------------------------------------------------------


def run_async(
    aio_url: str, sqs_url: str, q: Queues, app: App, count: int, **kw: Any
) -> list[Settlement]:
    async def main() -> list[Settlement]:
        engine = create_async_engine(aio_url)
        settled: list[Settlement] = []
        async with get_session().create_client("sqs", **client_options(sqs_url)) as sqs:
            reader = AsyncConsumer(
                sqs,
                q.name,
                consumer_name=CONSUMER,
                session_factory=async_sessionmaker(engine),
                inbox=app.inbox,
                **with_options(
                    {
                        "handler": pay_async(app),
                        "dead_letter": q.dead_name,
                        "wait_time": 1,
                        "visibility_timeout": 2,
                        "retry_delay": lambda n: 0,
                        **kw,
                    }
                ),
            )
            deadline = time.monotonic() + 30
            try:
                while len(settled) < count:
                    assert time.monotonic() < deadline, f"only {len(settled)} of {count}"
                    settled += await reader.poll()
            finally:
                await reader.aclose()
        await engine.dispose()
        return settled

    return asyncio.run(main())


def test_async_duplicate_sends_change_data_once_per_key(
    aio_url: str, aio_app: App, q: Queues, sqs_url: str
) -> None:
    q.send([*DUPLICATES, (None, "3.00")])
    settled = run_async(aio_url, sqs_url, q, aio_app, len(DUPLICATES) + 1)
    kinds = [s.disposition for s in settled]
    assert (kinds.count(Disposition.PROCESSED), kinds.count(Disposition.DUPLICATE)) == (2, 2)
    assert [d["record"]["reason"] for d in q.dead_letters()] == ["missing_message_id"]
    assert (aio_app.ledger_rows(), aio_app.balance(1)) == (2, Decimal("15.00"))
    assert q.counts() == (0, 0)


def test_async_poison_is_dead_lettered_without_stopping_the_queue(
    aio_url: str, aio_app: App, q: Queues, sqs_url: str
) -> None:
    q.send([("p-bad", "2.00"), ("p-1", "1.00")])
    handler = pay_async(aio_app, poison="p-bad")
    settled = run_async(aio_url, sqs_url, q, aio_app, 3, handler=handler, max_deliveries=2)
    assert [s.disposition for s in settled].count(Disposition.DEAD_LETTERED) == 1
    (dead,) = q.dead_letters()
    assert (dead["key"], dead["record"]["reason"]) == ("p-bad", "delivery_limit")
    assert (aio_app.ledger_rows(), q.counts()) == (1, (0, 0))


def test_async_heartbeat_keeps_a_slow_handlers_message(
    aio_url: str, aio_app: App, q: Queues, sqs_url: str
) -> None:
    """The asyncio heartbeat is a task: it extends while the handler awaits."""
    base = pay_async(aio_app)

    async def slow(session: Any, delivery: Any) -> None:
        await base(session, delivery)
        await asyncio.sleep(3)  # three visibility timeouts

    q.send([("h-1", "1.00")])
    (settled,) = run_async(aio_url, sqs_url, q, aio_app, 1, handler=slow, visibility_timeout=1)
    assert (settled.disposition, settled.delivery.delivery_count) == (Disposition.PROCESSED, 1)
    assert (aio_app.ledger_rows(), q.counts()) == (1, (0, 0))


# -- misuse: refused before any SQL ---------------------------------------------------------


@pytest.fixture
def statements(app: App) -> Iterator[list[str]]:
    seen: list[str] = []
    sa.event.listen(app.engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    yield seen


def make(app: App, q: Queues, **kw: Any) -> Consumer:
    defaults = {"session_factory": app.Session, "inbox": app.inbox, "handler": pay(app)}
    return Consumer(q.client, q.name, **with_options({**defaults, "wait_time": 0, **kw}))


@pytest.mark.parametrize(
    ("kw", "error"),
    [
        ({"visibility_timeout": 1.5}, InvalidArgument),
        ({"visibility_timeout": 0}, InvalidArgument),
        ({"wait_time": 21}, InvalidArgument),
        ({"batch_size": 11}, InvalidArgument),
        ({"max_deliveries": 0}, InvalidArgument),
        ({"key_source": " message_id"}, InvalidArgument),
        ({"dead_letter": "QUEUE"}, InvalidArgument),
        ({"handler": pay_async}, AsyncHandlerError),
    ],
)
def test_bad_arguments_are_refused_when_made(
    url: str, app: App, q: Queues, statements: list[str], kw: dict[str, Any], error: type
) -> None:
    kw = {k: (q.name if v == "QUEUE" else v) for k, v in kw.items()}
    if kw.get("handler") is pay_async:
        kw["handler"] = pay_async(app)
    with pytest.raises(error):
        make(app, q, **kw)
    assert statements == []


def test_an_async_session_factory_is_refused_by_the_sync_consumer(
    url: str, app: App, q: Queues, statements: list[str]
) -> None:
    engine = create_async_engine("sqlite+aiosqlite://")
    with pytest.raises(InvalidSessionFactory):
        make(app, q, session_factory=async_sessionmaker(engine))
    assert statements == []


def test_queue_misconfigurations_are_refused_before_any_sql(
    url: str, app: App, client: Any, statements: list[str]
) -> None:
    for plain in queues(client):
        with pytest.raises(ConfigurationError, match="no redrive policy"):
            make(app, plain).run()
        with pytest.raises(ConfigurationError, match="standard queue"):
            make(app, plain, dead_letter=plain.dead_name, deduplication_id_key=True).run()
    for redriven in queues(client, redrive=3):
        with pytest.raises(ConfigurationError, match="maxReceiveCount=3"):
            make(app, redriven, max_deliveries=5).run()
    content = {"ContentBasedDeduplication": "true"}
    for fifo in queues(client, fifo=True, attributes=content):
        with pytest.raises(ConfigurationError, match="content-based deduplication"):
            make(app, fifo, dead_letter=fifo.dead_name, deduplication_id_key=True).run()
    for fifo in queues(client, fifo=True):
        other = Queues.make(client)
        try:
            with pytest.raises(ConfigurationError, match="must be one too"):
                make(app, fifo, dead_letter=other.name).run()
        finally:
            other.delete()
    for plain in queues(client):
        missing = f"{plain.name}-missing"
        with pytest.raises(ConfigurationError, match=f"options.dead_letter '{missing}' does not"):
            make(app, plain, dead_letter=missing).run()
        with pytest.raises(ConfigurationError, match=f"SQS queue '{missing}' does not exist"):
            make(app, dataclasses.replace(plain, name=missing)).run()
    assert statements == [], "each refusal came before the database was asked anything"
