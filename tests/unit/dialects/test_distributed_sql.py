"""CockroachDB and YugabyteDB without a server: the registry, the recognition, the exact SQL
of the claim, the batch claim, the store's claim and the purge, and the error classifiers.

No server of either can be installed here; the live suite
(tests/backends/distributed/test_distributed_sql.py) runs only with
``SA_INBOX_TEST_COCKROACHDB_URL`` / ``SA_INBOX_TEST_YUGABYTEDB_URL``. CockroachDB's SQL is
compiled with ``sqlalchemy-cockroachdb``'s own dialect (installed by scripts/venv.sh for the
test suite; required in CI).
"""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from sa_inbox import Inbox
from sa_inbox.dialects import backend_for, backend_of, claim_dialect_for, classifier_for
from sa_inbox.dialects.cockroachdb import (
    CockroachDBClaim,
    CockroachDBPurge,
    CockroachDBStoreClaim,
    cockroachdb_version,
)
from sa_inbox.dialects.postgresql import PostgreSQLPurge
from sa_inbox.dialects.yugabytedb import YugabyteDBPurge, is_yugabytedb, yugabytedb_version
from sa_inbox.exc import UnsupportedBackend
from sa_inbox.retention import PurgeTarget
from sa_inbox.store import PROCESSING, InboxStore
from tests.conftest import importorskip

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
T = "inbox_processed_messages"
YB_VERSION = (
    "PostgreSQL 11.2-YB-2.20.1.0-b0 on x86_64-pc-linux-gnu, compiled by clang version "
    "16.0.6 (https://github.com/yugabyte/llvm-project.git 1e6329f), 64-bit"
)
CRDB_VERSION = (
    "CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu, built 2023/09/27 01:53:43, go1.19.10)"
)


@pytest.fixture(scope="module")
def crdb() -> sa.Dialect:
    """sqlalchemy-cockroachdb's psycopg 3 dialect (no connection is made)."""
    importorskip("sqlalchemy_cockroachdb", "cockroachdb")  # scripts/venv.sh installs it
    return sa.create_engine("cockroachdb+psycopg://root@127.0.0.1:26257/app").dialect


def sql(statement: Any, dialect: sa.Dialect) -> str:
    return " ".join(str(statement.compile(dialect=dialect)).split())


def test_the_cockroachdb_dialect_name_is_registered(crdb: sa.Dialect) -> None:
    assert crdb.name == "cockroachdb"
    backend = backend_for(crdb.name)
    assert type(backend.claim) is CockroachDBClaim
    assert type(backend.purge) is CockroachDBPurge
    assert type(backend.store_claim) is CockroachDBStoreClaim
    # SERIALIZABLE kept: READ COMMITTED needs a cluster setting (v23.2+)
    assert backend.purge.isolation_level is None and backend.store_claim.isolation_level is None


def test_cockroachdb_claims_with_on_conflict_do_nothing(crdb: sa.Dialect) -> None:
    table = Inbox(sa.MetaData()).table
    claim = claim_dialect_for("cockroachdb")
    single = claim.insert_or_skip(table)
    keys = ["message_id", "consumer_name", "payload_hash"]  # what a claim binds
    assert " ".join(str(single.compile(dialect=crdb, column_keys=keys)).split()) == (
        f"INSERT INTO {T} (message_id, consumer_name, payload_hash) "
        "VALUES (%(message_id)s::VARCHAR, %(consumer_name)s::VARCHAR, %(payload_hash)s) "
        "ON CONFLICT (message_id, consumer_name) DO NOTHING"
    )
    batch = single.returning(table.c.message_id)  # type: ignore[attr-defined]
    assert sql(batch, crdb).endswith(
        f"ON CONFLICT (message_id, consumer_name) DO NOTHING RETURNING {T}.message_id"
    )
    assert claim.supports_returning(SimpleNamespace(dialect=crdb))  # type: ignore[arg-type]


def _purge(dialect_sql: sa.Dialect, purge: Any) -> str:
    table = Inbox(sa.MetaData()).table
    target = PurgeTarget(table)
    statement = purge.delete_batch(table, target.expired(NOW), target.order_by, 5000)
    return sql(statement, dialect_sql)


PRIMARY_KEY_BATCH = (
    f"DELETE FROM {T} WHERE ({T}.message_id, {T}.consumer_name) IN "
    f"(SELECT {T}.message_id, {T}.consumer_name FROM {T} "
    f"WHERE {T}.received_at < %(cutoff)s::TIMESTAMP WITH TIME ZONE "
    f"ORDER BY {T}.received_at LIMIT %(param_1)s::INTEGER FOR UPDATE SKIP LOCKED)"
)


def test_cockroachdb_purges_by_primary_key_without_ctid(crdb: sa.Dialect) -> None:
    assert _purge(crdb, backend_for("cockroachdb").purge) == PRIMARY_KEY_BATCH


def test_yugabytedb_purges_by_primary_key_without_ctid() -> None:
    statement = _purge(postgresql.dialect(), YugabyteDBPurge())
    assert statement == PRIMARY_KEY_BATCH and "ctid" not in statement
    assert "ctid" in _purge(postgresql.dialect(), PostgreSQLPurge())  # PostgreSQL's differs


