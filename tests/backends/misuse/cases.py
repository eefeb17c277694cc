"""The misuse matrix: each public entry point given each plausible wrong object.

A case delivers one message the way a new user would write it with the wrong object in one
place (the other half of the API, an unbound store, a transaction factory for a session
factory...). Run three times on one id, it must be either refused every time with a
configuration error that is also a TypeError, nothing committed, or applied exactly once.
:data:`ENTRY_POINTS` lists which entry point each case covers;
``tests/unit/test_misuse_coverage.py`` fails when a public entry point has no case.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

import sa_inbox
import sa_inbox.asyncio
from sa_inbox import ConfigurationError, Inbox, Worker
from sa_inbox.asyncio import AsyncInbox, AsyncInboxStore, AsyncOutbox, AsyncOutboxRelay, AsyncWorker
from sa_inbox.outbox import OutboxRelay
from sa_inbox.store import Incoming, StoredMessage

from .env import AMOUNT, CONSUMER, Env

Deliver = Callable[[Env, str], Awaitable[None] | None]


@dataclass(frozen=True)
class Case:
    """One entry point given one wrong object."""

    #: The public entry point, as ``module.name`` or ``Class.method`` (``Class()``: made).
    entry: str
    #: The wrong object's name (:data:`tests.backends.misuse.env.WRONG`, or one the
    #: delivery opens itself: ``AsyncSession``, ``Session``, ``AUTOCOMMIT connection``).
    wrong: str
    #: Delivers one message with the wrong object.
    deliver: Deliver
    #: ``"refused"`` (every delivery raises, nothing committed) or ``"once"`` (the intent is
    #: unambiguous and accepted: applied exactly once).
    expect: Literal["refused", "once"]
    #: (effect rows, claim rows) to assert on.
    state: Callable[[Env], tuple[int, int]] = Env.payments
    #: What a refusal also is besides a ConfigurationError: a TypeError for an object of
    #: the wrong kind; the configuration error itself for a wrong setting (AUTOCOMMIT).
    kind: type[Exception] = TypeError
    #: For a delivery through a live broker: how many of the case's messages are still
    #: on it, neither acked nor dead-lettered (a refusal leaves every one there).
    left: Callable[[Env], int] | None = None

    @property
    def id(self) -> str:
        return f"{self.entry}[{self.wrong}]"


CASES: list[Case] = []


def case(entry: str, wrong: str, expect: Literal["refused", "once"] = "refused", **kw: Any):  # type: ignore[no-untyped-def]
    """Register the decorated delivery as a case."""

    def register(deliver: Deliver) -> Deliver:
        CASES.append(Case(entry, wrong, deliver, expect, **kw))
        return deliver

    return register


def acks(env: Env) -> dict[str, Any]:
    """``ack`` and ``nack`` that record their calls in ``env.settled``: a refusal calls
    neither."""
    return {"ack": lambda: env.settled.append("ack"), "nack": lambda: env.settled.append("nack")}


# -- the synchronous runner and claim -----------------------------------------------------


def _pay(env: Env, message_id: str) -> Callable[[Session], None]:
    # a function of its own (a lambda cannot own a consumer name), the same for every case
    return functools.partial(
        env.app.apply_payment, message_id=message_id, account_id=1, amount=AMOUNT
    )


@case("sa_inbox.handle", "AsyncInbox")
def _(env: Env, mid: str) -> None:
    sa_inbox.handle(
        env.app.Session, env.wrong("AsyncInbox"), mid, CONSUMER, _pay(env, mid), **acks(env)
    )


for _factory in ("async_sessionmaker", "async_sessionmaker.begin", "sessionmaker.begin"):

    @case("sa_inbox.handle", _factory)
    def _(env: Env, mid: str, factory: str = _factory) -> None:
        sa_inbox.handle(
            env.wrong(factory), env.app.inbox, mid, CONSUMER, _pay(env, mid), **acks(env)
        )

    @case("sa_inbox.run_in_transaction", _factory)
    def _(env: Env, mid: str, factory: str = _factory) -> None:
        def work(session: Session) -> None:
            if env.app.inbox.claim(session, mid, CONSUMER):
                env.app.apply_payment(session, mid, 1, AMOUNT)

        sa_inbox.run_in_transaction(env.wrong(factory), work)


@case("sa_inbox.handle", "a Table")
def _(env: Env, mid: str) -> None:
    sa_inbox.handle(
        env.app.Session, env.wrong("a Table"), mid, CONSUMER, _pay(env, mid), **acks(env)
    )


for _method in ("claim", "claim_many", "claim_batch", "is_processed"):

    @case(f"Inbox.{_method}", "AsyncSession")
    async def _(env: Env, mid: str, method: str = _method) -> None:
        async with env.ASession.begin() as session:
            claim = getattr(env.app.inbox, method)
            if _claimed(claim(session, _ids(method, mid), CONSUMER, **_key(method)), mid):
                await env.app.apply_payment_async(session, mid, 1, AMOUNT)

    @case(f"AsyncInbox.{_method}", "Session")
    def _(env: Env, mid: str, method: str = _method) -> None:
        # the mistake: an AsyncInbox in synchronous code; ``if coroutine:`` is true
        with env.app.Session.begin() as session:
            inbox = AsyncInbox(env.app.inbox)
            claim = getattr(inbox, method)
            if _claimed(claim(session, _ids(method, mid), CONSUMER, **_key(method)), mid):
                env.app.apply_payment(session, mid, 1, AMOUNT)


def _ids(method: str, mid: str) -> Any:
    return [mid] if method in ("claim_many", "claim_batch") else mid


def _key(method: str) -> dict[str, Any]:
    return {"key": lambda m: m} if method == "claim_batch" else {}


def _claimed(result: Any, mid: str) -> bool:
    """How user code reads each claim method's result (a coroutine is truthy)."""
    if isinstance(result, set | list):
        return mid in result
    return bool(result) if not isinstance(result, bool) else result


