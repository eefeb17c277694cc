"""Dead letters replayed to their source (:mod:`sa_inbox.brokers.dead_letters`) on the live
RabbitMQ, Redis and NATS JetStream brokers, with each adapter's real consumer, on SQLite,
PostgreSQL and MariaDB.

The flow: a poison message is dead-lettered after ``max_deliveries``, the handler is fixed,
the dead letter is replayed and the consumer applies it once. Then: a dead letter of a
message applied meanwhile applies nothing; a dry run moves nothing; the reason filter and
the limit; a replay SIGKILLed between the confirmed publish and the removal loses nothing
(the duplicate it leaves is skipped by the inbox); a source that refuses the publish leaves
the dead letter in place. Business state (ledger, balance) and broker state (the dead-letter
queue's count, the source's) are read after each step.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal

import pytest
import sqlalchemy as sa

from sa_inbox.brokers import Disposition, Settlement
from sa_inbox.brokers import dead_letters as dl
from sa_inbox.exc import DeadLetterQueueUnavailable
from tests.backends.brokers.dead_letter_sides import (
    SIDES,
    FastStreamRun,
    Nats,
    Payments,
    Rabbit,
    Side,
    faststream_queue,
)
from tests.backends.brokers.workers import Worker
from tests.conftest import backend_url, broker_url, importorskip
from tests.support.app import App
from tests.support.waiting import eventually

pytestmark = pytest.mark.backend

CHILD = "tests.backends.brokers.dead_letter_child"


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def app(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[App]:
    engine = sa.create_engine(backend_url(request.param, tmp_path))
    app = App(engine)
    app.reset()
    yield app
    app.drop()
    engine.dispose()


@pytest.fixture(params=list(SIDES))
def side(request: pytest.FixtureRequest) -> Iterator[Side]:
    side = SIDES[request.param](broker_url(request.param))
    yield side
    side.delete()


def outcomes(settlements: list[Settlement]) -> Counter[tuple[str | None, str]]:
    return Counter((s.delivery.message_id, s.disposition.value) for s in settlements)


def dead_letter(side: Side, app: App, handler: Payments, keys: list[str | None]) -> None:
    """Publish ``keys`` (None: a message without a key; those of ``handler.poison`` fail)
    and consume until the keyless and poison ones are dead-lettered; nothing is left in the
    source."""
    side.publish([(key, "1.00") for key in keys])
    poison = [key for key in keys if key in handler.poison]
    settled = side.consume(app, app.inbox, handler, len(keys) + 2 * len(poison))
    dead = [s for s in settled if s.disposition is Disposition.DEAD_LETTERED]
    assert len(dead) == len(poison) + keys.count(None)
    assert dl.count(side.url, side.dead) == len(dead)
    assert side.source_count() == 0


def replay_after_the_window(side: Side, **kw: object) -> dl.ReplayResult:
    """``replay``, once a NATS source stream forgot the last ``Nats-Msg-Id`` published."""
    if isinstance(side, Nats):
        side.wait_out_the_duplicate_window()
    return dl.replay(side.url, side.dead, **kw)  # type: ignore[arg-type]


# -- the flow ------------------------------------------------------------------------------


def test_a_poison_message_replayed_after_the_fix_is_applied_once(side: Side, app: App) -> None:
    handler = Payments(app, poison={"bad-1"})
    dead_letter(side, app, handler, ["pay-1", "bad-1", "pay-2"])
    assert app.ledger_rows("bad-1") == 0 and app.balance(1) == Decimal("2.00")
    (letter,) = dl.peek(side.url, side.dead)
    assert (letter.message_id, letter.reason) == ("bad-1", "delivery_limit")

    handler.fixed = True
    result = replay_after_the_window(side, dry_run=False)
    assert (result.chosen, result.moved, result.reasons) == (1, 1, {"delivery_limit": 1})
    assert result.complete and result.refused == []
    assert dl.count(side.url, side.dead) == 0 and side.source_count() == 1

    settled = side.consume(app, app.inbox, handler, 1)
    assert outcomes(settled) == {("bad-1", "processed"): 1}
    assert app.ledger_rows("bad-1") == 1 and app.balance(1) == Decimal("3.00")
    assert app.inbox_rows() == 3


def test_a_dead_letter_of_a_message_applied_meanwhile_applies_nothing(side: Side, app: App) -> None:
    handler = Payments(app, poison={"bad-1"})
    dead_letter(side, app, handler, ["bad-1"])
    handler.fixed = True
    if isinstance(side, Nats):
        side.wait_out_the_duplicate_window()
    side.publish([("bad-1", "1.00")])  # the producer sent it again, and it went through
    assert outcomes(side.consume(app, app.inbox, handler, 1)) == {("bad-1", "processed"): 1}

    assert replay_after_the_window(side, dry_run=False).moved == 1
    assert outcomes(side.consume(app, app.inbox, handler, 1)) == {("bad-1", "duplicate"): 1}
    assert app.ledger_rows("bad-1") == 1 and app.balance(1) == Decimal("1.00")
    assert dl.count(side.url, side.dead) == 0


def test_a_dry_run_counts_and_moves_nothing(side: Side, app: App) -> None:
    handler = Payments(app, poison={"bad-1", "bad-2"})
    dead_letter(side, app, handler, ["bad-1", "bad-2"])
    result = dl.replay(side.url, side.dead, dry_run=True)
    assert (result.dry_run, result.chosen, result.moved) == (True, 2, 0)
    assert result.as_dict()["would_replay"] == 2
    assert dl.count(side.url, side.dead) == 2 and side.source_count() == 0
    assert {letter.message_id for letter in dl.peek(side.url, side.dead)} == {"bad-1", "bad-2"}


def test_the_reason_filter_and_the_limit_choose_what_moves(side: Side, app: App) -> None:
    handler = Payments(app, poison={"bad-1", "bad-2"})
    dead_letter(side, app, handler, [None, "bad-1", "bad-2"])  # None: a producer's bug
    assert dl.count(side.url, side.dead) == 3
    handler.fixed = True

    first = replay_after_the_window(side, dry_run=False, reason="delivery_limit", limit=1)
    assert (first.chosen, first.moved, first.reasons) == (1, 1, {"delivery_limit": 1})
    eventually(lambda: dl.count(side.url, side.dead) == 2)  # RabbitMQ: what it read is back
    rest = dl.replay(side.url, side.dead, dry_run=False, reason="delivery_limit")
    assert (rest.moved, rest.passed_over) == (1, 1)
    (left,) = dl.peek(side.url, side.dead)
    assert (left.reason, left.message_id) == ("missing_message_id", None)

    settled = side.consume(app, app.inbox, handler, 2)
    assert outcomes(settled) == {("bad-1", "processed"): 1, ("bad-2", "processed"): 1}
    assert app.ledger_rows() == 2 and dl.count(side.url, side.dead) == 1


# -- a replay killed in the middle ----------------------------------------------------------


def test_a_replay_killed_mid_run_loses_nothing(side: Side, app: App) -> None:
    """SIGKILL at the 3rd of 6 dead letters: RabbitMQ and NATS after its publish to the
    source was confirmed and before it was removed (it is then in both: the next replay
    moves it again and the inbox skips the copy); Redis between two atomic moves."""
    keys = [f"bad-{n}" for n in range(6)]
    handler = Payments(app, poison=set(keys))
    dead_letter(side, app, handler, keys)
    handler.fixed = True
    if isinstance(side, Nats):
        side.wait_out_the_duplicate_window()

    child = Worker([sys.executable, "-m", CHILD, side.broker, side.url, side.dead, "3"])
    try:
        child.pid_line()
        word = "MOVED" if side.broker == "redis" else "PUBLISHED"
        deadline = time.monotonic() + 30
        while not any(line.startswith(word) for line in child.quiet(0.1)):
            assert time.monotonic() < deadline, "".join(child.stderr)
        child.kill()
    finally:
        child.ensure_dead()

    in_source, left = side.source_count(), dl.count(side.url, side.dead)
    copies = 0 if side.broker == "redis" else 1  # the one published and not removed
    assert (in_source, left) == (3, 3 + copies)
    if isinstance(side, Nats):  # the copy's Nats-Msg-Id is remembered for the window
        time.sleep(side.duplicate_window + 0.2)
    assert dl.replay(side.url, side.dead, dry_run=False).moved == 3 + copies
    assert dl.count(side.url, side.dead) == 0

    settled = side.consume(app, app.inbox, handler, len(keys) + copies)
    assert sum(n for (_, how), n in outcomes(settled).items() if how == "processed") == 6
    assert sum(n for (_, how), n in outcomes(settled).items() if how == "duplicate") == copies
    assert all(app.ledger_rows(key) == 1 for key in keys)
    assert app.balance(1) == Decimal("6.00")


# -- refusals --------------------------------------------------------------------------------


def test_a_dead_letter_whose_source_is_gone_stays(app: App) -> None:
    side = Rabbit(broker_url("rabbitmq"))
    try:
        handler = Payments(app, poison={"bad-1"})
        dead_letter(side, app, handler, ["bad-1"])
        side.channel.queue_delete(side.queue)
        result = dl.replay(side.url, side.dead, dry_run=False)
        assert (result.moved, result.complete) == (0, False)
        assert "no queue named" in result.refused[0]
        assert dl.count(side.url, side.dead) == 1
    finally:
        side.delete()


def test_nats_refuses_a_replay_inside_the_duplicate_window_and_keeps_it(app: App) -> None:
    """The source stream remembers the original's ``Nats-Msg-Id`` for 120 s: a replay inside
    that window would be dropped by JetStream, so the dead letter stays until after."""
    window = 120.0
    side = Nats(broker_url("nats"), duplicate_window=window)
    try:
        handler = Payments(app, poison={"bad-1"})
        started = time.monotonic()
        dead_letter(side, app, handler, ["bad-1"])
        result = dl.replay(side.url, side.dead, dry_run=False)
        assert time.monotonic() - started < window, "the test outlived the window it checks"
        assert (result.moved, result.complete) == (0, False)
        assert "duplicate" in result.refused[0]
        assert dl.count(side.url, side.dead) == 1 and side.source_count() == 0
    finally:
        side.delete()


def test_a_message_the_broker_dead_lettered_goes_back_to_its_x_death_queue(app: App) -> None:
    """What FastStream and Celery leave in a RabbitMQ dead-letter queue: a message rejected
    through the queue's dead-letter exchange, with RabbitMQ's ``x-death`` and no sa-inbox
    reason. It is listed without a reason, passed over by a reason filter, and replayed
    without one."""
    side = Rabbit(broker_url("rabbitmq"))
    try:
        side.publish([("pay-7", "7.00")])
        method, _, _ = side.channel.basic_get(side.queue)
        side.channel.basic_reject(method.delivery_tag, requeue=False)
        deadline = time.monotonic() + 10
        while dl.count(side.url, side.dead) == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        (letter,) = dl.peek(side.url, side.dead)
        assert (letter.reason, letter.source) == (None, side.queue)
        assert letter.detail == f"x-death: rejected from {side.queue}"
        assert dl.replay(side.url, side.dead, dry_run=False, reason="delivery_limit").moved == 0
        assert dl.replay(side.url, side.dead, dry_run=False).moved == 1
        handler = Payments(app)
        assert outcomes(side.consume(app, app.inbox, handler, 1)) == {("pay-7", "processed"): 1}
        assert app.balance(1) == Decimal("7.00")
    finally:
        side.delete()


# -- a broker that cannot be read ------------------------------------------------------------


@pytest.mark.parametrize(
    ("broker", "url"),
    [
        ("rabbitmq", "amqp://guest:guest@127.0.0.1:1/"),
        ("redis", "redis://127.0.0.1:1/0"),
        ("nats", "nats://127.0.0.1:1"),
    ],
)
def test_an_unreachable_broker_is_an_error_never_zero(broker: str, url: str) -> None:
    with pytest.raises(DeadLetterQueueUnavailable) as raised:
        dl.count(url, "payments_dead", timeout=2)
    assert "127.0.0.1:1" in str(raised.value) and "guest:guest" not in str(raised.value)
    (found,) = dl.sample([dl.DeadLetterTarget.of(url, "payments_dead")], timeout=2)
    assert found.dead_letters is None and found.error


def test_a_missing_queue_or_stream_or_a_key_of_another_type_is_an_error() -> None:
    with pytest.raises(DeadLetterQueueUnavailable, match="does not exist"):
        dl.count(broker_url("rabbitmq"), "sa-inbox-no-such-queue")
    with pytest.raises(DeadLetterQueueUnavailable, match="does not exist"):
        dl.replay(broker_url("nats"), "SA_INBOX_NO_SUCH_STREAM", dry_run=True)
    import redis

    client = redis.Redis.from_url(broker_url("redis"))
    try:
        client.set("sa-inbox-test:not-a-stream", "x")
        with pytest.raises(DeadLetterQueueUnavailable, match="not a stream"):
            dl.peek(broker_url("redis"), "sa-inbox-test:not-a-stream")
        assert dl.count(broker_url("redis"), "sa-inbox-test:no-such-stream") == 0
    finally:
        client.delete("sa-inbox-test:not-a-stream")
        client.close()


# -- FastStream: the same broker queues -----------------------------------------------------


@pytest.mark.parametrize("kind", ["rabbit", "redis"])
def test_a_faststream_dead_letter_replayed_after_the_fix_is_applied_once(
    kind: str, app: App
) -> None:
    """FastStream's middleware dead-letters a poison message (RabbitMQ: rejected through the
    queue's dead-letter exchange, no sa-inbox reason, ``x-death``; Redis: the adapter's
    dead letter); the same replay puts it back on the queue FastStream consumes."""
    importorskip("faststream", "faststream")
    url = broker_url({"rabbit": "rabbitmq", "redis": "redis"}[kind])
    handler = Payments(app, poison={"bad-1"})

    async def main(name: str, dead: str) -> tuple[list[dl.DeadLetter], dl.ReplayResult]:
        async with FastStreamRun(kind, url, name, app, app.inbox, handler) as run:
            await run.publish([("pay-1", "1.00"), ("bad-1", "2.00")])
            await run.settled(1 + 3)
            letters = await asyncio.to_thread(dl.peek, url, dead)
            handler.fixed = True
            result = await asyncio.to_thread(dl.replay, url, dead, dry_run=False)
            settled = await run.settled(1 + 3 + 1)
            assert settled[-1].disposition is Disposition.PROCESSED
            return letters, result

    with faststream_queue(kind, url) as (name, dead):
        letters, result = asyncio.run(main(name, dead))
        assert dl.count(url, dead) == 0
    (letter,) = letters
    assert letter.source == name
    assert letter.reason == (None if kind == "rabbit" else "delivery_limit")
    assert result.moved == 1
    assert app.ledger_rows("bad-1") == 1 and app.balance(1) == Decimal("3.00")


def test_the_nats_reader_works_from_inside_an_event_loop(app: App) -> None:
    """nats-py is asyncio only: the reader runs its own loop in its own thread, so the sync
    calls work from asyncio code too."""
    side = Nats(broker_url("nats"))
    try:
        dead_letter(side, app, Payments(app, poison={"bad-1"}), ["bad-1"])

        async def main() -> tuple[int, int]:
            counted = dl.count(side.url, side.dead)
            moved = (await asyncio.to_thread(dl.replay, side.url, side.dead, dry_run=True)).chosen
            return counted, moved

        assert asyncio.run(main()) == (1, 1)
    finally:
        side.delete()


def test_a_rabbitmq_replay_does_not_read_again_what_it_moved(app: App) -> None:
    """A moved message that fails again comes back to the dead-letter queue with the
    replay's mark (the adapter copies the headers): the replay holds it and ends, as it
    would have looped on it otherwise (the queue never answers empty while it returns)."""
    import pika

    from sa_inbox.brokers.dead_letters.rabbitmq import REPLAY_HEADER, RabbitMQDeadLetters
    from sa_inbox.brokers.dead_letters.target import DeadLetterTarget

    side = Rabbit(broker_url("rabbitmq"))
    try:
        dead_letter(side, app, Payments(app, poison={"bad-1", "bad-2"}), ["bad-1", "bad-2"])
        reader = RabbitMQDeadLetters(DeadLetterTarget.of(side.url, side.dead), 10)
        try:
            seen = []
            for letter in reader.scan():
                seen.append(letter.message_id)
                assert reader.move(letter)
                _, properties, body = side.channel.basic_get(side.queue, auto_ack=True)
                mark = properties.headers[REPLAY_HEADER]
                back = pika.BasicProperties(message_id=properties.message_id, headers={
                    **properties.headers, "x-sa-inbox-reason": "delivery_limit",
                    "x-sa-inbox-queue": side.queue,
                })  # fmt: skip
                side.channel.basic_publish("", side.dead, body, back, mandatory=True)
            assert sorted(seen) == ["bad-1", "bad-2"] and mark
        finally:
            reader.close()
        eventually(lambda: dl.count(side.url, side.dead) == 2)  # both back, for a fix
        again = dl.replay(side.url, side.dead, dry_run=False)  # another replay takes them
        assert again.moved == 2
    finally:
        side.delete()
