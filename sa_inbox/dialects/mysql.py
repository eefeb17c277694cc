"""MySQL and MariaDB: ``INSERT IGNORE``.

``IGNORE`` turns a duplicate key into warning 1062 and a skipped row, but it also downgrades
other errors to warnings: truncation (1265, 1406), NULL into NOT NULL (1048), bad strings
(1366) and foreign-key failures (1452) (MySQL manual, "13.2.6 INSERT Statement", "The Effect
of IGNORE on Statement Execution"). So ids are validated before sending, and after each
statement that the server reports warnings for, ``SHOW WARNINGS`` is read and anything but
1062 raises :class:`~sa_inbox.exc.ClaimWarning`.

``rowcount`` is the number of rows inserted: SQLAlchemy's MySQL dialects connect with
``CLIENT.FOUND_ROWS``, which changes what ``UPDATE`` and ``ON DUPLICATE KEY UPDATE`` report
(a duplicate counts as 1 there) but not ``INSERT IGNORE``, where a skipped row counts 0.
That is why sa-inbox uses ``INSERT IGNORE`` and never ``ON DUPLICATE KEY UPDATE id = id``.

MariaDB 10.5 and newer accept ``INSERT IGNORE … RETURNING``, so a batch is one statement
returning the new ids; MySQL 8 has no ``RETURNING`` and a batch is one statement per id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.exc import DBAPIError

from ..exc import ClaimWarning
from .base import ClaimDialect, Row, driver_error
from .store_claim import StoreClaimDialect, require_version

__all__ = ["MySQLClaim", "MySQLStoreClaim"]

#: Deadlock found, lock wait timeout exceeded (MySQL manual, "Server Error Message Reference").
TRANSIENT_ERRORS = frozenset({1213, 1205})
ER_DUP_ENTRY = 1062


def _error_code(exc: DBAPIError) -> int | None:
    args = getattr(driver_error(exc), "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _error_message(exc: DBAPIError) -> str:
    args: tuple[object, ...] = tuple(getattr(driver_error(exc), "args", ()))
    return str(args[1]) if len(args) > 1 else str(driver_error(exc))


def _warning_count(result: CursorResult[Any]) -> int | None:
    """Warnings the server reported for the statement, or None if the driver hides them."""
    cursor = result.context.cursor
    count = getattr(cursor, "warning_count", None)  # PyMySQL, mysql-connector
    if isinstance(count, int):
        return count
    connection = result.context.root_connection.connection.dbapi_connection
    method = getattr(connection, "warning_count", None)  # mysqlclient
    return method() if callable(method) else None


class MySQLClaim(ClaimDialect):
    """Claims on MySQL 5.7+/8 and MariaDB through SQLAlchemy's ``mysql.insert()``."""

    names = ("mysql", "mariadb")

    def insert_or_skip(self, table: sa.Table, rows: Sequence[Row] | None) -> mysql.Insert:
        statement = mysql.insert(table)
        if rows is not None:
            statement = statement.values(list(rows))
        return statement.prefix_with("IGNORE")

    def execute(self, conn: Connection, statement: Any, params: Row | None) -> CursorResult[Any]:
        result = super().execute(conn, statement, params)
        if _warning_count(result) == 0:
            return result
        if result.returns_rows:
            # Keep the RETURNING rows: SHOW WARNINGS reuses the connection.
            result = result.freeze()()  # type: ignore[assignment]
        self._raise_on_warnings(conn)
        return result

    def _raise_on_warnings(self, conn: Connection) -> None:
        rows = conn.exec_driver_sql("SHOW WARNINGS").all()
        unexpected = [(str(r[0]), int(r[1]), str(r[2])) for r in rows if int(r[1]) != ER_DUP_ENTRY]
        if unexpected:
            raise ClaimWarning(unexpected)

    def is_duplicate(self, exc: DBAPIError, table: sa.Table) -> bool:
        if _error_code(exc) != ER_DUP_ENTRY:
            return False
        # "Duplicate entry 'a-b' for key 'PRIMARY'" (MariaDB, MySQL 5.7) or
        # "... for key 'table.PRIMARY'" (MySQL 8): the primary key is always PRIMARY.
        message = _error_message(exc)
        return message.endswith("'PRIMARY'") or message.endswith(f"'{table.name}.PRIMARY'")

    def is_transient(self, exc: DBAPIError) -> bool:
        return _error_code(exc) in TRANSIENT_ERRORS


#: First releases with ``FOR UPDATE SKIP LOCKED`` (MySQL 8.0 manual, "Locking Read
#: Concurrency with NOWAIT and SKIP LOCKED"; MariaDB 10.6 release notes, "SKIP LOCKED").
MYSQL_SKIP_LOCKED = (8, 0, 1)
MARIADB_SKIP_LOCKED = (10, 6)


class MySQLStoreClaim(StoreClaimDialect):
    """The store's claim on MySQL ≥ 8.0.1 and MariaDB ≥ 10.6: the three-statement form.

    ``SELECT id … ORDER BY received_at, id LIMIT n FOR UPDATE SKIP LOCKED``, then ``UPDATE …
    WHERE id IN (…)`` and a ``SELECT`` of the claimed rows, in one READ COMMITTED
    transaction. Neither backend has ``UPDATE … RETURNING``, and MySQL refuses an
    ``UPDATE`` whose subquery reads the table being updated (error 1093).
    """

    names = ("mysql", "mariadb")

    def check_backend(self, conn: Connection) -> None:
        if conn.dialect.is_mariadb:  # type: ignore[attr-defined]
            require_version(conn, MARIADB_SKIP_LOCKED, "MariaDB", "FOR UPDATE SKIP LOCKED")
        else:
            require_version(conn, MYSQL_SKIP_LOCKED, "MySQL", "FOR UPDATE SKIP LOCKED")
