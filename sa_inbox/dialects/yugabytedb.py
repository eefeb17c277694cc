"""YugabyteDB (YSQL): the PostgreSQL dialect and wire protocol (SQLAlchemy's dialect name is
``postgresql``), recognised by its ``version()`` string, which contains ``-YB-``
(``"PostgreSQL 11.2-YB-2.20.1.0-b0 on x86_64-pc-linux-gnu, …"``; see
:func:`sa_inbox.dialects.backend_of`). The claim is PostgreSQL's ``INSERT … ON CONFLICT DO
NOTHING``, with PostgreSQL's SQLSTATEs (YugabyteDB reports its conflicts as 40001, e.g.
"could not serialize access due to concurrent update"). What differs, from YugabyteDB's
documentation:

* **Isolation**: Read Committed, YSQL's syntactic default, maps to Snapshot isolation
  (PostgreSQL's Repeatable Read) unless the ``yb_enable_read_committed_isolation`` flag is
  set (YugabyteDB docs, Architecture, "Transaction isolation levels"). Under Snapshot a
  conflict aborts a transaction with 40001 (Fail-on-Conflict) or after waiting
  (Wait-on-Conflict, "Concurrency control"): retries are the normal path, so pass
  ``max_retries=9`` or more to the runner on a contended workload (not measured here).
* **No ``ctid``** (yugabyte-db issues #11689 and #24843: "System column ... is not
  supported yet"): the purge deletes by primary key, ``DELETE … WHERE (message_id,
  consumer_name) IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)``.
* **SKIP LOCKED** is supported in both concurrency-control policies under Read Committed
  and Repeatable Read, not under Serializable (docs, "Concurrency control", "Row-level
  explicit locking clauses"; issue #11761 tracks Serializable). The store's claims and
  the purge run at READ COMMITTED (Snapshot without the flag), so both are covered; a
  SERIALIZABLE default on the server is overridden for them. sa-inbox checks no YugabyteDB
  version number (the YSQL docs of 2.6 to 2.13 already list ``SKIP LOCKED``, issue
  #11968).

No YugabyteDB server can be installed here: this module is proven by compiled-SQL tests;
the live suite runs only with ``SA_INBOX_TEST_YUGABYTEDB_URL``.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.sql.expression import ColumnElement, Executable

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

    def batch_statement(
        self,
        conn: sa.Connection,
        table: sa.Table,
        expired: ColumnElement[bool],
        order_by: ColumnElement[Any],
        batch_size: int,
    ) -> Executable:
        return self.delete_batch(table, expired, order_by, batch_size)


#: YugabyteDB's dialects: a variant of PostgreSQL's backend (same SQLAlchemy dialect name),
#: chosen by :func:`sa_inbox.dialects.backend_of` from the server's ``version()``.
BACKEND = Backend(
    names=("postgresql",),
    claim=PostgreSQLClaim(),
    purge=YugabyteDBPurge(),
    store_claim_dialect=PostgreSQLStoreClaim(),
)
