"""Every ``sa-inbox`` command on an async driver's URL, in real subprocesses on the live
servers: it runs on that very driver (asyncpg, psycopg 3 async, aiomysql, aiosqlite) and
changes the rows it should, or refuses with one line (exit 2) before touching anything.

With asyncpg the CLI runs with psycopg made unimportable: a command that swapped the URL
for ``postgresql+psycopg`` would fail there ("the driver is not installed"). The worker's
handlers write the driver their session runs on into each effect row.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from sa_inbox.asyncio import AsyncInboxStore
from sa_inbox.cli._common import open_database
from sa_inbox.retention.partitions import partitioned_processed_messages_table
from sa_inbox.store import DEAD, DONE, PENDING, Incoming, utc_now
from tests.conftest import ASYNC_DRIVERS, backend_url, broker_url
from tests.support.outbox_app import OutboxApp
from tests.support.store_app import TABLE, StoreApp, make_engine

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[2]
POLICY_ARGS = ["--max-redelivery", "1d", "--max-replay", "2d"]

#: The URL's driver name for each async driver under test (psycopg 3 under its async name).
URL_DRIVERS = {
    "aiosqlite": "sqlite+aiosqlite",
    "asyncpg": "postgresql+asyncpg",
    "psycopg_async": "postgresql+psycopg_async",
    "aiomysql": "mysql+aiomysql",
}

#: What ``cli_handler.driver_of`` says of a session on each (psycopg 3's async dialect is
#: named after the driver).
SEEN_AS = {
    "aiosqlite": "aiosqlite async",
    "asyncpg": "asyncpg async",
    "psycopg_async": "psycopg async",
    "aiomysql": "aiomysql async",
}

#: Runs the CLI with the modules named in argv[1] (comma-separated) unimportable.
WITHOUT_MODULES = (
    "import sys\n"
    "for name in filter(None, sys.argv.pop(1).split(',')):\n"
    "    sys.modules[name] = None\n"
    "from sa_inbox.cli import main\n"
    "main()\n"
)


@dataclass(frozen=True)
class AsyncDatabase:
    """An async driver's URL and the test apps on the same database (sync driver)."""

    driver: str
    url: str
    store: StoreApp
    outbox: OutboxApp

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``sa-inbox ARGS`` (``{url}`` in an argument is this URL), run to its end."""
        child = self.popen(*args)
        out, err = child.communicate(timeout=timeout)
        assert "Traceback" not in err, err
        return subprocess.CompletedProcess(child.args, child.returncode, out, err)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        # psycopg is the sync driver a swapped asyncpg URL would need.
        blocked = "psycopg" if self.driver == "asyncpg" else ""
        argv = [a.replace("{url}", self.url) for a in args]
        return subprocess.Popen(
            [sys.executable, "-c", WITHOUT_MODULES, blocked, *argv],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )


@contextlib.contextmanager
def async_database(driver: str, tmp_path: Path) -> Iterator[AsyncDatabase]:
    """The store and outbox tables, made through the sync driver, and the async URL."""
    sync_url = backend_url(ASYNC_DRIVERS[driver][0], tmp_path)
    url = sa.make_url(sync_url).set(drivername=URL_DRIVERS[driver])
    engine = make_engine(sync_url)
    store, outbox = StoreApp(engine), OutboxApp(engine)
    store.reset()
    outbox.reset()
    try:
        yield AsyncDatabase(driver, url.render_as_string(hide_password=False), store, outbox)
    finally:
        store.drop()
        outbox.drop()
        engine.dispose()


@pytest.fixture(params=list(URL_DRIVERS))
def adb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AsyncDatabase]:
    """One run per async driver."""
    with async_database(request.param, tmp_path) as database:
        yield database


@pytest.fixture(params=["asyncpg", "psycopg_async"])
def pg_adb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AsyncDatabase]:
    """One run per async driver of PostgreSQL."""
    with async_database(request.param, tmp_path) as database:
        yield database


def receive(app: StoreApp, count: int) -> list[str]:
    ids = [f"m-{i}" for i in range(count)]
    with app.engine.begin() as conn:
        app.store.receive_many(conn, [Incoming(i, {"seq": n}) for n, i in enumerate(ids)])
    return ids


def effects(app: StoreApp) -> list[tuple[str, str]]:
    """(message_id, driver) of every effect row, by message_id."""
    t = app.effects
    with app.engine.connect() as conn:
        rows = conn.execute(sa.select(t.c.message_id, t.c.aggregate_id).order_by(t.c.message_id))
        return [(m, d) for m, d in rows]


def set_status(app: StoreApp, status: str, ids: list[str]) -> None:
    t = app.store.table
    with app.engine.begin() as conn:
        conn.execute(t.update().where(t.c.message_id.in_(ids)).values(status=status))


@pytest.mark.parametrize("handler", ["record_driver", "record_driver_async"])
def test_the_worker_runs_on_the_urls_async_driver(adb: AsyncDatabase, handler: str) -> None:
    """A plain and an ``async def`` handler alike: every message applied once, each in a
    session on the URL's driver, the rows marked done."""
    ids = receive(adb.store, 8)
    done = adb.cli(
        "worker", "--url", "{url}", "--table", TABLE, "--consumer", "default",
        "--handler", f"tests.acceptance.cli_handler:{handler}", "--concurrency", "2",
        "--until-empty",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["processed"] == 8
    assert effects(adb.store) == [(i, SEEN_AS[adb.driver]) for i in sorted(ids)]
    assert adb.store.store.counts(adb.store.engine)[DONE] == 8


def test_store_commands_count_and_replay_through_the_async_driver(adb: AsyncDatabase) -> None:
    ids = receive(adb.store, 6)
    set_status(adb.store, DEAD, ids[:2])
    set_status(adb.store, DONE, ids[2:3])
    counts = adb.cli("store", "counts", "--url", "{url}", "--table", TABLE)
    assert counts.returncode == 0, counts.stderr
    assert json.loads(counts.stdout) == {PENDING: 3, "processing": 0, DONE: 1, DEAD: 2}
    replay = adb.cli("store", "replay", "--url", "{url}", "--table", TABLE, "--status", "dead")
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout) == {"replayed": 2}
    assert adb.store.store.counts(adb.store.engine) == {
        PENDING: 5, "processing": 0, DONE: 1, DEAD: 0,
    }  # fmt: skip


