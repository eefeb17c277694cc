"""Any other backend: a SAVEPOINT around a plain ``INSERT``.

The portable form, for backends without an insert-or-skip statement, and available on every
backend with ``Inbox(…, strategy="savepoint")``. The INSERT runs inside a SAVEPOINT so that a
duplicate-key failure rolls back only the INSERT and the caller's transaction stays usable
(SQL:1999 savepoints; SQLAlchemy ``Connection.begin_nested()``).

A failure counts as a duplicate only when it is a genuine duplicate-key conflict on the inbox's
primary key: the backend's own classifier decides where sa-inbox has one (SQLSTATE 23505 and
the constraint name on PostgreSQL, error 1062 on key PRIMARY on MySQL, ...); on an unknown
backend, an integrity error (SQLSTATE class 23, or no SQLSTATE exposed) counts only if the
row with the same key is found after the rollback to the savepoint. Any other error is
re-raised unchanged.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.sql.expression import Executable

from .base import ClaimDialect, Row, sqlstate_of
from .driver_sql import DriverSQL

__all__ = ["SavepointClaim"]

#: SQLSTATE class 23, "integrity constraint violation" (SQL:2011, and e.g. the PostgreSQL
#: manual, Appendix A); drivers like pyodbc report only "23000".
INTEGRITY_CLASS = "23"


class SavepointClaim(ClaimDialect):
    """Claims through ``SAVEPOINT`` + ``INSERT``, recognising the duplicate after the fact.

    :param native: the backend's own :class:`ClaimDialect`, whose error classification is
        used when present; ``None`` on an unknown backend.
    """

    def __init__(self, native: ClaimDialect | None = None) -> None:
        self.native = native

    def check_backend(self, conn: Connection) -> None:
        if self.native is not None:
            self.native.check_backend(conn)

    def check_table(self, conn: Connection, table: sa.Table) -> bool:
        return self.native.check_table(conn, table) if self.native is not None else True

    def insert_or_skip(self, table: sa.Table) -> Executable:
        return sa.insert(table)

    def supports_returning(self, conn: Connection) -> bool:
        return False

    def claim_one(
        self, conn: Connection, table: sa.Table, statement: Executable | DriverSQL, row: Row
    ) -> bool:
        if self.native is not None:
            self.native.before_savepoint(conn)
        savepoint = conn.begin_nested()
        try:
            with self.translate_errors():
                self.execute(conn, statement, row)
        except IntegrityError as exc:
            savepoint.rollback()
            if self._duplicate(conn, exc, table, row):
                return False
            raise
        except BaseException:
            if savepoint.is_active:
                savepoint.rollback()
            raise
        savepoint.commit()
        return True

    def _duplicate(self, conn: Connection, exc: IntegrityError, table: sa.Table, row: Row) -> bool:
        if self.native is not None:
            return self.native.is_duplicate(exc, table)
        sqlstate = sqlstate_of(exc)
        if sqlstate is not None and not sqlstate.startswith(INTEGRITY_CLASS):
            return False
        key = sa.and_(
            table.c.message_id == row["message_id"],
            table.c.consumer_name == row["consumer_name"],
        )
        return conn.execute(sa.select(sa.literal(1)).where(key)).first() is not None

    def is_duplicate(self, exc: DBAPIError, table: sa.Table) -> bool:
        return self.native is not None and self.native.is_duplicate(exc, table)

    def is_transient(self, exc: DBAPIError) -> bool:
        return self.native is not None and self.native.is_transient(exc)

    def is_missing_table(self, exc: DBAPIError) -> bool:
        return self.native is not None and self.native.is_missing_table(exc)

    def is_unavailable(self, exc: DBAPIError) -> bool:
        if self.native is not None:
            return self.native.is_unavailable(exc)
        return super().is_unavailable(exc)

    def driver_autocommit(self, dbapi_connection: Any) -> bool:
        if self.native is not None:
            return self.native.driver_autocommit(dbapi_connection)
        return super().driver_autocommit(dbapi_connection)