@case("AsyncInbox()", "AsyncInbox", expect="once")
async def _(env: Env, mid: str) -> None:
    inbox = AsyncInbox(env.wrong("AsyncInbox"))  # unwrapped: unambiguous
    async with env.ASession.begin() as session:
        if await inbox.claim(session, mid, CONSUMER):
            await env.app.apply_payment_async(session, mid, 1, AMOUNT)


@case("AsyncInbox()", "a Table")
async def _(env: Env, mid: str) -> None:
    inbox = AsyncInbox(env.wrong("a Table"))
    async with env.ASession.begin() as session:
        if await inbox.claim(session, mid, CONSUMER):
            await env.app.apply_payment_async(session, mid, 1, AMOUNT)


# -- the session extension ----------------------------------------------------------------


@case("sa_inbox.register_claim", "AsyncInbox")
def _(env: Env, mid: str) -> None:
    sa_inbox.install(env.app.Session)
    with env.app.Session.begin() as session:
        sa_inbox.register_claim(session, env.wrong("AsyncInbox"), mid, CONSUMER)
        env.app.apply_payment(session, mid, 1, AMOUNT)


@case("sa_inbox.register_claim", "AsyncSession")
async def _(env: Env, mid: str) -> None:
    sa_inbox.asyncio.install(env.ASession)
    async with env.ASession.begin() as session:
        sa_inbox.register_claim(session, env.app.inbox, mid, CONSUMER)  # type: ignore[arg-type]
        await env.app.apply_payment_async(session, mid, 1, AMOUNT)


@case("sa_inbox.install", "async_sessionmaker")
async def _(env: Env, mid: str) -> None:
    sa_inbox.install(env.ASession)  # type: ignore[arg-type]
    async with env.ASession.begin() as session:
        sa_inbox.asyncio.register_claim(session, env.app.inbox, mid, CONSUMER)
        await env.app.apply_payment_async(session, mid, 1, AMOUNT)


