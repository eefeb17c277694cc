"""Consume the "payments" queue: each payment applied to the ledger exactly once."""

import json
import os

import pika
from payments import Session, inbox, ledger

from sa_inbox.brokers import stop_on_signals
from sa_inbox.brokers.rabbitmq import Consumer, declare_queue


def apply_payment(session, delivery):
    """The business change. It runs in the transaction that claims the message."""
    payment = json.loads(delivery.body)
    session.execute(
        ledger.insert().values(
            payment_id=delivery.message_id, account=payment["account"], amount=payment["amount"]
        )
    )


def main():
    url = os.environ["AMQP_URL"]
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        declare_queue(connection.channel(), "payments")  # a quorum queue + payments.dead-letter
    consumer = Consumer(
        url,
        "payments",
        session_factory=Session,
        inbox=inbox,
        consumer_name="ledger",
        handler=apply_payment,
    )
    print("consuming; Ctrl-C or SIGTERM stops", flush=True)
    with stop_on_signals(consumer.stop):
        consumer.run()  # claim + apply in one transaction, commit, then ack


if __name__ == "__main__":
    main()
