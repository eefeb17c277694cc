"""PostgreSQL: ``INSERT … ON CONFLICT (message_id, consumer_name) DO NOTHING``.

A conflicting concurrent insert waits for the other transaction and then skips (PostgreSQL
manual, "INSERT", section "ON CONFLICT Clause"). Under REPEATABLE READ or SERIALIZABLE, a
conflict with a row committed after the snapshot raises SQLSTATE 40001 instead (manual 13.2.2,
"Repeatable Read Isolation Level"), which sa-inbox reports as
:class:`~sa_inbox.exc.TransientClaimError`.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.expression import ColumnElement, Executable

from ..schema import CLAIM_COLUMNS
from .backend import Backend
from .base import (
    EXECUTION_OPTIONS,
    DriverState,
    OnConflictDoNothingClaim,
    Row,
    driver_error,
    sqlstate_of,
)
from .driver_sql import DriverSQL
from .purge import Batch, RowLockingPurge, primary_key_batch
from .store_claim import CandidateQuery, Limit, StoreClaimDialect, require_version
from .with_begin import OPTION, Carried, WithBegin

__all__ = ["BACKEND", "PostgreSQLClaim", "PostgreSQLPurge", "PostgreSQLStoreClaim"]

#: serialization_failure, deadlock_detected, and lock_not_available (raised past the
#: session's ``lock_timeout``, as MySQL's 1205 past ``innodb_lock_wait_timeout``; PostgreSQL
#: manual, Appendix A, "Error Codes", and 20.11 "lock_timeout").
TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03"})
UNIQUE_VIOLATION = "23505"
#: undefined_table, undefined_column (PostgreSQL manual, Appendix A, "Error Codes").
MISSING_TABLE_SQLSTATES = frozenset({"42P01", "42703"})
#: The server cannot serve now (PostgreSQL manual, Appendix A, "Error Codes"): class 08
#: connection_exception (08000, 08003 connection_does_not_exist, 08006 connection_failure,
#: 08001 sqlclient_unable_to_establish_sqlconnection, 08004
#: sqlserver_rejected_establishment_of_sqlconnection), 57P01 admin_shutdown, 57P02
#: crash_shutdown, 57P03 cannot_connect_now (starting up, in recovery), and 25006
#: read_only_sql_transaction (a standby during a failover: writable again once promoted).
UNAVAILABLE_SQLSTATES = frozenset(
    {"08000", "08003", "08006", "08001", "08004", "57P01", "57P02", "57P03", "25006"}
)


def _constraint_name(exc: DBAPIError) -> str | None:
    """The violated constraint's name: psycopg 3 and psycopg2 put it on the error's ``diag``;
    asyncpg's errors have no ``diag``, and SQLAlchemy's asyncpg adapter raises its own error
    caused by asyncpg's, which carries ``constraint_name`` (asyncpg docs, "Exceptions")."""
    orig = driver_error(exc)
    for source in (getattr(orig, "diag", None), orig.__cause__):
        name = getattr(source, "constraint_name", None)
        if isinstance(name, str):
            return name
    return None


