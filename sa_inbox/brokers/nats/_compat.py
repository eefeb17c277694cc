"""What nats-py keeps private and the consumer needs: the one module that reads nats-py's
internals (nats-py 2.x), so a nats-py release that changes them is mended here only."""

from __future__ import annotations

from nats.aio.msg import Msg
from nats.js import JetStreamContext

__all__ = ["delivered_unfetched", "reconnecting", "term_sync"]


def delivered_unfetched(subscription: JetStreamContext.PullSubscription) -> list[Msg]:
    """The messages JetStream delivered to this client for an earlier pull that ``fetch``
    has not handed out yet: a pull request can still deliver after the client's ``fetch``
    returned, and nats-py keeps such messages for the next ``fetch`` in the subscription's
    pending queue (nats-py 2.x, ``PullSubscription._sub._pending_queue``; nothing if that
    changes). JetStream counts them delivered, so they need ``+WPI`` too."""
    queue = getattr(getattr(subscription, "_sub", None), "_pending_queue", None)
    waiting = list(getattr(queue, "_queue", ()))
    return [m for m in waiting if isinstance(m, Msg) and (m.reply or "").startswith("$JS.ACK.")]


def reconnecting(js: JetStreamContext) -> bool:
    """Whether the context's client is reconnecting (nats-py's ``Client.is_reconnecting``;
    the context keeps its client as ``_nc``)."""
    client = getattr(js, "_nc", None)
    return bool(getattr(client, "is_reconnecting", False))


async def term_sync(msg: Msg, timeout: float) -> None:
    """``+TERM`` sent as a request, which JetStream answers once the consumer processed it,
    as nats-py's ``Msg.ack_sync`` does for ``+ACK`` (nats-py 2.x has no ``term_sync``; the
    message keeps its client as ``_client``).

    :raises nats.errors.TimeoutError: if the server did not answer within ``timeout``.
    :raises nats.errors.NotJSMessageError: for a message that is no JetStream delivery (no
        reply subject), as ``Msg.term`` raises it.
    """
    msg._check_reply()
    await msg._client.request(msg.reply, Msg.Ack.Term, timeout=timeout)
    msg._ackd = True
