"""Oracle: ``MERGE INTO … USING (SELECT … FROM dual) … WHEN NOT MATCHED THEN INSERT``.

Oracle has no ``INSERT … ON CONFLICT``. ``MERGE`` with only a ``WHEN NOT MATCHED`` branch
inserts the row when no row with the same key is visible to the statement, and reports
``rowcount`` 1 (inserted) or 0 (matched). Two concurrent MERGEs can both take the not-matched
branch; the loser then fails with ORA-00001 on the primary key (Oracle Database SQL Language
Reference, "MERGE"). ORA-00001 on *the inbox's own primary key* (matched by constraint name)
is a duplicate; ORA-00001 on any other constraint is re-raised. Oracle rolls back only the
failed statement, so the caller's transaction stays usable.

``MERGE`` has no ``RETURNING`` for the rows it inserts, so a batch is one MERGE per id.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping
from sqlalchemy.exc import CompileError, DBAPIError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement, ColumnElement, Executable

from .._compat import cache_key
from ..exc import InvalidTable
from ..schema import insert_columns
from .backend import Backend
from .base import ClaimDialect, Row, driver_error
from .driver_sql import DriverSQL
from .purge import Batch, RowLockingPurge
from .store_claim import Limit, StoreClaimDialect

__all__ = ["BACKEND", "MergeInsertOrSkip", "OracleClaim", "OraclePurge", "OracleStoreClaim"]

#: ORA-08177 can't serialize access, ORA-00060 deadlock detected.
TRANSIENT_ERRORS = frozenset({8177, 60})
ORA_UNIQUE_VIOLATED = 1
#: ORA-00942 table or view does not exist, ORA-00904 invalid identifier (Oracle Database
#: Error Messages).
MISSING_TABLE_ERRORS = frozenset({942, 904})
#: The database cannot serve now (Oracle Database Error Messages): ORA-03113 end-of-file on
#: communication channel, ORA-03114 not connected, ORA-03135 connection lost contact,
#: ORA-12514 / ORA-12541 no service / no listener, ORA-12537 connection closed, ORA-01033
#: initialization or shutdown in progress, ORA-01034 not available, ORA-01089 immediate
#: shutdown in progress, ORA-16000 database open for read-only access (a standby).
UNAVAILABLE_ERRORS = frozenset({3113, 3114, 3135, 12514, 12541, 12537, 1033, 1034, 1089, 16000})
_CONSTRAINT = re.compile(r"unique constraint \((?:[^.()]+\.)?([^.()]+)\) violated", re.IGNORECASE)


@cache_key(table="clauseelement", columns="string_list")
class MergeInsertOrSkip(Executable, ClauseElement):
    """``MERGE INTO table USING (SELECT :col AS col, … FROM dual) s ON (key match)
    WHEN NOT MATCHED THEN INSERT``: one row, its values bound by column name at execution.

    :param table: the processed-messages table; its primary key columns form the ON clause.
    :param columns: the column names to insert, ``message_id`` and ``consumer_name`` first.
    :raises InvalidTable: if ``columns`` lacks a primary-key column of ``table``.

    Compiles on Oracle only; other dialects raise :class:`~sqlalchemy.exc.CompileError`.
    ``str(statement)`` renders the Oracle form (:attr:`stringify_dialect`).
    """

    #: The dialect ``str()`` compiles with when no dialect is given (SQLAlchemy's
    #: ``ClauseElement.stringify_dialect``, as its own ``postgresql.Insert`` sets it).
    stringify_dialect = "oracle"

    def __init__(self, table: sa.Table, columns: Sequence[str]) -> None:
        missing = [c.name for c in dedup_key(table).columns if c.name not in columns]
        if missing:
            raise InvalidTable(f"MERGE needs the primary key columns {missing}")
        self.table = table
        self.columns = list(columns)


@compiles(MergeInsertOrSkip)
def _merge_default(element: MergeInsertOrSkip, compiler: SQLCompiler, **kw: Any) -> str:
    raise CompileError(f"MergeInsertOrSkip compiles on Oracle only, not {compiler.dialect.name}")


@compiles(MergeInsertOrSkip, "oracle")
def _merge_oracle(element: MergeInsertOrSkip, compiler: SQLCompiler, **kw: Any) -> str:
    table = element.table
    preparer = compiler.preparer
    quoted = {name: preparer.quote(name) for name in element.columns}
    source = ", ".join(
        f"{compiler.process(sa.bindparam(name, type_=table.c[name].type), **kw)} AS {quoted[name]}"
        for name in element.columns
    )
    on = " AND ".join(f"t.{quoted[c.name]} = s.{quoted[c.name]}" for c in dedup_key(table).columns)
    insert_columns = ", ".join(quoted[name] for name in element.columns)
    insert_values = ", ".join(f"s.{quoted[name]}" for name in element.columns)
    return (
        f"MERGE INTO {preparer.format_table(table)} t "
        f"USING (SELECT {source} FROM dual) s ON ({on}) "
        f"WHEN NOT MATCHED THEN INSERT ({insert_columns}) VALUES ({insert_values})"
    )


def dedup_key(table: sa.Table) -> sa.PrimaryKeyConstraint | sa.UniqueConstraint:
    """The constraint whose violation is a duplicate: the unique ``(message_id,
    consumer_name)`` of the inbox store, else the table's primary key (processed messages).
    """
    for constraint in table.constraints:
        if isinstance(constraint, sa.UniqueConstraint) and {
            column.name for column in constraint.columns
        } == {"message_id", "consumer_name"}:
            return constraint
    return table.primary_key


def _error_code(exc: DBAPIError) -> int | None:
    args = getattr(driver_error(exc), "args", ())
    code = getattr(args[0], "code", None) if args else None  # oracledb's _Error
    return code if isinstance(code, int) else None


class OracleClaim(ClaimDialect):
    """Claims on Oracle (12c and newer) through :class:`MergeInsertOrSkip`."""

    def insert_or_skip(self, table: sa.Table) -> MergeInsertOrSkip:
        return MergeInsertOrSkip(table, insert_columns(table))

    def supports_returning(self, conn: sa.Connection) -> bool:
        return False

    def claim_one(
        self, conn: sa.Connection, table: sa.Table, statement: Executable | DriverSQL, row: Row
    ) -> bool:
        try:
            return super().claim_one(conn, table, statement, row)
        except sa.exc.IntegrityError as exc:
            return self.duplicate_or_raise(exc, table)

    def is_duplicate(self, exc: DBAPIError, table: sa.Table) -> bool:
        if _error_code(exc) != ORA_UNIQUE_VIOLATED:
            return False
        match = _CONSTRAINT.search(str(driver_error(exc)))
        name = dedup_key(table).name
        return bool(match and isinstance(name, str) and match.group(1).upper() == name.upper())

    def is_transient(self, exc: DBAPIError) -> bool:
        return _error_code(exc) in TRANSIENT_ERRORS

    def is_missing_table(self, exc: DBAPIError) -> bool:
        return _error_code(exc) in MISSING_TABLE_ERRORS

    def is_unavailable(self, exc: DBAPIError) -> bool:
        """:data:`UNAVAILABLE_ERRORS`, and SQLAlchemy's disconnect detection."""
        return super().is_unavailable(exc) or _error_code(exc) in UNAVAILABLE_ERRORS


