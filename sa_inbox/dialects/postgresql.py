"""PostgreSQL: ``INSERT … ON CONFLICT (message_id, consumer_name) DO NOTHING``.

A conflicting concurrent insert waits for the other transaction and then skips (PostgreSQL
manual, "INSERT", section "ON CONFLICT Clause"). Under REPEATABLE READ or SERIALIZABLE, a
conflict with a row committed after the snapshot raises SQLSTATE 40001 instead (manual 13.2.2,
"Repeatable Read Isolation Level"), which sa-inbox reports as
:class:`~sa_inbox.exc.TransientClaimError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import RowMapping
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.expression import Executable

from .base import OnConflictDoNothingClaim, driver_error, sqlstate_of
from .store_claim import CandidateQuery, StoreClaimDialect, require_version

__all__ = ["PostgreSQLClaim", "PostgreSQLStoreClaim"]

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

    names = ("postgresql",)

    def check_backend(self, conn: sa.Connection) -> None:
        require_version(conn, (9, 5), "PostgreSQL", "FOR UPDATE SKIP LOCKED")

    def claim_statement(
        self,
        table: sa.Table,
        candidates: CandidateQuery,
        limit: int,
        values: Mapping[str, Any],
    ) -> Executable:
        locked = self.lock(candidates(table.alias("candidate")), limit)
        return (
            sa.update(table).where(table.c.id.in_(locked)).values(dict(values)).returning(*table.c)
        )

    def claim(
        self,
        conn: sa.Connection,
        table: sa.Table,
        candidates: CandidateQuery,
        limit: int,
        values: Mapping[str, Any],
    ) -> Sequence[RowMapping]:
        statement = self.claim_statement(table, candidates, limit, values)
        return conn.execute(statement).mappings().all()
