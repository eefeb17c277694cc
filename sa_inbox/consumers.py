"""One consumer name, one handler: who owns each ``consumer_name``.

A claim is unique per ``(message_id, consumer_name)``, so two handlers that share a consumer
name share its claims: whichever claims an id first applies its change, and the other one
skips the id as a duplicate, acked and never run. The first handler to claim under a name
becomes its owner (a row of the consumers table, written in a short transaction of its own,
once per process and name); another handler claiming under that name is refused with
:class:`~sa_inbox.exc.ConsumerNameTaken` before anything is claimed. A name changes hands
only through :meth:`Consumers.hand_over`.

A handler is known by its qualified name (``module.qualname``; a module run as a script
by the name it would be imported under): the same function in a new release keeps its
name; ``functools.partial`` is known by its function, a callable object by its class. A
handler renamed in a new release takes the name over with :meth:`Consumers.hand_over`.
"""

from __future__ import annotations

import functools
import sys
import weakref
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from .checks import check_metadata
from .dialects import classifier_for
from .exc import ConsumerNameTaken, InvalidTable
from .schema import DEFAULT_MESSAGE_ID_LENGTH, NOW, TIMESTAMP_TZ, key_type
from .validation import positive_int

__all__ = ["DEFAULT_CONSUMERS_TABLE", "Consumers", "consumers_table", "handler_name"]

DEFAULT_CONSUMERS_TABLE = "inbox_consumers"
#: Length of the handler column: a module path and a qualified name.
HANDLER_LENGTH = 512


def consumers_table(
    metadata: sa.MetaData,
    *,
    table_name: str = DEFAULT_CONSUMERS_TABLE,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> sa.Table:
    """The consumers table on ``metadata`` (defined once per MetaData and schema; every
    inbox and store table of it shares it): ``(inbox_table, consumer_name)`` -> ``handler``.
    Alembic creates it with ``op.create_inbox_consumers_table()``.

    :param message_id_length: the length of ``inbox_table`` and ``consumer_name`` (the
        inbox's ``message_id_length``).
    :raises InvalidTable: if ``message_id_length`` is not a positive int.
    """
    check_metadata(metadata, entry="the consumers table")
    length = positive_int(message_id_length, "message_id_length", InvalidTable)
    key = table_name if schema is None else f"{schema}.{table_name}"
    existing = metadata.tables.get(key)
    if existing is not None:
        return existing
    return sa.Table(
        table_name,
        metadata,
        sa.Column("inbox_table", key_type(length), nullable=False),
        sa.Column("consumer_name", key_type(length), nullable=False),
        sa.Column("handler", sa.String(HANDLER_LENGTH), nullable=False),
        sa.Column("registered_at", TIMESTAMP_TZ, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("inbox_table", "consumer_name", name=f"pk_{table_name}"),
        schema=schema,
        comment="sa-inbox: the handler that owns each consumer name",
        info={"sa_inbox": {"kind": "consumers", "options": {"message_id_length": length}}},
    )


def handler_name(handler: object) -> str:
    """The name a handler is known by: ``module.qualname`` of the function (through
    ``functools.partial`` and :func:`functools.wraps`), or of a callable object's class."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    target = handler if hasattr(handler, "__qualname__") else type(handler)
    module = getattr(target, "__module__", None) or "?"
    if module == "__main__":
        module = _main_module_name()
    return f"{module}.{getattr(target, '__qualname__', type(target).__name__)}"


def _main_module_name() -> str:
    """The name of the ``__main__`` module as the one it would have when imported: a
    handler keeps its name whether its module runs as a script, with ``python -m``, or is
    imported."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return str(spec.name)
    path = getattr(main, "__file__", None)
    return Path(path).stem if path else "__main__"


class Consumers:
    """The owners of the consumer names of one inbox (or store) table.

    :param table: the consumers table (:func:`consumers_table`).
    :param inbox_table: the name of the table whose claims the names own.
    """

    def __init__(self, table: sa.Table, inbox_table: str) -> None:
        self.table = table
        self.inbox_table = inbox_table
        # Per engine: the names whose owner this process has seen in the database.
        self._owners: weakref.WeakKeyDictionary[sa.Engine, dict[str, str]] = (
            weakref.WeakKeyDictionary()
        )

    def ensure(self, engine: sa.Engine, consumer_name: str, handler: object) -> None:
        """Make ``handler`` the owner of ``consumer_name`` if the name has none; else check
        that it is the owner. One short transaction of its own the first time per process
        and name; a dictionary lookup after that.

        :raises ConsumerNameTaken: if another handler owns the name.
        :raises MissingTable: if the consumers table does not exist.
        """
        name = handler_name(handler)
        known = self._owners.setdefault(engine, {})
        if known.get(consumer_name) == name:
            return
        with classifier_for(engine.dialect.name).translate_configuration_errors():
            owner = self._owner(engine, consumer_name) or self._register(
                engine, consumer_name, name
            )
        known[consumer_name] = owner
        if owner != name:
            raise ConsumerNameTaken(consumer_name, owner, name)

    def hand_over(self, engine: sa.Engine, consumer_name: str, handler: object) -> str | None:
        """Give ``consumer_name`` to ``handler`` (a new handler taking over a name, with its
        claims). Processes that checked the name before keep their own view until they
        restart: stop the old handler's consumers first.

        :returns: the previous owner's name, or None if the name had none.
        """
        name = handler_name(handler)
        previous = self._owner(engine, consumer_name)
        with engine.begin() as conn:
            if previous is None:
                conn.execute(self.table.insert().values(self._row(consumer_name, name)))
            else:
                conn.execute(
                    self.table.update().where(*self._key(consumer_name)).values(handler=name)
                )
        self._owners.setdefault(engine, {})[consumer_name] = name
        return previous

    def owner(self, engine: sa.Engine, consumer_name: str) -> str | None:
        """The handler that owns ``consumer_name``, or None."""
        return self._owner(engine, consumer_name)

    # -- helpers ------------------------------------------------------------------------

    def _key(self, consumer_name: str) -> tuple[sa.ColumnElement[bool], ...]:
        t = self.table
        return (t.c.inbox_table == self.inbox_table, t.c.consumer_name == consumer_name)

    def _row(self, consumer_name: str, name: str) -> dict[str, str]:
        return {"inbox_table": self.inbox_table, "consumer_name": consumer_name, "handler": name}

    def _owner(self, engine: sa.Engine, consumer_name: str) -> str | None:
        query = sa.select(self.table.c.handler).where(*self._key(consumer_name))
        with engine.begin() as conn:
            owner = conn.execute(query).scalar_one_or_none()
        return None if owner is None else str(owner)

    def _register(self, engine: sa.Engine, consumer_name: str, name: str) -> str:
        """Insert the owner row; the winner's name if another process inserted first."""
        try:
            with engine.begin() as conn:
                conn.execute(self.table.insert().values(self._row(consumer_name, name)))
        except IntegrityError:
            owner = self._owner(engine, consumer_name)
            if owner is None:  # not a duplicate key: the row is not there
                raise
            return owner
        return name
