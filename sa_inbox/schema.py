"""The processed-messages table: one row per (message_id, consumer_name) ever claimed.

The composite primary key *is* the deduplication: a second delivery of the same message to
the same consumer collides with it. There is no surrogate key, since it would only add an
index to maintain on every claim.
"""

from __future__ import annotations

import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, oracle
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Mapped, declared_attr, mapped_column
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from .checks import check_metadata
from .exc import InvalidTable
from .validation import positive_int

__all__ = [
    "DEFAULT_MESSAGE_ID_LENGTH",
    "DEFAULT_TABLE_NAME",
    "INSERT_COLUMNS_INFO",
    "RECEIVED_AT",
    "RECEIVED_NOW",
    "REQUIRED_COLUMNS",
    "CurrentTimestamp",
    "InboxMessageMixin",
    "claim_columns",
    "identity_column",
    "insert_columns",
    "key_type",
    "processed_messages_table",
]

DEFAULT_TABLE_NAME = "inbox_processed_messages"
DEFAULT_MESSAGE_ID_LENGTH = 255
REQUIRED_COLUMNS = ("message_id", "consumer_name", "received_at")
TABLE_COMMENT = "sa-inbox: messages already processed, one row per (message_id, consumer)"
#: Columns a claim writes, in order; ``received_at`` comes from the server default.
CLAIM_COLUMNS = ("message_id", "consumer_name", "message_type", "correlation_id", "payload_hash")


def claim_columns(table: sa.Table) -> list[str]:
    """The :data:`CLAIM_COLUMNS` that ``table`` has, in order."""
    return [name for name in CLAIM_COLUMNS if name in table.c]


#: ``table.info`` key: the columns an insert-or-skip into the table writes, in order, when
#: they are not its :func:`claim_columns` (the inbox store's table sets its receive
#: columns). The table says what it is written with; a dialect that names the columns in
#: its statement (Oracle's ``MERGE``) reads them through :func:`insert_columns`.
INSERT_COLUMNS_INFO = "sa_inbox.insert_columns"


def insert_columns(table: sa.Table) -> list[str]:
    """The columns one insert-or-skip row into ``table`` has, ``message_id`` and
    ``consumer_name`` first: ``table.info[INSERT_COLUMNS_INFO]`` where the table sets it,
    else :func:`claim_columns`."""
    return list(table.info.get(INSERT_COLUMNS_INFO) or claim_columns(table))


#: Timestamp with time zone everywhere; Oracle's DateTime would be DATE (no fraction, no zone).
TIMESTAMP_TZ = sa.DateTime(timezone=True).with_variant(oracle.TIMESTAMP(timezone=True), "oracle")
#: ``CURRENT_TIMESTAMP`` is understood by every backend (MySQL 5.7 has no expression defaults).
NOW = sa.text("CURRENT_TIMESTAMP")
#: ``received_at`` of the processed-messages table: :data:`TIMESTAMP_TZ` with microseconds
#: on MySQL/MariaDB too, ``DATETIME(6)`` (a plain ``DATETIME`` keeps whole seconds: MySQL
#: manual, "Fractional Seconds in Time Values"; MariaDB KB, "DATETIME"), as the store's.
RECEIVED_AT = TIMESTAMP_TZ.with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


class CurrentTimestamp(FunctionElement[datetime.datetime]):
    """``CURRENT_TIMESTAMP`` with the precision of :data:`RECEIVED_AT`: ``CURRENT_TIMESTAMP(6)``
    on MySQL/MariaDB (whose ``CURRENT_TIMESTAMP`` has whole seconds, and whose
    ``DATETIME(6)`` default must name the same precision: MySQL manual, "Automatic
    Initialization and Updating for TIMESTAMP and DATETIME"), ``CURRENT_TIMESTAMP``
    elsewhere. The server default of ``received_at``."""

    type = sa.DateTime(timezone=True)
    name = "current_timestamp"
    inherit_cache = True


@compiles(CurrentTimestamp)
def _current_timestamp(element: CurrentTimestamp, compiler: SQLCompiler, **kw: Any) -> str:
    return "CURRENT_TIMESTAMP"


@compiles(CurrentTimestamp, "mysql")
@compiles(CurrentTimestamp, "mariadb")
def _current_timestamp_microseconds(
    element: CurrentTimestamp, compiler: SQLCompiler, **kw: Any
) -> str:
    return "CURRENT_TIMESTAMP(6)"


#: The server default of ``received_at`` (:class:`CurrentTimestamp`).
RECEIVED_NOW = CurrentTimestamp()
#: Up to 64 bytes. MySQL/MariaDB store ``BLOB(64)`` as ``TINYBLOB`` (MySQL manual, "13.3.4
#: The BLOB and TEXT Types"), so that is what the MetaData says there: Alembic's type
#: comparison then finds the reflected column equal and ``alembic check`` stays clean.
PAYLOAD_HASH = sa.LargeBinary(64).with_variant(mysql.TINYBLOB(), "mysql", "mariadb")


def identity_column() -> sa.Column[int]:
    """``id``: the table's primary key, a ``BIGINT`` identity (``INTEGER`` on SQLite, whose
    ``INTEGER PRIMARY KEY`` alone is the rowid alias)."""
    return sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        sa.Identity(),
        primary_key=True,
    )


