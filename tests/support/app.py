"""A small payments app used by the tests: accounts, a ledger, and the inbox."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox import Inbox

CONSUMER = "billing"

#: The sync driver each backend's tables are made and read through.
SYNC_DRIVERS = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql"}


def sync_driver_url(url: str | sa.URL) -> sa.URL:
    """The same database as ``url`` (an async driver's, or not) through its sync driver."""
    url = sa.make_url(url)
    return url.set(drivername=SYNC_DRIVERS[url.get_backend_name()])


def fresh_app(url: str | sa.URL) -> Iterator[App]:
    """A fixture body: the app made fresh through the sync driver of ``url``'s database,
    dropped after the test."""
    engine = sa.create_engine(sync_driver_url(url))
    app = App(engine)
    app.reset()
    yield app
    app.drop()
    engine.dispose()


def hand_over(owner: Any, engine: sa.Engine, handler: object, consumer: str = CONSUMER) -> None:
    """Give ``consumer`` to ``handler`` (the redelivery goes to another handler: a fixed
    release, a worker of another module): what a user does with ``consumers.hand_over``."""
    assert owner.consumers is not None
    owner.consumers.hand_over(engine, consumer, handler)


class App:
    """Accounts and ledger tables, an :class:`Inbox`, and a sessionmaker on ``engine``."""

    def __init__(self, engine: sa.Engine, *, strategy: str = "native", **inbox_kw: object) -> None:
        self.engine = engine
        self.metadata = sa.MetaData()
        self.inbox = Inbox(self.metadata, strategy=strategy, **inbox_kw)  # type: ignore[arg-type]
        self.accounts = sa.Table(
            "accounts",
            self.metadata,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("balance", sa.Numeric(14, 2), nullable=False),
        )
        self.ledger = sa.Table(
            "ledger",
            self.metadata,
            sa.Column("id", sa.Integer, sa.Identity(), primary_key=True),
            sa.Column("message_id", sa.String(255), nullable=False),
            sa.Column("account_id", sa.Integer, nullable=False),
            sa.Column("amount", sa.Numeric(14, 2), nullable=False),
        )
        self.Session = sessionmaker(engine)

    def reset(self, accounts: int = 3) -> None:
        self.drop()
        self.metadata.create_all(self.engine)
        with self.engine.begin() as conn:
            conn.execute(
                self.accounts.insert(),
                [{"id": i, "balance": Decimal(0)} for i in range(1, accounts + 1)],
            )

    def drop(self) -> None:
        self.metadata.drop_all(self.engine, checkfirst=True)

    # -- business change ----------------------------------------------------------------

    def payment(self, message_id: str, account_id: int, amount: Decimal) -> list[sa.Executable]:
        """The business change's statements: a ledger row, then the balance."""
        return [
            self.ledger.insert().values(
                message_id=message_id, account_id=account_id, amount=amount
            ),
            self.accounts.update()
            .where(self.accounts.c.id == account_id)
            .values(balance=self.accounts.c.balance + amount),
        ]

    def apply_payment(
        self, bind: Session | sa.Connection, message_id: str, account_id: int, amount: Decimal
    ) -> None:
        """Insert a ledger row and update the balance: the business change."""
        for statement in self.payment(message_id, account_id, amount):
            bind.execute(statement)

    async def apply_payment_async(
        self,
        bind: AsyncSession | AsyncConnection,
        message_id: str,
        account_id: int,
        amount: Decimal,
    ) -> None:
        """:meth:`apply_payment` on an AsyncSession or AsyncConnection."""
        for statement in self.payment(message_id, account_id, amount):
            await bind.execute(statement)

    # -- business state -----------------------------------------------------------------

    def ledger_rows(self, message_id: str | None = None) -> int:
        query = sa.select(sa.func.count()).select_from(self.ledger)
        if message_id is not None:
            query = query.where(self.ledger.c.message_id == message_id)
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def balance(self, account_id: int) -> Decimal:
        with self.engine.connect() as conn:
            return Decimal(
                conn.execute(
                    sa.select(self.accounts.c.balance).where(self.accounts.c.id == account_id)
                ).scalar_one()
            )

    def inbox_rows(self) -> int:
        with self.engine.connect() as conn:
            return int(
                conn.execute(sa.select(sa.func.count()).select_from(self.inbox.table)).scalar_one()
            )