class OraclePurge(RowLockingPurge):
    """Purge batches on Oracle: ``ROWNUM`` limits a single-table ``DELETE``.

    ::

        DELETE FROM t WHERE t.received_at < :cutoff AND ROWNUM <= :batch_size

    ``ROWNUM`` is assigned as rows pass the ``WHERE`` clause, so the statement stops after
    ``batch_size`` expired rows (Oracle Database SQL Language Reference, "ROWNUM
    Pseudocolumn"). Oracle has no ``SKIP LOCKED`` in a ``DELETE``: a second purger waits on
    the first one's row locks, then restarts its statement on the committed data (write
    consistency) and deletes the next rows, so no row is counted twice. Oracle is proven by
    compile tests here; the live tests run only with ``SA_INBOX_TEST_ORACLE_URL``.
    """

    concurrency = "row locks; a waiting DELETE restarts on the committed data"

    def statement(self, batch: Batch, partitioned: bool) -> Executable:
        rownum: ColumnElement[Any] = sa.literal_column("ROWNUM")
        limit = rownum <= sa.bindparam("batch_size", batch.size)
        return sa.delete(batch.table).where(batch.expired, limit)


class OracleStoreClaim(StoreClaimDialect):
    """The store's claim on Oracle: lock with ``SKIP LOCKED``, fetch only ``n`` rows.

    Oracle refuses ``FETCH FIRST``/``ROWNUM`` limits together with ``FOR UPDATE``
    (ORA-02014), and a ``ROWNUM`` filter would be applied before the locked rows are
    skipped. So the select has no limit; with ``SKIP LOCKED`` Oracle locks rows as they are
    fetched (Oracle Database SQL Language Reference, "SELECT", "for_update_clause"), and
    only ``n`` rows are fetched before the cursor is closed. Rows the driver prefetched past
    ``n`` stay locked until the claim's short transaction commits.
    """

    def lock(self, candidates: sa.Select[Any], limit: Limit) -> sa.Select[Any]:
        return candidates.with_for_update(skip_locked=True)

    def locked_rows(
        self,
        conn: sa.Connection,
        statement: sa.Select[Any],
        limit: int,
        parameters: Mapping[str, Any],
    ) -> Sequence[RowMapping]:
        result = conn.execute(statement, dict(parameters)).mappings()
        try:
            return result.fetchmany(limit)
        finally:
            result.close()


#: This backend's dialects, registered once in :mod:`sa_inbox.dialects` (see ``backend_for``).
BACKEND = Backend(
    names=("oracle",),
    claim=OracleClaim(),
    purge=OraclePurge(),
    store_claim_dialect=OracleStoreClaim(),
)
