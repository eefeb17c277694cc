"""The outbox table: one row per message a transaction published, until it is relayed.

Row states::

    pending ──relay claims──▶ processing ──broker confirmed──▶ dispatched ──purge──▶ (gone)
       ▲                        │  │
       │   publish failed       │  └── failed max_attempts times ──▶ dead
       └────────────────────────┘       (or abandoned that often)

Timestamps are Python's UTC clock at the writer (as the inbox store's, see
:mod:`sa_inbox.store.schema`), stored with microseconds on every backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect

from ..checks import check_metadata
from ..exc import InvalidTable
from ..schema import identity_column, key_type
from ..store.schema import lease_columns
from ..validation import positive_int

__all__ = [
    "DEAD",
    "DEFAULT_MESSAGE_ID_LENGTH",
    "DEFAULT_OUTBOX_TABLE",
    "DISPATCHED",
    "HEADERS",
    "MAX_ERROR_LENGTH",
    "PAYLOAD",
    "PENDING",
    "PROCESSING",
    "STATUSES",
    "MySQLBody",
    "outbox_table",
]

DEFAULT_OUTBOX_TABLE = "outbox_messages"
#: A UUIDv7 is 36 characters; a caller's own ids may be longer, up to the column's length.
DEFAULT_MESSAGE_ID_LENGTH = 255
PENDING, PROCESSING, DISPATCHED, DEAD = "pending", "processing", "dispatched", "dead"
STATUSES = (PENDING, PROCESSING, DISPATCHED, DEAD)
#: ``last_error`` keeps at most this many characters of the publish error.
MAX_ERROR_LENGTH = 2000


class MySQLBody(sa.TypeDecorator[bytes]):
    """``LONGBLOB`` (``BLOB`` holds 64 KiB) bound as ``UNHEX(:hex)`` on MySQL/MariaDB.

    aiomysql 0.3 cannot bind ``bytes`` with PyMySQL 2.2 (it imports
    ``pymysql.converters.escape_bytes_prefixed``, which PyMySQL 2.2 replaced by a string:
    ``TypeError: 'str' object is not callable``), so the body is sent as hex text and
    ``UNHEX()`` turns it back into the same bytes on the server, for every MySQL driver.
    """

    impl = mysql.LONGBLOB
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any]:
        return lambda value: None if value is None else bytes(value).hex()

    def bind_expression(self, bindvalue: Any) -> Any:
        return sa.func.unhex(bindvalue, type_=sa.String())


#: The message body as it will be sent, bytes.
PAYLOAD = sa.LargeBinary().with_variant(MySQLBody(), "mysql", "mariadb")
#: The headers, a JSON object of strings.
HEADERS = sa.JSON()


def outbox_table(
    metadata: sa.MetaData,
    *,
    table_name: str = DEFAULT_OUTBOX_TABLE,
    schema: str | None = None,
    message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> sa.Table:
    """Define the outbox table on ``metadata`` and return it.

    Columns: ``id`` (bigint identity, the primary key and the relay order), ``message_id``
    (the producer's key, a UUIDv7 unless the caller gave one; unique as
    ``uq_<table>_message_id``, byte-compared), ``destination`` (queue / routing key, stream
    or subject, up to 255 characters), ``headers`` (JSON), ``payload`` (the body's bytes),
    ``status`` (one of :data:`STATUSES`, checked by ``ck_<table>_status``), ``created_at``,
    ``available_at`` (not relayed before: the retry back-off), ``claimed_at``,
    ``claimed_by`` (the relay's claim token), ``attempts`` (counted at claim time),
    ``last_error`` and ``dispatched_at``.

    Indexes, named the same on every backend: ``ix_<table>_claim`` (status, id) serves the
    relay's claim in id order; ``ix_<table>_destination`` (destination, status, id) the
    per-destination order check; ``ix_<table>_purge`` (status, dispatched_at) the purge of
    dispatched rows.

    :param metadata: the caller's MetaData (``create_all`` and Alembic see the table).
    :param table_name: the table's name.
    :param schema: the schema, or ``None``.
    :param message_id_length: length in characters of ``message_id`` (>= 36, a UUIDv7).
    :raises InvalidTable: if ``message_id_length`` is not an int >= 36, ``table_name``
        is empty, or the MetaData already holds that table.
    """
    check_metadata(metadata, entry="the outbox table", table_name=table_name, schema=schema)
    positive_int(message_id_length, "message_id_length", InvalidTable)
    if message_id_length < 36:
        raise InvalidTable(
            f"message_id_length must be at least 36 (a UUID), not {message_id_length}"
        )
    statuses = ", ".join(f"'{status}'" for status in STATUSES)
    columns: list[Any] = [
        identity_column(),
        sa.Column("message_id", key_type(message_id_length), nullable=False),
        sa.Column("destination", key_type(255), nullable=False),
        sa.Column("headers", HEADERS, nullable=False),
        sa.Column("payload", PAYLOAD, nullable=False),
        *lease_columns("created_at", "dispatched_at"),
    ]
    return sa.Table(
        table_name,
        metadata,
        *columns,
        sa.UniqueConstraint("message_id", name=f"uq_{table_name}_message_id"),
        sa.CheckConstraint(f"status IN ({statuses})", name=f"ck_{table_name}_status"),
        sa.Index(f"ix_{table_name}_claim", "status", "id"),
        sa.Index(f"ix_{table_name}_destination", "destination", "status", "id"),
        sa.Index(f"ix_{table_name}_purge", "status", "dispatched_at"),
        schema=schema,
        comment="sa-inbox: messages published by committed transactions, until relayed",
        # Marks the table for Alembic autogenerate (sa_inbox.alembic): kind + options.
        info={"sa_inbox": {"kind": "outbox", "options": {"message_id_length": message_id_length}}},
    )
