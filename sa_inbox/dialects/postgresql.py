"""PostgreSQL: ``INSERT … ON CONFLICT (message_id, consumer_name) DO NOTHING``.

A conflicting concurrent insert waits for the other transaction and then skips (PostgreSQL
manual, "INSERT", section "ON CONFLICT Clause"). Under REPEATABLE READ or SERIALIZABLE, a
conflict with a row committed after the snapshot raises SQLSTATE 40001 instead (manual 13.2.2,
"Repeatable Read Isolation Level"), which sa-inbox reports as
:class:`~sa_inbox.exc.TransientClaimError`.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError

from .base import OnConflictDoNothingClaim, driver_error, sqlstate_of

__all__ = ["PostgreSQLClaim"]

#: serialization_failure, deadlock_detected (PostgreSQL manual, Appendix A, "Error Codes").
TRANSIENT_SQLSTATES = frozenset({"40001", "40P01"})
UNIQUE_VIOLATION = "23505"


class PostgreSQLClaim(OnConflictDoNothingClaim):
    """Claims on PostgreSQL (9.5 and newer) through SQLAlchemy's ``postgresql.insert()``."""

    names = ("postgresql",)
    insert_factory = postgresql.insert

    def supports_returning(self, conn: sa.Connection) -> bool:
        return True

    def is_duplicate(self, exc: DBAPIError, table: sa.Table) -> bool:
        if sqlstate_of(exc) != UNIQUE_VIOLATION:
            return False
        diag = getattr(driver_error(exc), "diag", None)
        constraint = getattr(diag, "constraint_name", None)
        return constraint == table.primary_key.name

    def is_transient(self, exc: DBAPIError) -> bool:
        return sqlstate_of(exc) in TRANSIENT_SQLSTATES
