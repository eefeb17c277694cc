"""``sa-inbox stats`` in a real subprocess, on real servers: the report, ``--json``, and
``--check``'s exit status in each warning case (and 0 when healthy)."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from sa_inbox import Inbox, InboxStore
from sa_inbox.collision import collisions_table, payload_hash
from sa_inbox.exc import InvalidTable
from sa_inbox.outbox import Outbox
from sa_inbox.stats import WARNING_CODES, ConsumerRename, collect, stats_warnings
from sa_inbox.store import Incoming

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[2]
INBOX, STORE = "stats_inbox", "stats_store"
LONG_AGO = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)


class Tables:
    """An inbox and a store table named with ``suffix`` (so that cases run side by side)."""

    def __init__(self, engine: sa.Engine, suffix: str = "") -> None:
        self.engine = engine
        self.metadata = sa.MetaData()
        self.names = (INBOX + suffix, STORE + suffix)
        self.inbox = Inbox(self.metadata, table_name=self.names[0])
        self.store = InboxStore(self.metadata, table_name=self.names[1])

    def reset(self) -> None:
        self.metadata.drop_all(self.engine)
        self.metadata.create_all(self.engine)
        with self.engine.begin() as conn:  # healthy: fresh rows, a done store row
            # two consumers of one stream, their claims interleaved (billing's first claim
            # before audit's, audit's before billing's last): a fan-out, not a rename, on
            # any clock resolution (CURRENT_TIMESTAMP(6) is per statement on MariaDB)
            self.inbox.claim(conn, "m-0", "billing")
            self.inbox.claim(conn, "m-0", "audit")
            for i in range(1, 3):
                self.inbox.claim(conn, f"m-{i}", "billing")
            self.store.receive_many(conn, [Incoming("s-1", {"n": 1}), Incoming("s-2", {"n": 2})])
            t = self.store.table
            conn.execute(t.update().values(status="done"))


@pytest.fixture
def engine_(url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(url)
    collisions_table(sa.MetaData()).drop(engine, checkfirst=True)
    yield engine
    collisions_table(sa.MetaData()).drop(engine, checkfirst=True)
    engine.dispose()


@pytest.fixture
def tables(engine_: sa.Engine) -> Iterator[Tables]:
    tables = Tables(engine_)
    tables.reset()
    yield tables
    tables.metadata.drop_all(engine_)


def stats(url: str, *args: str, names: tuple[str, str] = (INBOX, STORE)) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sa_inbox.cli",
            "stats",
            "--url",
            url,
            "--table",
            names[0],
            "--store-table",
            names[1],
            *args,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = process.communicate(timeout=60)
    return process.returncode, out + err


def test_report_and_json(tables: Tables, url: str) -> None:
    with tables.engine.begin() as conn:
        t = tables.store.table
        conn.execute(
            t.update()
            .where(t.c.message_id == "s-1")
            .values(status="dead", attempts=5, last_error="ValueError: bad amount")
        )
    shown, as_json = stats(url), stats(url, "--json")
    exact = stats(url, "--json", "--exact")
    code, text = finish(shown)
    assert code == 0, text  # warnings change the exit status only with --check
    assert "billing" in text and "ValueError: bad amount" in text and "dead-letters" in text
    assert "~" not in text  # tables this small are counted, not estimated
    code, text = finish(as_json)
    document = json.loads(text)
    code, text = finish(exact)
    assert code == 0 and json.loads(text)["tables"] == document["tables"]
    assert document["estimated"] is False and document["sampled_rows"] == 0
    assert not any(t["estimated"] for t in document["tables"])
    consumers = {c["consumer_name"]: c for c in document["consumers"]}
    assert consumers["billing"]["rows"] == 3 and consumers["audit"]["rows"] == 1
    store = document["store"]
    assert store["consumers"][0]["counts"] == {"pending": 0, "processing": 0, "done": 1, "dead": 1}
    assert store["dead_letters"][0]["message_id"] == "s-1"
    assert store["attempts"] == {"5": 1}
    rows = {t["name"]: t["rows"] for t in document["tables"]}
    assert rows == {INBOX: 4, STORE: 2}
    sizes = {t["name"]: t["total_bytes"] for t in document["tables"]}
    if tables.engine.dialect.name in ("postgresql", "mysql"):
        assert sizes[INBOX] > 0
    assert [w["kind"] for w in document["warnings"]] == ["dead-letters"]


KINDS = ["healthy", "purge-not-running", "dead-letters", "worker-stuck", "no-retention"]
CHECK = ("--check", "--retention", "7d", "--pending-threshold", "10m")


@contextmanager
def warning_cases(engine: sa.Engine) -> Iterator[dict[str, Tables]]:
    """One set of tables per case, each in the state of its warning (``no-retention``: an
    old row, but no --retention to judge it by); dropped after."""
    cases = {kind: Tables(engine, f"_{i}") for i, kind in enumerate(KINDS)}
    for case in cases.values():
        case.reset()
    try:
        old = {"message_id": "old", "consumer_name": "billing", "received_at": LONG_AGO}
        with engine.begin() as conn:  # a row older than 7d + 1h: the purge is not running
            conn.execute(cases["purge-not-running"].inbox.table.insert().values(old))
            conn.execute(cases["no-retention"].inbox.table.insert().values(old))
            s = cases["dead-letters"].store.table
            conn.execute(s.update().where(s.c.message_id == "s-1").values(status="dead"))
            an_hour_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
            cases["worker-stuck"].store.receive(conn, "late", {"n": 0}, now=an_hour_ago)
        yield cases
    finally:
        for case in cases.values():
            case.metadata.drop_all(engine)


def record_a_collision(engine: sa.Engine) -> None:
    """A row in inbox_collisions (one table for the whole database)."""
    collisions = collisions_table(sa.MetaData())
    collisions.create(engine)
    with engine.begin() as conn:
        conn.execute(
            collisions.insert().values(
                source=INBOX,
                message_id="m-1",
                consumer_name="billing",
                stored_hash=payload_hash(1),
                payload_hash=payload_hash(2),
            )
        )


def test_check_exit_codes_in_subprocesses(tmp_path: Path) -> None:
    """``sa-inbox stats --check`` as a probe runs it: a real subprocess per case (side by
    side), on a SQLite file; the same cases on every backend below, in-process."""
    url = f"sqlite:///{tmp_path}/stats.db"
    engine = sa.create_engine(url)
    with warning_cases(engine) as cases:
        running = {
            kind: stats(url, *(CHECK if kind != "no-retention" else ("--check",)), names=case.names)
            for kind, case in cases.items()
        }
        for kind, process in running.items():
            code, text = finish(process)
            expected = WARNING_CODES.get(kind, 0)  # no --retention: age not judged
            assert code == expected, (kind, text)
            assert kind in text or expected == 0
        record_a_collision(engine)
        healthy = stats(url, *CHECK, names=cases["healthy"].names)
        several = stats(url, *CHECK, names=cases["dead-letters"].names)
        code, text = finish(healthy)
        assert code == WARNING_CODES["collisions"], text
        code, text = finish(several)  # several warnings: every one said, the lowest code
        assert code == WARNING_CODES["dead-letters"] < WARNING_CODES["collisions"], text
        failed = [line for line in text.splitlines() if line.startswith("stats --check:")]
        assert failed == [
            f"stats --check: 2 check(s) failed: {WARNING_CODES['dead-letters']} dead-letters, "
            f"{WARNING_CODES['collisions']} collisions; exit {code} (the lowest)"
        ], text
    engine.dispose()


def test_warning_cases_on_every_backend(engine_: sa.Engine) -> None:
    """The warnings ``--check`` exits with, from each backend's own clock and catalog."""
    limits = {
        "margin": datetime.timedelta(hours=1),
        "pending_threshold": datetime.timedelta(minutes=10),
    }

    def codes(case: Tables, retention: datetime.timedelta | None) -> list[int]:
        sample = collect(engine_, inbox_table=case.names[0], store_table=case.names[1])
        return [w.code for w in stats_warnings(sample, retention=retention, **limits)]

    week = datetime.timedelta(days=7)
    with warning_cases(engine_) as cases:
        for kind, case in cases.items():
            found = codes(case, None if kind == "no-retention" else week)
            assert found == ([WARNING_CODES[kind]] if kind in WARNING_CODES else []), kind
        record_a_collision(engine_)
        assert codes(cases["healthy"], week) == [WARNING_CODES["collisions"]]


