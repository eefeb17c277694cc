"""One consumer name, one handler (:mod:`sa_inbox.consumers`), on SQLite, PostgreSQL and
MariaDB, sync and async (aiosqlite, asyncpg, psycopg 3 async, aiomysql).

A claim is unique per ``(message_id, consumer_name)``: without an owner per name, a second
handler under the name of the first skips the ids the first claimed as duplicates (acked,
never run), and two processes with different handlers split one stream between them. Here:
the second handler is refused with :class:`~sa_inbox.exc.ConsumerNameTaken` before anything is
claimed, neither acked nor nacked, and runs under its own name; two real processes with
different handlers under one name leave every message to the first (the second is refused
at its first message); two processes racing to be first leave exactly one owner;
``hand_over`` gives the name (and its claims) to a new handler; a broker adapter's handler is
checked as itself; a handler keeps its name
run as ``python -m``, as a script and imported; the store's Worker and AsyncWorker are
refused before they claim (rows pending, no attempt counted); ``consumers=False`` skips the
check; a missing consumers table is :class:`~sa_inbox.exc.MissingTable`. Business state
(effect rows per handler, claims, owner rows, store rows) is asserted throughout.
"""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session, sessionmaker

import sa_inbox
import sa_inbox.asyncio
from sa_inbox import ConfigurationError, Outcome, brokers
from sa_inbox.asyncio import AsyncInbox, AsyncInboxStore, AsyncWorker
from sa_inbox.brokers import Delivery
from sa_inbox.consumers import handler_name
from sa_inbox.exc import ConsumerNameTaken, MissingTable
from sa_inbox.store import PENDING, InboxStore, StoredMessage, Worker
from tests.backends.asyncio.conftest import async_url as async_url
from tests.backends.asyncio.conftest import sync_url as sync_url
from tests.backends.consumers import orders
from tests.backends.consumers.orders import (
    CONSUMER,
    REFUSED,
    Broker,
    Orders,
    create_order,
    create_order_async,
    send_invoice,
    send_invoice_async,
)
from tests.backends.store.test_store_backends import reaped, release_together

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[3]
CREATE_ORDER = handler_name(create_order)
SEND_INVOICE = handler_name(send_invoice)
#: Messages of the two-process tests (200: the finding's stream), and of the race.
STREAM = 200
RACE = 20


def _drop_consumers_table(engine: sa.Engine) -> None:
    """No consumers table left from another test (they share the test database)."""
    sa.Table("inbox_consumers", sa.MetaData()).drop(engine, checkfirst=True)


@pytest.fixture
def service(engine: sa.Engine) -> Iterator[Orders]:
    """The order service's tables, fresh, on the backend under test."""
    _drop_consumers_table(engine)
    service = orders.ORDERS
    service.reset(engine)
    yield service
    service.metadata.drop_all(engine, checkfirst=True)


def _deliver(
    session_factory: Any, inbox: Any, message_id: str, handler: Any, broker: Broker, **kw: Any
) -> sa_inbox.Result:
    """One delivery of ``message_id`` to ``handler`` under ``orders`` (or ``consumer=``)."""
    return sa_inbox.handle(
        session_factory,
        inbox,
        message_id,
        kw.get("consumer", CONSUMER),
        functools.partial(handler, message_id=message_id),
        ack=broker.ack,
        nack=broker.nack,
    )


# -- one process -----------------------------------------------------------------------------


