"""A Redis Streams consumer group, each entry applied once (needs REDIS_URL)."""

import json
import os
import threading
import time

import redis
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sa_inbox import Inbox
from sa_inbox.brokers import DeliveryOptions
from sa_inbox.brokers.redis import Consumer

metadata = sa.MetaData()
inbox = Inbox(metadata)
ledger = sa.Table("ledger", metadata, sa.Column("payment_id", sa.String(64), primary_key=True))
engine = sa.create_engine(os.environ.get("DATABASE_URL", "sqlite:///redis.db"))
metadata.drop_all(engine)
metadata.create_all(engine)
Session = sessionmaker(engine)
client = redis.Redis.from_url(os.environ["REDIS_URL"])
client.delete("payments", "payments:dead")  # a fresh stream for the example


def apply(session, delivery):
    payment = json.loads(delivery.body)
    session.execute(ledger.insert().values(payment_id=payment["id"]))


# the producer puts the key in the entry, the same on every retry:
for payment_id in ("p-1", "p-2", "p-1"):
    client.xadd("payments", {"message_id": payment_id, "body": json.dumps({"id": payment_id})})

settled = []
consumer = Consumer(
    client,
    "payments",
    group="billing",
    session_factory=Session,
    inbox=inbox,
    handler=apply,
    visibility_timeout=30.0,  # seconds before a failed or abandoned entry is taken over
    options=DeliveryOptions(max_deliveries=5, on_settled=settled.append),
)
thread = threading.Thread(target=consumer.run)  # consumer.stop() from any thread
thread.start()
deadline = time.monotonic() + 30
while len(settled) < 3 and time.monotonic() < deadline:
    time.sleep(0.05)
consumer.stop()
thread.join()
print([settlement.disposition.name for settlement in settled])
with engine.connect() as connection:
    assert connection.scalar(sa.select(sa.func.count()).select_from(ledger)) == 2
