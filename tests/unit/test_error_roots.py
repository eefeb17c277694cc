"""Every error sa-inbox raises on purpose is an :class:`~sa_inbox.InboxError`.

Each one that used to be a bare ``ValueError`` / ``TypeError`` is triggered here (no
database: they are all raised before any SQL) and keeps that builtin as a second base, so
``except ValueError`` in callers still works. A scan of the source then proves no bare
``raise ValueError(...)`` / ``raise TypeError(...)`` is left.
"""

from __future__ import annotations

import ast
import datetime
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

import sa_inbox
import sa_inbox.exc
from sa_inbox import (
    ConfigurationError,
    Inbox,
    InboxError,
    RetentionPolicy,
    processed_messages_table,
    purge,
)
from sa_inbox.alembic.revision import inbox_operations
from sa_inbox.alembic.tables import InboxTableKind, kind_for, register_kind
from sa_inbox.claim import connection_for
from sa_inbox.dialects import MergeInsertOrSkip, claim_dialect_for
from sa_inbox.dialects.mysql import DeleteOrderedLimit
from sa_inbox.exc import InvalidArgument, InvalidBind, InvalidTable, InvalidTableType
from sa_inbox.retention.partitions import (
    PartitionedInbox,
    create_partition,
    partition_range,
    partitioned_processed_messages_table,
)
from sa_inbox.store.schema import inbox_store_table

DAY = datetime.timedelta(days=1)
POLICY = RetentionPolicy(max_redelivery=DAY, max_replay=DAY)
TABLE = processed_messages_table(sa.MetaData())
MOMENT = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _table(*columns: sa.Column[str], name: str = "t") -> sa.Table:
    return sa.Table(name, sa.MetaData(), *columns)


def _registered_twice() -> None:
    kind = kind_for("processed_messages")
    assert kind is not None
    register_kind(InboxTableKind(kind.name, kind.factory, "other_create", "other_drop"))


def _long_partition_name() -> None:
    table = partitioned_processed_messages_table(sa.MetaData(), table_name="t" * 60)
    create_partition(None, table, MOMENT, DAY)  # type: ignore[arg-type]


CASES: list[tuple[str, Callable[[], object], type[InboxError], type[Exception]]] = [
    ("Inbox() with no MetaData", lambda: Inbox(), InvalidTableType, TypeError),
    (
        "for_table, missing column",
        lambda: Inbox.for_table(_table(sa.Column("message_id", sa.String, primary_key=True))),
        InvalidTable,
        ValueError,
    ),
    (
        "for_table, wrong primary key",
        lambda: Inbox.for_table(
            _table(
                sa.Column("message_id", sa.String, primary_key=True),
                sa.Column("consumer_name", sa.String),
                sa.Column("received_at", sa.DateTime),
            )
        ),
        InvalidTable,
        ValueError,
    ),
    ("connection_for(object)", lambda: connection_for(object(), TABLE), InvalidBind, TypeError),  # type: ignore[arg-type]
    (
        "Inbox.claim(object)",
        lambda: Inbox(sa.MetaData()).claim(object(), "m-1", "billing"),  # type: ignore[arg-type]
        InvalidBind,
        TypeError,
    ),
    (
        "PartitionedInbox.claim(object)",
        lambda: PartitionedInbox(partitioned_processed_messages_table(sa.MetaData())).claim(
            object(),  # type: ignore[arg-type]
            "m-1",
            "billing",
            event_time=MOMENT,
        ),
        InvalidBind,
        TypeError,
    ),
    ("unknown strategy", lambda: claim_dialect_for("", "bogus"), InvalidArgument, ValueError),  # type: ignore[arg-type]
    (
        "Inbox(strategy=bogus)",
        lambda: Inbox(sa.MetaData(), strategy="bogus"),  # type: ignore[arg-type]
        InvalidArgument,
        ValueError,
    ),
    (
        "Oracle MERGE without the key",
        lambda: MergeInsertOrSkip(TABLE, ["message_id"]),
        InvalidTable,
        ValueError,
    ),
    (
        "MySQL DELETE LIMIT 0",
        lambda: DeleteOrderedLimit(TABLE, TABLE.c.received_at < MOMENT, TABLE.c.received_at, 0),
        InvalidArgument,
        ValueError,
    ),
    (
        "processed_messages_table(message_id_length=0)",
        lambda: processed_messages_table(sa.MetaData(), message_id_length=0),
        InvalidTable,
        ValueError,
    ),
    (
        "inbox_store_table(message_id_length=0)",
        lambda: inbox_store_table(sa.MetaData(), message_id_length=0),
        InvalidTable,
        ValueError,
    ),
    (
        "partition interval under a minute",
        lambda: partition_range(MOMENT, datetime.timedelta(seconds=30)),
        InvalidArgument,
        ValueError,
    ),
    (
        "unaligned partition bound",
        lambda: create_partition(
            None,  # type: ignore[arg-type]
            partitioned_processed_messages_table(sa.MetaData()),
            MOMENT + datetime.timedelta(hours=1),
            DAY,
        ),
        InvalidArgument,
        ValueError,
    ),
    ("partition name over 63 characters", _long_partition_name, InvalidTable, ValueError),
    ("table kind registered twice", _registered_twice, InvalidArgument, ValueError),
    (
        "revision with no table",
        lambda: inbox_operations(processed_messages=False, store=False, consumers=False),
        InvalidArgument,
        ValueError,
    ),
    (
        "purge(table=object)",
        lambda: purge(sa.create_engine("sqlite://"), older_than=POLICY, table=object()),  # type: ignore[arg-type]
        InvalidTableType,
        TypeError,
    ),
    (
        "purge(bind=object)",
        lambda: purge(object(), older_than=POLICY),  # type: ignore[arg-type]
        InvalidBind,
        TypeError,
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "builtin"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_error_is_an_inbox_error_and_keeps_its_builtin_base(
    call: Callable[[], object], error: type[InboxError], builtin: type[Exception]
) -> None:
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, InboxError)
    assert isinstance(info.value, builtin)


def test_the_new_classes_are_configuration_errors_exported_from_exc() -> None:
    for cls in (InvalidBind, InvalidTable, InvalidTableType, InvalidArgument):
        assert issubclass(cls, ConfigurationError)
        assert getattr(sa_inbox.exc, cls.__name__) is cls
        assert cls.__name__ in sa_inbox.exc.__all__
    assert issubclass(InvalidTableType, InvalidTable)


#: The demo, benchmark and chaos tools: command-line programs with their own error classes
#: (DemoError, BenchError, ChaosError) rendered by their CLIs rather than library API.
TOOLS = ("bench", "chaos", "demo")


def _bare_raises(path: Path) -> list[str]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(target, ast.Name) and target.id in ("ValueError", "TypeError"):
            found.append((node.lineno, f"{path}:{node.lineno}: raise {target.id}"))
    return [line for _, line in sorted(found)]


def test_no_bare_value_or_type_error_is_raised() -> None:
    package = Path(sa_inbox.__file__).parent
    files = [
        path
        for path in sorted(package.rglob("*.py"))
        if path.relative_to(package).parts[0] not in TOOLS
    ]
    assert len(files) > 30
    bare = [line for path in files for line in _bare_raises(path)]
    assert bare == []


def test_the_scan_finds_a_bare_raise(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f(x):\n    if x:\n        raise ValueError('x')\n    raise TypeError\n")
    assert _bare_raises(sample) == [f"{sample}:3: raise ValueError", f"{sample}:4: raise TypeError"]
