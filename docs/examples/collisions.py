"""Tell a producer's reused id from a redelivery: a digest of the payload with the claim."""

import os

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sa_inbox import Inbox, Outcome, handle
from sa_inbox.collision import payload_hash
from sa_inbox.exc import MessageIdCollision

metadata = sa.MetaData()
inbox = Inbox(metadata)  # on_collision="raise", the default
engine = sa.create_engine(os.environ.get("DATABASE_URL", "sqlite:///collisions.db"))
metadata.drop_all(engine)
metadata.create_all(engine)
Session = sessionmaker(engine)
settled = []


def record_order(session):
    """The business change."""


def deliver(message_id, body):
    return handle(
        Session,
        inbox,
        message_id,
        "billing",
        record_order,
        ack=lambda: settled.append("ack"),
        nack=lambda: settled.append("nack"),
        payload_hash=payload_hash(body),  # SHA-256 of canonical JSON; bytes hashed raw
    )


print(deliver("order-7", {"amount": 10}).outcome)  # PROCESSED
print(deliver("order-7", {"amount": 10}).outcome)  # DUPLICATE: the same message again
result = deliver("order-7", {"amount": 99})  # another message under the same id
print(result.outcome, type(result.error).__name__)  # FAILED MessageIdCollision: nacked
assert result.outcome is Outcome.FAILED and isinstance(result.error, MessageIdCollision)
assert settled == ["ack", "ack", "nack"]
