"""Renaming a consumer: the operation a migration runs, on a connection of its own here.
In a revision file it is ``op.rename_inbox_consumer(...)`` after ``import sa_inbox.alembic``."""

import os

import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.orm import sessionmaker

import sa_inbox.alembic  # noqa: F401  (registers the operations on Alembic's Operations)
from sa_inbox import Inbox

metadata = sa.MetaData()
inbox = Inbox(metadata)
engine = sa.create_engine(os.environ.get("DATABASE_URL", "sqlite:///rename.db"))
metadata.drop_all(engine)
metadata.create_all(engine)
with sessionmaker(engine).begin() as session:
    inbox.claim(session, "payment-1", "billing")


def upgrade(op):
    op.rename_inbox_consumer("inbox_processed_messages", "billing", "billing-v2")


def downgrade(op):
    op.rename_inbox_consumer("inbox_processed_messages", "billing-v2", "billing")


with engine.begin() as connection:
    upgrade(Operations(MigrationContext.configure(connection)))

with sessionmaker(engine).begin() as session:  # the new name knows the old name's claims
    assert not inbox.claim(session, "payment-1", "billing-v2")
print("billing-v2 has the claims of billing")
