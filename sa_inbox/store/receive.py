"""The store's receive: one message, or a batch, stored in the caller's transaction with
the insert-or-skip of :meth:`sa_inbox.Inbox.claim` (a redelivery is skipped)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.expression import Executable

from ..claim import Bind, ClaimPath, PreparedInsert
from ..collision import store_digests
from ..dialects import ClaimDialect
from ..exc import InvalidArgument
from ..hooks import InboxHooks
from ..validation import JSONSerializer, json_text, validate_key
from .protocol import Incoming
from .schema import DEFAULT_CONSUMER, PENDING, SerialisedJSON
from .values import aware

__all__ = ["StoreReceive", "receive_insert"]


class StoreReceive:
    """The receive: a message stored in the caller's transaction, deduplicated (the
    attributes are :class:`~sa_inbox.store.base.StoreBase`'s)."""

    table: sa.Table
    hooks: InboxHooks
    json_serializer: JSONSerializer | None
    message_id_length: int
    _insert: PreparedInsert
    _receives: ClaimPath

    def receive(
        self,
        bind: Bind,
        message_id: str,
        payload: Any,
        *,
        consumer_name: str = DEFAULT_CONSUMER,
        aggregate_id: str | None = None,
        message_type: str | None = None,
        now: datetime.datetime | None = None,
        payload_hash: bytes | None = None,
    ) -> bool:
        """Store one message in the caller's transaction; skip it if already stored.

        The same insert-or-skip statement as :meth:`sa_inbox.Inbox.claim` (``ON CONFLICT
        DO NOTHING``, ``INSERT IGNORE``, ``MERGE``) on the unique ``(message_id,
        consumer_name)``. Commit, then ack the broker; a duplicate is acked too.

        Cost: one statement, new or duplicate (MySQL/MariaDB included, see
        :meth:`~sa_inbox.dialects.MySQLClaim.claim_one`), built once per backend
        (:func:`receive_insert`) and, on PostgreSQL, MySQL/MariaDB and SQLite, compiled once
        per engine and sent as driver SQL (:class:`~sa_inbox.dialects.driver_sql.DriverSQL`:
        ``before_cursor_execute`` listeners see it, ``before_execute`` ones do not); the
        payload is serialised once, by the validation, and that text is what is bound.

        :param bind: a Session or Connection in the caller's transaction (never committed
            here).
        :param message_id: the producer-assigned id.
        :param payload: any value the store's ``json_serializer`` (default
            :func:`json.dumps`) turns into JSON.
        :param consumer_name: the consumer (queue) the message is stored for.
        :param aggregate_id: the aggregate the message is about (per-aggregate ordering).
        :param message_type: optional type name, at most 255 characters.
        :param now: the receive time (aware); default the current UTC time.
        :param payload_hash: ``sa_inbox.collision.payload_hash(payload)``, to detect an id
            collision: on the duplicate path only, the stored payload is read (a locking
            read) and its digest compared (see ``on_collision``).
        :returns: True if the message is new, False if it was already stored (or a
            collision was recorded).
        :raises InvalidMessageId: for an invalid id, consumer name, aggregate id or type.
        :raises InvalidArgument: for a payload that is not JSON, or a ``payload_hash``
            that is not the payload's (nothing is sent).
        :raises MessageIdCollision: with ``on_collision="raise"``, for an id stored with a
            different payload: roll back and nack.
        :raises TransientClaimError: on a deadlock or serialization failure: roll back and
            retry.
        """
        row = self._row(message_id, payload, aggregate_id, message_type, consumer_name, now)
        digests = store_digests({row["message_id"]: payload}, {row["message_id"]: payload_hash})
        return self._receives.one(bind, row, digests.get(row["message_id"]), self.hooks)

    def receive_many(
        self,
        bind: Bind,
        messages: Iterable[Incoming],
        *,
        consumer_name: str = DEFAULT_CONSUMER,
        now: datetime.datetime | None = None,
        payload_hashes: Mapping[str, bytes] | None = None,
    ) -> set[str]:
        """Store a batch (one broker poll) in the caller's transaction.

        The batch keeps its order (ids, hence the lease order, follow it); a message id that
        occurs twice keeps its first occurrence. PostgreSQL, SQLite and MariaDB insert up to
        1000 rows per statement with ``RETURNING``; MySQL and Oracle one row per statement.
        Two concurrent batches holding the same ids in different orders can deadlock:
        that is a :class:`~sa_inbox.exc.TransientClaimError`, retry the transaction.

        :param messages: the batch; every message is validated before any SQL is sent.
        :param payload_hashes: ``message_id -> payload_hash(payload)``, as :meth:`receive`'s
            ``payload_hash``; the ids skipped are compared in one locking read.
        :returns: the ids of the messages that were new.
        :raises InvalidMessageId, InvalidArgument: as :meth:`receive`, for any message.
        :raises MessageIdCollision: as :meth:`receive`.
        """
        if isinstance(messages, Incoming):
            raise InvalidArgument("receive_many takes an iterable of Incoming messages")
        when = aware(now)
        rows: dict[str, Mapping[str, Any]] = {}
        payloads: dict[str, Any] = {}  # the first copy's payload per id, as given
        for message in messages:
            if not isinstance(message, Incoming):
                raise InvalidArgument(f"expected Incoming, not {type(message).__name__}")
            row = self._row(
                message.message_id,
                message.payload,
                message.aggregate_id,
                message.message_type,
                consumer_name,
                when,
            )
            if row["message_id"] not in rows:
                rows[row["message_id"]] = row
                payloads[row["message_id"]] = message.payload
        if not rows:
            return set()
        digests = store_digests(payloads, payload_hashes or {})
        return self._receives.many(bind, list(rows.values()), digests, self.hooks)

    def _row(
        self,
        message_id: str,
        payload: Any,
        aggregate_id: str | None,
        message_type: str | None,
        consumer_name: str,
        now: datetime.datetime | None,
    ) -> dict[str, Any]:
        """The validated row of one message (the payload serialised, once), before any SQL."""
        when = aware(now)
        length = self.message_id_length
        return {
            "message_id": validate_key(message_id, "message_id", length),
            "consumer_name": validate_key(consumer_name, "consumer_name", length),
            "aggregate_id": None if aggregate_id is None else _key(aggregate_id, "aggregate_id"),
            "message_type": None if message_type is None else _key(message_type, "message_type"),
            "payload": _json(payload, self.json_serializer),
            "status": PENDING,
            "received_at": when,
            "available_at": when,
            "attempts": 0,
        }

    def _prepared(self, conn: Connection) -> tuple[ClaimDialect, Executable]:
        """The insert-or-skip dialect and cached receive statement for ``conn``'s backend,
        after its one-time checks (:class:`~sa_inbox.claim.PreparedInsert`)."""
        return self._insert(conn)


