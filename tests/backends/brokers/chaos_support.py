"""What the chaos drivers' tests share: a driver's consume run in a thread until enough
messages are settled, with a handler that fails the poison message."""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

from sqlalchemy.orm import Session

from sa_inbox.brokers import Delivery, Settlement
from tests.support.app import CONSUMER, App

#: The body of the message the handler always fails.
POISON = b"boom"


def consume_until(
    driver: Any, name: str, app: App, settlements: int, *, seconds: float = 30.0
) -> list[Settlement]:
    """Run ``driver.consume(name, ...)`` in a thread until ``settlements`` messages are
    settled (or ``seconds`` passed), each body paid to account 1 but :data:`POISON`, with
    two deliveries allowed; then stop it.

    :returns: the settlements, in order.
    """
    seen: list[Settlement] = []
    stop = threading.Event()

    def on_settled(settlement: Settlement) -> None:
        seen.append(settlement)
        if len(seen) >= settlements:
            stop.set()

    def handler(session: Session, delivery: Delivery) -> None:
        if delivery.body == POISON:
            raise ValueError("poison")
        app.apply_payment(session, delivery.message_id or "", 1, Decimal(delivery.body.decode()))

    thread = threading.Thread(
        target=driver.consume,
        args=(name,),
        kwargs={
            "session_factory": app.Session,
            "inbox": app.inbox,
            "consumer_name": CONSUMER,
            "handler": handler,
            "max_deliveries": 2,
            "on_settled": on_settled,
            "stop": stop,
        },
    )
    thread.start()
    thread.join(timeout=seconds)
    stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive()
    return seen