def test_outbox_commands_count_and_replay_through_the_async_driver(adb: AsyncDatabase) -> None:
    app = adb.outbox
    with app.engine.begin() as conn:
        ids = [app.outbox.publish(conn, "payments", {"n": n}) for n in range(4)]
    t = app.outbox.table
    with app.engine.begin() as conn:
        conn.execute(t.update().where(t.c.message_id.in_(ids[:3])).values(status="dead"))
    counts = adb.cli("outbox", "counts", "--url", "{url}")
    assert counts.returncode == 0, counts.stderr
    assert json.loads(counts.stdout)["dead"] == 3
    replay = adb.cli("outbox", "replay", "--url", "{url}", "--status", "dead", "--id", "1")
    assert replay.returncode == 0, replay.stderr
    rows = {r["message_id"]: r["status"] for r in app.outbox_rows()}
    first = app.outbox_rows()[0]["message_id"]
    assert json.loads(replay.stdout) == {"replayed": 1} and rows[first] == "pending"
    assert sorted(rows.values()) == ["dead", "dead", "pending", "pending"]


def test_stats_reads_through_the_async_driver(adb: AsyncDatabase) -> None:
    ids = receive(adb.store, 5)
    set_status(adb.store, DEAD, ids[:1])
    stats = adb.cli(
        "stats", "--url", "{url}", "--store-table", TABLE, "--json", "--check",
    )  # fmt: skip
    assert stats.returncode == 11, stats.stderr  # dead letters
    report = json.loads(stats.stdout)
    assert [d["message_id"] for d in report["store"]["dead_letters"]] == ["m-0"]
    assert report["store"]["consumers"][0]["counts"][PENDING] == 4


def test_purge_of_the_store_deletes_through_the_async_driver(adb: AsyncDatabase) -> None:
    old = utc_now() - datetime.timedelta(days=10)
    with adb.store.engine.begin() as conn:
        adb.store.store.receive_many(conn, [Incoming(f"m-{i}", {}) for i in range(9)], now=old)
        t = adb.store.store.table
        conn.execute(t.update().where(t.c.message_id.in_(["m-0", "m-1", "m-2", "m-3"])).values(
            status=DONE, processed_at=old
        ))  # fmt: skip
    done = adb.cli("purge", "--url", "{url}", "--table", TABLE, *POLICY_ARGS, "--store")
    assert done.returncode == 0, done.stderr
    assert "deleted 4 rows" in done.stdout
    assert adb.store.store.counts(adb.store.engine) == {
        PENDING: 5, "processing": 0, DONE: 0, DEAD: 0,
    }  # fmt: skip


