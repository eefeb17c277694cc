"""The shape every backend shares for the purge: delete one short batch of expired rows.

:func:`sa_inbox.retention.purge` runs :meth:`PurgeDialect.batch_statement` in its own short
transaction again and again until a batch deletes nothing. A backend module subclasses
:class:`PurgeDialect` and specialises only what differs: the batch statement, how the batch
is protected from a second purger running at the same time (``FOR UPDATE SKIP LOCKED`` in
the batch's select, or an advisory lock around the batch), and the isolation level.

The cut-off is always *inside* the limited part of the statement (``WHERE received_at <
:cutoff … LIMIT n``), so the database stops after ``n`` expired rows and a batch never has
to read past rows that are not expired.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.expression import ColumnElement, Executable

__all__ = ["Batch", "PrimaryKeyPurge", "PurgeDialect", "RowLockingPurge", "primary_key_batch"]


class Batch(NamedTuple):
    """One batch of a purge, as every backend's statement takes it.

    :param table: the table to purge.
    :param expired: the condition of an expired row (it holds the cut-off).
    :param order_by: the column the batch is taken in order of (an indexed time column).
    :param size: rows per batch, at most.
    """

    table: sa.Table
    expired: ColumnElement[bool]
    order_by: ColumnElement[Any]
    size: int

    def oldest(self, *columns: ColumnElement[Any]) -> sa.Select[Any]:
        """``SELECT columns FROM table WHERE expired ORDER BY order_by LIMIT size``."""
        query = sa.select(*columns).select_from(self.table).where(self.expired)
        return query.order_by(self.order_by).limit(self.size)


def primary_key_batch(batch: Batch, *, skip_locked: bool = False) -> sa.Delete:
    """``DELETE FROM t WHERE (primary key) IN (SELECT primary key FROM t WHERE expired
    ORDER BY order_by LIMIT batch_size [FOR UPDATE SKIP LOCKED])``: the rows of the batch
    identified by the table's primary key.

    :param skip_locked: lock the batch's rows and skip rows another transaction has locked
        (PostgreSQL manual, "SELECT", "The Locking Clause").
    """
    keys = list(batch.table.primary_key.columns)
    oldest = batch.oldest(*keys)
    if skip_locked:
        oldest = oldest.with_for_update(skip_locked=True)
    target: ColumnElement[Any] = keys[0] if len(keys) == 1 else sa.tuple_(*keys)
    return sa.delete(batch.table).where(target.in_(oldest))


class PurgeDialect:
    """Batched deletes of expired rows for one database backend.

    The default, used by SQLite and by backends sa-inbox does not know, is the primary-key
    subquery of :func:`primary_key_batch` without row locks.
    """

    #: Isolation level of the purge's own transactions (``None``: keep the engine's).
    isolation_level: ClassVar[str | None] = None
    #: How concurrent purgers are kept apart, for the documentation and the CLI.
    concurrency: ClassVar[str] = "one writer at a time (the database lock)"
    #: Seconds the purge waits between two batches by default, so that other writers
    #: waiting for a database-wide write lock get it (0: row locks, nobody waits for it).
    pause: ClassVar[float] = 0.0

    def delete_batch(
        self,
        table: sa.Table,
        expired: ColumnElement[bool],
        order_by: ColumnElement[Any],
        batch_size: int,
        *,
        partitioned: bool = False,
    ) -> Executable:
        """The statement deleting at most ``batch_size`` rows matching ``expired``
        (:meth:`statement` of their :class:`Batch`).

        :param table: the table to purge.
        :param expired: the condition of an expired row (it holds the cut-off).
        :param order_by: the column the batch is taken in order of (an indexed time column).
        :param batch_size: rows per batch, at most.
        :param partitioned: whether ``table`` is partitioned on the server, as
            :meth:`batch_statement` found it.
        """
        return self.statement(Batch(table, expired, order_by, batch_size), partitioned)

    def statement(self, batch: Batch, partitioned: bool) -> Executable:
        """The backend's batch statement: the one thing a backend must say.

        The default is :func:`primary_key_batch` without row locks. ``partitioned`` is read
        only by a backend whose batch depends on it (PostgreSQL's ``ctid`` repeats across
        partitions).
        """
        return primary_key_batch(batch)

    def is_partitioned(self, conn: Connection, table: sa.Table) -> bool:
        """Whether ``table`` is partitioned on ``conn``'s server, for :meth:`statement`;
        the default looks nowhere and says no."""
        return False

    def batch_statement(
        self,
        conn: Connection,
        table: sa.Table,
        expired: ColumnElement[bool],
        order_by: ColumnElement[Any],
        batch_size: int,
    ) -> Executable:
        """The batch statement for ``table`` as it exists on ``conn``'s database
        (:meth:`is_partitioned` asks the catalog where the statement depends on it)."""
        batch = Batch(table, expired, order_by, batch_size)
        return self.statement(batch, self.is_partitioned(conn, table))

    @contextmanager
    def exclusive(self, conn: Connection, table: sa.Table, timeout: float) -> Iterator[None]:
        """Hold whatever keeps two purgers from deleting the same batch, around one batch.

        Entered outside the batch's transaction and left after its commit. The default
        holds nothing: the batch statement itself keeps purgers apart.

        :param timeout: seconds to wait for another purger's batch.
        """
        yield


class RowLockingPurge(PurgeDialect):
    """The purge on backends with row locks (PostgreSQL, MySQL/MariaDB, Oracle).

    Each batch runs at READ COMMITTED, so it sees the latest committed rows; on InnoDB it also
    takes no gap locks, so inserts of new claims are never blocked by a batch (MySQL manual,
    "15.7.2.1 Transaction Isolation Levels"; PostgreSQL manual, 13.2.1 "Read Committed
    Isolation Level").
    """

    isolation_level: ClassVar[str | None] = "READ COMMITTED"


class PrimaryKeyPurge(RowLockingPurge):
    """Row-locking purge batches taken by primary key with ``FOR UPDATE SKIP LOCKED``
    (:func:`primary_key_batch`), partitioned or not: for PostgreSQL-compatible servers
    without ``ctid`` (CockroachDB, YugabyteDB)."""

    concurrency: ClassVar[str] = "FOR UPDATE SKIP LOCKED in the batch select"

    def statement(self, batch: Batch, partitioned: bool) -> Executable:
        return primary_key_batch(batch, skip_locked=True)
