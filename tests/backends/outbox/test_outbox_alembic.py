"""The outbox table through Alembic: ``op.create_outbox_table`` emits the DDL of
``create_all`` on every dialect; autogenerate renders it; upgrade → the constraints and
indexes → a publish → ``alembic check`` clean → downgrade leaves nothing."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from sa_inbox.exc import InvalidArgument
from sa_inbox.outbox import Outbox
from tests.support.alembic.inspection import count_rows
from tests.support.alembic.project import Project
from tests.unit.alembic.test_operations import _metadata_ddl, _offline, _statements, assert_same_ddl

DIALECTS = ("postgresql", "mysql", "mariadb", "oracle", "sqlite")
INDEXES = {
    "ix_outbox_messages_claim": ["status", "id"],
    "ix_outbox_messages_destination": ["destination", "status", "id"],
    "ix_outbox_messages_purge": ["status", "dispatched_at"],
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_create_emits_the_ddl_of_create_all(dialect: str) -> None:
    operations, buffer = _offline(dialect)
    operations.create_outbox_table(message_id_length=64)  # type: ignore[attr-defined]
    expected = _metadata_ddl(dialect, lambda m: Outbox(m, message_id_length=64))
    assert_same_ddl(_statements(buffer.getvalue()), expected)
    assert len([s for s in expected if s.startswith("CREATE INDEX")]) == 3


def test_a_message_id_shorter_than_a_uuid_is_refused() -> None:
    operations, buffer = _offline("postgresql")
    with pytest.raises(InvalidArgument, match="at least 36"):
        operations.create_outbox_table(message_id_length=20)  # type: ignore[attr-defined]
    assert buffer.getvalue() == ""


@pytest.mark.backend
def test_outbox_round_trip(project: Project) -> None:
    project.init()
    project.write_models("from sa_inbox.outbox import Outbox\noutbox = Outbox(metadata)\n")
    text = project.autogenerate("add outbox")
    assert "op.create_outbox_table('outbox_messages', message_id_length=255)" in text
    assert "op.drop_outbox_table('outbox_messages', message_id_length=255)" in text
    assert "op.create_table(" not in text and "op.create_index(" not in text
    command.upgrade(project.config(), "head")
    engine = project.engine()
    try:
        inspector = sa.inspect(engine)
        assert inspector.get_pk_constraint("outbox_messages")["constrained_columns"] == ["id"]
        uniques = {
            tuple(u["column_names"]) for u in inspector.get_unique_constraints("outbox_messages")
        }
        assert ("message_id",) in uniques
        indexes = {
            i["name"]: i["column_names"]
            for i in inspector.get_indexes("outbox_messages")
            if i["name"] in INDEXES
        }
        assert set(indexes) == set(INDEXES)
        for name, columns in INDEXES.items():
            assert indexes[name][: len(columns)] == columns
        outbox = project.import_models().outbox
        with engine.begin() as conn:
            outbox.publish(conn, "q", b"\x00\xffbody")
        assert count_rows(engine, "outbox_messages") == 1
        with engine.connect() as conn:
            assert conn.execute(sa.select(outbox.table.c.payload)).scalar_one() == b"\x00\xffbody"
    finally:
        engine.dispose()
    command.check(project.config())
    command.downgrade(project.config(), "base")
    assert project.table_names() == {"alembic_version"}
