"""The operations run online on every backend, Oracle included when its URL is set.

Each test works on tables of its own (a random name) in the shared test database, so it
compares only those tables: ``compare_metadata`` with an ``include_name`` filter.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.operations import Operations

from sa_inbox import Inbox
from sa_inbox.consumers import Consumers, consumers_table
from sa_inbox.exc import ConsumerNameTaken
from sa_inbox.store import InboxStore
from tests.support.alembic.inspection import assert_inbox_table, count_rows

pytestmark = pytest.mark.backend


@pytest.fixture
def name() -> Iterator[str]:
    yield f"ib_{uuid.uuid4().hex[:10]}"


def _differences(conn: sa.Connection, metadata: sa.MetaData, names: set[str]) -> list[Any]:
    def include_name(name: str | None, type_: str, parent: Any) -> bool:
        return type_ != "table" or name in names

    context = MigrationContext.configure(conn, opts={"include_name": include_name})
    return list(compare_metadata(context, metadata))


def test_processed_messages_table_online(engine: sa.Engine, name: str) -> None:
    metadata = sa.MetaData()
    inbox = Inbox(metadata, table_name=name, message_id_length=120, consumers=False)
    with engine.begin() as conn:
        Operations(MigrationContext.configure(conn)).create_inbox_table(  # type: ignore[attr-defined]
            name, message_id_length=120
        )
    try:
        assert_inbox_table(engine, table=name, length=120)
        with engine.begin() as conn:
            assert inbox.claim(conn, "m-1", "billing") is True
            assert inbox.claim(conn, "m-1", "billing") is False
        assert count_rows(engine, name) == 1
        with engine.connect() as conn:
            assert _differences(conn, metadata, {name}) == []
    finally:
        with engine.begin() as conn:
            Operations(MigrationContext.configure(conn)).drop_inbox_table(name)  # type: ignore[attr-defined]
    assert name not in sa.inspect(engine).get_table_names()


def test_store_table_online(engine: sa.Engine, name: str) -> None:
    metadata = sa.MetaData()
    store = InboxStore(metadata, table_name=name, consumers=False)
    with engine.begin() as conn:
        Operations(MigrationContext.configure(conn)).create_inbox_store_table(name)  # type: ignore[attr-defined]
    try:
        with engine.begin() as conn:
            assert store.receive(conn, "m-1", {"n": 1}) is True
            assert store.receive(conn, "m-1", {"n": 1}) is False
        assert count_rows(engine, name) == 1
        with engine.connect() as conn:
            assert _differences(conn, metadata, {name}) == []
    finally:
        with engine.begin() as conn:
            Operations(MigrationContext.configure(conn)).drop_inbox_store_table(name)  # type: ignore[attr-defined]
    assert name not in sa.inspect(engine).get_table_names()


def _create_order(session: object) -> None:
    """The owner of the name in the test below."""


def _send_invoice(session: object) -> None:
    """Another handler, refused the name."""


def test_consumers_table_online(engine: sa.Engine, name: str) -> None:
    """The table op.create_inbox_consumers_table makes records owners and refuses others."""
    table_name = f"{name}_consumers"
    metadata = sa.MetaData()
    table = consumers_table(metadata, table_name=table_name, consumer_name_length=300)
    with engine.begin() as conn:
        Operations(MigrationContext.configure(conn)).create_inbox_consumers_table(  # type: ignore[attr-defined]
            table_name, consumer_name_length=300
        )
    try:
        consumers = Consumers(table, "orders_inbox", 300)
        consumers.ensure(engine, "c" * 300, _create_order)
        with pytest.raises(ConsumerNameTaken):
            Consumers(table, "orders_inbox", 300).ensure(engine, "c" * 300, _send_invoice)
        assert count_rows(engine, table_name) == 1
        with engine.connect() as conn:
            assert _differences(conn, metadata, {table_name}) == []
    finally:
        with engine.begin() as conn:
            Operations(MigrationContext.configure(conn)).drop_inbox_consumers_table(  # type: ignore[attr-defined]
                table_name, consumer_name_length=300
            )
    assert table_name not in sa.inspect(engine).get_table_names()
