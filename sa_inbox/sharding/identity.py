"""Which database a connection is on: the identity behind the wrong-shard check.

A claim must run on the shard its key routes to (:class:`~sa_inbox.exc.WrongShard`
otherwise). When the claim's connection comes from the shard's own Engine, that is known
without asking anything. When it comes from another Engine (the caller built their own),
its URL cannot tell: libpq's multi-host form (``postgresql://u@/db?host=h1:5432``, the form
for failover), Unix-socket URLs (``?host=/run/postgresql``) and ``connect_args`` or a
``creator`` keep the host and port out of ``url.host`` / ``url.port``, and two URLs can name
one server (``localhost`` and ``127.0.0.1``). So the server is asked, once per DBAPI
connection (cached in :attr:`sqlalchemy.engine.Connection.info`, which lives as long as the
pooled DBAPI connection), in the caller's transaction (read-only functions, no lock):

* PostgreSQL: ``pg_control_system()``'s ``system_identifier`` (a random 64-bit number chosen
  by ``initdb``, shared only by physical copies of one cluster: manual, 9.27 "System
  Information Functions and Operators", "Control Data Functions", and "pg_controldata"),
  the database (``current_database()``) and ``pg_postmaster_start_time()`` (the server
  process's start, to the microsecond), which tells apart two clusters cloned from one base
  backup (same ``system_identifier``) serving as two shards. None of them depends on how
  the connection reached the server (TCP, a Unix socket, one host of a multi-host list), so
  every URL form of one server gives one identity.
* MySQL / MariaDB: ``@@hostname``, ``@@port``, ``@@socket``, ``DATABASE()``, and on MySQL
  ``@@server_uuid`` (MySQL manual, "Replication and Binary Logging Options and
  Variables"; MariaDB has no such variable).
* SQLite: the main database's file (``PRAGMA database_list``); an in-memory or temporary
  database has none.

The identity is compared as a whole: equal means the same server and database; anything else
is refused. Where it errs, it errs towards refusing (a typed error, never a claim let
through): a restarted shard server, or a physical standby promoted by a failover, has
another start time, so before a claim is refused the shard's cached identity is read again
(:meth:`~sa_inbox.sharding.ShardedInbox.shard_identity`). One exception, on MariaDB only:
two servers on two machines that report the same host name, port, socket and database
name (e.g. containers given one host name) read as one; MySQL's ``server_uuid`` separates
them, MariaDB has nothing alike. A backend not listed here, or a server that does not
answer the query (e.g. a PostgreSQL-compatible server without ``pg_control_system()``),
gives :class:`~sa_inbox.exc.UnknownShardIdentity`: the check never passes on an
identity it could not establish.

Cost: nothing on the usual path (a Session of
:meth:`~sa_inbox.sharding.ShardedInbox.session_factory`, the shard's own Engine, which is
the shard); otherwise one query per new DBAPI connection, and one per shard per process.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from ..exc import UnknownShardIdentity

__all__ = ["ServerIdentity", "server_identity"]

#: ``(backend, field, field, ...)``: compared as a whole, never shown to a user as a URL.
ServerIdentity = tuple[str, ...]

_INFO_KEY = "sa_inbox.sharding.server_identity"

_POSTGRESQL = (
    "SELECT (pg_control_system()).system_identifier::text, current_database(), "
    "pg_postmaster_start_time()::text"
)
_MARIADB = "SELECT @@hostname, CAST(@@port AS CHAR), @@socket, DATABASE()"
_MYSQL = "SELECT @@hostname, CAST(@@port AS CHAR), @@socket, DATABASE(), @@server_uuid"


def _query(conn: Connection) -> str | None:
    dialect = conn.dialect
    if dialect.name == "postgresql":
        return _POSTGRESQL
    if dialect.name in ("mysql", "mariadb"):
        return _MARIADB if getattr(dialect, "is_mariadb", False) else _MYSQL
    if dialect.name == "sqlite":
        return "PRAGMA database_list"
    return None


def _read(conn: Connection) -> ServerIdentity:
    query = _query(conn)
    backend = conn.dialect.name
    if query is None:
        raise UnknownShardIdentity(
            f"cannot tell which {backend} server a connection is on (only PostgreSQL, "
            "MySQL/MariaDB and SQLite are asked)"
        )
    try:
        rows = conn.exec_driver_sql(query).all()
    except DBAPIError as exc:
        raise UnknownShardIdentity(
            f"the {backend} server did not say which server it is ({query}): "
            f"{type(exc.orig).__name__}"
        ) from exc
    if backend == "sqlite":
        files = [str(row[2]) for row in rows if row[1] == "main" and row[2]]
        values: tuple[object, ...] = tuple(files)
    else:
        values = tuple(rows[0]) if rows else ()
    if not values or any(value is None or value == "" for value in values):
        raise UnknownShardIdentity(
            f"the {backend} server gave an incomplete identity {values!r} (an in-memory "
            "database, no current database or no listening address)"
        )
    return (backend, *(str(value) for value in values))


def server_identity(conn: Connection, *, fresh: bool = False) -> ServerIdentity:
    """The identity of the server and database ``conn`` is on (see the module's rule):
    asked once per DBAPI connection, then read from ``conn.info``.

    :param conn: a Connection, possibly inside the caller's transaction (one read-only
        query is sent there the first time).
    :param fresh: ask again even if cached.
    :raises UnknownShardIdentity: for a backend that is not asked, a server that does not
        answer the query (its error chained; on PostgreSQL the caller's transaction is then
        aborted, and the claim refused anyway), or an incomplete answer.
    """
    info = conn.info
    cached = None if fresh else info.get(_INFO_KEY)
    if cached is not None:
        return tuple(cached)
    identity = _read(conn)
    info[_INFO_KEY] = identity
    return identity
