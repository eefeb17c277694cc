"""What nats-py keeps private and the consumer needs: the one module that reads nats-py's
internals (nats-py 2.x), so a nats-py release that changes them is mended here only."""

from __future__ import annotations

from nats.aio.msg import Msg
from nats.js import JetStreamContext

__all__ = ["delivered_unfetched", "reconnecting"]


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