def test_check_fails_when_none_of_the_tables_exists(tmp_path: Path) -> None:
    """A probe pointed at the wrong database (or wrong table names) is not healthy: 9
    (without --check the report could not run: 3); one of the two tables is enough to
    judge by (0)."""
    url = f"sqlite:///{tmp_path}/empty.db"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE unrelated (id INTEGER)"))
    code, text = finish(stats(url, "--check", names=("nope", "nope_store")))
    assert code == WARNING_CODES["no-tables"] == 9, text
    assert "nope" in text
    for interval in ("0", "-1", "nan", "inf"):  # a loop without a pause, or one forever
        code, text = finish(stats(url, "--watch", "--interval", interval, names=("a", "b")))
        assert code == 2 and "Invalid value for '--interval'" in text, text
    for report in ((), ("--json",)):  # without --check: the command could not run
        code, text = finish(stats(url, *report, names=("nope", "nope_store")))
        assert code == 3, text
        assert "Error: none of the tables to check exists (nope, nope_store)" in text, text
    Tables(engine, "_only_inbox").inbox.table.create(engine)
    for check in (("--check",), ()):
        code, text = finish(stats(url, *check, names=(f"{INBOX}_only_inbox", "nope_store")))
        assert code == 0, text
    engine.dispose()


def test_the_consumers_table_is_not_read_as_an_inbox(tables: Tables, url: str) -> None:
    """``inbox_consumers`` (the owner of each consumer name) named as the inbox or the store
    is refused before it is read, and the tables that are one report as before."""
    consumers = tables.inbox.consumers
    assert consumers is not None
    name = consumers.table.name
    for wrong in ((name, STORE), (INBOX, name)):
        with pytest.raises(InvalidTable, match="sa-inbox's consumers table"):
            collect(tables.engine, inbox_table=wrong[0], store_table=wrong[1])
        code, text = finish(stats(url, names=wrong))
        assert code == 3, text
        assert "InvalidTable" in text and "has no message_id column" in text
    stats_ = collect(tables.engine, inbox_table=INBOX, store_table=STORE)
    assert {t.name for t in stats_.tables} == {INBOX, STORE}  # the consumers table unlisted
    assert {c.consumer_name for c in stats_.consumers} == {"billing", "audit"}


