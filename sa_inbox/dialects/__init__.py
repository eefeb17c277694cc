"""The dialect layer: one module per backend, and one registry keyed by SQLAlchemy dialect name.

Each backend module holds a :class:`Backend` (its ``BACKEND``): the claim, purge and
store-claim dialects of that backend, registered here once under each of its dialect
names. :func:`backend_for` looks one up.

=============  ============================================================================
backend        claim statement
=============  ============================================================================
postgresql     ``INSERT … ON CONFLICT (message_id, consumer_name) DO NOTHING``
mysql/mariadb  ``INSERT IGNORE`` plus a warnings check
oracle         ``MERGE INTO … WHEN NOT MATCHED THEN INSERT``
sqlite         ``INSERT … ON CONFLICT (message_id, consumer_name) DO NOTHING``
cockroachdb    PostgreSQL's statement (``sqlalchemy-cockroachdb``); SERIALIZABLE, 40001 and
               40003 retried, purge by primary key, SKIP LOCKED from v23.1
yugabytedb     a PostgreSQL server whose ``version()`` contains ``-YB-`` (see
               :func:`backend_of`): PostgreSQL's claim, purge by primary key (no ``ctid``)
anything else  ``SAVEPOINT`` + ``INSERT`` (:mod:`sa_inbox.dialects.generic`); the purge's
               portable primary-key subquery; no store claim (``UnsupportedBackend``)
=============  ============================================================================

The dialect layer imports only :mod:`sa_inbox.exc`, :mod:`sa_inbox.schema`,
:mod:`sa_inbox._compat` and :mod:`sa_inbox.validation` from the rest of sa-inbox.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from ..exc import InvalidArgument
from . import cockroachdb, mysql, oracle, postgresql, sqlite, yugabytedb
from .backend import Backend as Backend
from .base import ClaimDialect as ClaimDialect
from .base import DriverState as DriverState
from .generic import SavepointClaim as SavepointClaim
from .mysql import MySQLClaim as MySQLClaim
from .mysql import MySQLPurge as MySQLPurge
from .oracle import MergeInsertOrSkip as MergeInsertOrSkip
from .oracle import OracleClaim as OracleClaim
from .oracle import OraclePurge as OraclePurge
from .postgresql import PostgreSQLClaim as PostgreSQLClaim
from .postgresql import PostgreSQLPurge as PostgreSQLPurge
from .purge import PurgeDialect as PurgeDialect
from .sqlite import SQLiteClaim as SQLiteClaim
from .sqlite import SQLitePurge as SQLitePurge

__all__ = [
    "Backend",
    "ClaimDialect",
    "DriverState",
    "MergeInsertOrSkip",
    "MySQLClaim",
    "MySQLPurge",
    "OracleClaim",
    "OraclePurge",
    "PostgreSQLClaim",
    "PostgreSQLPurge",
    "PurgeDialect",
    "SQLiteClaim",
    "SQLitePurge",
    "SavepointClaim",
    "Strategy",
    "backend_for",
    "backend_of",
    "claim_dialect_for",
    "classifier_for",
    "is_autocommit",
    "purge_dialect_for",
]

Strategy = Literal["native", "savepoint"]

#: The registry: every known backend under each of its SQLAlchemy dialect names.
_BACKENDS: dict[str, Backend] = {
    name: backend
    for backend in (
        postgresql.BACKEND,
        mysql.BACKEND,
        oracle.BACKEND,
        sqlite.BACKEND,
        cockroachdb.BACKEND,
    )
    for name in backend.names
}
#: Servers that speak another backend's SQLAlchemy dialect, told apart by their
#: ``version()`` string: dialect name -> (recognise, backend), tried in order.
_VARIANTS: dict[str, tuple[tuple[Callable[[str], bool], Backend], ...]] = {
    "postgresql": ((yugabytedb.is_yugabytedb, yugabytedb.BACKEND),),
}
#: The backend recognised per engine (one ``SELECT version()`` per engine).
_RECOGNISED: weakref.WeakKeyDictionary[sa.Engine, Backend] = weakref.WeakKeyDictionary()
#: The portable dialects of any other backend (stateless, so shared).
_PORTABLE_CLAIM = SavepointClaim(None)
_PORTABLE_PURGE = PurgeDialect()


def backend_for(dialect_name: str) -> Backend:
    """The :class:`Backend` for a SQLAlchemy dialect name (``engine.dialect.name``).

    :param dialect_name: ``"postgresql"``, ``"mysql"``, ``"mariadb"``, ``"oracle"``,
        ``"sqlite"`` or ``"cockroachdb"`` (a YugabyteDB server is a ``"postgresql"`` one:
        :func:`backend_of` tells it apart); any other name gets the portable defaults: the
        SAVEPOINT claim (:class:`SavepointClaim` without a native classifier), the
        primary-key subquery purge without row locks (:class:`PurgeDialect`), and no store
        claim (its :attr:`Backend.store_claim` raises :class:`~sa_inbox.exc.UnsupportedBackend`).
    """
    backend = _BACKENDS.get(dialect_name)
    if backend is not None:
        return backend
    return Backend(names=(dialect_name,), claim=_PORTABLE_CLAIM, purge=_PORTABLE_PURGE)


def backend_of(conn: Connection) -> Backend:
    """The :class:`Backend` of the server ``conn`` is connected to: :func:`backend_for` its
    dialect name, or a server that speaks that dialect but needs other SQL, recognised
    from its ``version()`` (YugabyteDB: ``-YB-`` in a ``postgresql`` server's version, see
    :mod:`sa_inbox.dialects.yugabytedb`).

    :param conn: a connection to the server; one ``SELECT version()`` is sent the first
        time an engine is seen (in the connection's transaction, which it begins if
        needed), then the answer is remembered for the engine.
    """
    backend = backend_for(conn.dialect.name)
    variants = _VARIANTS.get(conn.dialect.name)
    if not variants:
        return backend
    found = _RECOGNISED.get(conn.engine)
    if found is None:
        version = str(conn.exec_driver_sql("SELECT version()").scalar() or "")
        found = next((variant for recognise, variant in variants if recognise(version)), backend)
        _RECOGNISED[conn.engine] = found
    return found


class _EveryBackendClassifier(SavepointClaim):
    """The error classifiers of every known backend at once (see :func:`classifier_for`)."""

    def is_transient(self, exc: DBAPIError) -> bool:
        return any(backend.claim.is_transient(exc) for backend in _NATIVE)

    def is_missing_table(self, exc: DBAPIError) -> bool:
        return any(backend.claim.is_missing_table(exc) for backend in _NATIVE)

    def is_unavailable(self, exc: DBAPIError) -> bool:
        return any(backend.claim.is_unavailable(exc) for backend in _NATIVE)


_NATIVE = (postgresql.BACKEND, mysql.BACKEND, oracle.BACKEND, sqlite.BACKEND, cockroachdb.BACKEND)
_EVERY_BACKEND = _EveryBackendClassifier(None)


def classifier_for(dialect_name: str | None) -> ClaimDialect:
    """The claim dialect whose error classifiers (:meth:`ClaimDialect.is_transient`,
    :meth:`ClaimDialect.is_missing_table`, :meth:`ClaimDialect.is_unavailable`) apply to a
    dialect name.

    :param dialect_name: the engine's dialect name, or ``None`` when it cannot be known
        beforehand (a Session bound per table only, with no default bind): then every
        known backend's classifiers are asked. Their codes cannot be confused, since each
        reads its own driver's attribute (a psycopg/asyncpg SQLSTATE string, a MySQL
        driver's integer error number, an oracledb error object, sqlite3's error code).
    """
    if dialect_name is None:
        return _EVERY_BACKEND
    return backend_for(dialect_name).claim


def claim_dialect_for(dialect_name: str, strategy: Strategy = "native") -> ClaimDialect:
    """The :class:`ClaimDialect` for a dialect name and an ``Inbox`` strategy.

    :param dialect_name: as for :func:`backend_for`.
    :param strategy: ``"native"`` for the backend's insert-or-skip statement
        (:attr:`Backend.claim`), or ``"savepoint"`` to force the portable form (with the
        backend's error codes).
    :raises InvalidArgument: for an unknown ``strategy``.
    """
    claim = backend_for(dialect_name).claim
    if strategy == "native":
        return claim
    if strategy == "savepoint":
        return claim if isinstance(claim, SavepointClaim) else SavepointClaim(claim)
    raise InvalidArgument(f"strategy must be 'native' or 'savepoint', not {strategy!r}")


def is_autocommit(conn: Connection) -> bool:
    """Whether ``conn`` commits each statement on its own, so a claim on it would commit
    apart from the business change.

    True for SQLAlchemy's ``isolation_level="AUTOCOMMIT"`` (on the connection, the engine or
    ``create_engine()``; SQLAlchemy docs, "Setting Transaction Isolation Levels including
    DBAPI Autocommit") and for autocommit set on the driver itself, as the backend's
    :meth:`ClaimDialect.driver_autocommit` reads it (psycopg 3 / PyMySQL
    ``connect_args={"autocommit": True}``, :mod:`sqlite3` ``isolation_level=None``).

    :param conn: a Connection; its DBAPI connection is checked out if it was not yet.
    """
    return backend_for(conn.dialect.name).claim.is_autocommit(conn)


def purge_dialect_for(dialect_name: str) -> PurgeDialect:
    """The :class:`PurgeDialect` for a dialect name: :attr:`Backend.purge` of
    :func:`backend_for` (any other name: the portable primary-key subquery without row
    locks)."""
    return backend_for(dialect_name).purge