def _key(value: str, field: str) -> str:
    return validate_key(value, field, 255)


def _json(payload: Any, serializer: JSONSerializer | None = None) -> SerialisedJSON:
    """``payload`` as JSON text (:func:`~sa_inbox.validation.json_text`, with the store's
    ``json_serializer``): the one serialisation of a received payload, whose text the receive
    statement binds (:func:`receive_insert`).

    :raises InvalidArgument: if it cannot be serialised.
    """
    return SerialisedJSON(json_text(payload, serializer, InvalidArgument))


def receive_insert(dialect: ClaimDialect, table: sa.Table) -> Executable:
    """The store's single-row insert-or-skip for ``dialect``, its payload bound as JSON text.

    The receive serialises the payload once, to validate it (:func:`_json`); binding that
    text instead of the value saves the JSON type's second ``json.dumps`` on every receive.
    On an ``INSERT`` (PostgreSQL, MySQL/MariaDB, SQLite) the payload's value is the
    ``Text`` bind parameter ``payload`` through :meth:`ClaimDialect.json_text` (a cast to
    ``JSON`` on PostgreSQL), ``status`` and ``attempts`` are the literals ``'pending'`` and
    ``0`` in its text, and the statement is ``inline()`` (SQLAlchemy docs,
    ``Insert.inline``: no implicit ``RETURNING`` of the new ``id``); Oracle's ``MERGE``
    binds through :class:`JSONText`, which takes a :class:`SerialisedJSON` as it is.

    :param dialect: the backend's claim dialect.
    :param table: the store table.
    """
    statement = dialect.insert_or_skip(table)
    if isinstance(statement, sa.Insert):
        text = sa.bindparam("payload", type_=sa.Text())
        statement = statement.values(
            payload=dialect.json_text(text, table.c.payload),
            # The constants of every receive, in the SQL text rather than bound per call
            # (the row's own values for these keys are then not sent).
            status=sa.literal_column(f"'{PENDING}'", sa.String()),
            attempts=sa.literal_column("0", sa.Integer()),
        )
        # inline(): no implicit "RETURNING id" (SQLAlchemy adds it on PostgreSQL to fetch
        # the new identity, which a receive never uses: a result set to send, fetch and
        # read on every receive); an explicit .returning() (receive_many) still applies.
        statement = statement.inline()
    return statement
