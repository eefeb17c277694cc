"""A missing ``await`` inside an ``async def`` handler: refused, nothing committed, per task.

``session.execute(stmt)`` without ``await`` only makes a coroutine; the statement never
runs. Before, the async runner committed the claim and acked the message without the
change (the handler returned normally). Now the coroutines a handler drops un-awaited are
seen in the handler's own task (``sa_inbox.asyncio._unawaited``), and the attempt is
FAILED + nacked (the runner), a failed attempt (the AsyncWorker) or an
``AsyncHandlerError`` (``run_in_transaction``), on every async driver, while other tasks
run correct handlers at the same time.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from sa_inbox import InboxStore, Outcome, Result
from sa_inbox.asyncio import AsyncInboxStore, AsyncWorker, handle, run_in_transaction
from sa_inbox.exc import AsyncHandlerError
from sa_inbox.store import Incoming, StoredMessage
from tests.backends.asyncio.test_async import run
from tests.backends.runner.test_guarantee import Broker
from tests.support.app import CONSUMER, App, hand_over

pytestmark = pytest.mark.backend

AsyncHandler = Callable[[AsyncSession], Awaitable[None]]


def forgetful_handlers(app: App, message_id: str) -> dict[str, AsyncHandler]:
    """Handlers that each forget one ``await`` (and may await everything else)."""
    ledger_row, balance = app.payment(message_id, 1, Decimal(3))

    async def statement_dropped(session: AsyncSession) -> None:
        session.execute(ledger_row)  # type: ignore[unused-coroutine]
        await session.execute(balance)  # half the change runs: the balance, not the ledger

    async def helper_not_awaited(session: AsyncSession) -> None:
        app.apply_payment_async(session, message_id, 1, Decimal(3))  # type: ignore[unused-coroutine]

    async def dropped_after_other_work(session: AsyncSession) -> None:
        await session.execute(ledger_row)
        await asyncio.sleep(0)  # other tasks run in between
        session.scalar(sa.select(sa.func.count()).select_from(app.ledger))  # type: ignore[unused-coroutine]
        await session.execute(balance)

    async def kept_in_a_local(session: AsyncSession) -> None:
        pending = session.execute(ledger_row)  # noqa: F841 (never awaited; dropped at return)
        await session.execute(balance)

    return {
        "statement_dropped": statement_dropped,
        "helper_not_awaited": helper_not_awaited,
        "dropped_after_other_work": dropped_after_other_work,
        "kept_in_a_local": kept_in_a_local,
    }


def task_leaving_handlers(app: App, message_id: str) -> dict[str, AsyncHandler]:
    """Handlers that put part of the change in a task and return before it is done."""
    ledger_row, balance = app.payment(message_id, 1, Decimal(3))

    async def lookup_fails() -> None:
        raise LookupError("the lookup failed")

    async def create_task(session: AsyncSession) -> None:
        await session.execute(balance)
        asyncio.create_task(session.execute(ledger_row))  # noqa: RUF006

    async def ensure_future(session: AsyncSession) -> None:
        await session.execute(balance)
        asyncio.ensure_future(session.execute(ledger_row))  # noqa: RUF006

    async def gather_not_awaited(session: AsyncSession) -> None:
        await session.execute(balance)
        asyncio.gather(session.execute(ledger_row))

    async def gather_sibling_failed(session: AsyncSession) -> None:
        # No await is missing: gather raised the lookup's error and left the write running.
        await session.execute(balance)
        with contextlib.suppress(LookupError):
            await asyncio.gather(session.execute(ledger_row), lookup_fails())

    async def failed_unseen(session: AsyncSession) -> None:
        await session.execute(balance)
        asyncio.create_task(lookup_fails())  # noqa: RUF006
        await asyncio.sleep(0.01)  # the task fails meanwhile; nobody looks
        await session.execute(ledger_row)

    def plain_def_create_task(session: AsyncSession) -> None:
        asyncio.get_running_loop().create_task(session.execute(ledger_row))

    return {name: f for name, f in locals().items() if name not in ("lookup_fails", "app")}


def correct_handlers(app: App, message_id: str) -> dict[str, AsyncHandler]:
    """Handlers using tasks and coroutines correctly: never refused."""
    ledger_row, balance = app.payment(message_id, 1, Decimal(3))

    async def nothing() -> None:
        await asyncio.sleep(0)

    async def gather(session: AsyncSession) -> None:
        await asyncio.gather(session.execute(balance), nothing())
        await session.execute(ledger_row)

    async def task_awaited_later(session: AsyncSession) -> None:
        task = asyncio.create_task(nothing())
        await session.execute(balance)
        await task
        await session.execute(ledger_row)

    async def task_group(session: AsyncSession) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(nothing())
            group.create_task(nothing())
        await session.execute(balance)
        await session.execute(ledger_row)

    async def wait_for_timing_out(session: AsyncSession) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(5), 0.01)
        await session.execute(balance)
        await session.execute(ledger_row)

    async def failure_retrieved(session: AsyncSession) -> None:
        results = await asyncio.gather(nothing(), lookup_fails(), return_exceptions=True)
        assert isinstance(results[1], LookupError)
        await session.execute(balance)
        await session.execute(ledger_row)

    async def lookup_fails() -> None:
        raise LookupError("looked for nothing")

    async def foreign_coroutine_collected(session: AsyncSession) -> None:
        # Some other code's coroutine, in a reference cycle, finalised by the garbage
        # collector while this handler runs: not this handler's doing.
        await session.execute(balance)
        with pytest.warns(RuntimeWarning, match="never awaited"):
            gc.collect()
        await session.execute(ledger_row)

    return {
        name: f
        for name, f in locals().items()
        if name not in ("nothing", "lookup_fails", "app", "ledger_row", "balance")
    }


async def _deliver(Session: Any, app: App, handler: AsyncHandler) -> tuple[Result, Broker]:
    broker = Broker()
    result = await handle(
        Session, app.inbox, "m1", CONSUMER, handler, ack=broker.ack, nack=broker.nack
    )
    return result, broker


@pytest.mark.parametrize(
    "kind",
    [
        "create_task",
        "ensure_future",
        "gather_not_awaited",
        "gather_sibling_failed",
        "failed_unseen",
        "plain_def_create_task",
    ],
)
def test_a_handler_leaving_a_task_behind_is_refused(app: App, async_url: str, kind: str) -> None:
    """Before, each was PROCESSED + acked with the claim committed and no ledger row (the
    task ran after the commit, on a closed transaction)."""
    handler = task_leaving_handlers(app, "m1")[kind]

    async def scenario(engine: AsyncEngine) -> None:
        result, broker = await _deliver(async_sessionmaker(engine), app, handler)
        assert result.outcome is Outcome.FAILED, result
        assert isinstance(result.error, AsyncHandlerError), result.error
        assert "task(s) it created" in str(result.error)
        assert (broker.acks, broker.nacks) == (0, 1)
        await asyncio.sleep(0.05)  # a task left running would have written by now
        assert app.inbox_rows() == 0 and app.ledger_rows() == 0 and app.balance(1) == 0

    run(async_url, scenario)
    assert app.inbox_rows() == 0 and app.ledger_rows() == 0 and app.balance(1) == 0


@pytest.mark.parametrize(
    "kind",
    [
        "gather",
        "task_awaited_later",
        "task_group",
        "wait_for_timing_out",
        "failure_retrieved",
        "foreign_coroutine_collected",
    ],
)
def test_correct_handlers_with_tasks_are_not_refused(app: App, async_url: str, kind: str) -> None:
    handler = correct_handlers(app, "m1")[kind]

    def leak_a_foreign_coroutine() -> None:
        cycle: list[Any] = [_foreign()]
        cycle.append(cycle)

    async def scenario(engine: AsyncEngine) -> None:
        gc.disable()  # the cycle is finalised by the handler's gc.collect(), not before
        try:
            if kind == "foreign_coroutine_collected":
                leak_a_foreign_coroutine()
            result, broker = await _deliver(async_sessionmaker(engine), app, handler)
        finally:
            gc.enable()
        assert result.outcome is Outcome.PROCESSED, result
        assert (broker.acks, broker.nacks) == (1, 0)

    run(async_url, scenario)
    assert app.inbox_rows() == 1 and app.ledger_rows("m1") == 1 and app.balance(1) == Decimal(3)


async def _foreign() -> None:
    """Another component's coroutine, leaked un-awaited."""


