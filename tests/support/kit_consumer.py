"""The application's RabbitMQ consumer process, as production starts it:
``python -m tests.support.kit_consumer DB_URL AMQP_URL QUEUE``.

It runs :class:`~sa_inbox.brokers.rabbitmq.Consumer` with
:func:`tests.support.kit_app.apply` on the tables :func:`tests.support.kit_app.setup` made,
printing each settlement (``DISPOSITION DELIVERY_COUNT``), until SIGTERM. The fault tests
start it under ``python -m sa_inbox.testing.inject``.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sa_inbox.brokers import DeliveryOptions, Settlement
from sa_inbox.brokers.rabbitmq import Consumer
from tests.support import kit_app


def main(db_url: str, amqp_url: str, queue: str) -> None:
    def settled(settlement: Settlement) -> None:
        print(f"{settlement.disposition.value} {settlement.delivery.delivery_count}", flush=True)

    consumer = Consumer(
        amqp_url,
        queue,
        session_factory=sessionmaker(sa.create_engine(db_url)),
        inbox=kit_app.inbox,
        consumer_name=kit_app.CONSUMER,
        handler=kit_app.apply,
        options=DeliveryOptions(on_settled=settled),
        prefetch=1,
    )

    def stop(*_: Any) -> None:
        consumer.stop()

    signal.signal(signal.SIGTERM, stop)
    consumer.run()


if __name__ == "__main__":
    main(*sys.argv[1:4])
