"""Unit-test a store handler without a database: MemoryStore keeps the store's rules."""

from sa_inbox import Worker
from sa_inbox.testing import MemoryStore

ledger = []  # what the handler's "session" writes to, here


def apply_payment(session, message):
    if message.payload["amount"] <= 0:
        raise ValueError("not a payment")
    session.append((message.message_id, message.payload["amount"]))


store = MemoryStore(context=ledger)  # the handler gets `ledger` in place of a Session
for message_id, amount in [("p-1", 10), ("p-1", 10), ("p-2", -1)]:
    store.receive(message_id, {"amount": amount}, consumer_name="payments")

Worker(store, apply_payment, consumer_name="payments", max_attempts=1, poll_interval=0.01).run(
    until_empty=True, handle_signals=False
)
print(ledger, store.counts())
assert ledger == [("p-1", 10)]  # the duplicate was never stored, the failure went dead
assert store.counts()["dead"] == 1
