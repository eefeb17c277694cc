"""The NATS JetStream adapter (:mod:`sa_inbox.brokers.nats`) against the live nats-server and
every async driver: duplicate publishes, consumers SIGKILLed before and after the commit,
poison messages, messages without a key. Each test ends with the durable consumer drained
(``num_pending`` and ``num_ack_pending`` 0, from the server's consumer info)."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import nats
import pytest
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig
from sqlalchemy.ext.asyncio import AsyncSession

from sa_inbox import ConfigurationError
from sa_inbox.brokers import DeadLetterReason, Delivery, Disposition
from sa_inbox.brokers.nats import (
    DEAD_LETTER_DETAIL,
    DEAD_LETTER_MESSAGE_ID,
    DEAD_LETTER_REASON,
    DEAD_LETTER_SEQUENCE,
    backoff,
    ensure_consumer,
)
from sa_inbox.exc import MissingTable
from tests.backends.asyncio import conftest as async_fixtures
from tests.backends.brokers.nats_support import (
    POISON,
    Names,
    consumer_info,
    declare,
    delete,
    pay,
    publish,
    run_consumer,
)
from tests.backends.claim.test_crash import kill_when
from tests.conftest import broker_url
from tests.support.app import App

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[3]
CHILD = "tests.backends.brokers.nats_child"
T = TypeVar("T")

#: One run per async driver (aiosqlite, asyncpg, psycopg async, aiomysql).
async_url = async_fixtures.async_url
sync_url = async_fixtures.sync_url
app = async_fixtures.app


@pytest.fixture
def nats_url() -> str:
    return broker_url("nats")


@asynccontextmanager
async def streams(nats_url: str, **kw: Any) -> AsyncIterator[tuple[JetStreamContext, Names]]:
    """A fresh stream and dead-letter stream, deleted at the end."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    names = Names.fresh()
    try:
        await declare(js, names, **kw)
        yield js, names
    finally:
        await delete(js, names)
        await nc.close()