@case("sa_inbox.asyncio.install", "sessionmaker")
def _(env: Env, mid: str) -> None:
    sa_inbox.asyncio.install(env.app.Session)  # type: ignore[arg-type]
    with env.app.Session.begin() as session:
        sa_inbox.register_claim(session, env.app.inbox, mid, CONSUMER)
        env.app.apply_payment(session, mid, 1, AMOUNT)


for _inbox in ("Inbox", "AsyncInbox"):

    @case("sa_inbox.asyncio.register_claim", _inbox, expect="once")
    async def _(env: Env, mid: str, inbox: str = _inbox) -> None:
        sa_inbox.asyncio.install(env.ASession)
        try:
            async with env.ASession.begin() as session:
                sa_inbox.asyncio.register_claim(session, env.wrong(inbox), mid, CONSUMER)
                await env.app.apply_payment_async(session, mid, 1, AMOUNT)
        except sa_inbox.DuplicateMessage:
            pass


@case("sa_inbox.asyncio.register_claim", "Session")
def _(env: Env, mid: str) -> None:
    sa_inbox.install(env.app.Session)
    with env.app.Session.begin() as session:
        sa_inbox.asyncio.register_claim(session, env.app.inbox, mid, CONSUMER)  # type: ignore[arg-type]
        env.app.apply_payment(session, mid, 1, AMOUNT)


# -- the asyncio runner --------------------------------------------------------------------


async def _apay(env: Env, mid: str, session: AsyncSession) -> None:
    await env.app.apply_payment_async(session, mid, 1, AMOUNT)


for _inbox in ("Inbox", "AsyncInbox"):

    @case("sa_inbox.asyncio.handle", _inbox, expect="once")
    async def _(env: Env, mid: str, inbox: str = _inbox) -> None:
        await sa_inbox.asyncio.handle(
            env.ASession, env.wrong(inbox), mid, CONSUMER, _apay_handler(env, mid), **acks(env)
        )


for _factory in ("sessionmaker", "sessionmaker.begin", "async_sessionmaker.begin"):

    @case("sa_inbox.asyncio.handle", _factory)
    async def _(env: Env, mid: str, factory: str = _factory) -> None:
        await sa_inbox.asyncio.handle(
            env.wrong(factory),
            env.app.inbox,
            mid,
            CONSUMER,
            _apay_handler(env, mid),
            **acks(env),
        )

    @case("sa_inbox.asyncio.run_in_transaction", _factory)
    async def _(env: Env, mid: str, factory: str = _factory) -> None:
        inbox = AsyncInbox(env.app.inbox)

        async def work(session: AsyncSession) -> None:
            if await inbox.claim(session, mid, CONSUMER):
                await _apay(env, mid, session)

        await sa_inbox.asyncio.run_in_transaction(env.wrong(factory), work)


@case("sa_inbox.asyncio.handle", "a Table")
async def _(env: Env, mid: str) -> None:
    await sa_inbox.asyncio.handle(
        env.ASession, env.wrong("a Table"), mid, CONSUMER, _apay_handler(env, mid), **acks(env)
    )


# -- a handler of the wrong kind, a session factory of the wrong shape ----------------------


@case("sa_inbox.handle", "async def handler")
def _(env: Env, mid: str) -> None:
    async def pay(session: Session) -> None:
        env.app.apply_payment(session, mid, 1, AMOUNT)

    sa_inbox.handle(env.app.Session, env.app.inbox, mid, CONSUMER, pay, **acks(env))


@case("sa_inbox.run_in_transaction", "async def work")
def _(env: Env, mid: str) -> None:
    async def work(session: Session) -> None:
        if env.app.inbox.claim(session, mid, CONSUMER):
            env.app.apply_payment(session, mid, 1, AMOUNT)

    sa_inbox.run_in_transaction(env.app.Session, work)