class PostgreSQLClaim(OnConflictDoNothingClaim):
    """Claims on PostgreSQL (9.5 and newer) through SQLAlchemy's ``postgresql.insert()``.

    On psycopg 3 (synchronous), a claim that opens its transaction is sent with the
    transaction's ``BEGIN`` in one round trip (:mod:`sa_inbox.dialects.with_begin`).
    """

    insert_factory = postgresql.insert
    #: Whether this backend's claims may go with ``BEGIN`` on psycopg 3.
    sends_with_begin: ClassVar[bool] = True
    #: Whether a batch claim binds each column as one array (:meth:`claim_chunk`).
    claims_with_arrays: ClassVar[bool] = True

    def __init__(self) -> None:
        # table -> row keys -> the array statement (None: the table needs the VALUES form)
        self._arrays: weakref.WeakKeyDictionary[
            sa.Table, dict[tuple[str, ...], Executable | None]
        ] = weakref.WeakKeyDictionary()

    def supports_returning(self, conn: sa.Connection) -> bool:
        return True

    def with_begin(
        self, statement: Executable, dialect: sa.Dialect, keys: Sequence[str]
    ) -> WithBegin | None:
        """``statement`` as :class:`~sa_inbox.dialects.with_begin.WithBegin` on
        SQLAlchemy's synchronous psycopg 3 dialect; ``None`` on any other driver."""
        if not self.sends_with_begin or dialect.is_async:
            return None
        if not isinstance(dialect, PGDialect_psycopg):
            return None
        return WithBegin.build(statement, tuple(keys))

    def claim_one(
        self, conn: sa.Connection, table: sa.Table, statement: Executable | DriverSQL, row: Row
    ) -> bool:
        """As :meth:`ClaimDialect.claim_one
        <sa_inbox.dialects.base.ClaimDialect.claim_one>`; driver SQL with a
        :attr:`~sa_inbox.dialects.driver_sql.DriverSQL.with_begin` form is sent with the
        transaction's ``BEGIN`` where the connection allows it
        (:meth:`~sa_inbox.dialects.with_begin.WithBegin.runs_on`)."""
        with_begin = statement.with_begin if isinstance(statement, DriverSQL) else None
        if with_begin is None:
            return super().claim_one(conn, table, statement, row)
        carried = Carried(with_begin, row)
        try:
            result = statement.execute(conn, row, {**EXECUTION_OPTIONS, OPTION: carried})  # type: ignore[union-attr]
        except DBAPIError as exc:
            self.raise_translated(exc)
            raise
        count = result.rowcount if carried.rowcount is None else carried.rowcount
        return count == 1

    def claim_chunk(
        self, conn: sa.Connection, table: sa.Table, statement: Executable, chunk: Sequence[Row]
    ) -> set[str]:
        """Send a chunk of claim rows as one ``INSERT … SELECT … FROM unnest(:message_id,
        :consumer_name, …) WITH ORDINALITY ORDER BY ordinality ON CONFLICT DO NOTHING
        RETURNING message_id``, each column bound as ONE array (PostgreSQL manual, 9.19
        "Array Functions and Operators", ``unnest`` of several arrays; 7.2.1.4 "Table
        Functions", ``WITH ORDINALITY``): rows are inserted in the chunk's (sorted) order,
        and the statement's text is the same for every chunk, so the driver parses and
        prepares it once. Rows with other columns than
        :data:`~sa_inbox.schema.CLAIM_COLUMNS`, or a table with a Python-side column
        default, keep the multi-row ``VALUES`` form."""
        keys = tuple(chunk[0])
        arrays = self._array_insert(table, keys) if self.claims_with_arrays else None
        if arrays is None:
            return super().claim_chunk(conn, table, statement, chunk)
        params = {key: [row[key] for row in chunk] for key in keys}
        return set(self.execute(conn, arrays, params).scalars().all())

    def _array_insert(self, table: sa.Table, keys: tuple[str, ...]) -> Executable | None:
        """The array form of the insert-or-skip of ``keys`` into ``table`` (built once), or
        None where it does not apply."""
        built = self._arrays.setdefault(table, {})
        if keys not in built:
            plain = set(keys) <= set(CLAIM_COLUMNS) and not any(
                column.default is not None for column in table.c if column.name not in keys
            )
            built[keys] = _unnest_insert(table, keys) if plain else None
        return built[keys]

    def ids_in(self, column: ColumnElement[Any]) -> ColumnElement[bool]:
        return any_of(column)

    def json_text(self, text: sa.BindParameter[str], column: sa.Column[Any]) -> ColumnElement[Any]:
        """``CAST(:text AS JSON)``: PostgreSQL has no assignment cast from ``varchar`` to
        ``json`` (PostgreSQL manual, 10.4 "Value Storage": only an assignment or implicit
        cast is applied), and the cast parses the text once, as inserting the JSON value
        would (manual, 8.14 "JSON Types")."""
        return sa.cast(text, column.type)

    def is_duplicate(self, exc: DBAPIError, table: sa.Table) -> bool:
        if sqlstate_of(exc) != UNIQUE_VIOLATION:
            return False
        return _constraint_name(exc) == table.primary_key.name

    def is_transient(self, exc: DBAPIError) -> bool:
        return sqlstate_of(exc) in TRANSIENT_SQLSTATES

    def is_missing_table(self, exc: DBAPIError) -> bool:
        return sqlstate_of(exc) in MISSING_TABLE_SQLSTATES

    def is_unavailable(self, exc: DBAPIError) -> bool:
        """:data:`UNAVAILABLE_SQLSTATES`, SQLAlchemy's disconnect detection, and a psycopg
        ``OperationalError`` without SQLSTATE: libpq sets ``PG_DIAG_SQLSTATE`` only on
        errors the server sent (PostgreSQL manual, "libpq", ``PQresultErrorField``), so one
        without it is the client's: connection refused, reset, or closed."""
        if super().is_unavailable(exc) or sqlstate_of(exc) in UNAVAILABLE_SQLSTATES:
            return True
        orig = driver_error(exc)
        return (
            type(orig).__name__ == "OperationalError"
            and type(orig).__module__.startswith("psycopg")
            and sqlstate_of(exc) is None
        )

    def read_driver_state(self, driver_connection: Any) -> DriverState | None:
        """psycopg 3 and psycopg2: ``info.transaction_status``, libpq's
        ``PQtransactionStatus`` (PostgreSQL manual, "libpq", "Connection Status
        Functions": ``PQTRANS_ACTIVE`` while a command is in progress, ``INTRANS`` /
        ``INERROR`` in a transaction block, ``UNKNOWN`` for a bad connection). asyncpg:
        ``is_closed()`` and ``is_in_transaction()`` (the status of the server's last
        ReadyForQuery)."""
        info = getattr(driver_connection, "info", None)
        status = getattr(info, "transaction_status", None)
        if isinstance(status, int):
            return _LIBPQ_TRANSACTION_STATUS.get(int(status), DriverState.BROKEN)
        in_transaction = getattr(driver_connection, "is_in_transaction", None)
        is_closed = getattr(driver_connection, "is_closed", None)
        if callable(in_transaction) and callable(is_closed):
            if is_closed():
                return DriverState.BROKEN
            return DriverState.IN_TRANSACTION if in_transaction() else DriverState.IDLE
        return None


