"""The demo's business schema: merchant accounts, a ledger, and the inbox, all ``demo_``.

Money is stored as integer cents (``BIGINT``), exact on every backend, SQLite included
(which has no decimal type). The demo drops and creates only its own three tables; the
chaos run (:mod:`sa_inbox.chaos`) uses the same schema under the ``chaos_`` prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..claim import Inbox
from .db import make_engine, prepare_database
from .stream import Payment

__all__ = ["CONSUMER", "INBOX_TABLE", "DemoSchema", "LedgerState"]

#: The consumer name the demo's workers claim under.
CONSUMER = "demo-billing"
INBOX_TABLE = "demo_inbox_processed_messages"


@dataclass(frozen=True)
class LedgerState:
    """What the database holds after a run.

    :param ledger_rows: rows in ``demo_ledger`` (one per applied delivery).
    :param ledger_messages: distinct message ids in ``demo_ledger``.
    :param inbox_rows: rows in the inbox table.
    :param balances: balance in cents per account id.
    """

    ledger_rows: int
    ledger_messages: int
    inbox_rows: int
    balances: dict[str, int]


class DemoSchema:
    """The demo's tables on their own :class:`~sqlalchemy.MetaData`.

    :param prefix: the tables' name prefix: ``demo_accounts``, ``demo_ledger`` and
        ``demo_inbox_processed_messages`` by default.
    """

    def __init__(self, prefix: str = "demo_") -> None:
        self.metadata = sa.MetaData()
        self.inbox = Inbox(self.metadata, table_name=INBOX_TABLE.replace("demo_", prefix, 1))
        self.accounts = sa.Table(
            f"{prefix}accounts",
            self.metadata,
            sa.Column("account_id", sa.String(32), primary_key=True),
            sa.Column("balance_cents", sa.BigInteger, nullable=False),
        )
        self.ledger = sa.Table(
            f"{prefix}ledger",
            self.metadata,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("message_id", sa.String(64), nullable=False),
            sa.Column("account_id", sa.String(32), nullable=False),
            sa.Column("amount_cents", sa.BigInteger, nullable=False),
        )

    def prepared(self, url: str, accounts: list[str]) -> sa.Engine:
        """An engine on ``url`` (:func:`~sa_inbox.demo.db.make_engine`) with these tables
        made anew by :meth:`reset`, a SQLite file put in WAL mode first.

        :raises sqlalchemy.exc.ArgumentError: for a bad URL.
        :raises sqlalchemy.exc.SQLAlchemyError: if the database cannot be prepared (the
            engine is disposed).
        """
        engine = make_engine(url)
        try:
            prepare_database(engine)
            self.reset(engine, accounts)
        except sa.exc.SQLAlchemyError:
            engine.dispose()
            raise
        return engine

    def reset(self, engine: sa.Engine, accounts: list[str]) -> None:
        """Drop the demo's tables if they exist, create them, open ``accounts`` at 0.

        The consumers table (:mod:`sa_inbox.consumers`) is shared with every other inbox of
        the database (another prefix's): it is created if missing, never dropped, and only
        the owners of this inbox's consumer names are forgotten.
        """
        consumers = self.inbox.consumers
        shared = consumers.table if consumers is not None else None
        own = [table for table in self.metadata.sorted_tables if table is not shared]
        self.metadata.drop_all(engine, tables=own, checkfirst=True)
        self.metadata.create_all(engine)
        with engine.begin() as conn:
            if shared is not None:
                conn.execute(shared.delete().where(shared.c.inbox_table == self.inbox.table.name))
            conn.execute(
                self.accounts.insert(),
                [{"account_id": account, "balance_cents": 0} for account in accounts],
            )

    def apply_payment(self, session: Session, payment: Payment) -> None:
        """The business change: a ledger row and the account's new balance."""
        self.apply(session, payment.message_id, payment.account_id, payment.amount_cents)

    def apply(self, session: Session, message_id: str, account_id: str, cents: int) -> None:
        """A ledger row for ``message_id`` and ``cents`` (signed) added to the balance of
        ``account_id``, in the caller's transaction."""
        session.execute(
            self.ledger.insert().values(
                message_id=message_id, account_id=account_id, amount_cents=cents
            )
        )
        session.execute(
            self.accounts.update()
            .where(self.accounts.c.account_id == account_id)
            .values(balance_cents=self.accounts.c.balance_cents + cents)
        )

    def read_state(self, engine: sa.Engine) -> LedgerState:
        """Count the ledger and inbox rows and read every balance."""
        ledger, inbox = self.ledger, self.inbox.table
        with engine.connect() as conn:
            rows = conn.execute(sa.select(sa.func.count()).select_from(ledger)).scalar_one()
            messages = conn.execute(
                sa.select(sa.func.count(sa.distinct(ledger.c.message_id)))
            ).scalar_one()
            claimed = conn.execute(sa.select(sa.func.count()).select_from(inbox)).scalar_one()
            balances = conn.execute(
                sa.select(self.accounts.c.account_id, self.accounts.c.balance_cents)
            ).all()
        return LedgerState(
            ledger_rows=int(rows),
            ledger_messages=int(messages),
            inbox_rows=int(claimed),
            balances={account: int(cents) for account, cents in balances},
        )
