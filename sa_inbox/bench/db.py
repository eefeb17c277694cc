"""Engines and tables of the benchmarks: accounts, a ledger and an inbox, prefixed ``bench_``.

Every scenario drops and creates only its own ``bench_*`` tables, so it can run in a
database that holds other data. SQLite files run in WAL mode with ``synchronous=NORMAL``
(SQLite manual, "Write-Ahead Logging"): commits do not wait for an fsync each, so the
figures measure SQL work rather than the disk, as on the servers started by
``scripts/servers.sh`` (PostgreSQL ``fsync=off``, MariaDB
``innodb_flush_log_at_trx_commit=2``).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ..claim import Inbox

__all__ = [
    "ACCOUNT",
    "AMOUNT",
    "LEDGER",
    "BenchSchema",
    "backend_name",
    "default_sqlite_url",
    "make_engine",
    "sqlite_wal",
]

#: What each business transaction adds to an account's balance.
AMOUNT = Decimal("1.00")
#: Seconds a SQLite writer waits for the write lock before SQLITE_BUSY.
SQLITE_TIMEOUT = 60.0


@contextlib.contextmanager
def default_sqlite_url() -> Iterator[str]:
    """The default database of ``sa-inbox bench``: a SQLite file in a temporary directory,
    removed with the directory when the context ends."""
    with tempfile.TemporaryDirectory(prefix="sa-inbox-bench-") as directory:
        yield f"sqlite:///{Path(directory) / 'bench.db'}"


def backend_name(url: str | sa.Engine) -> str:
    """``"sqlite"``, ``"postgresql"``, ``"mariadb"``, ``"mysql"`` or another dialect name.

    A MySQL URL served by MariaDB is reported as ``"mariadb"`` (asked from the server).
    """
    engine = url if isinstance(url, sa.Engine) else None
    name = sa.make_url(url).get_backend_name() if isinstance(url, str) else url.dialect.name
    if name != "mysql":
        return name
    if engine is None:
        engine = make_engine(str(url))
    with engine.connect() as conn:
        version = str(conn.exec_driver_sql("SELECT VERSION()").scalar_one())
    return "mariadb" if "mariadb" in version.lower() else "mysql"


def _sqlite_pragmas(dbapi_connection: Any, connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def sqlite_wal(engine: sa.Engine) -> sa.Engine:
    """Open every connection of a SQLite ``engine`` in WAL mode with ``synchronous=NORMAL``.

    Several processes then write one file without an fsync per commit (readers never block
    the writer; SQLite manual, "Write-Ahead Logging"): the setting of the benchmarks, the
    demo and the tests that run worker processes. The first connection switches the file to
    WAL (the mode persists in it); later ones find it so. Engines of other backends are
    returned untouched.

    :param engine: the engine, before its first connection.
    :returns: ``engine``.

    Example::

        engine = sqlite_wal(sa.create_engine("sqlite:///inbox.db", connect_args={"timeout": 60}))
    """
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def make_engine(url: str, *, pool_size: int = 2) -> sa.Engine:
    """An engine for one benchmark process (SQLite: :func:`sqlite_wal`).

    :param url: a SQLAlchemy URL string.
    :param pool_size: connections kept in the pool.
    """
    if sa.make_url(url).get_backend_name() == "sqlite":
        return sqlite_wal(sa.create_engine(url, connect_args={"timeout": SQLITE_TIMEOUT}))
    return sa.create_engine(url, pool_size=pool_size, max_overflow=4)


class _Base(DeclarativeBase):
    pass


class Account(_Base):
    """An account whose balance each business transaction updates."""

    __tablename__ = "bench_accounts"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    balance: Mapped[Decimal] = mapped_column(sa.Numeric(14, 2))


class LedgerEntry(_Base):
    """One ledger row per processed message."""

    __tablename__ = "bench_ledger"
    id: Mapped[int] = mapped_column(sa.Identity(), primary_key=True)
    message_id: Mapped[str] = mapped_column(sa.String(255))
    account_id: Mapped[int] = mapped_column()
    amount: Mapped[Decimal] = mapped_column(sa.Numeric(14, 2))


ACCOUNT: sa.Table = Account.__table__  # type: ignore[assignment]
LEDGER: sa.Table = LedgerEntry.__table__  # type: ignore[assignment]
INBOX_TABLE = "bench_inbox"


class BenchSchema:
    """The business tables (shared ORM classes) plus an inbox, on one engine.

    :param engine: where the tables live.
    :param accounts: accounts created by :meth:`reset`, ids ``0 .. accounts - 1``.
    """

    def __init__(self, engine: sa.Engine, *, accounts: int = 64) -> None:
        self.engine = engine
        self.accounts = accounts
        self.metadata = sa.MetaData()
        self.inbox = Inbox(self.metadata, table_name=INBOX_TABLE)

    def reset(self) -> None:
        """Drop and create the ``bench_`` tables; every account starts at balance 0."""
        self.drop()
        _Base.metadata.create_all(self.engine)
        self.metadata.create_all(self.engine)
        with self.engine.begin() as conn:
            conn.execute(
                ACCOUNT.insert(), [{"id": i, "balance": Decimal(0)} for i in range(self.accounts)]
            )

    def drop(self) -> None:
        """Drop the ``bench_`` tables if they exist."""
        self.metadata.drop_all(self.engine, checkfirst=True)
        _Base.metadata.drop_all(self.engine, checkfirst=True)

    def state(self) -> dict[str, Any]:
        """The business state: ledger rows, inbox rows, and the sum of balances (a str)."""
        with self.engine.connect() as conn:
            ledger = conn.execute(sa.select(sa.func.count()).select_from(LEDGER)).scalar_one()
            inbox = conn.execute(
                sa.select(sa.func.count()).select_from(self.inbox.table)
            ).scalar_one()
            total = conn.execute(sa.select(sa.func.sum(ACCOUNT.c.balance))).scalar_one()
        return {
            "ledger_rows": int(ledger),
            "inbox_rows": int(inbox),
            "balance_total": str(Decimal(total or 0).quantize(Decimal("0.01"))),
        }
