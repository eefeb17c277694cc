"""The dialect layer: one module per backend, chosen by SQLAlchemy dialect name.

=============  ==============================================================
backend        claim statement
=============  ==============================================================
postgresql     ``INSERT … ON CONFLICT (message_id, consumer_name) DO NOTHING``
mysql/mariadb  ``INSERT IGNORE`` plus a warnings check
oracle         ``MERGE INTO … WHEN NOT MATCHED THEN INSERT``
sqlite         ``INSERT … ON CONFLICT (message_id, consumer_name) DO NOTHING``
anything else  ``SAVEPOINT`` + ``INSERT`` (:mod:`sa_inbox.dialects.generic`)
=============  ==============================================================
"""

from __future__ import annotations

from typing import Literal

from sqlalchemy.engine import Connection

from .._compat import autocommit_isolation
from ..exc import InvalidStrategy
from .base import ClaimDialect as ClaimDialect
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
    "ClaimDialect",
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
    "claim_dialect_for",
    "is_autocommit",
    "purge_dialect_for",
]

Strategy = Literal["native", "savepoint"]

_REGISTRY: dict[str, ClaimDialect] = {
    name: dialect
    for dialect in (PostgreSQLClaim(), MySQLClaim(), OracleClaim(), SQLiteClaim())
    for name in dialect.names
}


def claim_dialect_for(dialect_name: str, strategy: Strategy = "native") -> ClaimDialect:
    """The :class:`ClaimDialect` for a SQLAlchemy dialect name (``engine.dialect.name``).

    :param dialect_name: e.g. ``"postgresql"``, ``"mysql"``, ``"mariadb"``, ``"oracle"``,
        ``"sqlite"``; any other name gets the portable SAVEPOINT form.
    :param strategy: ``"native"`` for the backend's insert-or-skip statement, or
        ``"savepoint"`` to force the portable form (with the backend's error codes).
    :raises InvalidStrategy: for an unknown ``strategy``.
    """
    native = _REGISTRY.get(dialect_name)
    if strategy == "native":
        return native if native is not None else SavepointClaim(None)
    if strategy == "savepoint":
        return SavepointClaim(native)
    raise InvalidStrategy(f"strategy must be 'native' or 'savepoint', not {strategy!r}")


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
    if autocommit_isolation(conn):
        return True
    dialect = claim_dialect_for(conn.dialect.name)
    return dialect.driver_autocommit(conn.connection.dbapi_connection)


_PURGE_REGISTRY: dict[str, PurgeDialect] = {
    name: dialect
    for dialect in (PostgreSQLPurge(), MySQLPurge(), OraclePurge(), SQLitePurge())
    for name in dialect.names
}


def purge_dialect_for(dialect_name: str) -> PurgeDialect:
    """The :class:`PurgeDialect` for a SQLAlchemy dialect name (``engine.dialect.name``).

    Any other name gets the portable primary-key subquery without row locks.
    """
    return _PURGE_REGISTRY.get(dialect_name) or PurgeDialect()
