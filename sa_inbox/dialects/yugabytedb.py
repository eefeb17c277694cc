"""YugabyteDB (YSQL): the PostgreSQL dialect, recognised by ``-YB-`` in its ``version()``
string (:func:`sa_inbox.dialects.backend_of`), with YugabyteDB's edges.

Read Committed maps to Snapshot isolation unless ``yb_enable_read_committed_isolation`` is
set, so 40001 is the normal path (YugabyteDB docs, "Transaction isolation levels",
"Concurrency control"); no ``ctid`` (the purge deletes by primary key); ``SKIP LOCKED``
under Read Committed and Repeatable Read, not Serializable ("Row-level explicit locking
clauses"). Proven by compiled-SQL tests; the live suite runs with
``SA_INBOX_TEST_YUGABYTEDB_URL``.

.. seealso:: ``docs/discussions/distributed-sql.md``, "YugabyteDB".
"""

from __future__ import annotations

import re
from typing import ClassVar

import sqlalchemy as sa

from .backend import Backend
from .postgresql import PostgreSQLClaim, PostgreSQLPurge, PostgreSQLStoreClaim
from .purge import PrimaryKeyPurge

__all__ = ["BACKEND", "YugabyteDBPurge", "is_yugabytedb", "yugabytedb_version"]

_VERSION = re.compile(r"-YB-(\d+)\.(\d+)\.(\d+)")


def is_yugabytedb(version: str) -> bool:
    """Whether a server's ``version()`` string is YugabyteDB's (it contains ``-YB-``)."""
    return "-YB-" in version


def yugabytedb_version(version: str) -> tuple[int, ...] | None:
    """YugabyteDB's own version in its ``version()`` string (``…-YB-2.20.1.0-b0…`` ->
    ``(2, 20, 1)``), or None."""
    match = _VERSION.search(version)
    return None if match is None else tuple(int(part) for part in match.groups())


class YugabyteDBPurge(PrimaryKeyPurge, PostgreSQLPurge):
    """Purge batches on YugabyteDB: by primary key with ``FOR UPDATE SKIP LOCKED`` (no
    ``ctid``), partitioned or not, at READ COMMITTED."""

    concurrency: ClassVar[str] = "FOR UPDATE SKIP LOCKED in the batch select (not Serializable)"

    def is_partitioned(self, conn: sa.Connection, table: sa.Table) -> bool:
        return False  # the batch is taken by primary key either way


#: YugabyteDB's dialects: a variant of PostgreSQL's backend (same SQLAlchemy dialect name),
#: chosen by :func:`sa_inbox.dialects.backend_of` from the server's ``version()``.
BACKEND = Backend(
    names=("postgresql",),
    claim=PostgreSQLClaim(),
    purge=YugabyteDBPurge(),
    store_claim_dialect=PostgreSQLStoreClaim(),
)
