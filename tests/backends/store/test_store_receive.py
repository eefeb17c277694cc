"""``InboxStore.receive`` on real servers: one cached statement, no lock across SQL.

Proven by counting, not timing: the statement each receive hands to SQLAlchemy is the same
one every time (built once per backend, as ``Inbox.claim``'s; where the backend's statement
is an INSERT, its text compiled once per engine and sent as driver SQL), and
``before_cursor_execute`` sees every statement sent (exactly one per warm receive; the
backend's one-time checks only at the first receive on an engine, never again).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from sa_inbox.store import PENDING, InboxStore, Incoming

pytestmark = pytest.mark.backend

TABLE = "receive_store"


@pytest.fixture
def store(engine: sa.Engine) -> Iterator[InboxStore]:
    metadata = sa.MetaData()
    store = InboxStore(metadata, table_name=TABLE)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    yield store
    metadata.drop_all(engine)


class Sent:
    """The statement objects executed and the SQL strings sent through ``engine``."""

    def __init__(self, engine: sa.Engine) -> None:
        self.elements: list[Any] = []
        self.texts: list[str] = []
        self.sql: list[str] = []
        self.compiled: list[Any] = []
        event.listen(engine, "before_execute", self._element)
        event.listen(engine, "before_cursor_execute", self._cursor)

    def _element(self, conn: Any, element: Any, *args: Any) -> None:
        self.elements.append(element)

    def _cursor(
        self, conn: Any, cursor: Any, statement: str, params: Any, context: Any, *a: Any
    ) -> None:
        self.texts.append(statement)
        self.sql.append(" ".join(statement.split()))
        self.compiled.append(getattr(context, "compiled", None))

    def clear(self) -> None:
        self.elements, self.texts, self.sql, self.compiled = [], [], [], []


def _rows(engine: sa.Engine, store: InboxStore) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(store.table)).scalar_one())


def test_receive_sends_one_cached_statement(engine: sa.Engine, store: InboxStore) -> None:
    sent = Sent(engine)
    per_receive: list[tuple[list[Any], list[str], list[str], list[Any]]] = []
    for i in range(4):
        sent.clear()
        with engine.begin() as conn:
            assert store.receive(conn, f"m-{i}", {"n": i}) is True
        per_receive.append((sent.elements, sent.texts, sent.sql, sent.compiled))

    first_sql = per_receive[0][2]
    warm = per_receive[1:]
    # Every warm receive: exactly one statement, the insert-or-skip into the store.
    assert all(len(sql) == 1 and TABLE in sql[0] for _, _, sql, _ in warm)
    # The first receive also runs the backend's one-time checks (MySQL/MariaDB: the key
    # columns' collation), before its insert, and they never recur.
    one_time = first_sql[:-1]
    assert first_sql[-1] == warm[0][2][0]
    assert len(one_time) == (1 if engine.dialect.name == "mysql" else 0)
    assert all("information_schema" in statement for statement in one_time)
    compiled = [c[-1] for _, _, _, c in warm]
    if engine.dialect.name == "oracle":
        # One statement object, built once, handed to SQLAlchemy by every receive; and one
        # compiled form (the engine's compiled cache hit on it).
        inserts = [elements[-1] for elements, _, _, _ in per_receive]
        assert all(element is inserts[0] for element in inserts)
        assert compiled[0] is not None and all(c is compiled[0] for c in compiled)
    else:
        # PostgreSQL, MySQL/MariaDB, SQLite: the statement's text, compiled once for the
        # engine's dialect, sent by every receive as driver SQL: the same string object,
        # no compiled form at execution (exec_driver_sql fires no before_execute).
        texts = [t[-1] for _, t, _, _ in per_receive]
        assert all(text is texts[0] for text in texts)
        assert compiled == [None] * len(warm)
        assert all(TABLE not in str(e) for elements, _, _, _ in warm for e in elements)
    assert _rows(engine, store) == 4
    assert store.counts(engine)[PENDING] == 4


def test_receive_duplicate_still_one_statement(engine: sa.Engine, store: InboxStore) -> None:
    with engine.begin() as conn:
        assert store.receive(conn, "dup", {"n": 1}) is True
    sent = Sent(engine)
    with engine.begin() as conn:
        assert store.receive(conn, "dup", {"n": 2}) is False
    # MySQL/MariaDB too: one warning and no row is the duplicate's 1062 on the store table
    # (tests/backends/claim/test_mysql_duplicates.py), so SHOW WARNINGS is not read.
    assert len(sent.sql) == 1
    assert _rows(engine, store) == 1


@pytest.mark.parametrize("side", ["receive", "claim"])
def test_no_lock_is_held_across_a_database_call(
    engine: sa.Engine, store: InboxStore, side: str
) -> None:
    """While one engine's first call runs its one-time checks, a call on another engine
    through the same store goes through: the checks hold no lock that others wait on
    (asyncio callers will run these calls from one event-loop thread)."""
    other = sa.create_engine(engine.url)
    finished: list[bool] = []

    def on_other_engine() -> None:
        with other.begin() as conn:
            store.receive(conn, "other", {"n": 0})
        with store.transaction(other):  # the claim side's check (its own connection)
            pass
        finished.append(True)

    def interleave(*args: Any) -> None:
        if finished or threads:
            return
        thread = threading.Thread(target=on_other_engine, daemon=True)
        threads.append(thread)
        thread.start()
        thread.join(timeout=20)
        blocked.append(thread.is_alive())

    threads: list[threading.Thread] = []
    blocked: list[bool] = []
    # Fire inside the first call's one-time check: the claim side checks on a connection
    # it checks out itself; the receive side on the caller's connection, with SQL only on
    # MySQL/MariaDB (elsewhere the hook fires at the insert, after the checks).
    hook = "checkout" if side == "claim" else "before_cursor_execute"
    try:
        if side == "claim":
            event.listen(engine, hook, interleave)
            with store.transaction(engine):
                pass
        else:
            with engine.begin() as conn:
                event.listen(engine, hook, interleave)
                store.receive(conn, "first", {"n": 1})
    finally:
        event.remove(engine, hook, interleave)
        for thread in threads:
            thread.join(timeout=30)
        other.dispose()

    assert blocked == [False] and finished == [True]
    assert _rows(engine, store) == (2 if side == "receive" else 1)


def test_receive_and_receive_many_share_the_checks(engine: sa.Engine, store: InboxStore) -> None:
    """A batch after single receives (and the other way round) skips what is stored."""
    with engine.begin() as conn:
        assert store.receive(conn, "a", {"n": 0}) is True
        new = store.receive_many(conn, [Incoming(c, {}) for c in "abca"])
        assert store.receive(conn, "c", {"n": 0}) is False
    assert new == {"b", "c"}
    assert _rows(engine, store) == 3


def test_receive_follows_a_schema_translate_map(
    engine: sa.Engine, store: InboxStore, tmp_path: Path
) -> None:
    """The driver SQL, compiled once per dialect, names the table as the metadata does; on a
    connection with a ``schema_translate_map`` the receive keeps SQLAlchemy's compiled path,
    which applies the map: after a receive on a plain connection of the same engine (the
    driver SQL cached), a translated one still lands in the translated schema."""
    schema = f"tr_{uuid.uuid4().hex[:8]}"
    if engine.dialect.name == "sqlite":
        attached = tmp_path / f"{schema}.db"
        event.listen(
            engine,
            "connect",
            lambda dbapi, _: dbapi.execute(f"ATTACH DATABASE '{attached}' AS {schema}"),
        )
        engine.dispose()
    else:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    translated = engine.execution_options(schema_translate_map={None: schema})
    try:
        store.table.metadata.create_all(translated)
        with engine.begin() as conn:
            assert store.receive(conn, "plain-1", {"n": 1}) is True
        with translated.begin() as conn:
            assert store.receive(conn, "translated-1", {"n": 2}) is True
            assert store.receive(conn, "translated-1", {"n": 2}) is False
        ids = sa.select(store.table.c.message_id)
        with engine.connect() as conn:
            assert conn.execute(ids).scalars().all() == ["plain-1"]
        with translated.connect() as conn:
            assert conn.execute(ids).scalars().all() == ["translated-1"]
    finally:
        if engine.dialect.name != "sqlite":
            with engine.begin() as conn:
                drop = (
                    "DROP SCHEMA {} CASCADE"
                    if engine.dialect.name == "postgresql"
                    else ("DROP SCHEMA {}")
                )
                conn.exec_driver_sql(drop.format(schema))
