"""The sa-inbox tables that Alembic knows how to create: one :class:`InboxTableKind` each.

A kind names a table factory (such as :func:`sa_inbox.schema.processed_messages_table`) and
the two Alembic operations that create and drop its table. The factory marks every table it
builds with ``table.info["sa_inbox"] = {"kind": ..., "options": {...}}``; autogenerate reads
that mark to render ``op.create_inbox_table(...)`` instead of a raw ``op.create_table(...)``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import CreateIndex, CreateTable

from ..exc import InvalidArgument

__all__ = [
    "INFO_KEY",
    "InboxTableKind",
    "build_table",
    "kind_for",
    "marker",
    "matches_factory",
    "register_kind",
]

#: Key of :attr:`sqlalchemy.schema.Table.info` under which the factories mark their tables.
INFO_KEY = "sa_inbox"

TableFactory = Callable[..., sa.Table]


@dataclass(frozen=True)
class InboxTableKind:
    """One kind of sa-inbox table.

    :param name: the ``kind`` stored in the table's mark, e.g. ``"processed_messages"``.
    :param factory: ``factory(metadata, *, table_name, schema, **options) -> Table``.
    :param create_op: name of the Alembic operation that creates the table.
    :param drop_op: name of the Alembic operation that drops it.
    :param dialects: the dialect names the table exists on, or ``None`` for all.
    :param length_column: the key column whose length the factory option
        ``length_option`` sets (read back from a reflected table).
    :param length_option: the factory's option for that length.
    """

    name: str
    factory: TableFactory
    create_op: str
    drop_op: str
    dialects: frozenset[str] | None = None
    length_column: str = "message_id"
    length_option: str = "message_id_length"

    def options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """An operation's factory options: ``given`` over the factory's defaults, so that the
        operation records them all (its reverse and its rendering repeat them).

        :raises TypeError: for an option the factory does not take, as a call would.
        """
        inspect.signature(self.factory).bind_partial(**given)  # TypeError for an unknown one
        defaults = {k: v for k, v in self.defaults.items() if k != "table_name"}
        return defaults | dict(given)

    @property
    def defaults(self) -> dict[str, Any]:
        """The factory's keyword options and their defaults, ``table_name`` included
        (``schema`` is every table's)."""
        parameters = inspect.signature(self.factory).parameters.values()
        return {
            p.name: p.default for p in parameters if p.kind is p.KEYWORD_ONLY and p.name != "schema"
        }


_KINDS: dict[str, InboxTableKind] = {}


def register_kind(kind: InboxTableKind) -> InboxTableKind:
    """Add ``kind`` to the registry read by autogenerate and return it.

    :raises InvalidArgument: if another kind of the same name is registered.
    """
    existing = _KINDS.get(kind.name)
    if existing is not None and existing != kind:
        raise InvalidArgument(f"an sa-inbox table kind named {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def kind_for(name: str) -> InboxTableKind | None:
    """The registered kind called ``name``, or ``None``."""
    return _KINDS.get(name)


def marker(info: Mapping[str, Any]) -> tuple[InboxTableKind, dict[str, Any]] | None:
    """The kind and factory options marked in a table's ``info``, or ``None`` if unmarked."""
    mark = info.get(INFO_KEY)
    if not isinstance(mark, Mapping):
        return None
    kind = kind_for(str(mark.get("kind")))
    options = mark.get("options", {})
    if kind is None or not isinstance(options, Mapping):
        return None
    return kind, dict(options)


def build_table(
    kind: InboxTableKind,
    table_name: str,
    schema: str | None,
    options: Mapping[str, Any],
    metadata: sa.MetaData | None = None,
) -> sa.Table:
    """Build ``kind``'s table on ``metadata`` (a fresh one by default) with the factory.

    :raises InvalidArgument: if the factory rejects the name or the options.
    """
    if not isinstance(table_name, str) or not table_name:
        raise InvalidArgument(f"table_name must be a non-empty str, not {table_name!r}")
    if schema is not None and (not isinstance(schema, str) or not schema):
        raise InvalidArgument(f"schema must be None or a non-empty str, not {schema!r}")
    try:
        return kind.factory(
            sa.MetaData() if metadata is None else metadata,
            table_name=table_name,
            schema=schema,
            **options,
        )
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{kind.create_op}({table_name!r}): {exc}") from exc


def _ddl(table: sa.Table, dialect: Dialect) -> list[str]:
    statements = [CreateTable(table)] + [CreateIndex(index) for index in table.indexes]
    return sorted(str(statement.compile(dialect=dialect)).strip() for statement in statements)


def matches_factory(
    table: sa.Table, kind: InboxTableKind, options: Mapping[str, Any], dialect: Dialect
) -> bool:
    """True if ``table`` compiles, on ``dialect``, to exactly the DDL of a fresh factory table.

    A marked table that its owner changed afterwards (a column appended) does not match,
    and autogenerate then leaves Alembic's own ``create_table`` for it.
    """
    try:
        fresh = build_table(kind, table.name, table.schema, options)
    except InvalidArgument:
        return False
    return _ddl(table, dialect) == _ddl(fresh, dialect)
