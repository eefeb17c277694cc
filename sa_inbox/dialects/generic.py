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

import functools
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.expression import Executable

from .base import ClaimDialect, Row, sqlstate_of
from .driver_sql import DriverSQL

__all__ = ["FORWARDED", "SavepointClaim"]

#: SQLSTATE class 23, "integrity constraint violation" (SQL:2011, and e.g. the PostgreSQL
#: manual, Appendix A); drivers like pyodbc report only "23000".
INTEGRITY_CLASS = "23"


class SavepointClaim(ClaimDialect):
    """Claims through ``SAVEPOINT`` + ``INSERT``, recognising the duplicate after the fact.

    The claim's flow (:attr:`ClaimDialect.FLOW`) is this class's own; every other method
    (:data:`FORWARDED`: the checks, the error classifiers, the driver's state, the causal
    read, the JSON text) is the native dialect's, or :class:`ClaimDialect`'s default without
    one.

    :param native: the backend's own :class:`ClaimDialect`, or ``None`` on an unknown
        backend.
    """

    def __init__(self, native: ClaimDialect | None = None) -> None:
        self.native = native

    def insert_or_skip(self, table: sa.Table) -> Executable:
        return sa.insert(table)

    def supports_returning(self, conn: Connection) -> bool:
        return False

    def claim_one(
        self, conn: Connection, table: sa.Table, statement: Executable | DriverSQL, row: Row
    ) -> bool:
        self.before_savepoint(conn)
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


def _forwarded(name: str) -> Callable[..., Any]:
    """``SavepointClaim.<name>``: the native dialect's, else :class:`ClaimDialect`'s."""
    default = getattr(ClaimDialect, name)

    @functools.wraps(default)
    def forward(self: SavepointClaim, *args: Any, **kwargs: Any) -> Any:
        if self.native is None:
            return default(self, *args, **kwargs)
        return getattr(self.native, name)(*args, **kwargs)

    return forward


#: What :class:`SavepointClaim` takes from the native dialect: every public method of
#: :class:`ClaimDialect` outside its flow (a method added there is forwarded too).
FORWARDED = tuple(
    sorted(
        name
        for name in dir(ClaimDialect)
        if not name.startswith("_")
        and callable(getattr(ClaimDialect, name))
        and name not in ClaimDialect.FLOW
    )
)
for _name in FORWARDED:
    setattr(SavepointClaim, _name, _forwarded(_name))