@case("sa_inbox.asyncio.handle", "plain def handler", expect="once")
async def _(env: Env, mid: str) -> None:
    def pay(session: AsyncSession) -> Awaitable[None]:  # returns the coroutine: awaited
        return env.app.apply_payment_async(session, mid, 1, AMOUNT)

    await sa_inbox.asyncio.handle(env.ASession, env.app.inbox, mid, CONSUMER, pay, **acks(env))


@case("sa_inbox.asyncio.run_in_transaction", "plain def work", expect="once")
async def _(env: Env, mid: str) -> None:
    inbox = AsyncInbox(env.app.inbox)

    def work(session: AsyncSession) -> Awaitable[None]:
        async def claim_and_pay() -> None:
            if await inbox.claim(session, mid, CONSUMER):
                await _apay(env, mid, session)

        return claim_and_pay()

    await sa_inbox.asyncio.run_in_transaction(env.ASession, work)


for _factory in ("scoped_session", "Connection", "async_scoped_session", "AsyncConnection"):
    _sync = _factory in ("scoped_session", "Connection")

    @case("sa_inbox.handle", _factory, expect="once" if _factory == "scoped_session" else "refused")
    def _(env: Env, mid: str, factory: str = _factory) -> None:
        handler = _pay(env, mid)
        sa_inbox.handle(env.wrong(factory), env.app.inbox, mid, CONSUMER, handler, **acks(env))

    @case(
        "sa_inbox.asyncio.handle",
        _factory,
        expect="once" if _factory == "async_scoped_session" else "refused",
    )
    async def _(env: Env, mid: str, factory: str = _factory) -> None:
        handler = _apay_handler(env, mid)
        await sa_inbox.asyncio.handle(
            env.wrong(factory), env.app.inbox, mid, CONSUMER, handler, **acks(env)
        )

    if _factory in ("Connection", "AsyncConnection"):

        @case("sa_inbox.run_in_transaction", _factory)
        def _(env: Env, mid: str, factory: str = _factory) -> None:
            def work(session: Session) -> None:
                if env.app.inbox.claim(session, mid, CONSUMER):
                    env.app.apply_payment(session, mid, 1, AMOUNT)

            sa_inbox.run_in_transaction(env.wrong(factory), work)

        @case("sa_inbox.asyncio.run_in_transaction", _factory)
        async def _(env: Env, mid: str, factory: str = _factory) -> None:
            inbox = AsyncInbox(env.app.inbox)

            async def work(session: AsyncSession) -> None:
                if await inbox.claim(session, mid, CONSUMER):
                    await _apay(env, mid, session)

            await sa_inbox.asyncio.run_in_transaction(env.wrong(factory), work)


@case("sa_inbox.install", "scoped_session")
def _(env: Env, mid: str) -> None:
    sa_inbox.install(env.wrong("scoped_session"))
    with env.app.Session.begin() as session:
        sa_inbox.register_claim(session, env.app.inbox, mid, CONSUMER)
        env.app.apply_payment(session, mid, 1, AMOUNT)


def _apay_handler(env: Env, mid: str) -> Callable[[AsyncSession], Awaitable[None]]:
    async def pay(session: AsyncSession) -> None:
        await _apay(env, mid, session)

    return pay


# -- the store ------------------------------------------------------------------------------


@case("InboxStore.receive", "AsyncSession", state=Env.stored)
async def _(env: Env, mid: str) -> None:
    async with env.ASession.begin() as session:
        env.store.receive(session, mid, {"n": 1}, consumer_name=CONSUMER)  # type: ignore[arg-type]


@case("InboxStore.receive", "AUTOCOMMIT connection", state=Env.stored, kind=ConfigurationError)
def _(env: Env, mid: str) -> None:
    with env.app.engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        env.store.receive(conn, mid, {"n": 1}, consumer_name=CONSUMER)