@pytest.mark.filterwarnings("error")  # the coroutine's own RuntimeWarning is not emitted either
@pytest.mark.parametrize(
    "kind",
    ["statement_dropped", "helper_not_awaited", "dropped_after_other_work", "kept_in_a_local"],
)
def test_a_missing_await_in_an_async_def_handler_is_refused(
    app: App, async_url: str, kind: str
) -> None:
    handler = forgetful_handlers(app, "m1")[kind]

    async def correct(session: AsyncSession) -> None:
        await app.apply_payment_async(session, "m1", 1, Decimal(3))

    async def scenario(engine: AsyncEngine) -> None:
        Session = async_sessionmaker(engine)
        broker = Broker()
        result = await handle(
            Session, app.inbox, "m1", CONSUMER, handler, ack=broker.ack, nack=broker.nack
        )
        assert result.outcome is Outcome.FAILED, result
        assert isinstance(result.error, AsyncHandlerError), result.error
        assert "never awaited" in str(result.error)
        assert (broker.acks, broker.nacks) == (0, 1)
        # Nothing of the attempt committed: not the claim, not the half that was awaited.
        assert app.inbox_rows() == 0 and app.ledger_rows() == 0 and app.balance(1) == 0
        # The redelivery, to the corrected handler, applies the payment once.
        hand_over(app.inbox, app.engine, correct)
        broker = Broker()
        result = await handle(
            Session, app.inbox, "m1", CONSUMER, correct, ack=broker.ack, nack=broker.nack
        )
        assert result.outcome is Outcome.PROCESSED and (broker.acks, broker.nacks) == (1, 0)

    run(async_url, scenario)
    assert app.ledger_rows("m1") == 1 and app.balance(1) == Decimal(3) and app.inbox_rows() == 1