def run(test: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(test())


async def drained(js: JetStreamContext, names: Names) -> None:
    info = await consumer_info(js, names)
    assert (info.num_pending, info.num_ack_pending) == (0, 0), info


async def dead_letters(js: JetStreamContext, names: Names) -> list[Any]:
    """Every message of the dead-letter stream (read by sequence, the stream untouched)."""
    state = (await js.stream_info(names.dead_stream)).state
    return [
        await js.get_msg(names.dead_stream, seq)
        for seq in range(state.first_seq, state.first_seq + state.messages)
    ]


def keyed(key: str, body: str, header: str = "Nats-Msg-Id") -> tuple[dict[str, str], bytes]:
    return {header: key}, body.encode()


# -- duplicates --------------------------------------------------------------------------


def test_jetstream_drops_a_duplicate_publish_only_inside_its_window(nats_url: str) -> None:
    """The broker's own dedup, which the inbox does not rely on: inside the stream's
    duplicate_window a second publish of a Nats-Msg-Id is not stored; after it, it is."""

    async def test() -> None:
        async with streams(nats_url, duplicate_window=0.5) as (js, names):
            assert await publish(js, names, [keyed("p-1", "1"), keyed("p-1", "1")]) == [
                False,
                True,
            ]
            await asyncio.sleep(0.6)
            assert await publish(js, names, [keyed("p-1", "1")]) == [False]
            assert (await js.stream_info(names.stream)).state.messages == 2

    run(test)


def test_duplicate_publishes_are_applied_once_per_key(
    nats_url: str, async_url: str, app: App
) -> None:
    """Keyed on Idempotency-Key (JetStream does not dedup on it): all six publishes reach the
    consumer; the inbox applies each key once."""

    async def test() -> None:
        async with streams(nats_url) as (js, names):
            sends = [("p-1", "10.00")] * 3 + [("p-2", "5.00")] * 2 + [("p-3", "1.00")]
            await publish(js, names, [keyed(k, b, "Idempotency-Key") for k, b in sends])
            assert (await js.stream_info(names.stream)).state.messages == 6
            seen = await run_consumer(
                js, names, async_url, app, settlements=6, key_source="Idempotency-Key"
            )
            assert [s.disposition for s in seen].count(Disposition.PROCESSED) == 3
            assert [s.disposition for s in seen].count(Disposition.DUPLICATE) == 3
            assert {s.delivery.message_id for s in seen} == {"p-1", "p-2", "p-3"}
            assert all(s.delivery.broker_ref.startswith(names.stream) for s in seen)
            await drained(js, names)
            assert await dead_letters(js, names) == []

    run(test)
    assert app.ledger_rows() == 3 and app.inbox_rows() == 3
    assert app.balance(1) == Decimal("16.00")


def test_a_nats_msg_id_published_again_after_the_window_is_applied_once(
    nats_url: str, async_url: str, app: App
) -> None:
    """Outside JetStream's duplicate window the same Nats-Msg-Id is stored twice, and the
    default key header makes the inbox skip the second copy."""

    async def test() -> None:
        async with streams(nats_url, duplicate_window=0.3) as (js, names):
            await publish(js, names, [keyed("p-1", "7.00")])
            await asyncio.sleep(0.4)
            assert await publish(js, names, [keyed("p-1", "7.00")]) == [False]
            seen = await run_consumer(js, names, async_url, app, settlements=2)
            assert [s.disposition for s in seen] == [Disposition.PROCESSED, Disposition.DUPLICATE]
            await drained(js, names)

    run(test)
    assert app.ledger_rows("p-1") == 1 and app.balance(1) == Decimal("7.00")


# -- crashes -----------------------------------------------------------------------------


def child(nats_url: str, async_url: str, names: Names, mode: str, limit: int = 3) -> Any:
    return subprocess.Popen(
        [sys.executable, "-m", CHILD, nats_url, async_url, mode, str(limit), *names.as_args()],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def deliver(nats_url: str, async_url: str, names: Names, limit: int = 3) -> list[str]:
    """A new consumer process takes the next delivery: its disposition, reason, count."""
    out, err = child(nats_url, async_url, names, "deliver", limit).communicate(timeout=60)
    assert out.strip(), err
    return out.split()


def crash(
    nats_url: str, async_url: str, mode: str, said: str, limit: int = 3
) -> tuple[JetStreamContext, Names, Any]:
    """Publishes p-1 (42.00), SIGKILLs a consumer child once it says ``said``, and lets a
    new child take the redelivery; returns what the new child said, with the consumer info."""

    async def test() -> tuple[list[str], Any]:
        async with streams(nats_url) as (js, names):
            await publish(js, names, [keyed("p-1", "42.00")])
            kill_when(child(nats_url, async_url, names, mode, limit), said)
            info = await consumer_info(js, names)
            assert info.num_ack_pending == 1, "the killed consumer's delivery is unsettled"
            said_next = await asyncio.to_thread(deliver, nats_url, async_url, names, limit)
            await drained(js, names)
            return said_next, await dead_letters(js, names)

    return run(test)  # type: ignore[return-value]


def test_killed_after_commit_before_ack_the_redelivery_is_acked_as_duplicate(
    nats_url: str, async_url: str, app: App
) -> None:
    said, dead = crash(nats_url, async_url, "crash-after-commit", "COMMITTED")
    assert said == ["duplicate", "-", "2"], "JetStream redelivered it after ack_wait"
    assert dead == []
    assert app.ledger_rows("p-1") == 1 and app.inbox_rows() == 1
    assert app.balance(1) == Decimal("42.00")


def test_killed_before_commit_the_redelivery_is_applied_once(
    nats_url: str, async_url: str, app: App
) -> None:
    said, dead = crash(nats_url, async_url, "crash-before-commit", "APPLIED")
    assert said == ["processed", "-", "2"]
    assert dead == []
    assert app.ledger_rows("p-1") == 1 and app.inbox_rows() == 1
    assert app.balance(1) == Decimal("42.00")


def test_killed_on_the_last_delivery_allowed_the_next_is_dead_lettered_not_lost(
    nats_url: str, async_url: str, app: App
) -> None:
    """max_deliver=-1: JetStream delivers again past sa-inbox's limit (max_deliveries=1),
    and that delivery is dead-lettered without running the handler."""
    said, dead = crash(nats_url, async_url, "crash-before-commit", "APPLIED", limit=1)
    assert said == ["dead_lettered", DeadLetterReason.DELIVERY_LIMIT.value, "2"]
    assert [d.headers[DEAD_LETTER_MESSAGE_ID] for d in dead] == ["p-1"]
    assert dead[0].headers[DEAD_LETTER_REASON] == DeadLetterReason.DELIVERY_LIMIT.value
    assert app.ledger_rows() == 0 and app.inbox_rows() == 0


# -- dead letters ------------------------------------------------------------------------


def test_a_poison_message_is_dead_lettered_after_max_deliveries_without_blocking(
    nats_url: str, async_url: str, app: App
) -> None:
    async def test() -> None:
        async with streams(nats_url) as (js, names):
            await publish(
                js,
                names,
                [({"Nats-Msg-Id": "bad"}, POISON), keyed("p-1", "1.00"), keyed("p-2", "2.00")],
            )
            handled: list[float] = []
            paying = pay(app)

            async def timed(session: AsyncSession, delivery: Delivery) -> None:
                if delivery.message_id == "bad":
                    handled.append(time.monotonic())
                await paying(session, delivery)

            seen = await run_consumer(
                js,
                names,
                async_url,
                app,
                settlements=5,
                max_deliveries=3,
                handler=timed,
                retry_delay=backoff(0.3, 0.6),
            )
            gaps = [later - earlier for earlier, later in itertools.pairwise(handled)]
            assert gaps[0] >= 0.3 and gaps[1] >= 0.6, f"JetStream held each nak's delay: {gaps}"
            order = [
                (s.delivery.message_id, s.disposition, s.delivery.delivery_count) for s in seen
            ]
            assert order.index(("p-2", Disposition.PROCESSED, 1)) < order.index(
                ("bad", Disposition.DEAD_LETTERED, 3)
            ), "the messages behind the poison were not blocked"
            assert [o for o in order if o[0] == "bad"] == [
                ("bad", Disposition.RETRY, 1),
                ("bad", Disposition.RETRY, 2),
                ("bad", Disposition.DEAD_LETTERED, 3),
            ]
            [dead] = await dead_letters(js, names)
            assert dead.data == POISON
            assert dead.headers[DEAD_LETTER_REASON] == "delivery_limit"
            assert dead.headers[DEAD_LETTER_MESSAGE_ID] == "bad"
            assert dead.headers[DEAD_LETTER_SEQUENCE] == "1"
            assert "ValueError: cannot parse the payment" in dead.headers[DEAD_LETTER_DETAIL]
            await drained(js, names)
            info = await consumer_info(js, names)
            assert info.num_redelivered == 0, "terminated: JetStream stopped redelivering it"

    run(test)
    assert app.ledger_rows() == 2 and app.inbox_rows() == 2, "the poison's claim rolled back"
    assert app.balance(1) == Decimal("3.00")


def test_a_message_without_the_key_header_is_dead_lettered_never_processed(
    nats_url: str, async_url: str, app: App
) -> None:
    async def test() -> None:
        async with streams(nats_url) as (js, names):
            too_long = "k" * 300
            await publish(
                js,
                names,
                [
                    (None, b"9.00"),
                    ({"Other": "x"}, b"8.00"),
                    keyed(too_long, "7.00"),
                    keyed("p-1", "1.00"),
                ],
            )
            seen = await run_consumer(js, names, async_url, app, settlements=4)
            assert [(s.disposition, s.reason) for s in seen] == [
                (Disposition.DEAD_LETTERED, DeadLetterReason.MISSING_MESSAGE_ID),
                (Disposition.DEAD_LETTERED, DeadLetterReason.MISSING_MESSAGE_ID),
                (Disposition.DEAD_LETTERED, DeadLetterReason.INVALID_MESSAGE_ID),
                (Disposition.PROCESSED, None),
            ]
            dead = await dead_letters(js, names)
            assert [d.data for d in dead] == [b"9.00", b"8.00", b"7.00"]
            assert [d.headers[DEAD_LETTER_REASON] for d in dead] == [
                "missing_message_id",
                "missing_message_id",
                "invalid_message_id",
            ]
            assert DEAD_LETTER_MESSAGE_ID not in dead[0].headers
            assert dead[1].headers["Other"] == "x", "the original headers are kept"
            assert dead[2].headers[DEAD_LETTER_MESSAGE_ID] == too_long
            await drained(js, names)

    run(test)
    assert app.ledger_rows() == 1 and app.inbox_rows() == 1
    assert app.balance(1) == Decimal("1.00")


def test_an_existing_consumer_with_a_delivery_limit_is_refused(nats_url: str) -> None:
    async def test() -> None:
        async with streams(nats_url) as (js, names):
            config = ConsumerConfig(durable_name=names.durable, max_deliver=3)
            await js.add_consumer(names.stream, config)
            with pytest.raises(ConfigurationError, match="max_deliver=3"):
                await ensure_consumer(js, names.stream, config)

    run(test)


# -- failures of the settlement, the configuration, and stopping -------------------------


def test_a_dead_letter_the_broker_refuses_is_left_unsettled_and_comes_back(
    nats_url: str, async_url: str, app: App
) -> None:
    """The dead-letter stream is deleted while the consumer runs: the publish fails, the
    consumer goes on with the next message, and JetStream redelivers the refused one after
    ack_wait."""

    async def test() -> None:
        async with streams(nats_url) as (js, names):
            await publish(js, names, [keyed("p-1", "1.00"), (None, b"9.00")])
            paid, dropped = pay(app), []

            async def pay_then_drop_the_dead_stream(session: Any, delivery: Any) -> None:
                if not dropped:  # once: the consumer name stays this handler's
                    dropped.append(await js.delete_stream(names.dead_stream))
                await paid(session, delivery)

            handler = pay_then_drop_the_dead_stream
            seen = await run_consumer(js, names, async_url, app, settlements=1, handler=handler)
            assert [s.delivery.message_id for s in seen] == ["p-1"]
            assert (await consumer_info(js, names)).num_ack_pending == 1, "left unsettled"
            await js.add_stream(name=names.dead_stream, subjects=[names.dead_subject])
            [again] = await run_consumer(js, names, async_url, app, settlements=1, handler=handler)
            assert (again.reason, again.delivery.delivery_count) == (
                DeadLetterReason.MISSING_MESSAGE_ID,
                2,
            )
            assert [d.data for d in await dead_letters(js, names)] == [b"9.00"]
            await drained(js, names)

    run(test)
    assert app.ledger_rows() == 1


@pytest.mark.parametrize("where", ["no stream", "the source stream"])
def test_a_dead_letter_subject_no_other_stream_captures_is_refused_at_start(
    nats_url: str, async_url: str, app: App, where: str
) -> None:
    """Refused before anything is fetched: with no stream, every dead letter would be
    refused and its message redelivered for ever; in the source stream, consumed again."""

    async def test() -> None:
        async with streams(nats_url) as (js, names):
            await publish(js, names, [keyed("p-1", "1.00")])
            subject = names.dead_subject + "x" if where == "no stream" else names.subject
            wrong = Names(**{**vars(names), "dead_subject": subject})
            said = "no JetStream stream captures" if where == "no stream" else "consumed again"
            with pytest.raises(ConfigurationError, match=said):
                await run_consumer(js, wrong, async_url, app, settlements=1)
            with pytest.raises(nats.js.errors.NotFoundError):  # not even made
                await consumer_info(js, names)
            assert (await js.stream_info(names.stream)).state.messages == 1

    run(test)
    assert app.ledger_rows() == 0


@pytest.mark.parametrize(
    ("existing", "given", "refused"),
    [
        (None, "pay", False),
        (None, None, True),
        ("none", "pay", True),
        ("pay", None, False),
    ],
    ids=[
        "new consumer filtered",
        "new consumer unfiltered",
        "existing unfiltered, filter given",
        "existing filtered, none given",
    ],
)
def test_the_dead_letter_subject_is_checked_against_the_consumer_jetstream_keeps(
    nats_url: str, existing: str | None, given: str | None, refused: bool
) -> None:
    """The source stream captures both subjects: the dead letters are consumed again unless
    the consumer's filter leaves them out, and an existing consumer keeps its own filter."""
    from sa_inbox.brokers.nats.consumer import check_dead_letter_subject

    async def test() -> None:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        names = Names.fresh()
        filters = {"pay": names.subject, "none": None, None: None}
        try:
            await js.add_stream(name=names.stream, subjects=[names.subject, names.dead_subject])
            if existing is not None:
                config = ConsumerConfig(
                    durable_name=names.durable,
                    ack_policy=AckPolicy.EXPLICIT,
                    filter_subject=filters[existing],
                )
                await js.add_consumer(names.stream, config)
            checked = check_dead_letter_subject(
                js, names.stream, names.dead_subject, filters[given], names.durable
            )
            if refused:
                with pytest.raises(ConfigurationError, match="consumed again"):
                    await checked
            else:
                assert await checked == names.stream
        finally:
            await delete(js, names)
            await nc.close()

    run(test)


def test_a_missing_table_stops_the_consumer_before_it_fetches(
    nats_url: str, async_url: str, app: App
) -> None:
    async def test() -> None:
        async with streams(nats_url) as (js, names):
            await publish(js, names, [keyed("p-1", "1.00")])
            app.drop()  # no inbox table: every message would fail, so none is fetched
            with pytest.raises(MissingTable):
                await run_consumer(js, names, async_url, app, settlements=1)
            with pytest.raises(nats.js.errors.NotFoundError):  # not even made
                await consumer_info(js, names)
            assert (await js.stream_info(names.stream)).state.messages == 1
            assert await dead_letters(js, names) == []

    run(test)


def test_a_stop_finishes_and_settles_the_batch_in_hand(
    nats_url: str, async_url: str, app: App
) -> None:
    """stop is set by the first settlement; the other four of the batch are still handled."""

    async def test() -> None:
        async with streams(nats_url) as (js, names):
            await publish(js, names, [keyed(f"p-{i}", "1.00") for i in range(5)])
            seen = await run_consumer(js, names, async_url, app, settlements=1, batch=5)
            assert len(seen) == 5
            await drained(js, names)

    run(test)
    assert app.ledger_rows() == 5 and app.balance(1) == Decimal("5.00")


def test_backoff_doubles_up_to_its_cap() -> None:
    delay = backoff(0.5, 3.0)
    assert [delay(n) for n in (1, 2, 3, 4, 100)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    with pytest.raises(ValueError):
        backoff(0)