def test_a_second_handler_under_the_name_is_refused_and_claims_nothing(
    engine: sa.Engine, service: Orders
) -> None:
    """``handle(..., "evt-42", "orders", create_order)`` then ``send_invoice``: the invoice
    is refused (not acked as a duplicate), and runs once given a name of its own."""
    Session, broker = sessionmaker(engine), Broker()
    result = _deliver(Session, service.inbox, "evt-42", create_order, broker)
    assert result.outcome is Outcome.PROCESSED and (broker.acks, broker.nacks) == (1, 0)

    for message_id in ("evt-42", "evt-43"):  # the claimed id and a new one
        with pytest.raises(ConsumerNameTaken) as info:
            _deliver(Session, service.inbox, message_id, send_invoice, broker)
        assert (info.value.consumer_name, info.value.owner) == (CONSUMER, CREATE_ORDER)
        assert info.value.handler == SEND_INVOICE
        assert isinstance(info.value, ConfigurationError)
    assert (broker.acks, broker.nacks) == (1, 0)  # neither acked nor nacked
    assert service.claims(engine) == 1  # evt-43 was not claimed
    assert service.effects_by_handler(engine) == {"create_order": 1}

    result = _deliver(Session, service.inbox, "evt-42", send_invoice, broker, consumer="invoices")
    assert result.outcome is Outcome.PROCESSED and (broker.acks, broker.nacks) == (2, 0)
    assert service.effects_by_handler(engine) == {"create_order": 1, "send_invoice": 1}
    assert service.owners(engine) == [("invoices", SEND_INVOICE), (CONSUMER, CREATE_ORDER)]


def test_a_new_process_sees_the_owner_the_database_holds(
    engine: sa.Engine, service: Orders
) -> None:
    """Another Inbox (another process's view) reads the owner: refused at once."""
    Session, broker = sessionmaker(engine), Broker()
    _deliver(Session, service.inbox, "evt-1", create_order, broker)
    other = Orders()  # the same tables, a view of its own
    with pytest.raises(ConsumerNameTaken):
        _deliver(Session, other.inbox, "evt-2", send_invoice, broker)
    assert _deliver(Session, other.inbox, "evt-2", create_order, broker).outcome is (
        Outcome.PROCESSED
    )
    assert service.effects_by_handler(engine) == {"create_order": 2}
    assert (broker.acks, broker.nacks) == (2, 0)


def test_hand_over_gives_the_name_and_its_claims_to_the_new_handler(
    engine: sa.Engine, service: Orders
) -> None:
    Session, broker = sessionmaker(engine), Broker()
    _deliver(Session, service.inbox, "evt-1", create_order, broker)
    assert service.inbox.consumers is not None
    previous = service.inbox.consumers.hand_over(engine, CONSUMER, send_invoice)
    assert previous == CREATE_ORDER
    assert service.owners(engine) == [(CONSUMER, SEND_INVOICE)]

    assert _deliver(Session, service.inbox, "evt-2", send_invoice, broker).outcome is (
        Outcome.PROCESSED
    )
    # the claims came with the name: a redelivery of evt-1 is a duplicate for the new one
    assert _deliver(Session, service.inbox, "evt-1", send_invoice, broker).outcome is (
        Outcome.DUPLICATE
    )
    for inbox in (service.inbox, Orders().inbox):  # this process, and a restarted one
        with pytest.raises(ConsumerNameTaken) as info:
            _deliver(Session, inbox, "evt-3", create_order, broker)
        assert info.value.owner == SEND_INVOICE
    assert service.effects_by_handler(engine) == {"create_order": 1, "send_invoice": 1}
    assert service.claims(engine) == 2 and (broker.acks, broker.nacks) == (3, 0)


def test_hand_over_of_a_name_nobody_owns_registers_it(engine: sa.Engine, service: Orders) -> None:
    assert service.inbox.consumers is not None
    assert service.inbox.consumers.hand_over(engine, CONSUMER, send_invoice) is None
    with pytest.raises(ConsumerNameTaken):
        _deliver(sessionmaker(engine), service.inbox, "evt-1", create_order, Broker())
    assert service.owners(engine) == [(CONSUMER, SEND_INVOICE)]
    assert service.claims(engine) == 0


def test_consumers_false_skips_the_check(engine: sa.Engine) -> None:
    """No consumers table at all: the second handler's delivery is a duplicate again."""
    _drop_consumers_table(engine)
    service = Orders(consumers=False)
    service.reset(engine)
    try:
        assert "inbox_consumers" not in service.metadata.tables
        Session, broker = sessionmaker(engine), Broker()
        assert _deliver(Session, service.inbox, "evt-42", create_order, broker).outcome is (
            Outcome.PROCESSED
        )
        assert _deliver(Session, service.inbox, "evt-42", send_invoice, broker).outcome is (
            Outcome.DUPLICATE
        )
        assert (broker.acks, broker.nacks) == (2, 0)
        assert service.effects_by_handler(engine) == {"create_order": 1}
        assert not sa.inspect(engine).has_table("inbox_consumers")
    finally:
        service.metadata.drop_all(engine, checkfirst=True)


