"""MySQL and MariaDB: ``INSERT IGNORE``.

``IGNORE`` turns a duplicate key into warning 1062 and a skipped row, but it also downgrades
other errors to warnings: truncation (1265, 1406), NULL into NOT NULL (1048), bad strings
(1366) and foreign-key failures (1452) (MySQL manual, "13.2.6 INSERT Statement", "The Effect
of IGNORE on Statement Execution"). So ids are validated before sending, and after each
statement that the server reports warnings for, ``SHOW WARNINGS`` is read and anything but
1062 raises :class:`~sa_inbox.exc.ClaimWarning`, except where the warning count alone
proves them duplicates (:meth:`MySQLClaim.skips_only_duplicates`: as many warnings as
rows skipped, on a table where only a duplicate key skips a row).

``rowcount`` is the number of rows inserted: SQLAlchemy's MySQL dialects connect with
``CLIENT.FOUND_ROWS``, which changes what ``UPDATE`` and ``ON DUPLICATE KEY UPDATE`` report
(a duplicate counts as 1 there) but not ``INSERT IGNORE``, where a skipped row counts 0.
That is why sa-inbox uses ``INSERT IGNORE`` and never ``ON DUPLICATE KEY UPDATE id = id``.

MariaDB 10.5 and newer accept ``INSERT IGNORE … RETURNING``, so a batch is one statement
returning the new ids; MySQL 8 has no ``RETURNING`` and a batch is one statement per id.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.exc import CompileError, DBAPIError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement, ColumnElement, Executable

from .._compat import adapted_warning_count, cache_key, result_cursor
from ..exc import ClaimWarning, InvalidArgument, PurgeLockTimeout, UnsupportedBackend
from .backend import Backend
from .base import ClaimDialect, DriverState, Row, driver_error
from .driver_sql import DriverSQL
from .purge import Batch, RowLockingPurge
from .store_claim import ByPrimaryKey, StoreClaimDialect, require_version

__all__ = [
    "BACKEND",
    "CausalSelect",
    "DeleteOrderedLimit",
    "MySQLClaim",
    "MySQLPurge",
    "MySQLStoreClaim",
]

#: Deadlock found, lock wait timeout exceeded (MySQL manual, "Server Error Message Reference").
#: On a MariaDB Galera cluster, 1213 is also how a COMMIT that failed certification (a
#: conflicting write-set from another node came first) or a transaction aborted by one
#: (brute-force abort) is reported: "Galera Cluster uses at the cluster-level optimistic
#: concurrency control, which can result in transactions that issue a COMMIT aborting at that
#: stage" (MariaDB KB, "MariaDB Galera Cluster - Known Limitations"). Retrying the whole
#: transaction is the documented remedy for both.
TRANSIENT_ERRORS = frozenset({1213, 1205})
ER_DUP_ENTRY = 1062
#: A table's ``(schema, name)``.
TableName = tuple[str | None, str]
#: ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR (MySQL manual, "Server Error Message Reference").
MISSING_TABLE_ERRORS = frozenset({1146, 1054})
#: The server cannot serve now. Client errors (MySQL manual, "Client Error Message
#: Reference"; PyMySQL raises the same numbers): 2002 CR_CONNECTION_ERROR, 2003
#: CR_CONN_HOST_ERROR (connection refused), 2006 CR_SERVER_GONE_ERROR, 2013
#: CR_SERVER_LOST, 2055 CR_SERVER_LOST_EXTENDED. Server errors ("Server Error Message
#: Reference"): 1053 ER_SERVER_SHUTDOWN, 1077 ER_NORMAL_SHUTDOWN, 1290
#: ER_OPTION_PREVENTS_STATEMENT (``--read-only``: a replica during a failover), 1836
#: ER_READ_ONLY_MODE, 1927 ER_CONNECTION_KILLED (MariaDB), and 1047 on a MariaDB Galera
#: node that is not synced ("WSREP has not yet prepared node for application use", MariaDB
#: KB, "Galera Cluster Status Variables": ``wsrep_ready``).
UNAVAILABLE_ERRORS = frozenset({2002, 2003, 2006, 2013, 2055, 1053, 1077, 1290, 1836, 1927, 1047})


def _error_code(exc: DBAPIError) -> int | None:
    args = getattr(driver_error(exc), "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _error_message(exc: DBAPIError) -> str:
    args: tuple[object, ...] = tuple(getattr(driver_error(exc), "args", ()))
    return str(args[1]) if len(args) > 1 else str(driver_error(exc))


#: The table's one-time check, one round trip: the key columns' collations (``COLUMN``
#: rows), and what besides a duplicate key can make ``INSERT IGNORE`` skip a row: foreign
#: keys, CHECK constraints, partitions, INSERT triggers (see
#: :meth:`MySQLClaim.skips_only_duplicates`).
_TABLE_CHECK = sa.text(
    "SELECT 'COLUMN', COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
    "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table "
    "AND COLUMN_NAME IN ('message_id', 'consumer_name') "
    "UNION ALL SELECT CONSTRAINT_TYPE, CONSTRAINT_NAME, NULL "
    "FROM information_schema.TABLE_CONSTRAINTS "
    "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table "
    "AND CONSTRAINT_TYPE IN ('FOREIGN KEY', 'CHECK') "
    "UNION ALL SELECT 'PARTITION', PARTITION_NAME, NULL FROM information_schema.PARTITIONS "
    "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table "
    "AND PARTITION_NAME IS NOT NULL "
    "UNION ALL SELECT 'TRIGGER', TRIGGER_NAME, NULL FROM information_schema.TRIGGERS "
    "WHERE EVENT_OBJECT_SCHEMA = COALESCE(:schema, DATABASE()) "
    "AND EVENT_OBJECT_TABLE = :table AND EVENT_MANIPULATION = 'INSERT'"
)


def _unsafe_collation(collation: str | None) -> bool:
    """True for a case- or accent-insensitive collation (NULL: a binary type, safe)."""
    return collation is not None and not collation.endswith("_bin") and collation != "binary"


class MySQLClaim(ClaimDialect):
    """Claims on MySQL 5.7+/8 and MariaDB through SQLAlchemy's ``mysql.insert()``.

    A single-row claim whose statement inserted nothing and raised exactly one warning is a
    duplicate, without ``SHOW WARNINGS``, on a table where a duplicate key is the only way
    ``INSERT IGNORE`` skips a row (:meth:`skips_only_duplicates`); a batch likewise when its
    warnings number the rows it skipped (:meth:`claim_chunk`); every other warning count
    still reads ``SHOW WARNINGS``.
    """

    def __init__(self) -> None:
        #: Per engine, the ``(schema, table)`` names that :meth:`check_table` found to skip
        #: rows only on a duplicate key. No lock: a racing first call checks again.
        self._duplicate_only: weakref.WeakKeyDictionary[sa.Engine, set[TableName]] = (
            weakref.WeakKeyDictionary()
        )

    def insert_or_skip(self, table: sa.Table) -> mysql.Insert:
        return mysql.insert(table).prefix_with("IGNORE")

    def causal_select(self, conn: Connection, *entities: Any) -> sa.Select[Any]:
        """On MariaDB, a :class:`CausalSelect`, sent as ``SET STATEMENT wsrep_sync_wait = 1
        FOR SELECT …``: on a Galera node the read first waits until the node has applied
        every write-set the cluster had committed when the read arrived (MariaDB KB,
        "wsrep_sync_wait": bit 1, reads), for this statement only (MariaDB KB, "SET
        STATEMENT"); the session's own setting is left as it was. Without Galera
        (``wsrep_on=OFF``) the setting changes nothing. On MySQL, a plain ``SELECT`` (no
        ``SET STATEMENT``; Group Replication's counterpart, ``group_replication_consistency``,
        is the server's configuration).
        """
        if conn.dialect.is_mariadb:  # type: ignore[attr-defined]
            return CausalSelect(*entities)
        return sa.select(*entities)

    def claim_one(
        self, conn: Connection, table: sa.Table, statement: Executable | DriverSQL, row: Row
    ) -> bool:
        """Run the single-row ``INSERT IGNORE``; True if the row was inserted.

        Warnings: none, the statement's result stands; exactly one with no row inserted,
        on a table that :meth:`skips_only_duplicates`, it is the duplicate key's 1062 (the
        one condition that skipped the row), so no ``SHOW WARNINGS`` is sent; any other
        count (or an unknown one) reads ``SHOW WARNINGS`` and raises on anything but 1062.

        :raises ClaimWarning: for a warning other than duplicate key.
        :raises TransientClaimError, MissingTable: as :meth:`translate_errors`.
        """
        try:
            result = super().execute(conn, statement, row)
        except DBAPIError as exc:
            self.raise_translated(exc)
            raise
        inserted = result.rowcount
        count = self.warning_count(conn, result)
        if count != 0 and not (
            count == 1 and inserted == 0 and self.skips_only_duplicates(conn, table)
        ):
            self._raise_on_warnings(conn)
        return inserted == 1

    def claim_chunk(
        self, conn: Connection, table: sa.Table, statement: Executable, chunk: Sequence[Row]
    ) -> set[str]:
        """MariaDB's ``INSERT IGNORE … RETURNING message_id`` for a batch; the new ids.

        The rule of :meth:`claim_one` for many rows: every skipped row raised at least one
        warning (its reason), so when the warnings number exactly the rows sent but not
        returned, each skipped row raised one and no inserted row raised any; on a table
        that :meth:`skips_only_duplicates` they are all 1062 and ``SHOW WARNINGS`` is not
        sent. Any other count reads it (and raises on anything but 1062).

        :raises ClaimWarning: for a warning other than duplicate key.
        """
        result = super().execute(conn, statement, chunk)
        count = self.warning_count(conn, result)  # before the rows: the cursor's last OK/EOF
        claimed = set(result.scalars().all())
        skipped = len(chunk) - len(claimed)
        if count != 0 and not (count == skipped and self.skips_only_duplicates(conn, table)):
            self._raise_on_warnings(conn)
        return claimed

    def skips_only_duplicates(self, conn: Connection, table: sa.Table) -> bool:
        """Whether :meth:`check_table` found that on ``conn``'s server only a duplicate key
        makes ``INSERT IGNORE`` skip a row of ``table``.

        ``IGNORE`` turns these errors into a warning and a skipped row (MySQL manual,
        "INSERT Statement", "The Effect of IGNORE on Statement Execution"; MariaDB
        "IGNORE"): a duplicate key (1062), a foreign key failure (1452), a row matching no
        partition (1526), and on MySQL 8.0.16+ a CHECK constraint failure (3819). Tried
        on MariaDB 10.11: a CHECK failure stays error 4025 under ``INSERT IGNORE``, and a row
        for no partition is skipped with warning 1526, the same count as a duplicate. Every
        other condition ``IGNORE`` downgrades (truncation 1265/1406, NULL 1048, bad string
        1366) still inserts the row (``rowcount`` 1), and a triggered statement may add
        warnings of its own. So the table qualifies when it has no foreign key, no
        partitions, no INSERT trigger, and, on MySQL, no CHECK constraint.
        """
        names = self._duplicate_only.get(conn.engine)
        return names is not None and (table.schema, table.name) in names

    def execute(
        self, conn: Connection, statement: Any, params: Row | Sequence[Row] | None
    ) -> CursorResult[Any]:
        result = super().execute(conn, statement, params)
        if self.warning_count(conn, result) == 0:
            return result
        if result.returns_rows:
            # Keep the RETURNING rows: SHOW WARNINGS reuses the connection.
            result = result.freeze()()  # type: ignore[assignment]
        self._raise_on_warnings(conn)
        return result

    def warning_count(self, conn: Connection, result: CursorResult[Any]) -> int | None:
        """How many warnings the server reported for ``result``'s statement, as the driver
        tells it without a round trip; ``None`` if it does not (then ``SHOW WARNINGS`` is
        always read).

        PyMySQL and mysql-connector keep the count on the cursor (``warning_count``, from
        the OK packet; MySQL manual, "Client/Server Protocol", "OK_Packet"), mysqlclient on
        the connection (``warning_count()``), aiomysql on its cursor's last result.

        :param conn: the connection the statement ran on.
        :param result: the statement's result, possibly closed already.
        """
        cursor = result_cursor(result)
        count = getattr(cursor, "warning_count", None)
        if isinstance(count, int):
            return count
        # aiomysql's count is behind SQLAlchemy's adapted cursor: without it, every claim
        # read SHOW WARNINGS.
        count = adapted_warning_count(cursor)
        if count is not None:
            return count
        method = getattr(conn.connection.dbapi_connection, "warning_count", None)
        return method() if callable(method) else None

    def _raise_on_warnings(self, conn: Connection) -> None:
        rows = conn.exec_driver_sql("SHOW WARNINGS").all()
        unexpected = [(str(r[0]), int(r[1]), str(r[2])) for r in rows if int(r[1]) != ER_DUP_ENTRY]
        if unexpected:
            raise ClaimWarning(unexpected)

    def check_table(self, conn: Connection, table: sa.Table) -> bool:
        """Refuse key columns whose collation is not binary.

        MySQL's and MariaDB's default collations ignore case, accents and some Unicode
        differences (``utf8mb4_0900_ai_ci``, ``utf8mb4_general_ci``): the primary key would
        then take ``"Pay-1"`` and ``"pay-1"`` for the same message and skip the second as a
        duplicate (MySQL manual, "10.8.5 The binary Collation Compared to _bin Collations").
        Tables made by sa-inbox use ``utf8mb4_bin``; this catches tables made otherwise
        (``Inbox.for_table``, hand-written migrations).

        :raises UnsupportedBackend: naming the columns and the ``ALTER TABLE`` that fixes them.
        """
        found = conn.execute(_TABLE_CHECK, {"schema": table.schema, "table": table.name}).all()
        rows = [(name, collation) for kind, name, collation in found if kind == "COLUMN"]
        unsafe = [(name, collation) for name, collation in rows if _unsafe_collation(collation)]
        if unsafe:
            columns = ", ".join(f"{name} ({collation})" for name, collation in unsafe)
            raise UnsupportedBackend(
                f"table {table.name!r} compares its key columns without case/accent "
                f"sensitivity: {columns}; distinct message ids would be taken for duplicates. "
                "Use a binary collation, e.g. ALTER TABLE … MODIFY message_id VARCHAR(n) "
                "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL (and consumer_name)"
            )
        if rows:
            self._record_skip_reasons(conn, table, {str(kind) for kind, _, _ in found})
        return bool(rows)

    def _record_skip_reasons(self, conn: Connection, table: sa.Table, kinds: set[str]) -> None:
        """Remember whether ``table`` skips rows only on a duplicate key (see
        :meth:`skips_only_duplicates`), from the kinds of rows :data:`_TABLE_CHECK` found."""
        skipping = {"FOREIGN KEY", "PARTITION", "TRIGGER"}
        if not conn.dialect.is_mariadb:  # type: ignore[attr-defined]
            skipping.add("CHECK")  # MySQL 8.0.16+ skips a row failing a CHECK under IGNORE
        names = self._duplicate_only.setdefault(conn.engine, set())
        if kinds & skipping:
            names.discard((table.schema, table.name))
        else:
            names.add((table.schema, table.name))

    def is_duplicate(self, exc: DBAPIError, table: sa.Table) -> bool:
        if _error_code(exc) != ER_DUP_ENTRY:
            return False
        # "Duplicate entry 'a-b' for key 'PRIMARY'" (MariaDB, MySQL 5.7) or
        # "... for key 'table.PRIMARY'" (MySQL 8): the primary key is always PRIMARY.
        message = _error_message(exc)
        return message.endswith("'PRIMARY'") or message.endswith(f"'{table.name}.PRIMARY'")

    def is_transient(self, exc: DBAPIError) -> bool:
        return _error_code(exc) in TRANSIENT_ERRORS

    def is_missing_table(self, exc: DBAPIError) -> bool:
        return _error_code(exc) in MISSING_TABLE_ERRORS

    def is_unavailable(self, exc: DBAPIError) -> bool:
        """:data:`UNAVAILABLE_ERRORS`, and SQLAlchemy's disconnect detection (PyMySQL's
        ``InterfaceError(0, '')`` on a connection the server closed)."""
        return super().is_unavailable(exc) or _error_code(exc) in UNAVAILABLE_ERRORS

    def driver_autocommit(self, dbapi_connection: Any) -> bool:
        """PyMySQL and mysqlclient: ``get_autocommit()``, which reads the
        ``SERVER_STATUS_AUTOCOMMIT`` flag of the server's last reply (no round trip; MySQL
        manual, "Client/Server Protocol", "SERVER_STATUS_flags_enum"), so it also sees a
        ``SET autocommit=1`` sent behind the driver's back."""
        probe = getattr(dbapi_connection, "get_autocommit", None)
        if callable(probe):
            return bool(probe())
        return super().driver_autocommit(dbapi_connection)

    def read_driver_state(self, driver_connection: Any) -> DriverState | None:
        """PyMySQL and aiomysql: the ``SERVER_STATUS_IN_TRANS`` flag of the server's last
        reply, in ``server_status`` (MySQL manual, "Client/Server Protocol",
        "SERVER_STATUS_flags_enum"), and whether the socket is open (PyMySQL's ``open``,
        aiomysql's ``closed``). An unbuffered result left unread is not reported: PyMySQL
        and aiomysql read it to its end before their next command (with a warning)."""
        status = getattr(driver_connection, "server_status", None)
        if not isinstance(status, int):
            return None
        if (
            getattr(driver_connection, "open", True) is False
            or getattr(driver_connection, "closed", False) is True
        ):
            return DriverState.BROKEN
        return DriverState.IN_TRANSACTION if status & SERVER_STATUS_IN_TRANS else DriverState.IDLE