@pytest.mark.filterwarnings("error")
def test_forgetful_and_correct_handlers_in_concurrent_tasks(app: App, async_url: str) -> None:
    """16 tasks at a barrier, interleaving at every await: the eight that forget an await
    are refused and only they; the eight correct ones commit. The check is per task, so a
    coroutine dropped by one task never blames another. (SQLite has one writer: the claim
    holds it until the commit, so there the tasks meet no barrier and take turns.)"""
    tasks = 16
    barrier = asyncio.Barrier(1 if async_url.startswith("sqlite") else tasks)

    def make_handler(message_id: str, forgetful: bool) -> AsyncHandler:
        ledger_row, balance = app.payment(message_id, 1, Decimal(1))

        async def handler(session: AsyncSession) -> None:
            await barrier.wait()
            await session.execute(balance)
            await asyncio.sleep(0)
            if forgetful:
                session.execute(ledger_row)  # type: ignore[unused-coroutine]
            else:
                await session.execute(ledger_row)
            await asyncio.sleep(0)

        return handler

    async def scenario(engine: AsyncEngine) -> dict[str, Outcome]:
        Session = async_sessionmaker(engine)

        async def deliver(i: int) -> tuple[str, Outcome]:
            message_id = f"m{i}"
            result = await handle(
                Session,
                app.inbox,
                message_id,
                CONSUMER,
                make_handler(message_id, forgetful=i % 2 == 0),
                ack=lambda: None,
                nack=lambda: None,
            )
            return message_id, result.outcome

        return dict(await asyncio.gather(*(deliver(i) for i in range(tasks))))

    extra = {"connect_args": {"timeout": 30}} if async_url.startswith("sqlite") else {}
    outcomes = run(async_url, scenario, pool_size=tasks, **extra)
    expected = {f"m{i}": Outcome.FAILED if i % 2 == 0 else Outcome.PROCESSED for i in range(tasks)}
    assert outcomes == expected
    assert app.inbox_rows() == tasks // 2 and app.ledger_rows() == tasks // 2
    assert app.balance(1) == Decimal(tasks // 2)
    for i in range(0, tasks, 2):
        assert app.ledger_rows(f"m{i}") == 0


@pytest.mark.filterwarnings("error")
def test_the_async_worker_records_a_missing_await_as_a_failed_attempt(
    app: App, async_url: str
) -> None:
    store = InboxStore(app.metadata)
    store.table.create(app.engine)
    astore = AsyncInboxStore(store)

    async def handler(session: AsyncSession, message: StoredMessage) -> None:
        ledger_row, balance = app.payment(message.message_id, 1, Decimal(1))
        await session.execute(balance)
        if message.message_id == "m3":
            session.execute(ledger_row)  # type: ignore[unused-coroutine]
        else:
            await session.execute(ledger_row)

    async def scenario(engine: AsyncEngine) -> tuple[Any, dict[str, int]]:
        async with async_sessionmaker(engine).begin() as session:
            await astore.receive_many(
                session, [Incoming(f"m{i}", {}) for i in range(6)], consumer_name=CONSUMER
            )
        worker = AsyncWorker(
            astore.bind(engine), handler, consumer_name=CONSUMER, concurrency=3, max_attempts=1
        )
        summary = await worker.run(until_empty=True, max_seconds=60, handle_signals=False)
        return summary, await astore.counts(engine, CONSUMER)

    summary, counts = run(async_url, scenario)
    assert (summary.processed, summary.dead) == (5, 1)
    assert counts["done"] == 5 and counts["dead"] == 1
    assert app.ledger_rows() == 5 and app.ledger_rows("m3") == 0
    assert app.balance(1) == Decimal(5)


@pytest.mark.filterwarnings("error")
def test_run_in_transaction_refuses_a_missing_await(app: App, async_url: str) -> None:
    async def work(session: AsyncSession) -> None:
        ledger_row, balance = app.payment("w1", 1, Decimal(2))
        await session.execute(balance)
        session.execute(ledger_row)  # type: ignore[unused-coroutine]

    async def scenario(engine: AsyncEngine) -> None:
        with pytest.raises(AsyncHandlerError, match=r"AsyncSession\.execute"):
            await run_in_transaction(async_sessionmaker(engine), work)

    run(async_url, scenario)
    assert app.ledger_rows() == 0 and app.balance(1) == 0