def test_a_missing_consumers_table_is_missing_table(engine: sa.Engine, service: Orders) -> None:
    _drop_consumers_table(engine)
    broker = Broker()
    with pytest.raises(MissingTable, match=r"op\.create_inbox_consumers_table\(\)") as info:
        _deliver(sessionmaker(engine), service.inbox, "evt-1", create_order, broker)
    assert isinstance(info.value, ConfigurationError)
    assert "inbox_consumers" in str(info.value)
    assert (broker.acks, broker.nacks) == (0, 0)
    assert service.claims(engine) == 0 and service.effects_by_handler(engine) == {}


class Settler:
    """A broker adapter's settler, recording what it would send."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def ack(self) -> None:
        self.calls.append("ack")

    def retry(self) -> None:
        self.calls.append("retry")

    def dead_letter(self, reason: object, detail: str) -> None:
        self.calls.append("dead_letter")


def deliver_order(session: Session, delivery: Delivery) -> None:
    """A broker adapter's handler of the order service."""
    create_order(session, delivery.message_id or "")


def deliver_invoice(session: Session, delivery: Delivery) -> None:
    """Another delivery handler under the same consumer name."""
    send_invoice(session, delivery.message_id or "")


def test_a_broker_adapter_checks_its_own_handler(engine: sa.Engine, service: Orders) -> None:
    """Every adapter calls handle() through one wrapper of its own (the delivery limit):
    the owner is the adapter's handler, not that wrapper, so two adapters' handlers under
    one name are told apart."""
    Session = sessionmaker(engine)

    def process(handler: Any, message_id: str) -> list[str]:
        settler = Settler()
        brokers.process(
            Delivery(message_id, b"{}"),
            settler,
            session_factory=Session,
            inbox=service.inbox,
            consumer_name=CONSUMER,
            handler=handler,
        )
        return settler.calls

    assert process(deliver_order, "evt-42") == ["ack"]
    with pytest.raises(ConsumerNameTaken) as info:
        process(deliver_invoice, "evt-42")
    assert (info.value.owner, info.value.handler) == (
        handler_name(deliver_order),
        handler_name(deliver_invoice),
    )
    with pytest.raises(ConsumerNameTaken):
        process(deliver_invoice, "evt-43")  # unsettled: neither acked, retried nor dead
    assert process(deliver_order, "evt-43") == ["ack"]
    assert service.effects_by_handler(engine) == {"create_order": 2}
    assert service.claims(engine) == 2


# -- the store's workers -------------------------------------------------------------------


class StoreService:
    """An inbox store (and its consumers table) plus the effects the workers write."""

    def __init__(self, *, consumers: bool = True) -> None:
        self.metadata = sa.MetaData()
        self.store = InboxStore(self.metadata, table_name="owned_store", consumers=consumers)
        self.effects = orders.Orders().effects.to_metadata(self.metadata)

    def pending(self, engine: sa.Engine) -> list[tuple[str, int, str | None]]:
        """``(status, attempts, claimed_by)`` of every row."""
        t = self.store.table
        with engine.connect() as conn:
            rows = conn.execute(sa.select(t.c.status, t.c.attempts, t.c.claimed_by))
            return [(str(status), int(attempts), by) for status, attempts, by in rows]

    def effects_by_handler(self, engine: sa.Engine) -> dict[str, int]:
        t = self.effects
        query = sa.select(t.c.handler, sa.func.count()).group_by(t.c.handler)
        with engine.connect() as conn:
            return {str(name): int(count) for name, count in conn.execute(query)}


def _store_service(engine: sa.Engine, messages: int, *, consumers: bool = True) -> StoreService:
    _drop_consumers_table(engine)
    service = StoreService(consumers=consumers)
    service.metadata.drop_all(engine, checkfirst=True)
    service.metadata.create_all(engine)
    with engine.begin() as conn:
        for n in range(messages):
            service.store.receive(conn, f"evt-{n}", {"n": n}, consumer_name=CONSUMER)
    return service


