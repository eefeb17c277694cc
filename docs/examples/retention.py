"""Retention: purge claims once the broker can no longer redeliver or replay them."""

import datetime
import os

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sa_inbox import Inbox, InboxStore, RetentionPolicy, purge
from sa_inbox.exc import RetentionWindowTooShort
from sa_inbox.retention import purge_store

metadata = sa.MetaData()
inbox = Inbox(metadata)
store = InboxStore(metadata)
engine = sa.create_engine(os.environ.get("DATABASE_URL", "sqlite:///retention.db"))
metadata.drop_all(engine)
metadata.create_all(engine)
Session = sessionmaker(engine)

with Session.begin() as session:
    for number in range(3):
        inbox.claim(session, f"payment-{number}", "billing")

policy = RetentionPolicy(
    max_redelivery=datetime.timedelta(days=1),  # longest redelivery of an unacked message
    max_replay=datetime.timedelta(days=7),  # Kafka retention.ms, SQS retention, max-age
    margin=datetime.timedelta(hours=1),  # clock skew, lag (the default)
)
print(policy.window)  # 8 days, 1:00:00

deleted = purge(engine, older_than=policy, table=inbox)  # rows older than 8 days 1 hour
print("deleted", deleted)  # 0: the claims are new

try:
    purge(engine, older_than=datetime.timedelta(days=3), policy=policy, table=inbox)
except RetentionWindowTooShort as error:
    print("refused:", error)  # nothing deleted

# the store: only its old done rows (by processed_at); dead rows on a window of their own
result = purge_store(engine, store, older_than=policy, dead_older_than=datetime.timedelta(days=30))
print(result.done, "done and", result.dead, "dead rows deleted")

with engine.connect() as connection:
    assert connection.scalar(sa.select(sa.func.count()).select_from(inbox.table)) == 3