#: The server status flag of an open transaction (MySQL manual, "Client/Server Protocol",
#: "SERVER_STATUS_flags_enum": ``SERVER_STATUS_IN_TRANS``).
SERVER_STATUS_IN_TRANS = 1

#: "Transaction characteristics can't be changed while a transaction is in progress"
#: (MySQL/MariaDB error 1568, ER_CANT_CHANGE_TX_CHARACTERISTICS).
TRANSACTION_IN_PROGRESS = 1568


class CausalSelect(sa.Select[Any]):
    """MariaDB's ``SET STATEMENT wsrep_sync_wait = 1 FOR SELECT …``: a ``SELECT`` that waits
    for the Galera node to catch up with the cluster first (see
    :meth:`MySQLClaim.causal_select`). A :class:`~sqlalchemy.sql.expression.Select` in all
    else (built and cached as one); on any other dialect it compiles as a plain ``SELECT``.
    """

    inherit_cache = True


@compiles(CausalSelect, "mysql")
@compiles(CausalSelect, "mariadb")
def _causal_mariadb(element: CausalSelect, compiler: SQLCompiler, **kw: Any) -> str:
    select = str(compiler.visit_select(element, **kw))  # type: ignore[no-untyped-call]
    if not compiler.dialect.is_mariadb:  # type: ignore[attr-defined]
        return select  # MySQL has no SET STATEMENT
    return f"SET STATEMENT wsrep_sync_wait = 1 FOR {select}"