def test_unreachable_database_exits_3(tmp_path: Path) -> None:
    code, text = finish(stats(f"sqlite:///{tmp_path}/missing.db", "--check"))
    assert code == 3 and "does not exist" in text


def test_watch_ends_cleanly_on_sigint(tmp_path: Path) -> None:
    """``--watch`` keeps sampling until SIGINT (Ctrl-C) and exits 0 with the last sample
    printed: a row added after the first sample is in it, so it was sampled again (off a
    terminal rich prints only the last render)."""
    url = f"sqlite:///{tmp_path}/watch.db"
    engine = sa.create_engine(url)
    tables = Tables(engine)
    tables.reset()
    process = stats(url, "--watch", "--interval", "0.1")
    try:
        assert process.stderr is not None
        assert "Ctrl-C to stop" in process.stderr.readline()  # the first sample is taken
        with engine.begin() as conn:
            tables.inbox.claim(conn, "later", "newcomer")
        time.sleep(0.5)  # a few more samples
        assert process.poll() is None  # still watching
        process.send_signal(signal.SIGINT)
        code, text = finish(process)
    finally:
        if process.poll() is None:
            process.kill()
        engine.dispose()
    assert code == 0, text
    assert "newcomer" in text


def test_the_outbox_section_and_its_warnings(engine_: sa.Engine, url: str) -> None:
    """The outbox, when its table exists: rows per destination and status in the report and
    the JSON, ``outbox-dead`` (17) for a dead row, ``relay-stuck`` (18) for a pending row
    older than the threshold; none while every row is dispatched or fresh."""
    tables = Tables(engine_, "_outbox")
    outbox = Outbox(tables.metadata, table_name="stats_outbox")
    tables.reset()
    try:
        with engine_.begin() as conn:
            for destination in ("payments", "payments", "refunds"):
                outbox.publish(conn, destination, b"x")
            conn.execute(outbox.table.update().values(status="dispatched"))
        names = tables.names

        def codes() -> list[int]:
            sample = collect(
                engine_, inbox_table=names[0], store_table=names[1], outbox_table="stats_outbox"
            )
            minutes = datetime.timedelta(minutes=10)
            return [
                w.code for w in stats_warnings(sample, retention=None, pending_threshold=minutes)
            ]

        assert codes() == []
        with engine_.begin() as conn:
            outbox.publish(conn, "refunds", b"fresh")  # pending, but new: no warning
        assert codes() == []
        t = outbox.table
        with engine_.begin() as conn:
            conn.execute(t.update().where(t.c.id == 1).values(status="dead"))
            conn.execute(
                t.update().where(t.c.id == 2).values(status="pending", created_at=LONG_AGO)
            )
        assert codes() == [WARNING_CODES["outbox-dead"], WARNING_CODES["relay-stuck"]] == [17, 18]

        outbox_args = ("--outbox-table", "stats_outbox")
        code, text = finish(stats(url, "--check", *outbox_args, names=names))
        assert code == 17 and "Outbox stats_outbox" in text and "relay-stuck" in text, text
        code, text = finish(stats(url, "--json", *outbox_args, names=names))
        document = json.loads(text)
        assert [(d["destination"], d["counts"]) for d in document["outbox"]["destinations"]] == [
            ("payments", {"pending": 1, "processing": 0, "dispatched": 0, "dead": 1}),
            ("refunds", {"pending": 1, "processing": 0, "dispatched": 1, "dead": 0}),
        ]
        code, text = finish(stats(url, "--check", "--outbox-table", "", names=names))
        assert code == 0, text  # skipped: the outbox is not read
        code, text = finish(stats(url, "--check", *outbox_args, names=("nosuch", "nosuch2")))
        assert code == WARNING_CODES["no-tables"], text  # an outbox alone: wrong names
        code, text = finish(stats(url, "--outbox-table", "nosuch_outbox", names=names))
        assert code == 0 and "table nosuch_outbox does not exist" in text, text
    finally:
        tables.metadata.drop_all(engine_)


