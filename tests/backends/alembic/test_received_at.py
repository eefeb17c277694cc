"""A MariaDB inbox table made with whole-second ``received_at`` (as sa-inbox 0.1 made it)
migrates to ``DATETIME(6) DEFAULT CURRENT_TIMESTAMP(6)``: autogenerate renders the
``alter_column``, the upgrade keeps the rows, ``alembic check`` is clean after it, two
claims within one second then differ, and the downgrade restores the old column."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from sa_inbox.schema import PAYLOAD_HASH, key_type
from tests.support.alembic.project import Project

pytestmark = pytest.mark.backend

TABLE = "inbox_processed_messages"
MODELS = "inbox = Inbox(metadata, consumers=False)\n"


def create_whole_second_table(engine: sa.Engine) -> None:
    """The processed-messages table as sa-inbox 0.1 created it on MySQL/MariaDB."""
    metadata = sa.MetaData()
    sa.Table(
        TABLE,
        metadata,
        sa.Column("message_id", key_type(255), nullable=False),
        sa.Column("consumer_name", key_type(255), nullable=False),
        sa.Column(
            "received_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("CURRENT_TIMESTAMP"),
        ),
        sa.Column("message_type", sa.String(255)),
        sa.Column("correlation_id", sa.String(255)),
        sa.Column("payload_hash", PAYLOAD_HASH),
        sa.PrimaryKeyConstraint("message_id", "consumer_name", name=f"pk_{TABLE}"),
        sa.Index(f"ix_{TABLE}_received_at", "received_at"),
        comment="sa-inbox: messages already processed, one row per (message_id, consumer)",
    )
    metadata.create_all(engine)


def received_at(engine: sa.Engine) -> dict[str, object]:
    (column,) = [c for c in sa.inspect(engine).get_columns(TABLE) if c["name"] == "received_at"]
    return column  # type: ignore[return-value]


def claim_times(engine: sa.Engine, models: object, ids: list[str]) -> list[object]:
    for message_id in ids:  # each claim its own transaction, within one second
        with engine.begin() as conn:
            assert models.inbox.claim(conn, message_id, "billing")  # type: ignore[attr-defined]
    with engine.connect() as conn:
        table = sa.table(TABLE, sa.column("message_id"), sa.column("received_at"))
        rows = conn.execute(
            sa.select(table.c.received_at).where(table.c.message_id.in_(ids)).order_by("message_id")
        )
        return [row[0] for row in rows]


@pytest.mark.parametrize("database_url", ["mysql"], indirect=True)
def test_a_whole_second_received_at_migrates_to_microseconds(project: Project) -> None:
    project.init()
    project.write_models(MODELS)
    engine = project.engine()
    try:
        create_whole_second_table(engine)
        models = project.import_models()
        with engine.begin() as conn:
            assert models.inbox.claim(conn, "before", "billing")
        assert getattr(received_at(engine)["type"], "fsp", None) in (None, 0)

        text = project.autogenerate("fractional received_at")
        upgrade, downgrade = text.split("def downgrade()")
        assert "op.alter_column('inbox_processed_messages', 'received_at'" in upgrade
        assert "type_=mysql.DATETIME(fsp=6)" in upgrade
        assert "server_default=sa.text('CURRENT_TIMESTAMP(6)')" in upgrade
        assert "type_=mysql.DATETIME()" in downgrade
        command.upgrade(project.config(), "head")

        column = received_at(engine)
        assert getattr(column["type"], "fsp", None) == 6
        assert str(column["default"]).lower() == "current_timestamp(6)"
        assert column["nullable"] is False
        command.check(project.config())  # nothing left to migrate
        with engine.begin() as conn:  # the rows are kept: the earlier claim still holds
            assert models.inbox.claim(conn, "before", "billing") is False
        first, second = claim_times(engine, models, ["m-1", "m-2"])
        assert first < second  # type: ignore[operator]
        assert (second - first).total_seconds() < 1  # type: ignore[operator]

        command.downgrade(project.config(), "-1")
        assert getattr(received_at(engine)["type"], "fsp", None) in (None, 0)
        with engine.begin() as conn:
            assert models.inbox.claim(conn, "m-1", "billing") is False
    finally:
        engine.dispose()


@pytest.mark.parametrize("database_url", ["mysql"], indirect=True)
def test_a_new_table_needs_no_alter(project: Project) -> None:
    project.init()
    project.write_models(MODELS)
    text = project.autogenerate("inbox")
    assert "op.create_inbox_table('inbox_processed_messages'" in text
    assert "alter_column" not in text
    command.upgrade(project.config(), "head")
    engine = project.engine()
    try:
        assert getattr(received_at(engine)["type"], "fsp", None) == 6
    finally:
        engine.dispose()
    command.check(project.config())
