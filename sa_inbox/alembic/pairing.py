"""Autogenerate: an sa-inbox table that left the models is renamed, or its drop refused.

Alembic compares names only, so a table renamed in the models (``Inbox(metadata,
table_name="order_inbox")``) comes out of autogenerate as a create of the new table and a
drop of the old one: the upgrade would forget every row of the old table (for the
processed-messages table, every claimed message id, so each redelivery within the
retention window would be applied twice). :func:`resolve_drops` runs on the operations of
one autogenerate run, after the sa-inbox create/drop operations replaced Alembic's, and
pairs, per family of tables (processed messages, plain or partitioned; the inbox store; the
outbox; the consumers table, its own family, never paired with an inbox table), the tables
that came with those that went:

- one went and one came, of the same kind, in the same schema, the new one exactly what the
  sa-inbox operation makes: ``op.rename_<kind>(old, new)`` in place of both (its own
  ``message_id_length`` kept; a different one in the models is noted in the revision, for
  the next autogenerate to change);
- otherwise (two candidates, another kind, columns the models changed, a table that looks
  like an sa-inbox one but is not exactly one, a partitioned table): no drop, and first in
  the upgrade ``op.refuse_inbox_table_drop(old, reason=...)``, which stops the upgrade with
  the reason and what to write instead (also written as a comment above it);
- one went and none came: the drop stays (the table left the models), with a comment saying
  what it loses.

Each decision is also logged (logger ``sa_inbox.alembic``: a warning for a refusal or a
lone drop), so ``alembic revision --autogenerate`` shows it on the console.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from alembic.operations import ops

from .operations import PARTITIONED_PROCESSED_MESSAGES, CreateInboxTableOp, DropInboxTableOp
from .refusal import RefuseInboxTableDropOp
from .rename import RENAME_OPERATIONS, RenameInboxTableOp
from .tables import InboxTableKind, marker

__all__ = ["FAMILIES", "resolve_drops"]

logger = logging.getLogger("sa_inbox.alembic")

#: Kinds whose rows mean the same thing (a plain and a partitioned processed-messages table
#: both hold claimed ids): a drop of one with a create of the other loses the same rows.
FAMILIES = {
    "processed_messages": "processed messages",
    PARTITIONED_PROCESSED_MESSAGES.name: "processed messages",
    "store": "inbox store",
    "outbox": "outbox",
    "consumers": "consumer owners",
}
#: What the rows of a family's table are, for messages about losing them.
ROWS = {
    "processed messages": "the message ids claimed in it (every redelivery of them within "
    "the retention window would be applied again)",
    "inbox store": "the messages stored in it and their dedup keys",
    "outbox": "the messages in it not yet sent",
    "consumer owners": "the handler that owns each consumer name (the next handler to claim "
    "under a name would become its owner)",
}
#: Columns that make a table that is not exactly an sa-inbox one look like one.
LOOKALIKE_COLUMNS = frozenset({"message_id", "consumer_name"})
#: With :data:`LOOKALIKE_COLUMNS`, columns that make it look like an inbox store.
STORE_COLUMNS = frozenset({"payload", "status"})


@dataclass
class _Came:
    """A table the models have and the database lacks."""

    family: str
    kind: InboxTableKind
    operation: CreateInboxTableOp | ops.CreateTableOp

    @property
    def exact(self) -> bool:
        """Whether it is what the sa-inbox create operation makes (not altered by its owner)."""
        return isinstance(self.operation, CreateInboxTableOp)


@dataclass
class _Went:
    """A table the database has and the models lack."""

    family: str
    kind: InboxTableKind | None  # None: looks like an sa-inbox table without being one
    operation: DropInboxTableOp | ops.DropTableOp


def _came(operation: ops.MigrateOperation) -> _Came | None:
    if isinstance(operation, CreateInboxTableOp):
        kind = operation.kind
    elif isinstance(operation, ops.CreateTableOp) and (mark := marker(operation.info or {})):
        kind = mark[0]
    else:
        return None
    return _Came(FAMILIES[kind.name], kind, operation) if kind.name in FAMILIES else None


def _went(operation: ops.MigrateOperation) -> _Went | None:
    if isinstance(operation, DropInboxTableOp):
        kind = operation.kind
        return _Went(FAMILIES[kind.name], kind, operation) if kind.name in FAMILIES else None
    if not isinstance(operation, ops.DropTableOp):
        return None
    columns = set(operation.to_table().columns.keys())
    if not columns >= LOOKALIKE_COLUMNS:
        return None
    family = "inbox store" if columns >= STORE_COLUMNS else "processed messages"
    return _Went(family, None, operation)


def _name(operation: Any) -> str:
    schema = operation.schema
    return operation.table_name if schema is None else f"{schema}.{operation.table_name}"


def _call(name: str, *args: object, **options: object) -> str:
    arguments = [repr(arg) for arg in args]
    arguments += [f"{key}={value!r}" for key, value in sorted(options.items()) if value is not None]
    return f"op.{name}({', '.join(arguments)})"


def _drop_call(went: _Went) -> str:
    operation = went.operation
    if isinstance(operation, DropInboxTableOp):
        return _call(
            operation.kind.drop_op,
            operation.table_name,
            schema=operation.schema,
            **operation.options,
        )
    return _call("drop_table", operation.table_name, schema=operation.schema)


def _mismatch(went: _Went, came: _Came) -> str | None:
    """Why ``went`` cannot be renamed to ``came``; ``None`` if it can."""
    old, new = _name(went.operation), _name(came.operation)
    if went.kind is None:
        return (
            f"{old} has message_id and consumer_name columns but is not exactly an sa-inbox "
            f"table, so sa-inbox cannot rename it to {new}"
        )
    if went.kind is not came.kind:
        return f"{old} is a {went.kind.name} table and {new} a {came.kind.name} table"
    if went.kind.name not in RENAME_OPERATIONS:
        return f"sa-inbox does not rename a {went.kind.name} table"
    if not came.exact:
        return (
            f"{new} is not what op.{came.kind.create_op} makes (the models change its "
            f"columns, indexes or constraints), so a rename of {old} would not give it"
        )
    if went.operation.schema != came.operation.schema:
        return f"{old} and {new} are in different schemas; sa-inbox renames within one"
    return None


def _reason(went: _Went, why: str, news: list[_Came]) -> str:
    old = _name(went.operation)
    if isinstance(went.operation, DropInboxTableOp) and _renamable(went, news):
        rename = RENAME_OPERATIONS[went.operation.kind.name]
        call = _call(
            rename.op_name,
            went.operation.table_name,
            "<new name>",
            schema=went.operation.schema,
            **went.operation.options,
        )
        keep = (
            f"If {' or '.join(_name(c.operation) for c in news)} is {old} renamed, replace "
            f"this line and that table's op.{rename.kind.create_op}(...) with {call}"
        )
    else:
        keep = "To keep them, copy them into the new table in this revision, in place of this line"
    return (
        f"refused to drop {old}: {why}. Dropping {old} would lose {ROWS[went.family]}. "
        f"{keep}; to drop it all the same, write {_drop_call(went)} here instead."
    )


def _renamable(went: _Went, news: list[_Came]) -> bool:
    """Whether one of ``news`` is a table ``went`` could be renamed to, were it told which."""
    return any(
        c.exact
        and c.kind is went.kind
        and c.kind.name in RENAME_OPERATIONS
        and c.operation.schema == went.operation.schema
        for c in news
    )


def _refusal(went: _Went, why: str, news: list[_Came]) -> RefuseInboxTableDropOp:
    operation = went.operation
    reason = _reason(went, why, news)
    logger.warning("sa-inbox: %s", reason)
    return RefuseInboxTableDropOp(operation.table_name, schema=operation.schema, reason=reason)


def _rename(went: _Went, came: _Came) -> RenameInboxTableOp:
    dropped, created = went.operation, came.operation
    assert isinstance(dropped, DropInboxTableOp) and isinstance(created, CreateInboxTableOp)
    rename = RENAME_OPERATIONS[dropped.kind.name](
        dropped.table_name, created.table_name, schema=dropped.schema, **dropped.options
    )
    if created.options != dropped.options:
        changes = ", ".join(
            f"{key} {dropped.options.get(key)!r} -> {value!r}"
            for key, value in sorted(created.options.items())
            if dropped.options.get(key) != value
        )
        rename.notes = [
            f"The models also change {changes}: the rename keeps the table's own; run "
            f"autogenerate again after this upgrade to change it."
        ]
    logger.info("sa-inbox: %s renamed to %s", _name(dropped), _name(created))
    return rename


def _lone_drop(went: _Went) -> None:
    operation = went.operation
    if not isinstance(operation, DropInboxTableOp):
        return  # not an sa-inbox table: Alembic's drop_table, as for any other table
    if operation.notes:
        return  # seen by an earlier run (the global hook and the plugin both enabled)
    operation.notes = [
        f"Drops {_name(operation)} and {ROWS[went.family]}: the models no longer have it "
        f"(if they do, they are missing from env.py's target_metadata)."
    ]
    logger.warning("sa-inbox: %s", operation.notes[0])


def resolve_drops(operations: list[ops.MigrateOperation]) -> list[ops.MigrateOperation]:
    """``operations`` with each sa-inbox drop renamed, refused or annotated (see the module).

    Refusals come first, so the upgrade stops before it has run anything. Idempotent: what
    it returns has no drop left to pair.
    """
    came = [new for operation in operations if (new := _came(operation))]
    went = [old for operation in operations if (old := _went(operation))]
    replaced: dict[int, ops.MigrateOperation | None] = {}
    refusals: list[RefuseInboxTableDropOp] = []
    for family in sorted({w.family for w in went}):
        news = [c for c in came if c.family == family]
        olds = [w for w in went if w.family == family]
        if not news:
            for old in olds:
                _lone_drop(old)
            continue
        if len(olds) == 1 and len(news) == 1:
            why = _mismatch(olds[0], news[0])
            if why is None:
                replaced[id(news[0].operation)] = _rename(olds[0], news[0])
                replaced[id(olds[0].operation)] = None
                continue
        else:
            why = (
                f"{', '.join(_name(w.operation) for w in olds)} left the models while "
                f"{', '.join(_name(c.operation) for c in news)} came in: sa-inbox cannot "
                f"tell which, if any, is a renamed one"
            )
        for old in olds:
            refusals.append(_refusal(old, why, news))
            replaced[id(old.operation)] = None
    refused = {(refusal.schema, refusal.table_name) for refusal in refusals}
    kept: list[ops.MigrateOperation] = [*refusals]
    for operation in operations:
        if id(operation) in replaced:
            replacement = replaced[id(operation)]
            if replacement is not None:
                kept.append(replacement)
        elif not _drops_refused_indexes(operation, refused):
            kept.append(operation)
    return kept


def _drops_refused_indexes(
    operation: ops.MigrateOperation, refused: set[tuple[str | None, str]]
) -> bool:
    """Whether ``operation`` drops the indexes of a table whose drop was refused."""
    return (
        isinstance(operation, ops.ModifyTableOps)
        and (operation.schema, operation.table_name) in refused
        and all(isinstance(op, ops.DropIndexOp) for op in operation.ops)
    )