#: libpq's ``PGTransactionStatusType`` values (``libpq-fe.h``) as driver states.
_LIBPQ_TRANSACTION_STATUS = {
    0: DriverState.IDLE,  # PQTRANS_IDLE
    1: DriverState.BUSY,  # PQTRANS_ACTIVE
    2: DriverState.IN_TRANSACTION,  # PQTRANS_INTRANS
    3: DriverState.IN_TRANSACTION,  # PQTRANS_INERROR
    4: DriverState.BROKEN,  # PQTRANS_UNKNOWN
}


class PostgreSQLPurge(RowLockingPurge):
    """Purge batches on PostgreSQL, by ``ctid`` with ``FOR UPDATE SKIP LOCKED``.

    A plain table is purged by physical row address::

        DELETE FROM t WHERE ctid = ANY (array((SELECT ctid FROM t WHERE t.received_at < :cutoff
            ORDER BY t.received_at LIMIT :n FOR UPDATE SKIP LOCKED)))

    The inner select walks the ``received_at`` index from the oldest row and stops after
    ``n`` rows; the delete is a TID scan of exactly those rows (no scan of the table, no
    primary-key lookups). A ctid is stable while the row is locked, and ``SKIP LOCKED`` makes
    a second purger take the next rows instead of waiting (PostgreSQL manual, "SELECT", "The
    Locking Clause"). A partitioned table (``relkind = 'p'``) repeats ctids across its
    partitions, so it is purged by primary key instead (:func:`primary_key_batch`, also
    with ``SKIP LOCKED``).
    """

    concurrency = "FOR UPDATE SKIP LOCKED in the batch select"

    def statement(self, batch: Batch, partitioned: bool) -> Executable:
        if partitioned:
            return primary_key_batch(batch, skip_locked=True)
        ctid: ColumnElement[Any] = sa.literal_column("ctid")
        rows = batch.oldest(ctid).with_for_update(skip_locked=True).scalar_subquery()
        return sa.delete(batch.table).where(ctid == sa.any_(sa.func.array(rows)))

    def is_partitioned(self, conn: sa.Connection, table: sa.Table) -> bool:
        return is_partitioned(conn, table)