def fulfil(session: Session, message: StoredMessage) -> None:
    """The store's owner handler."""
    session.execute(orders._effect(message.message_id, "create_order"))


def bill(session: Session, message: StoredMessage) -> None:
    """Another handler under the same consumer name."""
    session.execute(orders._effect(message.message_id, "send_invoice"))


async def fulfil_async(session: AsyncSession, message: StoredMessage) -> None:
    await session.execute(orders._effect(message.message_id, "create_order"))


async def bill_async(session: AsyncSession, message: StoredMessage) -> None:
    await session.execute(orders._effect(message.message_id, "send_invoice"))


def test_the_store_worker_is_refused_before_it_claims_anything(engine: sa.Engine) -> None:
    service = _store_service(engine, 5)
    try:
        bound = service.store.bind(engine)
        owner = Worker(bound, fulfil, consumer_name=CONSUMER)
        owner.own_consumer_name()  # the owner, before any message
        other = Worker(bound, bill, consumer_name=CONSUMER)
        with pytest.raises(ConsumerNameTaken) as info:
            other.run(until_empty=True, handle_signals=False)
        assert info.value.owner == handler_name(fulfil)
        with pytest.raises(ConsumerNameTaken):
            other.own_consumer_name()
        assert service.pending(engine) == [(PENDING, 0, None)] * 5  # not even claimed
        assert other.summary.processed == 0

        assert owner.run(until_empty=True, handle_signals=False).processed == 5
        assert service.effects_by_handler(engine) == {"create_order": 5}
    finally:
        service.metadata.drop_all(engine, checkfirst=True)


def test_the_store_worker_with_consumers_false_runs_any_handler(engine: sa.Engine) -> None:
    service = _store_service(engine, 2, consumers=False)
    try:
        bound = service.store.bind(engine)
        Worker(bound, fulfil, consumer_name=CONSUMER).run(max_messages=1, handle_signals=False)
        Worker(bound, bill, consumer_name=CONSUMER).run(until_empty=True, handle_signals=False)
        assert service.effects_by_handler(engine) == {"create_order": 1, "send_invoice": 1}
        assert not sa.inspect(engine).has_table("inbox_consumers")
    finally:
        service.metadata.drop_all(engine, checkfirst=True)


# -- processes ---------------------------------------------------------------------------------


