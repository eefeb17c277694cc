"""The Redis tests' delivery handlers, shared by the test process and its consumer children:
one handler (one :func:`~sa_inbox.consumers.handler_name`) owns the consumer name in both,
so a child's entries taken over by the test's consumer are the same consumer's."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from sa_inbox.brokers import Delivery
from tests.support.app import App

__all__ = ["pay", "pay_async"]


def pay(app: App, poison: str = "") -> Callable[[Session, Delivery], None]:
    """The payment of the delivery's body to account 1; ``poison`` fails every time."""

    def handler(session: Session, delivery: Delivery) -> None:
        app.apply_payment(session, delivery.message_id or "", 1, Decimal(delivery.body.decode()))
        if delivery.message_id == poison:
            raise RuntimeError(f"poison, delivery {delivery.delivery_count}")

    return handler


def pay_async(app: App, poison: str = "") -> Callable[[AsyncSession, Delivery], Any]:
    """:func:`pay` on an AsyncSession."""

    async def handler(session: AsyncSession, delivery: Delivery) -> None:
        amount = Decimal(delivery.body.decode())
        await app.apply_payment_async(session, delivery.message_id or "", 1, amount)
        if delivery.message_id == poison:
            raise RuntimeError(f"poison, delivery {delivery.delivery_count}")

    return handler