@case("InboxStore.receive_many", "AsyncSession", state=Env.stored)
async def _(env: Env, mid: str) -> None:
    async with env.ASession.begin() as session:
        env.store.receive_many(session, [Incoming(mid, {"n": 1})], consumer_name=CONSUMER)  # type: ignore[arg-type]


@case("InboxStore.receive_many", "AUTOCOMMIT connection", state=Env.stored, kind=ConfigurationError)
def _(env: Env, mid: str) -> None:
    with env.app.engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        env.store.receive_many(conn, [Incoming(mid, {"n": 1})], consumer_name=CONSUMER)


for _method in ("receive", "receive_many"):

    @case(f"AsyncInboxStore.{_method}", "Session", state=Env.stored)
    def _(env: Env, mid: str, method: str = _method) -> None:
        store = AsyncInboxStore(env.store)
        with env.app.Session.begin() as session:
            if method == "receive":
                store.receive(session, mid, {"n": 1}, consumer_name=CONSUMER)  # type: ignore[arg-type]
            else:
                store.receive_many(session, [Incoming(mid, {"n": 1})], consumer_name=CONSUMER)  # type: ignore[arg-type]


@case("AsyncInboxStore()", "AsyncInboxStore", expect="once", state=Env.stored)
async def _(env: Env, mid: str) -> None:
    store = AsyncInboxStore(env.wrong("AsyncInboxStore"))  # unwrapped: unambiguous
    async with env.ASession.begin() as session:
        await store.receive(session, mid, {"n": 1}, consumer_name=CONSUMER)


def _receive_then(env: Env, mid: str) -> None:
    """Store ``mid`` (once: a duplicate is skipped), for the worker cases."""
    with env.app.Session.begin() as session:
        env.store.receive(session, mid, {"n": 1}, consumer_name=CONSUMER)


def _worked(env: Env) -> tuple[int, int]:
    """(ledger rows, store rows done): a refused worker processes nothing."""
    import sqlalchemy as sa

    t = env.store.table
    with env.app.engine.connect() as conn:
        done = conn.execute(
            sa.select(sa.func.count()).select_from(t).where(t.c.status == "done")
        ).scalar_one()
    return env.app.ledger_rows(), int(done)


def _purged(env: Env) -> tuple[int, int]:
    """(claims or stored rows deleted, 0): the setup left one of each."""
    return 2 - env.app.inbox_rows() - env.count(env.store.table), 0


def _store_handler(env: Env) -> Callable[[Session, StoredMessage], None]:
    def pay(session: Session, message: StoredMessage) -> None:
        env.app.apply_payment(session, message.message_id, 1, AMOUNT)

    return pay


for _store in ("InboxStore", "AsyncInboxStore", "AsyncBoundStore", "Inbox", "sessionmaker",
               "Engine"):  # fmt: skip

    @case("Worker()", _store, state=_worked)
    def _(env: Env, mid: str, store: str = _store) -> None:
        _receive_then(env, mid)
        Worker(env.wrong(store), _store_handler(env), consumer_name=CONSUMER).run(until_empty=True)


for _store in ("InboxStore", "AsyncInboxStore", "BoundStore"):

    @case("AsyncWorker()", _store, state=_worked)
    async def _(env: Env, mid: str, store: str = _store) -> None:
        async def handler(session: AsyncSession, message: StoredMessage) -> None:
            await _apay(env, message.message_id, session)

        await _in_thread(_receive_then, env, mid)
        await AsyncWorker(env.wrong(store), handler, consumer_name=CONSUMER).run(until_empty=True)


@case("Worker()", "async def handler", state=_worked)
def _(env: Env, mid: str) -> None:
    async def handler(session: Session, message: StoredMessage) -> None:
        env.app.apply_payment(session, message.message_id, 1, AMOUNT)

    _receive_then(env, mid)
    Worker(env.store, handler, consumer_name=CONSUMER).run(until_empty=True)


