"""Store-then-process: the consumer stores and acks, a worker processes later."""

import os

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sa_inbox import Backoff, InboxStore, Worker

metadata = sa.MetaData()
store = InboxStore(metadata)  # table inbox_store
balances = sa.Table(
    "balances",
    metadata,
    sa.Column("account", sa.String(32), primary_key=True),
    sa.Column("amount", sa.Integer, nullable=False),
)
engine = sa.create_engine(os.environ.get("DATABASE_URL", "sqlite:///store.db"))
metadata.drop_all(engine)
metadata.create_all(engine)
Session = sessionmaker(engine)

# the consumer: store, commit, then ack (a duplicate returns False, and is acked too)
deliveries = [("p-1", "acct-1", 10), ("p-2", "acct-1", 5), ("p-1", "acct-1", 10), ("p-3", "x", 0)]
for message_id, account, amount in deliveries:
    with Session.begin() as session:
        new = store.receive(
            session,
            message_id,
            {"account": account, "amount": amount},
            consumer_name="payments",
            aggregate_id=account,  # ordered=True keeps one account's messages in order
        )
    print(message_id, "stored" if new else "duplicate")  # ack it here


# the worker: handler(session, message) runs in the transaction that marks the row done
def apply_payment(session, message):
    if message.payload["amount"] <= 0:
        raise ValueError("not a payment")  # retried, then dead after max_attempts
    account, amount = message.payload["account"], message.payload["amount"]
    updated = session.execute(
        balances.update()
        .where(balances.c.account == account)
        .values(amount=balances.c.amount + amount)
    )
    if updated.rowcount == 0:
        session.execute(balances.insert().values(account=account, amount=amount))


worker = Worker(
    store.bind(engine),
    apply_payment,
    consumer_name="payments",
    batch_size=10,
    max_attempts=2,
    ordered=True,
    backoff=Backoff(base=0.01, maximum=0.01),  # a fast retry, for the example
    poll_interval=0.05,
)
summary = worker.run(until_empty=True, handle_signals=False)  # until SIGTERM without until_empty
print(summary.processed, "processed,", summary.dead, "dead")

print(store.counts(engine, "payments"))  # rows per status
with engine.connect() as connection:
    assert connection.scalar(sa.select(balances.c.amount)) == 15
store.replay(engine, status="dead")  # after a fix: the dead row back to pending
assert store.counts(engine, "payments")["pending"] == 1
