"""Dead letters: a poison message dead-lettered, the handler fixed, the dead letter
replayed and applied once (on Redis Streams; needs REDIS_URL)."""

import json
import os
import threading
import time

import redis
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sa_inbox import Inbox
from sa_inbox.brokers import DeliveryOptions, dead_letters
from sa_inbox.brokers.redis import Consumer

REDIS_URL = os.environ["REDIS_URL"]
metadata = sa.MetaData()
inbox = Inbox(metadata)
ledger = sa.Table("ledger", metadata, sa.Column("payment_id", sa.String(64), primary_key=True))
engine = sa.create_engine(os.environ.get("DATABASE_URL", "sqlite:///dead_letters.db"))
metadata.drop_all(engine)
metadata.create_all(engine)
Session = sessionmaker(engine)
client = redis.Redis.from_url(REDIS_URL)
client.delete("refunds", "refunds:dead")


def consume(handler, settlements):
    """Run a consumer until it has settled ``settlements`` deliveries."""
    settled = []
    consumer = Consumer(
        client,
        "refunds",
        group="billing",
        session_factory=Session,
        inbox=inbox,
        handler=handler,
        # the first failure is the last: dead-lettered at once
        options=DeliveryOptions(max_deliveries=1, on_settled=settled.append),
        visibility_timeout=1.0,
    )
    thread = threading.Thread(target=consumer.run)
    thread.start()
    deadline = time.monotonic() + 30
    while len(settled) < settlements and time.monotonic() < deadline:
        time.sleep(0.05)
    consumer.stop()
    thread.join()
    return [settlement.disposition.name for settlement in settled]


service_is_up = False


def refund(session, delivery):
    if not service_is_up:
        raise RuntimeError("the refunds service is down")
    session.execute(ledger.insert().values(payment_id=json.loads(delivery.body)["id"]))


client.xadd("refunds", {"message_id": "r-1", "body": json.dumps({"id": "r-1"})})
print(consume(refund, 1))  # ['DEAD_LETTERED']: reason delivery_limit
print(dead_letters.count(REDIS_URL, "refunds:dead"))  # 1

dry = dead_letters.replay(REDIS_URL, "refunds:dead", dry_run=True, reason="delivery_limit")
print(dry.chosen, "to replay")  # counts only
service_is_up = True  # the cause fixed, replay:
result = dead_letters.replay(REDIS_URL, "refunds:dead", dry_run=False, reason="delivery_limit")
print(result.moved, "moved,", result.refused, "refused")  # back to "refunds", with its key
print(consume(refund, 1))  # ['PROCESSED']

assert dead_letters.count(REDIS_URL, "refunds:dead") == 0
with engine.connect() as connection:
    assert connection.scalar(sa.select(sa.func.count()).select_from(ledger)) == 1
