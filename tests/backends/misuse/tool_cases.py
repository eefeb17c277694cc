"""The misuse matrix's cases for the tools around the consumers: the console, the dead rows
of the statistics, the hooks and the exactly-once kit of ``sa_inbox.testing``.

Each case calls the entry point with the wrong object, then delivers the message as usual
(or, for the kit, lets its checks deliver new messages): a refusal raises before anything
is committed, so nothing is delivered.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from sa_inbox.brokers import Delivery

from .cases import case, claim_and_pay
from .env import AMOUNT, CONSUMER, Env

# -- the console and the dead rows it shows ----------------------------------------------------


for _wrong in ("AsyncEngine", "Connection", "sessionmaker"):

    @case("sa_inbox.console.create_app", _wrong)
    def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        from sa_inbox.console import create_app

        create_app(env.wrong(wrong))
        claim_and_pay(env, mid)


for _wrong in ("AsyncEngine", "AsyncConnection", "Engine"):

    @case("sa_inbox.stats.dead_letters", _wrong)
    def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        from sa_inbox.stats import dead_letters

        dead_letters(env.wrong(wrong), "store", env.store.table.name)
        claim_and_pay(env, mid)


# -- the hooks ----------------------------------------------------------------------------------


@case("sa_inbox.hooks.as_hooks", "Inbox")
def _(env: Env, mid: str) -> None:
    from sa_inbox.hooks import as_hooks

    as_hooks(env.wrong("Inbox"))  # what Inbox(..., hooks=inbox) runs
    claim_and_pay(env, mid)


@case("sa_inbox.hooks.as_hooks", "RelayMetrics")
def _(env: Env, mid: str) -> None:
    from tests.conftest import importorskip

    prometheus = importorskip("sa_inbox.hooks.prometheus", "prometheus")
    from prometheus_client import CollectorRegistry

    from sa_inbox.hooks import as_hooks

    as_hooks(prometheus.RelayMetrics(CollectorRegistry()))  # the relay's metrics as hooks=
    claim_and_pay(env, mid)


@case("sa_inbox.hooks.as_hooks", "a hooks class")
def _(env: Env, mid: str) -> None:
    from sa_inbox.hooks import MultiHooks, as_hooks

    as_hooks(MultiHooks)  # the class for an instance
    claim_and_pay(env, mid)


# -- the exactly-once kit -------------------------------------------------------------------------


def _kit(env: Env, *, asynchronous: bool) -> dict[str, Any]:
    """The kit's arguments besides the handler's objects: a payment per new message id, and
    its ledger rows as the state."""
    from sa_inbox.testing import Message

    def rows(message: Any) -> Any:
        ledger = env.app.ledger
        return sa.select(sa.func.count()).where(ledger.c.message_id == message.message_id)

    def ledger_rows(session: Session, message: Any) -> int:
        return int(session.execute(rows(message)).scalar_one())

    async def ledger_rows_async(session: AsyncSession, message: Any) -> int:
        return int((await session.execute(rows(message))).scalar_one())

    return {
        "message": lambda message_id: Message(message_id, b"10.00"),
        "state": ledger_rows_async if asynchronous else ledger_rows,
        "consumer_name": CONSUMER,
        "workers": 2,
    }


def _pay(env: Env) -> Any:
    def pay(session: Session, delivery: Delivery) -> None:
        env.app.apply_payment(session, delivery.message_id or "", 1, AMOUNT)

    return pay


def _apay(env: Env) -> Any:
    async def apay(session: AsyncSession, delivery: Delivery) -> None:
        await env.app.apply_payment_async(session, delivery.message_id or "", 1, AMOUNT)

    return apay


def _kit_objects(env: Env, wrong: str, *, asynchronous: bool) -> dict[str, Any]:
    """The handler and its objects, the one named ``wrong`` put in its place."""
    objects: dict[str, Any] = {
        "session_factory": env.ASession if asynchronous else env.app.Session,
        "inbox": env.app.inbox,
    }
    handler = _apay(env) if asynchronous else _pay(env)
    if wrong == "async def handler":
        handler = _apay(env)
    elif wrong in ("AsyncInbox", "a Table"):
        objects["inbox"] = env.wrong(wrong)
    else:
        objects["session_factory"] = env.wrong(wrong)
    return {"handler": handler, **objects}


for _wrong in ("AsyncInbox", "sessionmaker.begin", "async def handler", "a Table"):

    @case("sa_inbox.testing.check_exactly_once", _wrong)
    def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        from sa_inbox.testing import check_exactly_once

        objects = _kit_objects(env, wrong, asynchronous=False)
        check_exactly_once(objects.pop("handler"), **objects, **_kit(env, asynchronous=False))


for _wrong in ("sessionmaker", "async_sessionmaker.begin", "AsyncConnection"):

    @case("sa_inbox.testing.check_exactly_once_async", _wrong)
    async def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        from sa_inbox.testing import check_exactly_once_async

        objects = _kit_objects(env, wrong, asynchronous=True)
        await check_exactly_once_async(
            objects.pop("handler"), **objects, **_kit(env, asynchronous=True)
        )


class Adapter:
    """A broker adapter of the user's own, registered for the kit (``register_adapter``),
    whose profile carries the wrong object."""

    def __init__(self, env: Env, wrong: str) -> None:
        self.objects = _kit_objects(env, wrong, asynchronous=False)


def _profile(adapter: Adapter) -> Any:
    from sa_inbox.brokers import Delivery
    from sa_inbox.testing import AdapterProfile

    return AdapterProfile(
        name="the user's adapter",
        consumer_name=CONSUMER,
        asynchronous=False,
        to_delivery=lambda bd: Delivery(bd.message.message_id, bd.message.body),
        **adapter.objects,
    )


for _entry, _wrong in (
    ("AdapterProfile()", "async_sessionmaker"),
    ("sa_inbox.testing.register_adapter", "AsyncInbox"),
):

    @case(_entry, _wrong)
    def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        from sa_inbox.testing import check_exactly_once, register_adapter

        register_adapter(f"{__name__}.Adapter", _profile)
        kit = _kit(env, asynchronous=False)
        del kit["consumer_name"]  # the adapter's own
        check_exactly_once(Adapter(env, wrong), **kit)


@case("sa_inbox.testing.faults.publish_twice", "async publisher")
def _(env: Env, mid: str) -> None:
    from sa_inbox.testing import Message
    from sa_inbox.testing.faults import publish_twice

    publisher = env.wrong("async publisher")
    publish_twice(publisher, "payments", Message(mid, b"10.00"))
    for _ in publisher.sent:  # the consumer's deliveries of what was published
        claim_and_pay(env, mid)
