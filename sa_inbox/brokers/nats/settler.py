"""How a JetStream delivery is settled: ``ack`` after the commit, ``nak`` with a back-off,
or a dead letter then ``term``."""

from __future__ import annotations

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from ...exc import InvalidArgument
from ..delivery import DeadLetterReason, Delivery
from ..options import RetryDelay
from ._compat import term_sync
from .delivery import dead_letter_headers

__all__ = ["DEFAULT_ACK_TIMEOUT", "JetStreamSettler", "backoff"]

#: Seconds to wait for the server's confirmation of an ack (``ack_sync``).
DEFAULT_ACK_TIMEOUT = 5.0


def backoff(first: float = 1.0, cap: float = 60.0) -> RetryDelay:
    """An exponential back-off for :meth:`JetStreamSettler.retry`: ``first`` seconds after
    the first delivery failed, doubling per delivery, at most ``cap`` seconds.

    :param first: seconds, > 0.
    :param cap: seconds, >= ``first``.
    :raises InvalidArgument: (a ValueError) if ``first <= 0`` or ``cap < first``.
    """
    if not first > 0 or cap < first:
        raise InvalidArgument(f"backoff needs 0 < first <= cap, got first={first!r}, cap={cap!r}")

    def delay(delivery_count: int) -> float:
        return float(min(cap, first * 2 ** max(0, min(delivery_count - 1, 62))))

    return delay


class JetStreamSettler:
    """The :class:`~sa_inbox.brokers.Settler` of one JetStream message (``async`` methods).

    The acknowledgement types are those of "JetStream Model Deep Dive: Acknowledgement
    Models" (docs.nats.io): ``+ACK`` (AckAck), ``-NAK`` (AckNak), ``+TERM`` (AckTerm).

    - :meth:`ack` is a **double ack** (nats-py's ``ack_sync``: the ``+ACK`` is sent as a
      request and the server's reply awaited; "Exactly Once Delivery" in the same page), so a
      settlement reported ``processed`` was confirmed by the server, and a lost ack raises
      instead of passing silently. It costs one round trip per message. A plain ``ack`` would
      be safe too (the redelivery of a committed message is acked as a duplicate) but would
      hide a broken connection until ``ack_wait`` brought the message back.
    - :meth:`retry` is ``-NAK {"delay": ns}``: JetStream redelivers after the delay instead
      of at once (nats-server 2.7.1+; verified on 2.9.10 by the poison test).
    - :meth:`dead_letter` publishes the body to ``dead_letter_subject`` (a subject of a
      dead-letter stream) with the reason headers of
      :func:`~sa_inbox.brokers.nats.delivery.dead_letter_headers`, waits for the stream's
      PubAck, then sends ``+TERM`` (JetStream stops redelivering it). If the consumer dies
      between the two, the message comes back and is dead-lettered again; the dead letter's
      ``Nats-Msg-Id`` lets the dead-letter stream drop that copy inside its duplicate window.

    :param msg: the JetStream message.
    :param delivery: its :class:`~sa_inbox.brokers.Delivery` (for the delivery count).
    :param js: the JetStream context to publish dead letters with.
    :param dead_letter_subject: a subject bound to a stream (not the consumed one's filter).
    :param retry_delay: seconds before a retry, from the delivery count (:func:`backoff`).
    :param ack_timeout: seconds to wait for the server's ack confirmation.
    """

    def __init__(
        self,
        msg: Msg,
        delivery: Delivery,
        *,
        js: JetStreamContext,
        dead_letter_subject: str,
        retry_delay: RetryDelay,
        ack_timeout: float = DEFAULT_ACK_TIMEOUT,
    ) -> None:
        self.msg = msg
        self.delivery = delivery
        self._js = js
        self._dead_letter_subject = dead_letter_subject
        self._retry_delay = retry_delay
        self._ack_timeout = ack_timeout

    async def ack(self) -> None:
        """``+ACK``, confirmed by the server.

        :raises nats.errors.TimeoutError: if the server did not confirm in ``ack_timeout``
            (the message comes back after ``ack_wait``, as a duplicate if committed).
        """
        await self.msg.ack_sync(timeout=self._ack_timeout)

    async def retry(self) -> None:
        """``-NAK`` with ``retry_delay(delivery_count)`` seconds of delay."""
        await self.msg.nak(delay=self._retry_delay(self.delivery.delivery_count))

    async def give_back(self) -> None:
        """``-NAK`` without delay: redelivered unprocessed (a run of keyless messages).
        JetStream counts the redelivery in ``num_delivered`` like any other (it has no
        uncounted return: "Consumers", "MaxDeliver"), so it costs one of the message's
        ``max_deliveries``."""
        await self.msg.nak()

    async def dead_letter(self, reason: DeadLetterReason, detail: str) -> None:
        """Publish the dead letter (awaiting its PubAck), then ``+TERM`` the original,
        confirmed by the server as :meth:`ack` is.

        :raises nats.js.errors.NoStreamResponseError: if no stream holds
            ``dead_letter_subject`` (the original is then left unsettled).
        :raises nats.errors.TimeoutError: if the server did not confirm the ``+TERM`` in
            ``ack_timeout`` (the original comes back after ``ack_wait``).
        """
        headers = dead_letter_headers(self.msg, self.delivery, reason, detail)
        await self._js.publish(self._dead_letter_subject, self.msg.data, headers=headers)
        await term_sync(self.msg, self._ack_timeout)
