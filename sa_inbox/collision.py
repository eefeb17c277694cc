"""Message-id collisions: two different messages that share ``(message_id, consumer_name)``.

A redelivery carries the same payload as the delivery that claimed the id; two producers
whose ids collide send *different* payloads under one id, and the second message would be
discarded as a duplicate with nothing erroring. sa-inbox tells them apart by a digest of the
payload, compared only on the duplicate path (a new claim stays one statement):

* :func:`payload_hash` is the stable digest both sides can compute: SHA-256 of the canonical
  JSON of the payload (sorted keys, no insignificant whitespace, UTF-8, no NaN/Infinity), or
  of the raw bytes for a ``bytes`` payload (a non-JSON body is hashed as it is on the wire).
* :class:`CollisionCheck` reads the stored digest of the ids a claim skipped, with a locking
  read, and compares. On a difference it raises :class:`~sa_inbox.exc.MessageIdCollision`
  (``on_collision="raise"``, the default: the caller's transaction rolls back and the
  message is nacked) or writes a row into the collisions table (``"record"``: the message is
  skipped like a duplicate, and the row commits with the caller's transaction).

Why a locking read (``SELECT … FOR SHARE``; MariaDB ``LOCK IN SHARE MODE``): under InnoDB's
default REPEATABLE READ a plain ``SELECT`` reads the transaction's snapshot, taken at its
first read, which may predate the commit of the row the ``INSERT IGNORE`` just met; a locking
read reads the latest committed version (MySQL manual, "Consistent Nonlocking Reads" and
"Locking Reads"). On PostgreSQL under READ COMMITTED each statement sees every row committed
before it starts (manual 13.2.1, "Read Committed Isolation Level"); ``FOR SHARE`` also keeps
the row from being purged before the caller commits (manual, "SELECT", "The Locking
Clause"). SQLite serialises writers, so the row it met is committed and visible.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .checks import check_metadata
from .exc import InvalidArgument, MessageIdCollision
from .schema import PAYLOAD_HASH, TIMESTAMP_TZ, identity_column, key_type

__all__ = [
    "COLLISIONS_TABLE",
    "CollisionCheck",
    "CollisionMode",
    "canonical_json",
    "check_mode",
    "collisions_table",
    "payload_hash",
    "payload_hash_of_row",
    "store_digests",
]

logger = logging.getLogger("sa_inbox.collision")

#: ``"raise"``: raise :class:`~sa_inbox.exc.MessageIdCollision`; ``"record"``: write a row
#: into the collisions table and skip the message.
CollisionMode = Literal["raise", "record"]
COLLISIONS_TABLE = "inbox_collisions"
_MODES = ("raise", "record")


def canonical_json(payload: Any) -> bytes:
    """The canonical JSON text of ``payload``, UTF-8 encoded: keys sorted, separators
    ``","`` and ``":"`` without spaces, non-ASCII characters as themselves (not ``\\u``
    escapes), NaN and Infinity refused (RFC 8259 has no such numbers).

    :param payload: any value :func:`json.dumps` accepts.
    :raises ValueError: for NaN/Infinity; :class:`TypeError` for a value JSON cannot hold.
    """
    text = json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


def payload_hash(payload: Any) -> bytes:
    """The 32-byte SHA-256 digest of a message payload, the same on producer and consumer.

    ``bytes``, ``bytearray`` and ``memoryview`` payloads are hashed as they are (the rule for
    non-JSON bodies: hash the raw bytes on the wire); anything else is hashed as its
    :func:`canonical_json`, so ``{"a": 1, "b": 2}`` and ``{"b": 2, "a": 1}`` agree. A
    ``str`` is a JSON string (hashed with its quotes); hash ``body.encode()`` to hash the
    text itself.

    :param payload: the payload.
    :returns: 32 bytes, fitting the ``payload_hash`` column (at most 64 bytes).
    :raises ValueError, TypeError: as :func:`canonical_json`.
    """
    if isinstance(payload, bytes | bytearray | memoryview):
        return hashlib.sha256(payload).digest()
    return hashlib.sha256(canonical_json(payload)).digest()


def check_mode(mode: str) -> CollisionMode:
    """``mode`` if it is ``"raise"`` or ``"record"``.

    :raises InvalidArgument: otherwise (a :class:`ValueError` too), when the Inbox or store
        is built.
    """
    if mode not in _MODES:
        raise InvalidArgument(f"on_collision must be 'raise' or 'record', not {mode!r}")
    return mode  # type: ignore[return-value]


def collisions_table(metadata: sa.MetaData, *, schema: str | None = None) -> sa.Table:
    """The collisions table on ``metadata`` (defined once, shared by every Inbox and store
    of that MetaData): ``id`` (identity), ``source`` (the inbox or store table),
    ``message_id``, ``consumer_name``, ``stored_hash`` (the digest of the message that
    claimed the id first), ``payload_hash`` (the colliding one's), and
    ``detected_at``.

    :param metadata: the MetaData of the inbox table.
    :param schema: the schema of the inbox table.
    :raises InvalidTableType: if ``metadata`` is not a MetaData (a declarative base).
    """
    check_metadata(metadata, entry="collisions_table()")
    key = f"{schema}.{COLLISIONS_TABLE}" if schema else COLLISIONS_TABLE
    existing = metadata.tables.get(key)
    if existing is not None:
        return existing
    return sa.Table(
        COLLISIONS_TABLE,
        metadata,
        identity_column(),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("message_id", key_type(255), nullable=False),
        sa.Column("consumer_name", key_type(255), nullable=False),
        sa.Column("stored_hash", PAYLOAD_HASH, nullable=True),
        sa.Column("payload_hash", PAYLOAD_HASH, nullable=False),
        sa.Column(
            "detected_at", TIMESTAMP_TZ, nullable=False, server_default=sa.text("CURRENT_TIMESTAMP")
        ),
        sa.Index(f"ix_{COLLISIONS_TABLE}_consumer", "consumer_name", "detected_at"),
        schema=schema,
        comment="sa-inbox: messages that shared an id with an earlier, different message",
    )


#: Reads the stored digest of a row: ``row mapping -> digest or None``.
StoredDigest = Callable[[Mapping[Any, Any]], bytes | None]


class CollisionCheck:
    """The duplicate path's comparison for one table (the inbox's or the store's).

    :param table: the table claimed into (``message_id``, ``consumer_name`` columns).
    :param columns: the columns to read for ``stored``.
    :param stored: the stored digest of a read row (``payload_hash`` for the inbox; the
        :func:`payload_hash` of the stored payload for the store).
    :param mode: ``"raise"`` or ``"record"``.
    """

    def __init__(
        self,
        table: sa.Table,
        columns: tuple[str, ...],
        stored: StoredDigest,
        mode: CollisionMode = "raise",
    ) -> None:
        self.table = table
        self.mode = check_mode(mode)
        self.stored = stored
        self.collisions = (
            collisions_table(table.metadata, schema=table.schema) if mode == "record" else None
        )
        c = table.c
        self._read = (
            sa.select(c.message_id, *(c[name] for name in columns))
            .where(c.consumer_name == sa.bindparam("consumer"))
            .where(c.message_id.in_(sa.bindparam("ids", expanding=True)))
            .with_for_update(read=True)
        )

    def check(self, conn: Connection, consumer_name: str, digests: Mapping[str, bytes]) -> set[str]:
        """Compare the skipped ids' ``digests`` with the stored ones; one locking read.

        :param conn: the caller's connection, in its transaction.
        :param consumer_name: the consumer.
        :param digests: message id -> the new delivery's digest, for the ids the claim
            skipped (a row exists).
        :returns: the ids that collided (recorded, in ``"record"`` mode); an id whose stored
            digest is unknown (NULL, or no row found) is a plain duplicate.
        :raises MessageIdCollision: in ``"raise"`` mode, for the first colliding id (sorted).
        """
        if not digests:
            return set()
        params = {"consumer": consumer_name, "ids": sorted(digests)}
        stored = {
            row["message_id"]: self.stored(row)
            for row in conn.execute(self._read, params).mappings()
        }
        collided = {
            mid: stored[mid]
            for mid in sorted(digests)
            if stored.get(mid) is not None and stored[mid] != digests[mid]
        }
        for mid, old in collided.items():
            self.found(conn, mid, consumer_name, old, digests[mid])
        return set(collided)

    def found(
        self,
        conn: Connection,
        message_id: str,
        consumer_name: str,
        stored_hash: bytes | None,
        new_hash: bytes,
    ) -> None:
        """Raise or record one collision (see :meth:`check`)."""
        logger.warning(
            "message %s (consumer %s): id collision, the payload differs from the claimed one",
            message_id,
            consumer_name,
            extra={
                "event": "inbox.claim.collision",
                "message_id": message_id,
                "consumer_name": consumer_name,
                "mode": self.mode,
            },
        )
        if self.collisions is None:
            raise MessageIdCollision(message_id, consumer_name, stored_hash, new_hash)
        conn.execute(
            self.collisions.insert(),
            {
                "source": self.table.name,
                "message_id": message_id[:255],
                "consumer_name": consumer_name[:255],
                "stored_hash": stored_hash,
                "payload_hash": new_hash,
            },
        )


def payload_hash_of_row(row: Mapping[Any, Any]) -> bytes | None:
    """The :func:`payload_hash` of a stored row's ``payload`` (the inbox store's digest)."""
    return payload_hash(row["payload"])


def store_digests(
    payloads: Mapping[str, Any], given: Mapping[str, bytes | None]
) -> dict[str, bytes]:
    """The digests given for a store receive, each checked against its payload.

    :param payloads: message id -> payload.
    :param given: message id -> the caller's ``payload_hash`` (or None: not compared).
    :raises InvalidArgument: if a digest is not :func:`payload_hash` of its payload
        (the store compares digests of stored payloads, so no other digest can match).
    """
    digests: dict[str, bytes] = {}
    for message_id, digest in given.items():
        if digest is None or message_id not in payloads:
            continue
        if digest != payload_hash(payloads[message_id]):
            raise InvalidArgument(
                f"payload_hash of {message_id!r} is not sa_inbox.collision.payload_hash(payload)"
            )
        digests[message_id] = digest
    return digests
