"""CockroachDB, through ``sqlalchemy-cockroachdb`` (dialect name ``cockroachdb``; the
``sa-inbox[cockroachdb]`` extra): PostgreSQL's claim, with CockroachDB's edges.

SERIALIZABLE by default, so 40001 ("restart transaction") is the normal path and 40003 (an
ambiguous commit) is transient for the inbox's own transactions (CockroachDB docs,
"Transaction Retry Error Reference"); no ``ctid`` (the purge deletes by primary key);
``SKIP LOCKED`` from v23.1 ("SELECT FOR UPDATE"), checked before the store's claim. Proven by
compiled-SQL tests; the live suite runs with ``SA_INBOX_TEST_COCKROACHDB_URL``.

.. seealso:: ``docs/discussions/distributed-sql.md``, "CockroachDB".
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
    """Claims on CockroachDB: PostgreSQL's statement, and 40003 transient too; always
    sent after the driver's own ``BEGIN``, and a batch as ``VALUES`` rows (the pipelined
    and the array forms are not proven there)."""

    sends_with_begin: ClassVar[bool] = False
    claims_with_arrays: ClassVar[bool] = False

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