@cache_key(
    table="clauseelement", whereclause="clauseelement", order_by="clauseelement", limit="plain_obj"
)
class DeleteOrderedLimit(Executable, ClauseElement):
    """MySQL's single-table ``DELETE FROM t WHERE … ORDER BY col LIMIT n``.

    SQLAlchemy's :func:`~sqlalchemy.delete` has no ``ORDER BY`` for MySQL; the single-table
    form is the only one that takes ``ORDER BY`` and ``LIMIT`` (MySQL manual, "DELETE
    Statement"). Compiles on MySQL/MariaDB only; elsewhere it raises
    :class:`~sqlalchemy.exc.CompileError`.

    :param table: the table to delete from.
    :param whereclause: the condition (it holds the cut-off).
    :param order_by: the column rows are deleted in order of.
    :param limit: rows per statement, at most (a positive int, rendered inline).
    :raises InvalidArgument: if ``limit`` is not a positive int.

    ``str(statement)`` renders the MySQL form (:attr:`stringify_dialect`).
    """

    #: The dialect ``str()`` compiles with when no dialect is given (SQLAlchemy's
    #: ``ClauseElement.stringify_dialect``, as its own ``mysql.Insert`` sets it).
    stringify_dialect = "mysql"

    def __init__(
        self,
        table: sa.Table,
        whereclause: ColumnElement[bool],
        order_by: ColumnElement[Any],
        limit: int,
    ) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            raise InvalidArgument(f"limit must be a positive int, not {limit!r}")
        self.table = table
        self.whereclause = whereclause
        self.order_by = order_by
        self.limit = limit