@case("AsyncWorker()", "plain def handler", expect="once", state=_worked)
async def _(env: Env, mid: str) -> None:
    def handler(session: AsyncSession, message: StoredMessage) -> Awaitable[None]:
        return _apay(env, message.message_id, session)

    await _in_thread(_receive_then, env, mid)
    store = AsyncInboxStore(env.store).bind(env.aengine)
    await AsyncWorker(store, handler, consumer_name=CONSUMER).run(until_empty=True)


for _engine, _factory in (("AsyncEngine", None), ("Engine", "async_sessionmaker")):

    @case("InboxStore.bind", _factory or _engine, state=_worked)
    def _(env: Env, mid: str, engine: str = _engine, factory: str | None = _factory) -> None:
        _receive_then(env, mid)
        bound = env.store.bind(env.wrong(engine), *([env.wrong(factory)] if factory else []))
        Worker(bound, _store_handler(env), consumer_name=CONSUMER).run(until_empty=True)


for _engine, _factory in (("Engine", None), ("AsyncEngine", "sessionmaker")):

    @case("AsyncInboxStore.bind", _factory or _engine, state=_worked)
    async def _(env: Env, mid: str, engine: str = _engine, factory: str | None = _factory) -> None:
        async def handler(session: AsyncSession, message: StoredMessage) -> None:
            await _apay(env, message.message_id, session)

        await _in_thread(_receive_then, env, mid)
        store = AsyncInboxStore(env.store)
        bound = store.bind(env.wrong(engine), *([env.wrong(factory)] if factory else []))
        await AsyncWorker(bound, handler, consumer_name=CONSUMER).run(until_empty=True)


for _method in ("counts", "replay"):

    @case(f"AsyncInboxStore.{_method}", "Engine", state=Env.stored)
    def _(env: Env, mid: str, method: str = _method) -> None:
        store = AsyncInboxStore(env.store)
        kw = {"ids": [1], "yes": True} if method == "replay" else {}
        getattr(store, method)(env.app.engine, **kw)


# -- the hand-over of a consumer name (sa_inbox.consumers) ------------------------------------


@case("Consumers.hand_over", "AsyncEngine")
def _(env: Env, mid: str) -> None:
    handler = _pay(env, mid)
    assert env.app.inbox.consumers is not None
    env.app.inbox.consumers.hand_over(env.wrong("AsyncEngine"), CONSUMER, handler)
    sa_inbox.handle(env.app.Session, env.app.inbox, mid, CONSUMER, handler, **acks(env))


@case("AsyncInbox.hand_over", "Engine")
async def _(env: Env, mid: str) -> None:
    async def handler(session: AsyncSession) -> None:
        await _apay(env, mid, session)

    inbox = AsyncInbox(env.app.inbox)
    await inbox.hand_over(env.wrong("Engine"), CONSUMER, handler)
    await sa_inbox.asyncio.handle(env.ASession, inbox, mid, CONSUMER, handler, **acks(env))


@case("AsyncInboxStore.hand_over", "Engine", state=_worked)
async def _(env: Env, mid: str) -> None:
    async def handler(session: AsyncSession, message: StoredMessage) -> None:
        await _apay(env, message.message_id, session)

    await _in_thread(_receive_then, env, mid)
    store = AsyncInboxStore(env.store)
    await store.hand_over(env.wrong("Engine"), CONSUMER, handler)
    await AsyncWorker(store.bind(env.aengine), handler, consumer_name=CONSUMER).run(
        until_empty=True
    )


# -- the outbox -----------------------------------------------------------------------------


@case("Outbox.publish", "AsyncSession", state=Env.published)
async def _(env: Env, mid: str) -> None:
    inbox = AsyncInbox(env.app.inbox)
    async with env.ASession.begin() as session:
        if await inbox.claim(session, mid, CONSUMER):
            env.outbox.publish(session, "payments", {"id": mid})  # type: ignore[arg-type]


