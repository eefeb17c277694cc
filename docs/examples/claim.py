"""Claim in your own consumer: by hand, through the runner, and for a whole poll."""

import functools
import os
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sa_inbox import Inbox, Outcome, handle

metadata = sa.MetaData()
inbox = Inbox(metadata)  # tables inbox_processed_messages and inbox_consumers
ledger = sa.Table(
    "ledger",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("payment_id", sa.String(64)),
    sa.Column("amount", sa.Integer),
)
engine = sa.create_engine(os.environ.get("DATABASE_URL", "sqlite:///claim.db"))
metadata.drop_all(engine)
metadata.create_all(engine)
Session = sessionmaker(engine)


@dataclass
class Message:  # what your broker client hands you
    message_id: str
    amount: int


def apply_payment(session, message):
    session.execute(ledger.insert().values(payment_id=message.message_id, amount=message.amount))


acked = []
message = Message("payment-1", 10)

# 1. by hand: claim first, business change second, one commit, ack after the commit
for delivery in (message, message):  # the broker delivers it twice
    with Session.begin() as session:
        if inbox.claim(session, delivery.message_id, "billing"):
            apply_payment(session, delivery)
    acked.append(delivery.message_id)  # a duplicate is acked too: an earlier delivery committed it

# 2. the runner does the same, and retries deadlocks and serialization failures
second = Message("payment-2", 20)
for delivery in (second, second):
    result = handle(
        Session,
        inbox,
        delivery.message_id,
        "billing",
        functools.partial(apply_payment, message=delivery),  # a function: it owns "billing"
        ack=lambda: acked.append("ack"),
        nack=lambda: acked.append("nack"),
    )
    print(result.outcome)  # Outcome.PROCESSED, then Outcome.DUPLICATE
assert result.outcome is Outcome.DUPLICATE

# 3. a whole poll in one transaction: one statement claims every id; the result is the
#    messages to apply, the first copy of each new id, in poll order
poll = [Message("payment-3", 30), Message("payment-1", 10), Message("payment-3", 30)]
with Session.begin() as session:
    for fresh in inbox.claim_batch(session, poll, "billing-batch", key=lambda m: m.message_id):
        apply_payment(session, fresh)
# commit the poll's offsets here, after the database commit

with engine.connect() as connection:
    rows = connection.execute(sa.select(ledger.c.payment_id).order_by(ledger.c.id)).scalars()
    applied = list(rows)
print(applied)
assert applied == ["payment-1", "payment-2", "payment-3", "payment-1"]
