"""The table factories refuse, before SQLAlchemy does, a table name that is empty or that
their MetaData already holds (``Inbox(metadata)`` twice), with a typed error and nothing
added to the MetaData."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlalchemy as sa

from sa_inbox import Inbox, InboxStore
from sa_inbox.exc import InvalidTable
from sa_inbox.outbox import Outbox
from sa_inbox.retention.partitions import partitioned_processed_messages_table

FACTORIES: dict[str, Callable[..., object]] = {
    "Inbox": Inbox,
    "InboxStore": InboxStore,
    "Outbox": Outbox,
    "partitioned": partitioned_processed_messages_table,
}


@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("name", ["", "   ", 7, b"inbox", None])
def test_an_empty_or_non_string_table_name_is_refused(factory: str, name: object) -> None:
    metadata = sa.MetaData()
    with pytest.raises(InvalidTable, match=r"table_name must be a non-empty string, not "):
        FACTORIES[factory](metadata, table_name=name)
    assert list(metadata.tables) == []


@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("schema", [None, "billing"])
def test_a_second_table_of_the_same_name_on_one_metadata_is_refused(
    factory: str, schema: str | None
) -> None:
    metadata = sa.MetaData()
    FACTORIES[factory](metadata, table_name="t", schema=schema)
    before = dict(metadata.tables)
    key = "t" if schema is None else f"{schema}.t"
    with pytest.raises(InvalidTable, match=f"the MetaData already holds a table '{key}'"):
        FACTORIES[factory](metadata, table_name="t", schema=schema)
    assert dict(metadata.tables) == before
    other = FACTORIES[factory](metadata, table_name="t2", schema=schema)
    assert other is not None and f"{key}2" in metadata.tables


def test_the_metadatas_own_schema_counts() -> None:
    metadata = sa.MetaData(schema="billing")
    Inbox(metadata)
    with pytest.raises(InvalidTable, match=r"'billing\.inbox_processed_messages'"):
        Inbox(metadata)


@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("schema", ["", "  ", 5])
def test_an_empty_or_non_string_schema_is_refused(factory: str, schema: object) -> None:
    """``schema=""`` would name a table ``.t`` beside ``t``, and escape the check above."""
    metadata = sa.MetaData()
    with pytest.raises(InvalidTable, match=r"schema must be None or a non-empty string, not "):
        FACTORIES[factory](metadata, table_name="t", schema=schema)
    assert list(metadata.tables) == []
