"""The statements on the adapter's tables (:mod:`.schema`), run in the caller's transaction.

Every statement is plain SQLAlchemy Core (one form for every backend). The insert of a new
attempts or offsets row runs in a savepoint and gives way to a row another consumer
inserted meanwhile (its unique key: then the row is updated instead), so the poll's
transaction survives that race.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, SessionTransaction

from ...dialects import claim_dialect_for
from .schema import MAX_ERROR_LENGTH, KafkaTables

__all__ = ["Attempts", "Offsets", "savepoint"]

Position = tuple[str, int]


class Attempts:
    """Failed attempts per ``(consumer_name, message_id)``.

    :param tables: the adapter's tables.
    :param consumer_name: the consumer whose attempts these are.
    """

    def __init__(self, tables: KafkaTables, consumer_name: str) -> None:
        self.table = tables.attempts
        self.consumer_name = consumer_name

    def read(self, session: Session, message_ids: Collection[str]) -> dict[str, int]:
        """The failed attempts recorded for each of ``message_ids`` that has any."""
        if not message_ids:
            return {}
        t = self.table
        conn = session.connection(bind_arguments={"clause": t})
        dialect = claim_dialect_for(conn.dialect.name, "native")
        rows = conn.execute(
            sa.select(t.c.message_id, t.c.attempts).where(
                t.c.consumer_name == self.consumer_name, dialect.ids_in(t.c.message_id)
            ),
            {"ids": sorted(message_ids)},
        )
        return {message_id: int(attempts) for message_id, attempts in rows}

    def record(self, session: Session, message_id: str, attempts: int, error: str) -> None:
        """Set the message's failed attempts to ``attempts`` (its delivery count when it
        failed), with the error's text."""
        values = {"attempts": attempts, "last_error": error[:MAX_ERROR_LENGTH]}
        key = {"consumer_name": self.consumer_name, "message_id": message_id}
        _upsert(session, self.table, key, values, sa.true())

    def clear(self, session: Session, message_ids: Collection[str]) -> None:
        """Forget the attempts of messages now processed."""
        if message_ids:
            t = self.table
            session.execute(
                t.delete().where(
                    t.c.consumer_name == self.consumer_name,
                    t.c.message_id.in_(sorted(message_ids)),
                )
            )


class Offsets:
    """The next offset per ``(consumer_name, topic, partition)`` (``offsets="database"``).

    :param tables: the adapter's tables.
    :param consumer_name: the consumer whose offsets these are.
    """

    def __init__(self, tables: KafkaTables, consumer_name: str) -> None:
        self.table = tables.offsets
        self.consumer_name = consumer_name

    def read(self, session: Session, positions: Collection[Position]) -> dict[Position, int]:
        """The stored next offset of each of ``positions`` that has one."""
        if not positions:
            return {}
        t = self.table
        topics = sorted({topic for topic, _ in positions})
        rows = session.execute(
            sa.select(t.c.topic, t.c.partition, t.c.next_offset).where(
                t.c.consumer_name == self.consumer_name, t.c.topic.in_(topics)
            )
        )
        wanted = set(positions)
        return {
            (topic, int(partition)): int(offset)
            for topic, partition, offset in rows
            if (topic, int(partition)) in wanted
        }

    def advance(self, session: Session, next_offsets: Mapping[Position, int]) -> None:
        """Store each partition's next offset, never moving one back: a consumer that lost
        the partition while its transaction ran (a zombie) cannot undo its successor's
        progress (``UPDATE ... WHERE next_offset < :new``)."""
        t = self.table
        for (topic, partition), offset in sorted(next_offsets.items()):
            key = {"consumer_name": self.consumer_name, "topic": topic, "partition": partition}
            _upsert(session, t, key, {"next_offset": offset}, t.c.next_offset < offset)


def savepoint(session: Session) -> SessionTransaction:
    """``session.begin_nested()``, after the backend's step before a savepoint
    (:meth:`~sa_inbox.dialects.ClaimDialect.before_savepoint`: on SQLite, the driver's
    ``BEGIN``, without which the savepoint would open and commit a transaction of its own)."""
    conn = session.connection()
    claim_dialect_for(conn.dialect.name, "native").before_savepoint(conn)
    return session.begin_nested()


def _upsert(
    session: Session,
    table: sa.Table,
    key: Mapping[str, object],
    values: Mapping[str, object],
    guard: sa.ColumnElement[bool],
) -> None:
    """``UPDATE table SET values WHERE key AND guard``; if no row has ``key``, insert it
    (in a savepoint; a row inserted meanwhile by another transaction is updated instead)."""
    where = sa.and_(*(table.c[name] == value for name, value in key.items()))
    update = (
        table.update().where(where, guard).values(**values, updated_at=sa.func.current_timestamp())
    )
    if session.execute(update).rowcount:  # type: ignore[attr-defined]
        return
    exists = session.execute(sa.select(sa.literal(1)).select_from(table).where(where)).first()
    if exists is not None:
        return  # the guard held it back
    try:
        with savepoint(session):
            session.execute(table.insert().values(**key, **values))
    except IntegrityError:
        session.execute(update)