def test_partitions_maintain_through_an_async_postgresql_driver(pg_adb: AsyncDatabase) -> None:
    adb = pg_adb
    engine = adb.store.engine
    metadata = sa.MetaData()
    table = partitioned_processed_messages_table(metadata, table_name="cli_async_partitioned")
    metadata.drop_all(engine)
    metadata.create_all(engine)
    try:
        args = ["--url", "{url}", "--table", table.name, *POLICY_ARGS, "--ahead", "2d"]
        maintained = adb.cli("partitions", "maintain", *args)
        assert maintained.returncode == 0, maintained.stderr
        listed = adb.cli("partitions", "list", "--url", "{url}", "--table", table.name)
        assert listed.returncode == 0, listed.stderr
        with engine.connect() as conn:
            names = conn.exec_driver_sql(
                "SELECT inhrelid::regclass::text FROM pg_inherits "
                "WHERE inhparent = 'cli_async_partitioned'::regclass ORDER BY 1"
            ).scalars()
            created = sorted(names)
        assert len(created) >= 5 and f"created {len(created)}:" in maintained.stdout
        assert sorted(line.split("\t")[0] for line in listed.stdout.splitlines()) == created
    finally:
        metadata.drop_all(engine)


# -- the relay: the asyncio relay with each broker's asyncio publisher ----------------------


def _rabbitmq(destination: str) -> tuple[str, object]:
    import pika

    from sa_inbox.brokers.rabbitmq import declare_queue

    connection = pika.BlockingConnection(pika.URLParameters(broker_url("rabbitmq")))
    channel = connection.channel()
    declare_queue(channel, destination)

    def received() -> list[str]:
        got = []
        while (message := channel.basic_get(destination, auto_ack=True))[0] is not None:
            got.append(message[1].message_id)
        channel.queue_delete(destination)
        connection.close()
        return got

    return destination, received


def _redis(destination: str) -> tuple[str, object]:
    import redis

    client = redis.Redis.from_url(broker_url("redis"))

    def received() -> list[str]:
        entries = client.xrange(destination)
        client.delete(destination)
        client.close()
        return [fields[b"message_id"].decode() for _, fields in entries]

    return destination, received


def _nats(destination: str) -> tuple[str, object]:
    import nats

    url = broker_url("nats")

    async def add() -> None:
        nc = await nats.connect(url)
        await nc.jetstream().add_stream(name=destination, subjects=[f"{destination}.>"])
        await nc.close()

    async def read() -> list[str]:
        nc = await nats.connect(url)
        js = nc.jetstream()
        info = await js.stream_info(destination)
        ids = []
        for seq in range(1, info.state.messages + 1):
            message = await js.get_msg(destination, seq)
            ids.append((message.headers or {})["Nats-Msg-Id"])
        await js.delete_stream(destination)
        await nc.close()
        return ids

    asyncio.run(add())
    return f"{destination}.payments", lambda: asyncio.run(read())


BROKERS = {"rabbitmq": _rabbitmq, "redis": _redis, "nats": _nats}


@pytest.mark.parametrize("broker", list(BROKERS))
def test_the_relay_publishes_through_the_async_driver(adb: AsyncDatabase, broker: str) -> None:
    """``relay --until-empty`` on an async driver's URL: every row dispatched in the
    database and in the broker once, in order; then a running relay stops on SIGTERM."""
    destination, received = BROKERS[broker](f"sa-inbox-cli-async-{uuid.uuid4().hex[:10]}")
    app = adb.outbox
    with app.engine.begin() as conn:
        ids = [app.outbox.publish(conn, destination, f"{n}".encode()) for n in range(3)]
    try:
        done = adb.cli("relay", "--url", "{url}", "--broker", broker_url(broker), "--until-empty")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["dispatched"] == 3
        assert [r["status"] for r in app.outbox_rows()] == ["dispatched"] * 3
    finally:
        got = received()  # type: ignore[operator]
    assert got == ids

    running = adb.popen("relay", "--url", "{url}", "--broker", broker_url(broker))
    assert running.stderr is not None
    assert running.stderr.readline().startswith("relay running")  # the handlers are set
    running.send_signal(signal.SIGTERM)
    out, err = running.communicate(timeout=60)
    assert running.returncode == 0 and json.loads(out)["claimed"] == 0, err


# -- in process: the engine the CLI makes for a URL ------------------------------------------


def test_the_cli_engine_keeps_the_urls_async_driver(adb: AsyncDatabase) -> None:
    """``open_database`` gives an AsyncEngine on the URL's driver, and its greenlet runs the
    sync API on it against the live server."""
    receive(adb.store, 2)
    db = open_database(adb.url)
    try:
        assert db.async_engine is not None
        assert db.engine is db.async_engine.sync_engine and db.engine.dialect.is_async
        assert f"{db.engine.dialect.driver} async" == SEEN_AS[adb.driver]
        store = AsyncInboxStore(adb.store.store)
        assert db.call(adb.store.store.counts, db.engine)[PENDING] == 2
        assert db.run(store.counts(db.async_engine))[PENDING] == 2
    finally:
        db.close()
