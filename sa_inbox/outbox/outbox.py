"""The :class:`Outbox`: record a message in the caller's transaction, to be relayed later.

The transactional outbox: a handler that must publish a message does not publish it; it
inserts it into the outbox table in the same transaction as the inbox claim and the business
change. The message then exists if and only if that transaction committed. A relay
(:mod:`sa_inbox.outbox.relay`) later publishes each committed row with publisher confirms,
carrying the row's ``message_id`` as the broker message's id, the key the consuming
sa-inbox deduplicates on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session, scoped_session

from ..claim import Bind, connection_for
from ..dialects import is_autocommit
from ..exc import AutocommitConnection
from ..store.schema import utc_now
from ..validation import JSONSerializer, check_json_serializer
from .ids import uuid7
from .message import encode_payload, validate_destination, validate_headers, validate_message_id
from .schema import DEFAULT_MESSAGE_ID_LENGTH, DEFAULT_OUTBOX_TABLE, PENDING, outbox_table

__all__ = ["Outbox"]


class Outbox:
    """The outbox table, defined on the caller's :class:`~sqlalchemy.MetaData`.

    :param metadata: the MetaData the table joins (see
        :func:`~sa_inbox.outbox.schema.outbox_table`); create it with ``create_all()`` or
        ``op.create_outbox_table()``.
    :param table_name: the table's name.
    :param schema: the table's schema, or ``None``.
    :param message_id_length: length in characters of ``message_id`` (>= 36).
    :param json_serializer: turns a payload that is not ``bytes`` into its JSON text, as
        ``create_engine(json_serializer=...)`` does (e.g. ``functools.partial(json.dumps,
        default=str)`` for ``Decimal`` amounts); it may return text or UTF-8 bytes. Default
        compact :func:`json.dumps` (NaN and Infinity refused).
    :raises InvalidTable: for a bad ``message_id_length``.
    :raises InvalidArgument: for a ``json_serializer`` that is not callable.

    Example::

        outbox = Outbox(Base.metadata)

        def handler(session, delivery):            # run by sa_inbox.handle / process
            apply_payment(session, delivery)
            outbox.publish(session, "payments.applied", {"payment": delivery.message_id})
        # the row commits with the claim and the payment, or not at all
    """

    def __init__(
        self,
        metadata: sa.MetaData,
        *,
        table_name: str = DEFAULT_OUTBOX_TABLE,
        schema: str | None = None,
        message_id_length: int = DEFAULT_MESSAGE_ID_LENGTH,
        json_serializer: JSONSerializer | None = None,
    ) -> None:
        #: What :meth:`publish` serialises a payload that is not bytes with.
        self.json_serializer = check_json_serializer(json_serializer)
        self.table = outbox_table(
            metadata, table_name=table_name, schema=schema, message_id_length=message_id_length
        )
        self.message_id_length = message_id_length
        self._insert = self.table.insert()

    def row(
        self,
        destination: str,
        payload: Any,
        *,
        headers: Mapping[str, str] | None = None,
        message_id: str | None = None,
    ) -> dict[str, Any]:
        """Validate a message and return the row :meth:`publish` inserts; sends nothing.

        :raises InvalidOutboxMessage: see :meth:`publish`.
        """
        now = utc_now()
        return {
            "message_id": str(uuid7())
            if message_id is None
            else validate_message_id(message_id, self.message_id_length),
            "destination": validate_destination(destination),
            "headers": validate_headers(headers),
            "payload": encode_payload(payload, self.json_serializer),
            "status": PENDING,
            "created_at": now,
            "available_at": now,
            "attempts": 0,
        }

    def publish(
        self,
        bind: Bind,
        destination: str,
        payload: Any,
        *,
        headers: Mapping[str, str] | None = None,
        message_id: str | None = None,
    ) -> str:
        """Record a message in the caller's transaction; a relay publishes it after commit.

        One ``INSERT``; nothing is committed or flushed besides it. On a Session it runs
        through ``Session.execute``, so a claim registered with the session extension
        (:func:`sa_inbox.register_claim`) is emitted before it (the extension's
        ``do_orm_execute`` hook). If the transaction rolls back, the message was never
        published.

        :param bind: a Session, scoped_session or Connection in the caller's transaction
            (the handler's session in :func:`sa_inbox.handle` / the broker adapters).
        :param destination: the queue (RabbitMQ routing key on the publisher's exchange),
            stream (Redis) or subject (NATS); at most 255 characters.
        :param payload: the body: ``bytes`` as they are, any other value as JSON (UTF-8,
            through the outbox's ``json_serializer``).
        :param headers: optional string headers, sent with the message.
        :param message_id: the producer's key, default a new UUIDv7 (assigned here, once).
            Give your own only if it is unique per message (the column is unique: a second
            row with the same id fails the transaction with an ``IntegrityError``).
        :returns: the message's ``message_id``.
        :raises InvalidOutboxMessage: for a bad destination, payload, header or id, before
            any SQL (nothing is written).
        :raises AutocommitConnection: if ``bind`` commits each statement on its own (the
            message would commit apart from the business change).
        :raises InvalidBind: if ``bind`` is not a Session, scoped_session or Connection.
        """
        row = self.row(destination, payload, headers=headers, message_id=message_id)
        conn = connection_for(bind, self.table)
        if is_autocommit(conn):
            raise AutocommitConnection(
                "the outbox's connection is in AUTOCOMMIT mode: the message would commit on "
                "its own, apart from the business change; use a transactional connection"
            )
        self._execute(bind, conn, row)
        return str(row["message_id"])

    def _execute(self, bind: Bind, conn: Connection, row: dict[str, Any]) -> None:
        if isinstance(bind, Session | scoped_session):
            bind.execute(self._insert, row, bind_arguments={"clause": self.table})
        else:
            conn.execute(self._insert, row)
