"""The Celery app of the Celery tests, run by a real worker:
``celery -A tests.backends.brokers.celery_child worker -P prefork -c 1 -Q QUEUE``.

Configured by environment variables: ``SA_INBOX_CELERY_BROKER`` (the broker URL),
``SA_INBOX_CELERY_QUEUE`` (a queue dead-lettering to ``<queue>.dead``), ``SA_INBOX_CELERY_DB``
(the database URL; without it the module only makes the producer's app) and
``SA_INBOX_CELERY_CRASH``: ``-`` or comma-separated ``after-commit:KEY`` (the pool process prints
``COMMITTED KEY`` then ``PID <its pid>`` after the commit of KEY and hangs before the task
returns, so before the ack) or ``before-commit:KEY`` (prints ``APPLIED KEY`` with the change
flushed, uncommitted, and hangs). The worker prints ``READY`` when it consumes, and the pool
process ``<disposition> <key>`` per settled message.
"""

from __future__ import annotations

import os
import time
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from celery import Celery
from celery.signals import worker_ready
from kombu import Queue
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox.backoff import Backoff
from sa_inbox.brokers import DeliveryOptions, Settlement
from sa_inbox.brokers.celery import inbox_task
from tests.support.app import CONSUMER, App
from tests.support.child import say

TASK = "sa_inbox_tests.pay"
PLAIN = "sa_inbox_tests.plain"
#: More than Celery's default max_retries (3): the inbox's limit, not Celery's, applies.
MAX_DELIVERIES = 5


def make_app(broker_url: str, queue: str) -> Celery:
    """The Celery app, for the worker and the producer: one queue, dead-lettering to
    ``<queue>.dead`` through the default exchange."""
    app = Celery("sa_inbox_tests", broker=broker_url)
    app.conf.update(
        task_queues=[
            Queue(
                queue,
                routing_key=queue,
                queue_arguments={
                    "x-dead-letter-exchange": "",
                    "x-dead-letter-routing-key": queue + ".dead",
                },
            )
        ],
        task_default_queue=queue,
        worker_prefetch_multiplier=1,
        # no pidbox queue: it is exclusive per worker name, and a worker a failed run left
        # behind would stop the next one from starting
        worker_enable_remote_control=False,
        worker_redirect_stdouts=False,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
    )
    return app


def register(app: Celery, db_url: str, crash: str) -> None:
    engine = sa.create_engine(db_url)
    payments = App(engine)
    crashes = {key: mode for mode, _, key in (c.partition(":") for c in crash.split(","))}

    def settled(settlement: Settlement) -> None:
        say(f"{settlement.disposition.value} {settlement.delivery.message_id}")

    @inbox_task(
        app,
        session_factory=sessionmaker(engine),
        inbox=payments.inbox,
        consumer_name=CONSUMER,
        options=DeliveryOptions(
            max_deliveries=MAX_DELIVERIES,
            on_settled=settled,
            # 0.05, 0.1, 0.2, 0.4 s: the poison case stays quick
            retry_delay=Backoff(base=0.05, maximum=60.0),
        ),
        name=TASK,
    )
    def pay(session: Session, account: int, amount: str, idempotency_key: str) -> None:
        payments.apply_payment(session, idempotency_key, account, Decimal(amount))
        if crashes.get(idempotency_key) == "after-commit":
            event.listen(session, "after_commit", lambda _: hang(f"COMMITTED {idempotency_key}"))
        if crashes.get(idempotency_key) == "before-commit":
            session.flush()
            hang(f"APPLIED {idempotency_key}")


def hang(line: str) -> None:
    say(line)
    say(f"PID {os.getpid()}")
    time.sleep(120)


@worker_ready.connect
def ready(**_: Any) -> None:
    say("READY")


app = make_app(
    os.environ.get("SA_INBOX_CELERY_BROKER", "memory://"),
    os.environ.get("SA_INBOX_CELERY_QUEUE", "sa_inbox_tests"),
)


@app.task(name=PLAIN, acks_late=True, reject_on_worker_lost=False)
def plain(flag: str) -> None:
    """Not an inbox task: ``acks_late`` without ``reject_on_worker_lost``. Prints its pid and,
    the first time (no file ``flag`` yet), hangs until killed."""
    say(f"PID {os.getpid()}")
    if not os.path.exists(flag):
        open(flag, "w").close()
        time.sleep(120)


if "SA_INBOX_CELERY_DB" in os.environ:
    register(app, os.environ["SA_INBOX_CELERY_DB"], os.environ.get("SA_INBOX_CELERY_CRASH", "-"))
