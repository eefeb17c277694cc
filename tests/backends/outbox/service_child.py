"""The processes of the outbox crash and end-to-end tests:
``python -m tests.backends.outbox.service_child ROLE AMQP_URL DB_URL QUEUE [OUT_QUEUE]``.

ROLE ``relay-crash-before-mark``: one :class:`~sa_inbox.outbox.OutboxRelay` batch whose
publishes are all confirmed by RabbitMQ; the mark then prints ``PUBLISHED <n>`` and SIGKILLs
this process before the ``dispatched`` UPDATE (rows stay ``processing``).
ROLE ``relay``: an OutboxRelay (visibility timeout 1 s, batches of 5) until SIGTERM, each
mark 20 ms after the confirms (and each consumer's ack 20 ms after its commit), so that the
random kills of the end-to-end test often land in those windows.
ROLE ``a-consumer`` (service A): a Consumer of QUEUE, consumer ``service-a``; the
handler pays the body's amount into account 1 under the delivery's message_id and records,
in the same transaction, an outbox message to OUT_QUEUE with the header ``source`` = that
message_id. ROLE ``b-consumer`` (service B): a Consumer of QUEUE, consumer
``service-b``; the handler pays the body's amount into account 2 under the ``source``
header. Consumers run until SIGTERM, printing ``READY`` once SIGTERM is handled, then each
settlement.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox.brokers import Delivery, DeliveryOptions, Settlement
from sa_inbox.brokers.rabbitmq import Consumer, PikaSettler, Publisher
from sa_inbox.outbox import OutboxMessage, OutboxRelay
from sa_inbox.outbox.relay import RelayCore
from tests.support.child import say
from tests.support.outbox_app import OutboxApp


def crash_in_mark(self: RelayCore, messages: Sequence[OutboxMessage], now: Any = None) -> int:
    say(f"PUBLISHED {len(messages)}")
    os.kill(os.getpid(), signal.SIGKILL)
    return 0


def slowed(method: Any) -> Any:
    """``method`` after a 20 ms pause: widens the windows a kill should land in (after the
    broker's confirm and before the mark; after the commit and before the ack)."""

    def pause_then(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.02)
        return method(*args, **kwargs)

    return pause_then


def main(role: str, amqp_url: str, db_url: str, queue: str, out_queue: str = "") -> None:
    app = OutboxApp(sa.create_engine(db_url))
    if role.startswith("relay"):
        relay = OutboxRelay(
            app.engine,
            app.outbox,
            Publisher(amqp_url),
            batch_size=5,
            visibility_timeout=1.0,
            poll_interval=0.05,
        )
        if role == "relay-crash-before-mark":
            RelayCore.mark_dispatched = crash_in_mark  # type: ignore[method-assign]
            relay.run_once()
            return
        RelayCore.mark_dispatched = slowed(RelayCore.mark_dispatched)  # type: ignore[method-assign]
        signal.signal(signal.SIGTERM, lambda *_: relay.stop())
        say("READY")
        relay.run()
        say("STOPPED")
        return

    def a_handler(session: Session, delivery: Delivery) -> None:
        mid = delivery.message_id or ""
        app.apply_payment(session, mid, 1, Decimal(delivery.body.decode()))
        app.outbox.publish(session, out_queue, delivery.body, headers={"source": mid})
        time.sleep(0.02)  # so that a kill lands mid-stream

    def b_handler(session: Session, delivery: Delivery) -> None:
        source = str(delivery.headers["source"])
        app.apply_payment(session, source, 2, Decimal(delivery.body.decode()))
        time.sleep(0.02)

    def settled(settlement: Settlement) -> None:
        say(f"{settlement.disposition.value} {settlement.delivery.message_id}")

    PikaSettler.ack = slowed(PikaSettler.ack)  # type: ignore[method-assign]
    consumer = Consumer(
        amqp_url,
        queue,
        session_factory=app.Session,
        inbox=app.inbox,
        consumer_name="service-a" if role == "a-consumer" else "service-b",
        handler=a_handler if role == "a-consumer" else b_handler,
        prefetch=2,
        options=DeliveryOptions(max_deliveries=20, on_settled=settled),
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: (stop.set(), consumer.stop()))
    say("READY")
    consumer.run()
    say("STOPPED")


if __name__ == "__main__":
    main(*sys.argv[1:6])
