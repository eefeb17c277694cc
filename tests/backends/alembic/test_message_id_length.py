"""A change of ``message_id_length`` in the models migrates, on SQLite, PostgreSQL and MariaDB.

The template's env.py renders SQLite's changes in batch mode (SQLite's ALTER TABLE cannot
change a column; Alembic re-creates the table with its rows). For the processed-messages
table and the inbox store: autogenerate → upgrade → the rows are kept (a claim made before
is a duplicate) → the new length holds (the reflected columns; a 200-character id is
claimed, one of 201 refused by the Inbox before any SQL, and by the database itself where
it enforces VARCHAR lengths) → ``alembic check`` clean → downgrade back to 64 with the rows.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from sa_inbox.exc import InvalidMessageId
from tests.support.alembic.inspection import count_rows
from tests.support.alembic.project import Project

pytestmark = pytest.mark.backend

OLD, NEW = 64, 200
MODELS = (
    "from sa_inbox.store import InboxStore\n"
    "inbox = Inbox(metadata, message_id_length={n})\n"
    "store = InboxStore(metadata, message_id_length={n})\n"
)
TABLES = ("inbox_processed_messages", "inbox_store")


def _lengths(engine: sa.Engine) -> set[int]:
    inspector = sa.inspect(engine)
    return {
        column["type"].length
        for table in TABLES
        for column in inspector.get_columns(table)
        if column["name"] in ("message_id", "consumer_name")
    }


def _enforces_lengths(engine: sa.Engine) -> bool:
    """SQLite does not enforce VARCHAR lengths (SQLite docs, "Datatypes In SQLite", 3.1)."""
    return engine.dialect.name != "sqlite"


def test_message_id_length_change_keeps_rows_and_enforces_the_new_length(
    project: Project,
) -> None:
    project.init()
    project.write_models(MODELS.format(n=OLD))
    project.autogenerate("inbox")
    command.upgrade(project.config(), "head")
    first = "a" * OLD
    engine = project.engine()
    try:
        models = project.import_models()
        with engine.begin() as conn:
            assert models.inbox.claim(conn, first, "billing") is True
            assert models.store.receive(conn, first, {"n": 1}) is True

        project.write_models(MODELS.format(n=NEW))
        text = project.autogenerate("longer ids")
        upgrade = text.split("def downgrade()")[0]
        assert upgrade.count("alter_column(") == 4  # two columns of two tables
        if engine.dialect.name == "sqlite":
            assert "with op.batch_alter_table('inbox_processed_messages'" in upgrade
            assert "with op.batch_alter_table('inbox_store'" in upgrade
        command.upgrade(project.config(), "head")

        assert _lengths(engine) == {NEW}
        models = project.import_models()
        with engine.begin() as conn:  # the rows are kept: the earlier claims still hold
            assert models.inbox.claim(conn, first, "billing") is False
            assert models.store.receive(conn, first, {"n": 1}) is False
            assert models.inbox.claim(conn, "b" * NEW, "c" * NEW) is True
            with pytest.raises(InvalidMessageId, match="the column holds 200"):
                models.inbox.claim(conn, "b" * (NEW + 1), "billing")
        if _enforces_lengths(engine):
            with pytest.raises(sa.exc.DBAPIError), engine.begin() as conn:
                conn.execute(
                    models.inbox.table.insert().values(
                        message_id="d" * (NEW + 1), consumer_name="billing"
                    )
                )
        assert count_rows(engine, "inbox_processed_messages") == 2
        assert count_rows(engine, "inbox_store") == 1
        command.check(project.config())

        with engine.begin() as conn:  # a shorter column cannot hold it
            conn.execute(
                models.inbox.table.delete().where(models.inbox.table.c.message_id != first)
            )
        command.downgrade(project.config(), "-1")
        assert _lengths(engine) == {OLD}
        assert count_rows(engine, "inbox_processed_messages") == 1
        assert count_rows(engine, "inbox_store") == 1
    finally:
        engine.dispose()
