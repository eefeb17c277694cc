"""Handlers the runner cannot serve, on every backend: a generator (its body would never
run) is refused before any SQL, and a handler that registers the runner's own claim fails
the delivery instead of reporting a duplicate."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox import Outcome, handle, install, register_claim
from sa_inbox.exc import InvalidHandler
from tests.backends.runner.test_guarantee import Broker, assert_redelivery_applies, deliver
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend


def pay(app: App, message_id: str = "m1") -> object:
    def apply(session: Session) -> None:  # a function: a lambda cannot own a consumer name
        app.apply_payment(session, message_id, 1, Decimal(3))

    return apply


def test_a_duplicate_raised_inside_the_handler_is_a_failure_not_a_duplicate(app: App) -> None:
    """A handler that also registers the runner's claim through the session extension: the
    delivery fails (nack, nothing committed), never DUPLICATE + ack, which loses the message."""
    install(app.Session)

    def shared_code(session: Session) -> None:
        register_claim(session, app.inbox, "m1", CONSUMER)
        app.apply_payment(session, "m1", 1, Decimal(3))

    result, broker = deliver(app, shared_code)
    assert result.outcome is Outcome.FAILED and (broker.acks, broker.nacks) == (0, 1)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0
    assert_redelivery_applies(app)


@pytest.fixture
def generators(app: App) -> Iterator[dict[str, object]]:
    def generator(session: Session) -> Iterator[None]:
        app.apply_payment(session, "m1", 1, Decimal(3))
        yield

    def returns_a_generator(session: Session) -> object:
        return generator(session)

    yield {"generator function": generator, "returns a generator": returns_a_generator}


@pytest.mark.parametrize("kind", ["generator function", "returns a generator"])
def test_a_generator_handler_is_refused(app: App, generators: dict[str, object], kind: str) -> None:
    """Its body would never run while the claim commits and the message is acked."""
    broker = Broker()
    with pytest.raises(InvalidHandler, match="generator"):
        handle(app.Session, app.inbox, "m1", CONSUMER, generators[kind],  # type: ignore[arg-type]
               ack=broker.ack, nack=broker.nack)  # fmt: skip
    assert (broker.acks, broker.nacks) == (0, 0)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0


def test_an_async_generator_handler_is_refused_by_the_asyncio_runner(app: App, url: str) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

    from sa_inbox.asyncio import handle as async_handle

    drivers = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg",
               "mysql": "mysql+aiomysql"}  # fmt: skip
    parsed = sa.make_url(url)
    async_url = parsed.set(drivername=drivers[parsed.get_backend_name()])

    async def generator(session: AsyncSession) -> object:
        await session.execute(sa.select(1))
        yield None

    async def scenario() -> None:
        engine = create_async_engine(async_url)
        try:
            with pytest.raises(InvalidHandler, match="generator"):
                await async_handle(async_sessionmaker(engine), app.inbox, "m1", CONSUMER,
                                   generator, ack=lambda: None, nack=lambda: None)  # fmt: skip
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    assert app.inbox_rows() == 0