def any_of(column: ColumnElement[Any]) -> ColumnElement[bool]:
    """``column = ANY(:ids)``, the list bound as ONE array parameter (PostgreSQL manual,
    9.25.3 "ANY/SOME (array)"): the statement's text is the same for every list (so the
    driver's prepared statement is reused), where an expanding ``IN`` renders and sends one
    parameter per id."""
    ids = sa.bindparam("ids", type_=postgresql.ARRAY(column.type))
    return column == sa.any_(ids)


def _unnest_insert(table: sa.Table, keys: tuple[str, ...]) -> Executable:
    """``INSERT INTO table (keys) SELECT … FROM unnest(:key, …) WITH ORDINALITY ORDER BY
    ordinality ON CONFLICT (message_id, consumer_name) DO NOTHING RETURNING message_id``."""
    arrays = [sa.bindparam(key, type_=postgresql.ARRAY(table.c[key].type)) for key in keys]
    rows = sa.func.unnest(*arrays).table_valued(*keys, with_ordinality="ordinality")
    rows = rows.render_derived(name="claims")
    source = sa.select(*(rows.c[key] for key in keys)).order_by(rows.c.ordinality)
    return (
        postgresql.insert(table)
        .from_select(list(keys), source, include_defaults=False)
        .on_conflict_do_nothing(index_elements=[table.c.message_id, table.c.consumer_name])
        .returning(table.c.message_id)
    )


def is_partitioned(conn: sa.Connection, table: sa.Table) -> bool:
    """Whether ``table`` is a partitioned table on ``conn``'s PostgreSQL server."""
    name = conn.dialect.identifier_preparer.format_table(table)
    query = sa.text("SELECT relkind FROM pg_class WHERE oid = to_regclass(:name)")
    return conn.execute(query, {"name": name}).scalar() == "p"


class PostgreSQLStoreClaim(StoreClaimDialect):
    """The store's claim on PostgreSQL 9.5 and newer, in one statement::

        UPDATE inbox_store SET status=…, claimed_at=…, claimed_by=…, attempts=attempts + 1
        WHERE inbox_store.id IN (SELECT candidate.id FROM inbox_store AS candidate
            WHERE <claimable> ORDER BY candidate.received_at, candidate.id
            LIMIT :n FOR UPDATE SKIP LOCKED)
        RETURNING inbox_store.*

    ``SKIP LOCKED`` (PostgreSQL 9.5, manual "SELECT", "The Locking Clause") makes a second
    worker take the next rows instead of waiting for the first one's batch.
    """

    def check_backend(self, conn: sa.Connection) -> None:
        require_version(conn, (9, 5), "PostgreSQL", "FOR UPDATE SKIP LOCKED")

    def ids_in(self, column: ColumnElement[Any]) -> ColumnElement[bool]:
        return any_of(column)

    def claim_statement(
        self,
        table: sa.Table,
        candidates: CandidateQuery,
        limit: Limit,
        values: Mapping[str, Any],
        columns: Sequence[sa.Column[Any]] | None = None,
    ) -> Executable:
        locked = self.lock(candidates(table.alias("candidate")), limit)
        returned = table.c if columns is None else columns
        return (
            sa.update(table).where(table.c.id.in_(locked)).values(dict(values)).returning(*returned)
        )


#: This backend's dialects, registered once in :mod:`sa_inbox.dialects` (see ``backend_for``).
BACKEND = Backend(
    names=("postgresql",),
    claim=PostgreSQLClaim(),
    purge=PostgreSQLPurge(),
    store_claim_dialect=PostgreSQLStoreClaim(),
)
