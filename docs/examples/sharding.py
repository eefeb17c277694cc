"""The inbox sharded with the business data: every delivery of a message reaches the
shard of its key. Two SQLite files stand in for two database servers."""

import functools

import sqlalchemy as sa

from sa_inbox import Inbox, Outcome
from sa_inbox.sharding import ShardedInbox

metadata = sa.MetaData()
inbox = Inbox(metadata)  # the shards' tables: one schema, created on each shard
ledger = sa.Table(
    "ledger",
    metadata,
    sa.Column("payment_id", sa.String(64), primary_key=True),
    sa.Column("tenant", sa.String(32)),
)
shards = {"eu": sa.create_engine("sqlite:///eu.db"), "us": sa.create_engine("sqlite:///us.db")}
for engine in shards.values():
    metadata.drop_all(engine)
    metadata.create_all(engine)

sharded = ShardedInbox(inbox, shards)


def pay(session, payment_id, tenant):
    session.execute(ledger.insert().values(payment_id=payment_id, tenant=tenant))


for tenant, payment_id in [("acme", "p-1"), ("globex", "p-2"), ("acme", "p-1")]:
    result = sharded.handle(
        tenant,  # the shard key: the same on every delivery of the message
        payment_id,
        "billing",
        functools.partial(pay, payment_id=payment_id, tenant=tenant),
        ack=lambda: None,
        nack=lambda: None,
    )
    print(tenant, payment_id, "->", sharded.shard_for(tenant), result.outcome.name)
assert result.outcome is Outcome.DUPLICATE