@case("AsyncOutbox.publish", "Session", state=Env.published)
def _(env: Env, mid: str) -> None:
    outbox = AsyncOutbox(env.outbox)
    with env.app.Session.begin() as session:
        if env.app.inbox.claim(session, mid, CONSUMER):
            outbox.publish(session, "payments", {"id": mid})  # type: ignore[arg-type]


@case("AsyncOutbox()", "AsyncOutbox", expect="once", state=Env.published)
async def _(env: Env, mid: str) -> None:
    outbox = AsyncOutbox(env.wrong("AsyncOutbox"))  # unwrapped: unambiguous
    inbox = AsyncInbox(env.app.inbox)
    async with env.ASession.begin() as session:
        if await inbox.claim(session, mid, CONSUMER):
            await outbox.publish(session, "payments", {"id": mid})


def _published_once(env: Env, mid: str) -> None:
    """Record ``mid``'s message in the outbox once (a redelivery is a duplicate)."""
    with env.app.Session.begin() as session:
        if env.app.inbox.claim(session, mid, CONSUMER):
            env.outbox.publish(session, "payments", {"id": mid}, message_id=mid)


def _relay_state(env: Env) -> tuple[int, int]:
    """(outbox rows dispatched, claims): a refused relay dispatches nothing."""
    import sqlalchemy as sa

    t = env.outbox.table
    with env.app.engine.connect() as conn:
        dispatched = conn.execute(
            sa.select(sa.func.count()).select_from(t).where(t.c.status == "dispatched")
        ).scalar_one()
    return int(dispatched), env.app.inbox_rows() - 1


for _wrong in ("AsyncEngine", "AsyncOutbox", "async publisher"):

    @case("OutboxRelay()", _wrong, state=_relay_state)
    def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        _published_once(env, mid)
        parts: dict[str, Any] = {"engine": env.app.engine, "outbox": env.outbox, "publisher": None}
        parts[{"AsyncEngine": "engine", "AsyncOutbox": "outbox"}.get(wrong, "publisher")] = (
            env.wrong(wrong)
        )
        OutboxRelay(parts["engine"], parts["outbox"], parts["publisher"]).run(until_empty=True)


for _wrong in ("Engine", "a Table"):

    @case("AsyncOutboxRelay()", _wrong, state=_relay_state)
    async def _(env: Env, mid: str, wrong: str = _wrong) -> None:
        await _in_thread(_published_once, env, mid)
        engine = env.wrong(wrong) if wrong == "Engine" else env.aengine
        outbox = env.wrong(wrong) if wrong != "Engine" else env.outbox
        from .env import AsyncPublisher

        await AsyncOutboxRelay(engine, outbox, AsyncPublisher()).run(until_empty=True)


async def _in_thread(fn: Callable[..., None], *args: Any) -> None:
    import asyncio

    await asyncio.to_thread(fn, *args)


# -- retention --------------------------------------------------------------------------------


@case("sa_inbox.purge", "AsyncEngine", state=_purged)
def _(env: Env, mid: str) -> None:
    claim_and_pay(env, mid)
    _receive_then(env, mid)
    sa_inbox.purge(env.wrong("AsyncEngine"), older_than=policy(), table=env.app.inbox)


@case("sa_inbox.asyncio.purge", "Engine", state=_purged)
async def _(env: Env, mid: str) -> None:
    await _in_thread(claim_and_pay, env, mid)
    await _in_thread(_receive_then, env, mid)
    await sa_inbox.asyncio.purge(env.wrong("Engine"), older_than=policy(), table=env.app.inbox)


for _entry, _wrong in (
    ("sa_inbox.retention.purge_store", "AsyncEngine"),
    ("sa_inbox.asyncio.purge_store", "Engine"),
):

    @case(_entry, _wrong, state=_purged)
    async def _(env: Env, mid: str, entry: str = _entry, wrong: str = _wrong) -> None:
        await _in_thread(_receive_then, env, mid)
        await _in_thread(claim_and_pay, env, mid)
        if entry == "sa_inbox.retention.purge_store":
            sa_inbox.retention.purge_store(env.wrong(wrong), env.store, older_than=policy())
        else:
            await sa_inbox.asyncio.purge_store(env.wrong(wrong), env.store, older_than=policy())


