"""The ORM session extension: the claim joins the unit of work."""

import os

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from sa_inbox import DuplicateMessage, Inbox, install, register_claim


class Base(DeclarativeBase):
    pass


class LedgerEntry(Base):
    __tablename__ = "ledger_entries"
    id: Mapped[int] = mapped_column(primary_key=True)
    payment_id: Mapped[str] = mapped_column(sa.String(64))


inbox = Inbox(Base.metadata)
engine = sa.create_engine(os.environ.get("DATABASE_URL", "sqlite:///session.db"))
Base.metadata.drop_all(engine)
Base.metadata.create_all(engine)
Session = sessionmaker(engine)
install(Session)  # SQLAlchemy session events; your Session class stays yours

for _delivery in range(2):  # the same message, delivered twice
    try:
        with Session.begin() as session:
            register_claim(session, inbox, "payment-1", "billing")
            session.add(LedgerEntry(payment_id="payment-1"))
        print("applied")
    except DuplicateMessage:
        print("already processed: ack it")  # the transaction was rolled back
    # ack the delivery here, in both cases

with Session() as session:
    assert session.scalar(sa.select(sa.func.count()).select_from(LedgerEntry)) == 1
