"""The consumers table (:mod:`sa_inbox.consumers`) in Alembic, without a database server.

Its operations emit the DDL of ``create_all``; the table is shared by the inboxes and stores
of a MetaData and schema, at least 255 characters of ``consumer_name`` and widened to the
longest; autogenerate renders ``op.create_inbox_consumers_table`` / its drop, and pairs the
table only with its own kind, never with an inbox table; the ``[sa_inbox]`` settings and
``sa-inbox alembic revision`` add it where an Inbox claims through it.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import alembic.config
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import render_op_text
from alembic.autogenerate.api import AutogenContext
from alembic.migration import MigrationContext
from click.testing import CliRunner

from sa_inbox import ConfigurationError, Inbox
from sa_inbox.alembic import (
    CreateInboxConsumersTableOp,
    CreateProcessedMessagesTableOp,
    DropInboxConsumersTableOp,
    RefuseInboxTableDropOp,
    create_inbox_consumers_table,
    drop_inbox_consumers_table,
    inbox_operations,
    target_metadata,
)
from sa_inbox.alembic.pairing import resolve_drops
from sa_inbox.cli import main
from sa_inbox.consumers import consumers_table
from sa_inbox.exc import InvalidArgument, InvalidTable
from sa_inbox.store import InboxStore
from tests.support.alembic.project import Project
from tests.unit.alembic.test_operations import (
    _autogenerate,
    _metadata_ddl,
    _offline,
    _statements,
    assert_same_ddl,
)

DIALECTS = ("postgresql", "mysql", "mariadb", "oracle", "sqlite")
CONSUMERS = "inbox_consumers"


def _length(table: sa.Table) -> int:
    return int(table.c.consumer_name.type.length)  # type: ignore[attr-defined]


def _only_consumers(build: Any) -> Any:
    """A MetaData builder keeping only the consumers table that ``build`` defines."""

    def built(metadata: sa.MetaData) -> None:
        build(metadata)
        for table in [t for t in metadata.tables.values() if t.name != CONSUMERS]:
            metadata.remove(table)

    return built


# -- the operations ------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
def test_create_emits_the_ddl_of_the_table_an_inbox_defines(dialect: str) -> None:
    operations, buffer = _offline(dialect)
    operations.create_inbox_consumers_table(consumer_name_length=300)  # type: ignore[attr-defined]
    expected = _metadata_ddl(dialect, _only_consumers(lambda m: Inbox(m, message_id_length=300)))
    assert_same_ddl(_statements(buffer.getvalue()), expected)
    assert expected == _metadata_ddl(
        dialect, lambda m: consumers_table(m, consumer_name_length=300)
    )
    assert expected[0].startswith(f"CREATE TABLE {CONSUMERS}")
    assert "PRIMARY KEY (inbox_table, consumer_name)" in expected[0]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_drop_emits_the_ddl_of_drop_all(dialect: str) -> None:
    operations, buffer = _offline(dialect)
    operations.drop_inbox_consumers_table()  # type: ignore[attr-defined]
    expected = _metadata_ddl(dialect, _only_consumers(Inbox), drop=True)
    assert _statements(buffer.getvalue()) == expected == [f"DROP TABLE {CONSUMERS}"]


def test_typed_functions_emit_what_the_registered_operations_emit() -> None:
    registered, registered_buffer = _offline("postgresql")
    registered.create_inbox_consumers_table("owners", schema="a", consumer_name_length=9)  # type: ignore[attr-defined]
    registered.drop_inbox_consumers_table("owners", schema="a", consumer_name_length=9)  # type: ignore[attr-defined]
    typed, typed_buffer = _offline("postgresql")
    create_inbox_consumers_table(typed, "owners", schema="a", consumer_name_length=9)
    drop_inbox_consumers_table(typed, "owners", schema="a", consumer_name_length=9)
    assert typed_buffer.getvalue() == registered_buffer.getvalue()
    assert "CREATE TABLE a.owners" in typed_buffer.getvalue()


def test_render_and_reverse() -> None:
    context = AutogenContext(MigrationContext.configure(dialect_name="sqlite"), autogenerate=False)
    create = CreateInboxConsumersTableOp(CONSUMERS, schema="audit", consumer_name_length=300)
    assert render_op_text(context, create) == (
        f"op.create_inbox_consumers_table('{CONSUMERS}', schema='audit', consumer_name_length=300)"
    )
    assert render_op_text(context, create.reverse()) == (
        f"op.drop_inbox_consumers_table('{CONSUMERS}', schema='audit', consumer_name_length=300)"
    )
    assert create.reverse() == DropInboxConsumersTableOp(
        CONSUMERS, schema="audit", consumer_name_length=300
    )
    assert create.reverse().reverse() == create
    assert context.imports == {"import sa_inbox.alembic"}


@pytest.mark.parametrize(
    "options",
    [{"consumer_name_length": 0}, {"consumer_name_length": "64"}, {"table_name": ""}],
)
def test_bad_options_raise_a_typed_error_before_any_sql(options: dict[str, Any]) -> None:
    operations, buffer = _offline("postgresql")
    with pytest.raises(InvalidArgument):
        operations.create_inbox_consumers_table(**options)  # type: ignore[attr-defined]
    with pytest.raises(InvalidArgument):
        create_inbox_consumers_table(operations, **options)
    assert buffer.getvalue() == ""


# -- one table per MetaData and schema -------------------------------------------------------


def test_the_table_is_shared_at_least_255_long_and_widened_to_the_longest() -> None:
    metadata = sa.MetaData()
    inbox = Inbox(metadata, message_id_length=64)
    assert inbox.consumers is not None and _length(inbox.consumers.table) == 255
    store = InboxStore(metadata, message_id_length=400)
    assert store.consumers is not None and store.consumers.table is inbox.consumers.table
    assert _length(inbox.consumers.table) == 400  # widened: the store's names fit
    Inbox(metadata, table_name="refunds", message_id_length=100)  # shorter: unchanged
    assert _length(inbox.consumers.table) == 400
    assert inbox.consumers.table.info["sa_inbox"]["options"] == {"consumer_name_length": 400}
    # the table name column holds any identifier, whatever message_id_length is
    short = Inbox(
        sa.MetaData(), table_name="a_rather_long_processed_messages_name", message_id_length=8
    )
    assert short.consumers is not None
    assert short.consumers.table.c.inbox_table.type.length == 128  # type: ignore[attr-defined]


def test_each_schema_has_its_own_table() -> None:
    metadata = sa.MetaData()
    plain, audit = Inbox(metadata), Inbox(metadata, schema="audit")
    assert plain.consumers is not None and audit.consumers is not None
    assert plain.consumers.table.fullname == CONSUMERS
    assert audit.consumers.table.fullname == f"audit.{CONSUMERS}"


def test_consumers_false_defines_no_table() -> None:
    metadata = sa.MetaData()
    assert Inbox(metadata, consumers=False).consumers is None
    assert InboxStore(metadata, consumers=False).consumers is None
    assert CONSUMERS not in metadata.tables


@pytest.mark.parametrize("build", [Inbox, InboxStore], ids=["Inbox", "InboxStore"])
def test_a_consumers_flag_that_is_not_a_bool_is_refused_before_any_table(build: Any) -> None:
    metadata = sa.MetaData()
    with pytest.raises(InvalidTable, match="consumers must be True or False, not 'no'"):
        build(metadata, consumers="no")
    assert metadata.tables == {}


def test_an_application_table_of_that_name_is_refused() -> None:
    metadata = sa.MetaData()
    sa.Table(CONSUMERS, metadata, sa.Column("id", sa.Integer, primary_key=True))
    with pytest.raises(InvalidTable, match="not sa-inbox's consumers table") as info:
        Inbox(metadata)
    assert isinstance(info.value, ConfigurationError)
    assert Inbox(sa.MetaData(), consumers=False).consumers is None  # the way out it names


# -- autogenerate ----------------------------------------------------------------------------


def _database(*builds: Any) -> sa.Engine:
    engine = sa.create_engine("sqlite://", poolclass=sa.pool.StaticPool)
    metadata = sa.MetaData()
    for build in builds:
        build(metadata)
    metadata.create_all(engine)
    return engine


def test_an_existing_inbox_gains_only_the_consumers_table() -> None:
    """A database migrated before the consumers table existed: only it is created."""
    engine = _database(lambda m: Inbox(m, consumers=False))
    metadata = sa.MetaData()
    Inbox(metadata)
    _, upgrade_ops = _autogenerate(metadata, engine)
    assert upgrade_ops.ops == [CreateInboxConsumersTableOp(CONSUMERS, consumer_name_length=255)]


def test_a_removed_consumers_table_renders_its_drop_with_what_it_loses(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = _database(lambda m: consumers_table(m, consumer_name_length=300))
    with caplog.at_level(logging.WARNING, "sa_inbox.alembic"):
        _, upgrade_ops = _autogenerate(sa.MetaData(), engine)
    (drop,) = upgrade_ops.ops
    assert drop == DropInboxConsumersTableOp(CONSUMERS, consumer_name_length=300)  # read back
    assert isinstance(drop, DropInboxConsumersTableOp)
    assert drop.notes[0].startswith(
        f"Drops {CONSUMERS} and the handler that owns each consumer name"
    )
    assert [record.levelno for record in caplog.records] == [logging.WARNING]


def test_the_consumers_table_is_never_paired_with_an_inbox_table() -> None:
    """A consumers table that went while an inbox table came (and the reverse): each is its
    own kind, so neither becomes a rename of the other nor a refusal because of it."""
    engine = _database(lambda m: consumers_table(m))
    metadata = sa.MetaData()
    Inbox(metadata, consumers=False)
    _, upgrade_ops = _autogenerate(metadata, engine)
    kinds = sorted(type(op).__name__ for op in upgrade_ops.ops)
    assert kinds == ["CreateProcessedMessagesTableOp", "DropInboxConsumersTableOp"]

    engine = _database(lambda m: Inbox(m, consumers=False))
    metadata = sa.MetaData()
    consumers_table(metadata)
    _, upgrade_ops = _autogenerate(metadata, engine)
    kinds = sorted(type(op).__name__ for op in upgrade_ops.ops)
    assert kinds == ["CreateInboxConsumersTableOp", "DropProcessedMessagesTableOp"]


def test_a_consumers_table_moved_to_another_schema_is_refused() -> None:
    went = DropInboxConsumersTableOp(CONSUMERS, schema="old", consumer_name_length=255)
    came = CreateInboxConsumersTableOp(CONSUMERS, schema="new", consumer_name_length=255)
    inbox = CreateProcessedMessagesTableOp("inbox_processed_messages", message_id_length=255)
    result = resolve_drops([came, inbox, went])
    refusal = result[0]
    assert isinstance(refusal, RefuseInboxTableDropOp)
    assert result[1:] == [came, inbox]
    assert "sa-inbox does not rename a consumers table" in refusal.reason
    assert "the handler that owns each consumer name" in refusal.reason
    assert (
        f"op.drop_inbox_consumers_table('{CONSUMERS}', consumer_name_length=255, schema='old')"
        in refusal.reason
    )


# -- [sa_inbox] settings and sa-inbox alembic revision ---------------------------------------


def _config(tmp_path: Path, section: str) -> alembic.config.Config:
    ini = tmp_path / "alembic.ini"
    ini.write_text(f"[alembic]\nscript_location = migrations\n\n[sa_inbox]\n{section}\n")
    return alembic.config.Config(str(ini))


def _models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text(
        "import sqlalchemy as sa\nfrom sa_inbox import Inbox\nfrom sa_inbox.store import "
        f"InboxStore\nmetadata = sa.MetaData()\n{body}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"target_metadata = {name}:metadata"


def test_models_without_consumers_get_none_from_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _models(tmp_path, monkeypatch, "cons_models_off", "Inbox(metadata, consumers=False)")
    assert CONSUMERS not in target_metadata(_config(tmp_path, spec)).tables


def test_a_store_added_from_the_settings_shares_the_models_consumers_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _models(tmp_path, monkeypatch, "cons_models_on", "Inbox(metadata)")
    metadata = target_metadata(
        _config(tmp_path, f"{spec}\ntables = store\nmessage_id_length = 300")
    )
    assert sorted(metadata.tables) == [CONSUMERS, "inbox_processed_messages", "inbox_store"]
    assert _length(metadata.tables[CONSUMERS]) == 300  # widened for the store's names


def test_a_settings_table_next_to_an_application_table_of_that_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = f"sa.Table({CONSUMERS!r}, metadata, sa.Column('id', sa.Integer, primary_key=True))"
    spec = _models(tmp_path, monkeypatch, "cons_models_clash", body)
    with pytest.raises(InvalidArgument, match=r"\[sa_inbox\]: .*not sa-inbox's consumers"):
        target_metadata(_config(tmp_path, spec))


def test_inbox_operations_create_the_consumers_table() -> None:
    default = inbox_operations()
    assert default[-1] == CreateInboxConsumersTableOp(CONSUMERS, consumer_name_length=255)
    assert [type(op) for op in default] == [
        CreateProcessedMessagesTableOp,
        CreateInboxConsumersTableOp,
    ]
    assert inbox_operations(schema="a", message_id_length=400, store=True)[-1] == (
        CreateInboxConsumersTableOp(CONSUMERS, schema="a", consumer_name_length=400)
    )
    assert inbox_operations(processed_messages=False) == [
        CreateInboxConsumersTableOp(CONSUMERS, consumer_name_length=255)
    ]
    assert [type(op) for op in inbox_operations(consumers=False)] == [
        CreateProcessedMessagesTableOp
    ]
    with pytest.raises(InvalidArgument):
        inbox_operations(processed_messages=False, consumers=True, message_id_length=0)


def _plain_project(tmp_path: Path) -> Project:
    project = Project(tmp_path, f"sqlite:///{tmp_path}/app.db")
    command.init(alembic.config.Config(str(project.ini)), str(project.migrations))
    return project


@pytest.mark.parametrize(
    ("flags", "created"),
    [
        ([], ["create_inbox_table", "create_inbox_consumers_table"]),
        (["--no-consumers"], ["create_inbox_table"]),
        (["--consumers-only"], ["create_inbox_consumers_table"]),
        (["--store-only"], ["create_inbox_store_table"]),
        (
            ["--store"],
            ["create_inbox_table", "create_inbox_store_table", "create_inbox_consumers_table"],
        ),
    ],
)
def test_revision_flags_choose_the_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], created: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    project = _plain_project(tmp_path)
    result = CliRunner().invoke(main, ["alembic", "revision", *flags])
    assert result.exit_code == 0, result.output
    (written,) = project.revision_files()
    upgrade = written.read_text().split("def downgrade()")[0]
    assert re.findall(r"op\.(\w+)\(", upgrade) == created


@pytest.mark.parametrize(
    "flags",
    [
        ["--consumers-only", "--store-only"],
        ["--consumers-only", "--no-consumers"],
        ["--consumers-only", "--store"],
    ],
)
def test_revision_flags_that_contradict_are_a_usage_error_and_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    project = _plain_project(tmp_path)
    result = CliRunner().invoke(main, ["alembic", "revision", *flags])
    assert result.exit_code == 2
    assert "ask for different tables: give one" in result.output
    assert project.revision_files() == []


def test_revision_store_only_with_no_consumers_is_the_store_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    project = _plain_project(tmp_path)
    result = CliRunner().invoke(main, ["alembic", "revision", "--store-only", "--no-consumers"])
    assert result.exit_code == 0, result.output
    (written,) = project.revision_files()
    assert re.findall(r"op\.(create\w+)\(", written.read_text()) == ["create_inbox_store_table"]
