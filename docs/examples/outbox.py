"""The outbox: a handler records the messages it publishes; a relay sends them after the
commit. The publisher here keeps them in a list; in production it is a broker's
(``sa_inbox.brokers.rabbitmq.Publisher``, ``sa_inbox.brokers.redis.Publisher``,
``sa_inbox.brokers.nats.Publisher``...) or ``sa-inbox relay``."""

import functools
import os

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sa_inbox import Inbox, handle, idempotency_key
from sa_inbox.outbox import Outbox, OutboxRelay

metadata = sa.MetaData()
inbox = Inbox(metadata)
outbox = Outbox(metadata)  # table outbox_messages
engine = sa.create_engine(os.environ.get("DATABASE_URL", "sqlite:///outbox.db"))
metadata.drop_all(engine)
metadata.create_all(engine)
Session = sessionmaker(engine)


def apply(session, payment_id):
    # ... the business change, then the message it announces: one INSERT, same transaction
    outbox.publish(session, "payments.applied", {"payment": payment_id}, headers={"v": "1"})
    # a remote call that deduplicates requests gets a key stable across redeliveries
    return idempotency_key(payment_id, "billing", "charge-card")


for delivery in ("payment-1", "payment-1", "payment-2"):  # payment-1 delivered twice
    handle(
        Session,
        inbox,
        delivery,
        "billing",
        functools.partial(apply, payment_id=delivery),
        ack=lambda: None,  # your broker's ack and nack
        nack=lambda: None,
    )


class ListPublisher:
    """A publisher keeps the Publisher protocol: publish() returns once the broker confirmed."""

    def __init__(self):
        self.sent = []

    def publish(self, message):
        self.sent.append((message.message_id, message.destination, message.payload))

    def close(self):
        pass


publisher = ListPublisher()
OutboxRelay(engine, outbox, publisher, poll_interval=0.05).run(until_empty=True)
print([(destination, payload) for _id, destination, payload in publisher.sent])
assert len(publisher.sent) == 2  # the duplicate delivery recorded nothing
print(idempotency_key("payment-1", "billing", "charge-card"))  # a UUID, the same every time