@compiles(DeleteOrderedLimit)
def _delete_default(element: DeleteOrderedLimit, compiler: SQLCompiler, **kw: Any) -> str:
    raise CompileError(f"DeleteOrderedLimit compiles on MySQL only, not {compiler.dialect.name}")


@compiles(DeleteOrderedLimit, "mysql")
@compiles(DeleteOrderedLimit, "mariadb")
def _delete_mysql(element: DeleteOrderedLimit, compiler: SQLCompiler, **kw: Any) -> str:
    return (
        f"DELETE FROM {compiler.preparer.format_table(element.table)} "
        f"WHERE {compiler.process(element.whereclause, **kw)} "
        f"ORDER BY {compiler.process(element.order_by, **kw)} LIMIT {element.limit:d}"
    )


def purge_lock_name(table: sa.Table) -> str:
    """The ``GET_LOCK()`` name of ``table``'s purge: at most 64 characters (MySQL 5.7+)."""
    name = f"sa_inbox.purge.{table.fullname}"
    if len(name) <= 64:
        return name
    return f"sa_inbox.purge.{hashlib.sha256(table.fullname.encode()).hexdigest()[:48]}"


class MySQLPurge(RowLockingPurge):
    """Purge batches on MySQL and MariaDB: one single-table ``DELETE … ORDER BY … LIMIT``.

    ::

        DELETE FROM t WHERE t.received_at < %s ORDER BY t.received_at LIMIT 5000

    InnoDB walks the ``received_at`` index from the oldest row and stops after ``n`` rows.
    MySQL cannot put ``LIMIT`` in an ``IN`` subquery, and a ``DELETE`` has no ``SKIP
    LOCKED``, so two purgers are kept apart by the named lock ``GET_LOCK()`` held around
    each batch (MySQL manual, "Locking Functions"): they take turns, batch by batch, and
    never wait on each other's row locks. Claims never take that lock. The batches run at
    READ COMMITTED, which takes no gap locks, so inserts of new claims are not blocked.
    """

    concurrency = "named lock GET_LOCK() around each batch"

    def statement(self, batch: Batch, partitioned: bool) -> Executable:
        return DeleteOrderedLimit(*batch)

    @contextmanager
    def exclusive(self, conn: Connection, table: sa.Table, timeout: float) -> Iterator[None]:
        name = purge_lock_name(table)
        acquired = conn.execute(sa.select(sa.func.get_lock(name, timeout))).scalar()
        conn.commit()
        if acquired != 1:
            raise PurgeLockTimeout(f"another purger held {name!r} for over {timeout} s")
        try:
            yield
        finally:
            if conn.in_transaction():
                conn.rollback()
            conn.execute(sa.select(sa.func.release_lock(name)))
            conn.commit()