def start(url: str, handler: str, count: int, *more: str, script: bool = False) -> Any:
    """The consumer process of :mod:`tests.backends.consumers.orders`: ``python -m`` (or its
    file as a script)."""
    target = [str(Path(orders.__file__))] if script else ["-m", orders.__name__]
    return subprocess.Popen(
        [sys.executable, *target, url, handler, str(count), *more],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def said(child: Any) -> str:
    assert child.stdout is not None
    return str(child.stdout.readline().strip())


def resume(child: Any) -> None:
    assert child.stdin is not None
    child.stdin.write("GO\n")
    child.stdin.flush()


def ended(child: Any, timeout: float = 120) -> tuple[int, str]:
    """The exit status and last line of a child that finishes on its own."""
    out, err = child.communicate(timeout=timeout)
    lines = out.strip().splitlines()
    assert lines, err
    return child.returncode, lines[-1]


def test_two_processes_with_different_handlers_the_second_is_refused(
    url: str, engine: sa.Engine, service: Orders
) -> None:
    """The finding's case: two consumers of one stream under ``orders`` with different
    handlers. The second is refused at its first message and the first applies all of it,
    while both run (the first pauses mid-stream until the second has ended)."""
    with reaped([start(url, "create_order", STREAM, str(STREAM // 2))]) as (first,):
        release_together([first])
        assert said(first) == "PAUSED"  # half the stream applied: the name is its own
        with reaped([start(url, "send_invoice", STREAM)]) as (second,):
            release_together([second])
            status, line = ended(second)
        assert status == REFUSED
        assert line == f"REFUSED evt-0 {CREATE_ORDER} 0 0"  # at its first message
        resume(first)
        assert ended(first) == (0, f"DONE {STREAM} 0")
    assert service.effects_by_handler(engine) == {"create_order": STREAM}  # 200 of 200
    assert service.claims(engine) == STREAM
    assert service.owners(engine) == [(CONSUMER, CREATE_ORDER)]


def _race(url: str, engine: sa.Engine, service: Orders, handlers: tuple[str, str]) -> None:
    """Two processes released together at a barrier, each the first to claim under the
    name if it wins: exactly one owner, the other refused, every message applied once."""
    children = [start(url, handler, RACE) for handler in handlers]
    with reaped(children):
        release_together(children)
        results = [ended(child) for child in children]
    statuses = sorted(status for status, _ in results)
    assert statuses == [0, REFUSED], results
    winner = handlers[[status for status, _ in results].index(0)]
    owner = handler_name(orders.HANDLERS[winner])
    assert service.owners(engine) == [(CONSUMER, owner)]
    refused = next(line for status, line in results if status == REFUSED)
    assert refused == f"REFUSED evt-0 {owner} 0 0"
    applied = winner.removesuffix("_async")
    assert service.effects_by_handler(engine) == {applied: RACE}
    assert service.claims(engine) == RACE


def test_two_processes_racing_to_be_first_leave_one_owner(
    url: str, engine: sa.Engine, service: Orders
) -> None:
    _race(url, engine, service, ("create_order", "send_invoice"))


def test_a_handler_keeps_its_name_as_a_module_a_script_and_imported() -> None:
    """``python -m pkg.mod``, ``python pkg/mod.py`` and ``import pkg.mod`` name the handler
    alike (no database: the process prints the name)."""
    names = set()
    for script in (False, True):
        child = start("sqlite://", "name", 0, script=script)
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        names.add(out.strip())
    assert names == {CREATE_ORDER} == {"tests.backends.consumers.orders.create_order"}


def test_the_same_handler_run_as_a_script_then_a_module_then_imported_is_one_owner(
    url: str, engine: sa.Engine, service: Orders
) -> None:
    with reaped([start(url, "create_order", 10, script=True)]) as (as_script,):
        release_together([as_script])
        assert ended(as_script) == (0, "DONE 10 0")
    with reaped([start(url, "create_order", 20)]) as (as_module,):
        release_together([as_module])
        assert ended(as_module) == (0, "DONE 20 0")  # the first 10 acked as duplicates
    assert _deliver(
        sessionmaker(engine), service.inbox, "evt-20", create_order, Broker()
    ).outcome is (Outcome.PROCESSED)
    assert service.effects_by_handler(engine) == {"create_order": 21}
    assert service.owners(engine) == [(CONSUMER, CREATE_ORDER)]


# -- asyncio -----------------------------------------------------------------------------------


@pytest.fixture
def async_service(sync_url: str) -> Iterator[tuple[sa.Engine, Orders]]:
    engine = sa.create_engine(sync_url)
    _drop_consumers_table(engine)
    service = orders.ORDERS
    service.reset(engine)
    yield engine, service
    service.metadata.drop_all(engine, checkfirst=True)
    engine.dispose()


async def _adeliver(
    Session: Any, inbox: Any, message_id: str, handler: Any, broker: Broker, **kw: Any
) -> sa_inbox.Result:
    return await sa_inbox.asyncio.handle(
        Session,
        inbox,
        message_id,
        kw.get("consumer", CONSUMER),
        functools.partial(handler, message_id=message_id),
        ack=broker.ack,
        nack=broker.nack,
    )


def test_async_a_second_handler_is_refused_and_claims_nothing(
    async_url: str, async_service: tuple[sa.Engine, Orders]
) -> None:
    engine, service = async_service
    broker = Broker()

    async def scenario() -> None:
        aengine = create_async_engine(async_url)
        try:
            Session, inbox = async_sessionmaker(aengine), AsyncInbox(service.inbox)
            result = await _adeliver(Session, inbox, "evt-42", create_order_async, broker)
            assert result.outcome is Outcome.PROCESSED
            for message_id in ("evt-42", "evt-43"):
                with pytest.raises(ConsumerNameTaken) as info:
                    await _adeliver(Session, inbox, message_id, send_invoice_async, broker)
                assert info.value.owner == handler_name(create_order_async)
            assert (broker.acks, broker.nacks) == (1, 0)
            result = await _adeliver(
                Session, inbox, "evt-42", send_invoice_async, broker, consumer="invoices"
            )
            assert result.outcome is Outcome.PROCESSED
        finally:
            await aengine.dispose()

    asyncio.run(scenario())
    assert (broker.acks, broker.nacks) == (2, 0)
    assert service.claims(engine) == 1 and service.claims(engine, "invoices") == 1
    assert service.effects_by_handler(engine) == {"create_order": 1, "send_invoice": 1}


def test_async_hand_over_then_the_new_handler_works_and_the_old_is_refused(
    async_url: str, async_service: tuple[sa.Engine, Orders]
) -> None:
    engine, service = async_service
    broker = Broker()

    async def scenario() -> str | None:
        aengine = create_async_engine(async_url)
        try:
            Session, inbox = async_sessionmaker(aengine), AsyncInbox(service.inbox)
            await _adeliver(Session, inbox, "evt-1", create_order_async, broker)
            previous = await inbox.hand_over(aengine, CONSUMER, send_invoice_async)
            result = await _adeliver(Session, inbox, "evt-2", send_invoice_async, broker)
            assert result.outcome is Outcome.PROCESSED
            with pytest.raises(ConsumerNameTaken):
                await _adeliver(Session, inbox, "evt-3", create_order_async, broker)
            return previous
        finally:
            await aengine.dispose()

    assert asyncio.run(scenario()) == handler_name(create_order_async)
    assert service.owners(engine) == [(CONSUMER, handler_name(send_invoice_async))]
    assert service.effects_by_handler(engine) == {"create_order": 1, "send_invoice": 1}
    assert (broker.acks, broker.nacks) == (2, 0)


def test_async_a_missing_consumers_table_is_missing_table(
    async_url: str, async_service: tuple[sa.Engine, Orders]
) -> None:
    engine, service = async_service
    _drop_consumers_table(engine)
    broker = Broker()

    async def scenario() -> None:
        aengine = create_async_engine(async_url)
        try:
            with pytest.raises(MissingTable, match="inbox_consumers"):
                await _adeliver(
                    async_sessionmaker(aengine), service.inbox, "evt-1", create_order_async, broker
                )
        finally:
            await aengine.dispose()

    asyncio.run(scenario())
    assert (broker.acks, broker.nacks) == (0, 0)
    assert service.claims(engine) == 0 and service.effects_by_handler(engine) == {}


def test_the_async_worker_is_refused_before_it_claims_anything(
    async_url: str, sync_url: str
) -> None:
    engine = sa.create_engine(sync_url)
    service = _store_service(engine, 5)
    store = AsyncInboxStore(service.store)

    async def scenario() -> int:
        aengine = create_async_engine(async_url)
        try:
            await store.hand_over(aengine, CONSUMER, fulfil_async)
            other = AsyncWorker(store.bind(aengine), bill_async, consumer_name=CONSUMER)
            with pytest.raises(ConsumerNameTaken) as info:
                await other.run(until_empty=True, handle_signals=False)
            assert info.value.owner == handler_name(fulfil_async)
            assert await asyncio.to_thread(service.pending, engine) == [(PENDING, 0, None)] * 5
            owner = AsyncWorker(store.bind(aengine), fulfil_async, consumer_name=CONSUMER)
            return (await owner.run(until_empty=True, handle_signals=False)).processed
        finally:
            await aengine.dispose()

    try:
        assert asyncio.run(scenario()) == 5
        assert service.effects_by_handler(engine) == {"create_order": 5}
    finally:
        service.metadata.drop_all(engine, checkfirst=True)
        engine.dispose()


def test_async_processes_racing_to_be_first_leave_one_owner(
    async_url: str, async_service: tuple[sa.Engine, Orders]
) -> None:
    engine, service = async_service
    _race(async_url, engine, service, ("create_order_async", "send_invoice_async"))
