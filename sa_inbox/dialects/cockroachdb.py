"""CockroachDB, through ``sqlalchemy-cockroachdb`` (dialect name ``cockroachdb``; the
``sa-inbox[cockroachdb]`` extra). CockroachDB speaks the PostgreSQL wire protocol and the
dialect subclasses SQLAlchemy's PostgreSQL one, so the claim is PostgreSQL's
``INSERT … ON CONFLICT (message_id, consumer_name) DO NOTHING`` (with ``RETURNING`` for a
batch). What differs, from CockroachDB's documentation:

* **SERIALIZABLE is the default isolation** (CockroachDB docs, "Transactions",
  "Isolation levels"; READ COMMITTED exists from v23.2 behind the
  ``sql.txn.read_committed_isolation.enabled`` cluster setting). A contended transaction
  gets SQLSTATE 40001 ("restart transaction", CockroachDB docs, "Transaction Retry Error
  Reference"): the normal path, not an anomaly. The runner rolls back and re-runs the whole
  transaction with full-jitter exponential back-off, as those docs ask; its default budget
  (4 re-runs, 20 ms doubling, at most 1 s) is short for a contended SERIALIZABLE workload,
  so pass ``max_retries=9`` or more there (not measured here: no CockroachDB server).
* **40003 "statement completion unknown"** (an ambiguous commit: CockroachDB could not tell
  whether the COMMIT applied, "Transaction Retry Error Reference", "Ambiguous commit
  errors") is transient *for the inbox*: re-running is safe because the claim commits with
  the change, so if the first COMMIT did apply, the re-run finds the claim and is a
  duplicate. Only the inbox's own transactions make that safe; code outside them must not
  follow it.
* **No ``ctid``**: the purge deletes by primary key,
  ``DELETE … WHERE (message_id, consumer_name) IN (SELECT … ORDER BY received_at LIMIT n
  FOR UPDATE SKIP LOCKED)``.
* **SKIP LOCKED from v23.1**: the v22.2 page of "SELECT FOR UPDATE" says "skipping locked
  rows is not yet supported"; the v23.1 page lists ``SKIP LOCKED`` among its wait policies.
  The store's claim checks the server's version (``SELECT version()``, e.g. ``CockroachDB
  CCL v23.1.11 (…)``; the dialect itself reports a fixed ``server_version_info`` of 9.5) and
  raises :class:`~sa_inbox.exc.UnsupportedBackend` before 23.1.
* The store's and the purge's short transactions keep the server's isolation (SERIALIZABLE)
  instead of asking for READ COMMITTED, which needs the cluster setting.

No CockroachDB server can be installed here: this module is proven by compiled-SQL tests;
the live suite runs only with ``SA_INBOX_TEST_COCKROACHDB_URL``.
"""

from __future__ import annotations

import re
from typing import ClassVar

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from ..exc import UnsupportedBackend
from .backend import Backend
from .base import sqlstate_of
from .postgresql import TRANSIENT_SQLSTATES as POSTGRESQL_TRANSIENT
from .postgresql import PostgreSQLClaim, PostgreSQLStoreClaim
from .purge import PrimaryKeyPurge

__all__ = [
    "BACKEND",
    "SKIP_LOCKED_SINCE",
    "CockroachDBClaim",
    "CockroachDBPurge",
    "CockroachDBStoreClaim",
    "cockroachdb_version",
]

#: PostgreSQL's transient SQLSTATEs, and 40003 statement_completion_unknown (see above).
TRANSIENT_SQLSTATES = POSTGRESQL_TRANSIENT | {"40003"}
#: The first CockroachDB version with ``FOR UPDATE SKIP LOCKED``.
SKIP_LOCKED_SINCE = (23, 1)
_VERSION = re.compile(r"CockroachDB\s+\S+\s+v(\d+)\.(\d+)(?:\.(\d+))?")


def cockroachdb_version(text: str) -> tuple[int, ...] | None:
    """The version in CockroachDB's ``version()`` string (``"CockroachDB CCL v23.1.11
    (x86_64-pc-linux-gnu, …)"`` -> ``(23, 1, 11)``), or None if it is not one."""
    match = _VERSION.search(text)
    if match is None:
        return None
    return tuple(int(part) for part in match.groups() if part is not None)


class CockroachDBClaim(PostgreSQLClaim):
    """Claims on CockroachDB: PostgreSQL's statement, and 40003 transient too."""

    def is_transient(self, exc: DBAPIError) -> bool:
        return sqlstate_of(exc) in TRANSIENT_SQLSTATES


class CockroachDBPurge(PrimaryKeyPurge):
    """Purge batches on CockroachDB by primary key with ``FOR UPDATE SKIP LOCKED`` (no
    ``ctid``), in the server's own isolation (SERIALIZABLE by default)."""

    isolation_level: ClassVar[str | None] = None
    concurrency: ClassVar[str] = "FOR UPDATE SKIP LOCKED in the batch select (v23.1+)"


class CockroachDBStoreClaim(PostgreSQLStoreClaim):
    """The store's claim on CockroachDB 23.1 and newer: PostgreSQL's single
    ``UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED) RETURNING``, in the server's
    own isolation."""

    isolation_level: ClassVar[str | None] = None

    def check_backend(self, conn: sa.Connection) -> None:
        text = str(conn.exec_driver_sql("SELECT version()").scalar() or "")
        version = cockroachdb_version(text)
        if version is None or version[:2] < SKIP_LOCKED_SINCE:
            raise UnsupportedBackend(
                f"{text or 'this server'} has no FOR UPDATE SKIP LOCKED; the inbox store's "
                "worker needs CockroachDB 23.1 or newer"
            )


#: This backend's dialects, registered once in :mod:`sa_inbox.dialects` (see ``backend_for``).
BACKEND = Backend(
    names=("cockroachdb",),
    claim=CockroachDBClaim(),
    purge=CockroachDBPurge(),
    store_claim_dialect=CockroachDBStoreClaim(),
)
