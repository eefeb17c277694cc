"""sa_inbox._compat: each wrapper of a private SQLAlchemy name, on the installed SQLAlchemy,
and each fallback called directly (what runs should a release drop the private name).

Real SQLite databases throughout; nothing of SQLAlchemy's is mocked.
"""

from __future__ import annotations

import asyncio
import sqlite3
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement, Executable

from sa_inbox import _compat
from sa_inbox.dialects import is_autocommit


@pytest.fixture
def engine(tmp_path: object) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/compat.db")
    yield engine
    engine.dispose()


@pytest.fixture
def table(engine: sa.Engine) -> sa.Table:
    table = sa.Table("t", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    table.create(engine)
    return table


# -- autocommit_isolation ------------------------------------------------------------------


def test_autocommit_isolation_off_by_default(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        assert _compat.autocommit_isolation(conn) is False
        assert _compat._autocommit_isolation_from_options(conn) is False


def test_autocommit_isolation_on_the_connection(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        assert _compat.autocommit_isolation(conn) is True
        assert _compat._autocommit_isolation_from_options(conn) is True


def test_autocommit_isolation_on_the_engine(engine: sa.Engine) -> None:
    with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
        assert _compat.autocommit_isolation(conn) is True
        assert _compat._autocommit_isolation_from_options(conn) is True


def test_autocommit_isolation_from_create_engine(tmp_path: object) -> None:
    """The private method sees ``create_engine(isolation_level=...)``; the fallback does not,
    and :func:`is_autocommit` still does through the driver's own flag."""
    engine = sa.create_engine(f"sqlite:///{tmp_path}/ac.db", isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            assert _compat.autocommit_isolation(conn) is True
            assert _compat._autocommit_isolation_from_options(conn) is False
            assert conn.connection.dbapi_connection.isolation_level is None  # type: ignore[union-attr]
            assert is_autocommit(conn) is True
    finally:
        engine.dispose()


# -- cache_key -----------------------------------------------------------------------------


class _Limited(Executable, ClauseElement):
    """``SELECT <column> FROM <table> LIMIT <n>``: a custom construct with state of its own."""

    def __init__(self, table: sa.Table, column: str, n: int) -> None:
        self.table = table
        self.columns = [column]
        self.n = n


@compiles(_Limited)
def _compile_limited(element: _Limited, compiler: SQLCompiler, **kw: Any) -> str:
    table = compiler.process(element.table, asfrom=True, **kw)
    return f"SELECT {element.columns[0]} FROM {table} LIMIT {element.n:d}"


def _construct(decorate: Any) -> type[_Limited]:
    return decorate(type("Limited", (_Limited,), {}))  # type: ignore[no-any-return]


def test_cache_key_follows_the_named_attributes(table: sa.Table) -> None:
    limited = _construct(
        _compat.cache_key(table="clauseelement", columns="string_list", n="plain_obj")
    )
    one, two, other = limited(table, "id", 1), limited(table, "id", 1), limited(table, "id", 2)
    assert limited.__dict__["inherit_cache"] is True
    assert one._generate_cache_key() == two._generate_cache_key()
    assert one._generate_cache_key() != other._generate_cache_key()


def test_cached_construct_runs_with_its_own_values(engine: sa.Engine, table: sa.Table) -> None:
    """Two statements differing only in ``n`` must not share a compiled form."""
    limited = _construct(
        _compat.cache_key(table="clauseelement", columns="string_list", n="plain_obj")
    )
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": 1}, {"id": 2}, {"id": 3}])
        assert len(conn.execute(limited(table, "id", 1)).all()) == 1
        assert len(conn.execute(limited(table, "id", 3)).all()) == 3


def test_cache_key_falls_back_for_an_unknown_kind() -> None:
    limited = _construct(_compat.cache_key(n="no_such_kind"))  # type: ignore[arg-type]
    assert limited.__dict__["inherit_cache"] is False


def test_uncached_fallback(engine: sa.Engine, table: sa.Table) -> None:
    limited = _construct(_compat._uncached)
    assert limited(table, "id", 1)._generate_cache_key() is None
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": 1}, {"id": 2}])
        assert len(conn.execute(limited(table, "id", 1)).all()) == 1
        assert len(conn.execute(limited(table, "id", 2)).all()) == 2


# -- result_cursor -------------------------------------------------------------------------


def test_result_cursor_outlives_the_closed_result(engine: sa.Engine, table: sa.Table) -> None:
    with engine.begin() as conn:
        result = conn.execute(table.insert(), {"id": 1})
        assert not result.returns_rows  # so SQLAlchemy has released result.cursor already
        cursor = _compat.result_cursor(result)
        assert isinstance(cursor, sqlite3.Cursor)
        assert cursor.rowcount == 1
        assert _compat._open_result_cursor(result) is None


def test_open_result_cursor_fallback_while_open(engine: sa.Engine, table: sa.Table) -> None:
    with engine.begin() as conn:
        result = conn.execute(sa.select(table.c.id))
        assert isinstance(_compat._open_result_cursor(result), sqlite3.Cursor)
        assert _compat._open_result_cursor(result) is _compat.result_cursor(result)
        result.close()


# -- sort_indexes --------------------------------------------------------------------------


def _indexed() -> sa.Table:
    return sa.Table(
        "ix",
        sa.MetaData(),
        sa.Column("a", sa.Integer),
        sa.Column("b", sa.Integer),
        sa.Column("c", sa.Integer),
        sa.Index("ix_c", "c"),
        sa.Index("ix_a", "a"),
        sa.Index("ix_b", "b"),
    )


@pytest.mark.parametrize("sort", [_compat.sort_indexes, _compat._sort_indexes_in_set])
def test_indexes_iterate_in_name_order(sort: Any, engine: sa.Engine) -> None:
    table = sort(_indexed())
    assert [index.name for index in table.indexes] == ["ix_a", "ix_b", "ix_c"]
    assert isinstance(table.indexes, set)
    created: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("CREATE INDEX"):
            created.append(statement.split()[2])

    table.metadata.create_all(engine)
    assert created == ["ix_a", "ix_b", "ix_c"]
    with engine.connect() as conn:
        assert {ix["name"] for ix in sa.inspect(conn).get_indexes("ix")} == set(created)


def test_sorted_indexes_stay_a_working_set() -> None:
    table = _compat._sort_indexes_in_set(_indexed())
    sa.Index("ix_0", table.c.a)  # joins table.indexes through SQLAlchemy's own add()
    assert [index.name for index in table.indexes] == ["ix_0", "ix_a", "ix_b", "ix_c"]
    ordered = _compat.sort_indexes(_indexed())
    sa.Index("ix_0", ordered.c.a)
    assert [index.name for index in ordered.indexes] == ["ix_a", "ix_b", "ix_c", "ix_0"]


def test_adapted_warning_count() -> None:
    """aiomysql's count behind SQLAlchemy's adapted cursor; ``None`` for a plain cursor (the
    live check is tests/backends/asyncio: a new claim on aiomysql sends no SHOW WARNINGS)."""
    from types import SimpleNamespace

    adapted = SimpleNamespace(_cursor=SimpleNamespace(_result=SimpleNamespace(warning_count=2)))
    assert _compat.adapted_warning_count(adapted) == 2
    assert _compat.adapted_warning_count(SimpleNamespace(warning_count=1)) is None
    assert _compat.adapted_warning_count(None) is None


def test_adapter_executing_while_another_task_runs_a_statement() -> None:
    """SQLAlchemy's aiosqlite adapter, while a task's statement runs on it and after."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from tests.support.sleep import sleep_sql

    async def main() -> list[bool]:
        engine = create_async_engine("sqlite+aiosqlite://")
        statement = sa.text(sleep_sql(engine, 0.2))
        try:
            async with engine.connect() as conn:
                adapted = (await conn.get_raw_connection()).dbapi_connection
                seen = [_compat.adapter_executing(adapted)]
                running = asyncio.create_task(conn.execute(statement))
                while not running.done() and not _compat.adapter_executing(adapted):
                    await asyncio.sleep(0.005)
                seen.append(_compat.adapter_executing(adapted))
                await running
                seen.append(_compat.adapter_executing(adapted))
        finally:
            await engine.dispose()
        return seen

    assert asyncio.run(main()) == [False, True, False]


def test_adapter_executing_without_the_adapter_lock() -> None:
    """A plain DBAPI connection, or an adapter without the name: never executing."""
    from types import SimpleNamespace

    assert _compat.adapter_executing(sqlite3.connect(":memory:")) is False
    assert _compat.adapter_executing(SimpleNamespace(_execute_mutex=object())) is False


# -- sessionmaker.kw ------------------------------------------------------------------------


class OwnSession(Session):
    """A Session class of the application's."""


def test_session_options_of_a_sessionmaker(engine: sa.Engine) -> None:
    maker = sessionmaker(engine, info={"tenant": "a"})
    options = _compat.session_options(maker)
    assert options["bind"] is engine and options["info"] == {"tenant": "a"}
    options["info"]["tenant"] = "b"  # a copy: the maker is unchanged
    fallback = _compat._options_of_a_session(maker)
    assert fallback["bind"] is engine and fallback["info"] == {"tenant": "a"}
    maker.configure(info={"tenant": "c"})
    assert _compat.session_options(maker)["info"] == {"tenant": "c"}
    assert _compat._options_of_a_session(maker)["info"] == {"tenant": "c"}
    assert _compat.session_options(sessionmaker()).get("bind") is None
    assert _compat._options_of_a_session(sessionmaker())["bind"] is None


def test_session_options_of_an_async_sessionmaker(tmp_path: object) -> None:
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/compat_async.db")
    maker = async_sessionmaker(engine, sync_session_class=OwnSession)
    for options in (_compat.session_options(maker), _compat._options_of_a_session(maker)):
        assert options["bind"] is engine and options["sync_session_class"] is OwnSession
    asyncio.run(engine.dispose())


# -- CPython: warnings._warn_unawaited_coroutine, Task._log_traceback ------------------------


def test_the_unawaited_coroutine_hook_is_found_and_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = warnings._warn_unawaited_coroutine  # type: ignore[attr-defined]
    assert _compat.unawaited_coroutine_hook() is original
    seen: list[object] = []
    monkeypatch.setattr(warnings, "_warn_unawaited_coroutine", original)
    previous = _compat.unawaited_coroutine_hook(lambda current: seen.append)
    assert previous is original
    assert warnings._warn_unawaited_coroutine == seen.append  # type: ignore[attr-defined]


def test_without_the_hook_nothing_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(warnings, "_warn_unawaited_coroutine")
    assert _compat.unawaited_coroutine_hook(lambda current: current) is None
    assert not hasattr(warnings, "_warn_unawaited_coroutine")


def test_a_task_failed_unseen_until_its_exception_is_retrieved() -> None:
    async def fails() -> None:
        raise LookupError

    async def main() -> list[bool]:
        task = asyncio.create_task(fails())
        await asyncio.sleep(0)
        before = _compat.task_failed_unseen(task)
        task.exception()
        cancelled = asyncio.create_task(asyncio.sleep(1))
        cancelled.cancel()
        await asyncio.sleep(0)
        return [before, _compat.task_failed_unseen(task), _compat.task_failed_unseen(cancelled)]

    assert asyncio.run(main()) == [True, False, False]


def test_task_failed_unseen_without_the_private_flag() -> None:
    class NoFlag:
        def cancelled(self) -> bool:
            return False

    assert _compat.task_failed_unseen(NoFlag()) is False  # type: ignore[arg-type]


def test_faststream_handler_is_the_decorated_function_or_none() -> None:
    """FastStream's wrapper of a subscriber keeps the decorated function; anything else
    (a FastStream without the private name) gives None."""
    from tests.conftest import importorskip

    faststream = importorskip("faststream.rabbit", "faststream")

    broker = faststream.RabbitBroker("amqp://unused/")

    async def pay(body: dict[str, object]) -> None:
        pass

    subscriber = broker.subscriber("q")
    subscriber(pay)
    (item,) = subscriber.calls
    assert _compat.faststream_handler(item.handler) is pay
    assert _compat.faststream_handler(object()) is None