@pytest.mark.parametrize("which", ["cockroachdb", "yugabytedb"])
def test_the_store_claims_in_one_update_with_skip_locked(crdb: sa.Dialect, which: str) -> None:
    store = InboxStore(sa.MetaData())
    t = store.table
    _, pending = store.candidates(visibility_timeout=30, max_attempts=5, now=NOW)
    values = {"status": PROCESSING, "claimed_at": NOW, "claimed_by": "w#1"}
    dialect = crdb if which == "cockroachdb" else postgresql.dialect()
    store_claim = (
        backend_for("cockroachdb").store_claim
        if which == "cockroachdb"
        else _yugabytedb_backend().store_claim
    )
    statement = sql(store_claim.claim_statement(t, pending, 10, values), dialect)
    assert statement.startswith("UPDATE inbox_store SET status=%(status)s::VARCHAR")
    assert (
        "WHERE inbox_store.id IN (SELECT candidate.id FROM inbox_store AS candidate "
        "WHERE candidate.consumer_name = %(consumer_name_1)s::VARCHAR" in statement
    )
    returning = ", ".join(f"inbox_store.{c.name}" for c in t.c)
    assert statement.endswith(
        "ORDER BY candidate.received_at, candidate.id LIMIT %(param_1)s::INTEGER "
        f"FOR UPDATE SKIP LOCKED) RETURNING {returning}"
    )


def _error(sqlstate: str) -> sa.exc.DBAPIError:
    orig = psycopg.errors.lookup(sqlstate)("restart transaction")
    return sa.exc.OperationalError("COMMIT", {}, orig)


@pytest.mark.parametrize(
    ("sqlstate", "cockroachdb", "postgresql_"),
    [("40001", True, True), ("40P01", True, True), ("40003", True, False), ("23505", False, False)],
)
def test_transient_errors(sqlstate: str, cockroachdb: bool, postgresql_: bool) -> None:
    error = _error(sqlstate)
    assert classifier_for("cockroachdb").is_transient(error) is cockroachdb
    assert classifier_for("postgresql").is_transient(error) is postgresql_
    assert classifier_for(None).is_transient(error) is (cockroachdb or postgresql_)
    assert _yugabytedb_backend().claim.is_transient(error) is postgresql_


def test_versions_are_read_from_the_version_strings() -> None:
    assert cockroachdb_version(CRDB_VERSION) == (23, 1, 11)
    assert cockroachdb_version("CockroachDB OSS v22.2.0 (…)") == (22, 2, 0)
    assert cockroachdb_version("PostgreSQL 15.4") is None
    assert is_yugabytedb(YB_VERSION) and yugabytedb_version(YB_VERSION) == (2, 20, 1)
    assert not is_yugabytedb("PostgreSQL 15.4 (Debian 15.4-1) on x86_64-pc-linux-gnu")
    assert yugabytedb_version("PostgreSQL 15.4") is None


class Engine:
    """A stand-in for the engine a connection belongs to (weak-referenceable)."""


class VersionConnection:
    """Answers ``SELECT version()`` with a fixed string (the only statement the checks send)."""

    def __init__(self, version: str, dialect: sa.Dialect) -> None:
        self.version = version
        self.dialect = dialect
        self.engine = Engine()  # one per connection here
        self.sent: list[str] = []

    def exec_driver_sql(self, statement: str) -> Any:
        self.sent.append(statement)
        return SimpleNamespace(scalar=lambda: self.version)


@pytest.mark.parametrize(
    ("version", "supported"),
    [
        (CRDB_VERSION, True),
        ("CockroachDB CCL v25.2.0 (…)", True),
        ("CockroachDB CCL v22.2.19 (…)", False),
        ("CockroachDB OSS v21.2.0", False),
    ],
)
def test_the_store_claim_needs_cockroachdb_23_1(
    crdb: sa.Dialect, version: str, supported: bool
) -> None:
    conn: Any = VersionConnection(version, crdb)
    if supported:
        backend_for("cockroachdb").store_claim.check_backend(conn)
    else:
        with pytest.raises(UnsupportedBackend, match=r"CockroachDB 23\.1 or newer"):
            backend_for("cockroachdb").store_claim.check_backend(conn)
    assert conn.sent == ["SELECT version()"]


def _yugabytedb_backend() -> Any:
    return backend_of(VersionConnection(YB_VERSION, postgresql.dialect()))  # type: ignore[arg-type]


def test_backend_of_tells_yugabytedb_from_postgresql_once_per_engine() -> None:
    yb: Any = VersionConnection(YB_VERSION, postgresql.dialect())
    assert type(backend_of(yb).purge) is YugabyteDBPurge
    assert backend_of(yb) is backend_of(yb) and yb.sent == ["SELECT version()"]
    pg: Any = VersionConnection("PostgreSQL 15.4 on x86_64", postgresql.dialect())
    assert backend_of(pg) is backend_for("postgresql")
    crdb_conn: Any = VersionConnection(CRDB_VERSION, sa.dialects.sqlite.dialect())
    assert backend_of(crdb_conn) is backend_for("sqlite") and crdb_conn.sent == []