def claim_and_pay(env: Env, mid: str) -> None:
    with env.app.Session.begin() as session:
        if env.app.inbox.claim(session, mid, CONSUMER):
            env.app.apply_payment(session, mid, 1, AMOUNT)


def policy() -> sa_inbox.RetentionPolicy:
    import datetime

    second = datetime.timedelta(seconds=1)
    return sa_inbox.RetentionPolicy(max_redelivery=second, max_replay=second)


# -- the store's engine operations and the constructors -----------------------------------

for _method in (
    "lease",
    "claim",
    "complete",
    "complete_batch",
    "fail",
    "release",
    "reap",
    "replay",
    "replayable",
    "counts",
    "has_unfinished",
    "transaction",
    "renew",
):

    @case(f"InboxStore.{_method}", "AsyncEngine", state=_worked)
    def _(env: Env, mid: str, method: str = _method) -> None:
        _receive_then(env, mid)
        with warnings.catch_warnings():  # claim: the deprecated name of lease
            warnings.simplefilter("ignore", DeprecationWarning)
            result = getattr(env.store, method)(env.wrong("AsyncEngine"))
        if method == "transaction":
            with result:
                pass


_DECLARATIVE = "a declarative Base"


def _base(env: Env) -> Any:
    from sqlalchemy.orm import DeclarativeBase

    class Base(DeclarativeBase):
        metadata = env.app.metadata

    return Base


for _entry in ("Inbox()", "InboxStore()", "Outbox()", "sa_inbox.processed_messages_table",
               "sa_inbox.outbox.outbox_table"):  # fmt: skip

    @case(_entry, _DECLARATIVE)
    def _(env: Env, mid: str, entry: str = _entry) -> None:
        from sa_inbox import InboxStore, processed_messages_table
        from sa_inbox.outbox import Outbox, outbox_table

        make = {
            "Inbox()": Inbox,
            "InboxStore()": InboxStore,
            "Outbox()": Outbox,
            "sa_inbox.processed_messages_table": processed_messages_table,
            "sa_inbox.outbox.outbox_table": outbox_table,
        }[entry]
        made = make(_base(env))
        with env.app.Session.begin() as session:  # what the user then does with it
            if isinstance(made, Inbox) and made.claim(session, mid, CONSUMER):
                env.app.apply_payment(session, mid, 1, AMOUNT)


@case("Inbox.for_table", "Inbox")
def _(env: Env, mid: str) -> None:
    inbox = Inbox.for_table(env.wrong("Inbox"))
    with env.app.Session.begin() as session:
        if inbox.claim(session, mid, CONSUMER):
            env.app.apply_payment(session, mid, 1, AMOUNT)


@case("sa_inbox.outbox.purge_dispatched", "AsyncEngine", state=_purged)
def _(env: Env, mid: str) -> None:
    from sa_inbox.outbox import purge_dispatched

    claim_and_pay(env, mid)
    _receive_then(env, mid)
    purge_dispatched(env.wrong("AsyncEngine"), env.outbox, older_than=policy().max_replay)


# the other modules' cases register themselves on import
from . import api_cases as api_cases  # noqa: E402
from . import broker_cases as broker_cases  # noqa: E402
from . import sharding_cases as sharding_cases  # noqa: E402
from . import stream_cases as stream_cases  # noqa: E402
from . import tool_cases as tool_cases  # noqa: E402

#: Every entry point a case covers.
ENTRY_POINTS = frozenset(c.entry for c in CASES)

__all__ = ["CASES", "ENTRY_POINTS", "Case", "Inbox", "acks", "case", "claim_and_pay", "policy"]