#: First releases with ``FOR UPDATE SKIP LOCKED`` (MySQL 8.0 manual, "Locking Read
#: Concurrency with NOWAIT and SKIP LOCKED"; MariaDB 10.6 release notes, "SKIP LOCKED").
MYSQL_SKIP_LOCKED = (8, 0, 1)
MARIADB_SKIP_LOCKED = (10, 6)


class MySQLStoreClaim(StoreClaimDialect):
    """The store's claim on MySQL ≥ 8.0.1 and MariaDB ≥ 10.6: lock through a plain read, UPDATE.

    ``SELECT STRAIGHT_JOIN … FROM (SELECT id … ORDER BY received_at, id LIMIT 4n) AS
    claim_window JOIN <table> FORCE INDEX (PRIMARY) ON … WHERE <still claimable> LIMIT n FOR
    UPDATE SKIP LOCKED``, then ``UPDATE … WHERE id IN (…)``, in one READ COMMITTED
    transaction: neither backend has ``UPDATE … RETURNING``, and MySQL refuses an ``UPDATE``
    whose subquery reads its own table (error 1093). The candidates are found by a plain read
    (:attr:`~sa_inbox.dialects.store_claim.StoreClaimDialect.find_first`), which passes by the
    delete-marked index entries a locking scan would lock (MySQL manual, "Locks Set by
    Different SQL Statements in InnoDB"); ``STRAIGHT_JOIN`` keeps the window first (MariaDB
    manual, "Index Hints: How to Force Query Plans").

    .. seealso:: ``docs/discussions/store-claim.md``, "MySQL and MariaDB".
    """

    recheck_ordered = True
    find_first = True

    @contextmanager
    def begin(self, conn: Connection) -> Iterator[None]:
        """READ COMMITTED for this transaction only: ``SET TRANSACTION ISOLATION LEVEL READ
        COMMITTED`` before its first statement (MySQL manual, 15.1.4.7 "SET TRANSACTION
        Statement"; MariaDB manual, "SET TRANSACTION"). On an autocommit connection the execution
        option is set instead; where a transaction is already open (error 1568) it is committed and
        the statement sent again.

        .. seealso:: ``docs/discussions/store-claim.md``, "READ COMMITTED for one transaction".
        """
        if self.isolation_level is None or BACKEND.claim.is_autocommit(conn):
            with super().begin(conn):
                yield
            return
        statement = f"SET TRANSACTION ISOLATION LEVEL {self.isolation_level}"
        with conn.begin():
            try:
                conn.exec_driver_sql(statement)
            except DBAPIError as exc:
                if _error_code(exc) != TRANSACTION_IN_PROGRESS:
                    raise
                conn.exec_driver_sql("COMMIT")
                conn.exec_driver_sql(statement)
            self.begin_write(conn)
            yield

    def by_primary_key(self, statement: ByPrimaryKey, table: sa.Table) -> ByPrimaryKey:
        """``FORCE INDEX (PRIMARY)`` (MariaDB manual, "Index Hints"): an equality search on
        a unique index locks only the rows it finds.

        Otherwise the optimizer may take ``id IN (…) AND status = …`` through a status
        index, whose range scan locks delete-marked entries and gaps (MariaDB manual,
        "InnoDB Lock Modes"; MySQL manual, "Locks Set by Different SQL Statements in
        InnoDB").

        .. seealso:: ``docs/discussions/store-claim.md``, "By primary key on InnoDB".
        """
        hint = "FORCE INDEX (PRIMARY)"
        for dialect_name in ("mysql", "mariadb"):
            if isinstance(statement, sa.Update):
                statement = statement.with_hint(hint, table, dialect_name=dialect_name)
            else:
                statement = statement.with_hint(table, hint, dialect_name=dialect_name)
        return statement

    def join_in_order(self, statement: sa.Select[Any]) -> sa.Select[Any]:
        """``SELECT STRAIGHT_JOIN``: the tables are joined in the order written (MySQL
        manual, 15.2.13 "SELECT Statement"; MariaDB manual, "SELECT")."""
        for dialect_name in ("mysql", "mariadb"):
            statement = statement.prefix_with("STRAIGHT_JOIN", dialect=dialect_name)
        return statement

    def check_backend(self, conn: Connection) -> None:
        if conn.dialect.is_mariadb:  # type: ignore[attr-defined]
            require_version(conn, MARIADB_SKIP_LOCKED, "MariaDB", "FOR UPDATE SKIP LOCKED")
        else:
            require_version(conn, MYSQL_SKIP_LOCKED, "MySQL", "FOR UPDATE SKIP LOCKED")


#: This backend's dialects, registered once in :mod:`sa_inbox.dialects` (see ``backend_for``).
BACKEND = Backend(
    names=("mysql", "mariadb"),
    claim=MySQLClaim(),
    purge=MySQLPurge(),
    store_claim_dialect=MySQLStoreClaim(),
)