def key_type(length: int) -> sa.types.TypeEngine[str]:
    """``VARCHAR(length)`` compared byte for byte on every backend.

    MySQL's and MariaDB's default collations are case- and accent-insensitive
    (``utf8mb4_0900_ai_ci``, ``utf8mb4_general_ci``): under them ``"Pay-1"`` and ``"pay-1"``
    would collide on the primary key and the second message would be skipped as a duplicate.
    So the key columns use ``utf8mb4_bin`` there (MySQL manual, "10.8.5 The binary Collation
    Compared to _bin Collations"). PostgreSQL's, SQLite's and Oracle's defaults are already
    binary/deterministic.
    """
    binary = mysql.VARCHAR(length, charset="utf8mb4", collation="utf8mb4_bin")
    return sa.String(length).with_variant(binary, "mysql", "mariadb")


def _columns(message_id_length: int) -> list[sa.Column[object]]:
    return [
        sa.Column("message_id", key_type(message_id_length), nullable=False),
        sa.Column("consumer_name", key_type(message_id_length), nullable=False),
        sa.Column("received_at", RECEIVED_AT, nullable=False, server_default=RECEIVED_NOW),
        sa.Column("message_type", sa.String(255), nullable=True),
        sa.Column("correlation_id", sa.String(255), nullable=True),
        sa.Column("payload_hash", PAYLOAD_HASH, nullable=True),
    ]


def _table_info(message_id_length: int) -> dict[str, object]:
    """The mark by which Alembic autogenerate recognises an sa-inbox table."""
    return {
        "sa_inbox": {
            "kind": "processed_messages",
            "options": {"message_id_length": message_id_length},
        }
    }


def processed_messages_table(
    metadata: sa.MetaData,
    *,
    table_name: str = DEFAULT_TABLE_NAME,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> sa.Table:
    """Define the processed-messages table on ``metadata`` and return it.

    Columns: ``message_id`` and ``consumer_name`` (``VARCHAR(message_id_length)``, NOT NULL,
    together the primary key ``pk_<table_name>``), ``received_at`` (timestamp with time
    zone and microseconds, :data:`RECEIVED_AT`, server default :class:`CurrentTimestamp`,
    indexed as ``ix_<table_name>_received_at`` for the
    purge), and the optional debugging columns ``message_type``, ``correlation_id`` and
    ``payload_hash`` (up to 64 bytes, e.g. a SHA-256 digest).

    The primary key is named so that a duplicate can be matched by constraint name on
    backends whose only signal is the constraint (Oracle's ORA-00001).

    :param metadata: the caller's MetaData; the table joins it, so ``create_all`` and
        Alembic autogenerate see it.
    :param table_name: the table's name.
    :param schema: the schema, or ``None`` for the default.
    :param message_id_length: the length in characters of ``message_id`` and
        ``consumer_name``; longer values are refused before any SQL is sent.
    :raises InvalidTable: if ``message_id_length`` is not a positive int, ``table_name``
        is empty, or the MetaData already holds that table.
    """
    check_metadata(metadata, entry="the inbox table", table_name=table_name, schema=schema)
    positive_int(message_id_length, "message_id_length", InvalidTable)
    return sa.Table(
        table_name,
        metadata,
        *_columns(message_id_length),
        sa.PrimaryKeyConstraint("message_id", "consumer_name", name=f"pk_{table_name}"),
        sa.Index(f"ix_{table_name}_received_at", "received_at"),
        schema=schema,
        comment=TABLE_COMMENT,
        # Marks the table for Alembic autogenerate (sa_inbox.alembic): kind + factory options.
        info=_table_info(message_id_length),
    )


class InboxMessageMixin:
    """Declarative mixin for users who want an ORM class over the processed-messages table.

    Example::

        class ProcessedMessage(InboxMessageMixin, Base):
            __tablename__ = "inbox_processed_messages"

        inbox = Inbox.for_table(ProcessedMessage.__table__)

    Columns and constraints are the same as :func:`processed_messages_table` with the
    default ``message_id_length`` of 255 characters.
    """

    message_id: Mapped[str] = mapped_column(key_type(DEFAULT_MESSAGE_ID_LENGTH), primary_key=True)
    consumer_name: Mapped[str] = mapped_column(
        key_type(DEFAULT_MESSAGE_ID_LENGTH), primary_key=True
    )
    received_at: Mapped[datetime.datetime] = mapped_column(RECEIVED_AT, server_default=RECEIVED_NOW)
    message_type: Mapped[str | None] = mapped_column(sa.String(255))
    correlation_id: Mapped[str | None] = mapped_column(sa.String(255))
    payload_hash: Mapped[bytes | None] = mapped_column(PAYLOAD_HASH)

    @declared_attr.directive
    def __table_args__(cls) -> tuple[object, ...]:
        name = getattr(cls, "__tablename__", DEFAULT_TABLE_NAME)
        return (
            sa.PrimaryKeyConstraint("message_id", "consumer_name", name=f"pk_{name}"),
            sa.Index(f"ix_{name}_received_at", "received_at"),
            {"comment": TABLE_COMMENT, "info": _table_info(DEFAULT_MESSAGE_ID_LENGTH)},
        )
