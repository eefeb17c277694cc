"""A JetStream message as the inbox sees it: :func:`to_delivery`, and the dead letter's headers.

The dedup key is the **producer's**, read from a header the user names (default
``Nats-Msg-Id``, the header JetStream itself deduplicates publishes on). The stream sequence
and ``num_delivered`` change from one delivery to the next; they go to
:attr:`~sa_inbox.brokers.Delivery.broker_ref` and
:attr:`~sa_inbox.brokers.Delivery.delivery_count`, never to the key.
"""

from __future__ import annotations

from collections.abc import Mapping

from nats.aio.msg import Msg

from ..delivery import DeadLetterReason, Delivery
from ..keys import read_key

__all__ = [
    "DEAD_LETTER_DETAIL",
    "DEAD_LETTER_MESSAGE_ID",
    "DEAD_LETTER_NATS_MSG_ID",
    "DEAD_LETTER_REASON",
    "DEAD_LETTER_SEQUENCE",
    "DEAD_LETTER_STREAM",
    "DEAD_LETTER_SUBJECT",
    "DEFAULT_KEY_HEADER",
    "dead_letter_headers",
    "to_delivery",
]

#: The header the producer's key is read from by default. JetStream also drops a publish whose
#: ``Nats-Msg-Id`` it saw inside the stream's ``duplicate_window`` ("JetStream Model Deep
#: Dive: Message Deduplication", default window 2 minutes).
DEFAULT_KEY_HEADER = "Nats-Msg-Id"

#: Headers the adapter adds to a dead letter (the original's other headers are kept).
DEAD_LETTER_REASON = "Sa-Inbox-Dead-Letter-Reason"
DEAD_LETTER_DETAIL = "Sa-Inbox-Dead-Letter-Detail"
DEAD_LETTER_MESSAGE_ID = "Sa-Inbox-Message-Id"
DEAD_LETTER_STREAM = "Sa-Inbox-Stream"
DEAD_LETTER_SEQUENCE = "Sa-Inbox-Stream-Sequence"
DEAD_LETTER_SUBJECT = "Sa-Inbox-Subject"
#: The original's ``Nats-Msg-Id`` (the dead letter's own is ``"<stream>:<sequence>"``), put
#: back by :func:`sa_inbox.brokers.dead_letters.replay`.
DEAD_LETTER_NATS_MSG_ID = "Sa-Inbox-Nats-Msg-Id"


def to_delivery(msg: Msg, *, key_header: str = DEFAULT_KEY_HEADER) -> Delivery:
    """The :class:`~sa_inbox.brokers.Delivery` for one JetStream message.

    :param msg: a message fetched from a JetStream consumer (its reply subject carries the
        metadata: "JetStream Model Deep Dive: Consumer Acknowledgements", the
        ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>...`` subject).
    :param key_header: the header holding the producer's key, matched exactly (NATS header
        names are case-sensitive on the wire); a message without it gets ``message_id=None``
        and is dead-lettered ``MISSING_MESSAGE_ID`` by :func:`~sa_inbox.brokers.process_async`.
    :returns: the delivery: ``delivery_count`` = ``msg.metadata.num_delivered`` (1 for the
        first delivery), ``broker_ref`` = ``"<stream>:<stream sequence>"``.
    :raises nats.errors.NotJSMessageError: if ``msg`` did not come from JetStream.
    """
    headers: Mapping[str, str] = msg.headers or {}
    metadata = msg.metadata
    key, key_error = read_key(headers.get(key_header))
    return Delivery(
        message_id=key,
        key_error=key_error,
        body=msg.data,
        delivery_count=max(1, metadata.num_delivered),
        headers=dict(headers),
        broker_ref=f"{metadata.stream}:{metadata.sequence.stream}",
    )


def dead_letter_headers(
    msg: Msg, delivery: Delivery, reason: DeadLetterReason, detail: str
) -> dict[str, str]:
    """The headers of ``msg``'s dead letter: the original's, minus JetStream's own
    ``Nats-*`` headers (a ``Nats-Expected-*`` header would make the publish fail), plus the
    reason, the detail, the producer's key, where the message came from and its own
    ``Nats-Msg-Id`` (:data:`DEAD_LETTER_NATS_MSG_ID`).

    The dead letter's ``Nats-Msg-Id`` is ``"<stream>:<sequence>"``, so JetStream drops a
    second dead letter of the same message inside the dead-letter stream's duplicate window
    (a consumer killed between the publish and the ``term``).
    """
    original = msg.headers or {}
    headers = {k: v for k, v in original.items() if not k.startswith("Nats-")}
    metadata = msg.metadata
    headers.update(
        {
            DEAD_LETTER_REASON: reason.value,
            DEAD_LETTER_DETAIL: detail,
            DEAD_LETTER_STREAM: metadata.stream,
            DEAD_LETTER_SEQUENCE: str(metadata.sequence.stream),
            DEAD_LETTER_SUBJECT: msg.subject,
            "Nats-Msg-Id": delivery.broker_ref,
        }
    )
    if delivery.message_id is not None:
        headers[DEAD_LETTER_MESSAGE_ID] = delivery.message_id
    if "Nats-Msg-Id" in original:
        headers[DEAD_LETTER_NATS_MSG_ID] = original["Nats-Msg-Id"]
    return headers
