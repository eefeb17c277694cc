"""Stable idempotency keys for side effects that are not messages (payment APIs and the like).

A handler may run more than once for one message: the broker redelivers when the consumer
dies after the remote call and before its commit, and the runner re-runs a transaction after
a deadlock. A remote call made from the handler then repeats. Services that accept an
idempotency key (Stripe's ``Idempotency-Key`` header, most payment and messaging APIs)
perform a repeated request with the same key once and replay the first response. The key must
therefore be the same on every run of the handler for that message, and differ between
messages, consumers and the distinct calls one handler makes: :func:`idempotency_key`
derives it from exactly those three, and from nothing that changes between deliveries.

The derivation (stable across versions, processes and hosts; pinned by the tests)::

    uuid5(NAMESPACE, message_id + "\\0" + consumer_name + "\\0" + effect)

with ``NAMESPACE = uuid5(NAMESPACE_URL, "sa-inbox:idempotency-key")``
(``37862b5f-18fa-533f-bb7e-c656e369641b``, :data:`NAMESPACE`). NUL never occurs in a valid
message id, consumer name or effect, so the three parts cannot run into each other. UUIDv5
is SHA-1 based (RFC 9562, section 5.5): fine for a key that must be stable and unique,
not secret.

Limits: a service that takes **no** key cannot deduplicate, and the call repeats on a
redelivery (record the call's outcome in your own table inside the transaction and check it
first, or make the call from an outbox message's consumer instead); a service keeps keys only
for a **window** (Stripe: "at least 24 hours"), so a redelivery or replay after it repeats
the effect; a key reused with **different parameters** is refused by most services (Stripe
answers an error), so derive one key per distinct call (``effect``).
"""

from __future__ import annotations

import uuid

from .validation import validate_key

__all__ = ["NAMESPACE", "idempotency_key"]

#: The UUIDv5 namespace of the keys: ``uuid5(NAMESPACE_URL, "sa-inbox:idempotency-key")``.
NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "sa-inbox:idempotency-key")


def idempotency_key(message_id: str, consumer_name: str, effect: str) -> str:
    """The idempotency key of one outbound call made while handling one message.

    :param message_id: the message's producer-assigned id (what the inbox claims).
    :param consumer_name: the consumer handling it (one message may reach several).
    :param effect: names the call within the handler, e.g. ``"stripe:charge"`` or
        ``"email:receipt"``; two different calls of one handler need two effects.
    :returns: a UUID string (36 characters), the same for the same three arguments on
        every run, process and version: ``str(uuid5(NAMESPACE, "<message_id>\\0<consumer>\\0
        <effect>"))``.
    :raises InvalidMessageId: if any argument is not a non-empty str without surrounding
        whitespace or NUL (checked as a message id, up to 255 characters each).

    Example::

        def handler(session, delivery):
            key = idempotency_key(delivery.message_id, "billing", "stripe:charge")
            stripe.PaymentIntent.create(amount=..., idempotency_key=key)
            record_charge(session, delivery)
    """
    parts = [
        validate_key(message_id, "message_id", 255),
        validate_key(consumer_name, "consumer_name", 255),
        validate_key(effect, "effect", 255),
    ]
    return str(uuid.uuid5(NAMESPACE, "\x00".join(parts)))
