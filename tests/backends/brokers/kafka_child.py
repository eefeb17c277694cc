"""A Kafka consumer process for the crash tests:
``python -m tests.backends.brokers.kafka_child DB_URL SERVERS TOPIC GROUP OFFSETS MODE [N]``.

It consumes ``TOPIC`` in group ``GROUP`` with the sync :class:`Consumer`
(``offsets=OFFSETS``: ``kafka`` or ``database``) and the tests' payment handler, printing
one line per settlement: ``DISPOSITION DELIVERY_COUNT MESSAGE_ID``.

MODE ``crash-after-commit``: the first poll's transaction commits, then the process prints
``COMMITTED`` and SIGKILLs itself (a ``Session`` ``after_commit`` listener), before the
offsets are committed to the group. MODE ``deliver``: settles ``N`` records, then stops
(the offsets committed) and exits 0.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import Session

from sa_inbox.brokers import Delivery, Settlement
from sa_inbox.brokers.kafka import Consumer
from tests.backends.brokers.kafka_support import FAST_SYNC, kafka_tables
from tests.backends.brokers.payments import pay
from tests.support.app import CONSUMER, App

DEADLINE = 60.0


def say(line: str) -> None:
    print(line, flush=True)


def main(
    db_url: str, servers: str, topic: str, group: str, offsets: str, mode: str, n: int
) -> None:
    app = App(sa.create_engine(db_url))
    kafka_tables(app.inbox)
    settled: list[Settlement] = []

    def report(settlement: Settlement) -> None:
        settled.append(settlement)
        delivery = settlement.delivery
        say(f"{settlement.disposition.value} {delivery.delivery_count} {delivery.message_id}")

    handler = pay(app)
    if mode == "crash-after-commit":

        def die(session: Session) -> None:  # the outermost commit (not a savepoint's)
            if not session.in_nested_transaction() and session.info.pop("crash", False):
                say("COMMITTED")
                os.kill(os.getpid(), signal.SIGKILL)

        event.listen(Session, "after_commit", die)

        paying = pay(app)

        @functools.wraps(paying)  # the same handler, for the consumer name's owner
        def handler(session: Session, delivery: Delivery) -> None:  # the poll's session
            session.info["crash"] = True
            paying(session, delivery)

    consumer = Consumer(
        topic,
        bootstrap_servers=servers,
        group_id=group,
        consumer_name=CONSUMER,
        session_factory=app.Session,
        inbox=app.inbox,
        handler=handler,
        offsets=offsets,  # type: ignore[arg-type]
        on_settled=report,
        poll_timeout=0.2,
        config=FAST_SYNC,
    )
    stop = threading.Event()
    thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
    thread.start()
    deadline = time.monotonic() + DEADLINE
    while len(settled) < n and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.05)
    time.sleep(0.5)  # no settlement beyond the expected ones
    stop.set()
    thread.join(30)
    app.engine.dispose()


if __name__ == "__main__":
    db, servers, topic, group, offsets, mode = sys.argv[1:7]
    main(db, servers, topic, group, offsets, mode, int(sys.argv[7]) if len(sys.argv) > 7 else 1)
