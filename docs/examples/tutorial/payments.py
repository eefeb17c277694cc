"""The tutorial's application: a ledger of payments, and the inbox that guards it."""

import os

import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sa_inbox import Inbox

metadata = sa.MetaData()
inbox = Inbox(metadata)  # the tables inbox_processed_messages and inbox_consumers

ledger = sa.Table(
    "ledger",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("payment_id", sa.String(64), nullable=False),
    sa.Column("account", sa.String(32), nullable=False),
    sa.Column("amount", sa.Integer, nullable=False),
)

engine = sa.create_engine(os.environ["DATABASE_URL"])
Session = sessionmaker(engine)

if __name__ == "__main__":
    metadata.create_all(engine)  # in a real project: an Alembic revision
    print("tables created:", ", ".join(sorted(metadata.tables)))