def test_a_renamed_consumer_is_reported(engine_: sa.Engine, url: str) -> None:
    """``billing`` stopped claiming and ``billing-v2`` started claiming ids ``billing`` had
    claimed (redeliveries applied a second time): warning 19, in-process and from the CLI. A
    fan-out consumer claiming the same ids alongside (``audit``, still active when
    ``billing`` stopped) is not one."""
    case = Tables(engine_, "_renamed")
    case.reset()
    t = case.inbox.table
    now = datetime.datetime.now(datetime.UTC)
    before, after = now - datetime.timedelta(hours=3), now - datetime.timedelta(hours=1)
    with engine_.begin() as conn:
        conn.execute(t.update().values(received_at=before))  # billing and audit, side by side
        conn.execute(t.insert(), [
            {"message_id": mid, "consumer_name": "billing-v2", "received_at": after}
            for mid in ("m-1", "m-2", "m-9")
        ])  # fmt: skip
    try:
        sample = collect(engine_, inbox_table=case.names[0], store_table=case.names[1])
        assert sample.renames == [ConsumerRename("billing", "billing-v2", 2)]
        found = stats_warnings(sample, retention=None)
        assert [w.code for w in found] == [WARNING_CODES["renamed-consumer"]]
        assert "billing-v2" in found[0].text and "op.rename_inbox_consumer" in found[0].text
        code, text = finish(stats(url, "--check", names=case.names))
        assert code == WARNING_CODES["renamed-consumer"] == 19, text
    finally:
        case.metadata.drop_all(engine_)
