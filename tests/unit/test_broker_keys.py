"""How the broker adapters read the producer's key, and the run of keyless deliveries
(:mod:`sa_inbox.brokers.keys`): no broker, no database; the live behaviour is in
``tests/backends/brokers/test_key_configuration.py``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from faststream import StreamMessage

from sa_inbox import ConfigurationError
from sa_inbox.brokers import Delivery
from sa_inbox.brokers.faststream import delivery_of
from sa_inbox.brokers.keys import (
    KeylessStreak,
    check_key_name,
    check_max_keyless,
    flush,
    offer,
    offer_async,
    read_key,
)
from sa_inbox.brokers.rabbitmq import producer_key, to_delivery
from sa_inbox.exc import InvalidArgument, MissingKeyHeader


@pytest.mark.parametrize(
    ("value", "key", "why"),
    [
        (None, None, None),
        ("pay-1", "pay-1", None),
        ("", "", None),  # present: invalid_message_id later, not "missing"
        (b"pay-1", "pay-1", None),
        (bytearray(b"pay-\xc3\xa9"), "pay-é", None),
        (b"\xff\xfe", None, "bytes that are not UTF-8"),
        (7, None, "int 7, not a string"),
        (7.5, None, "float 7.5"),
        (True, None, "bool True"),
        (["pay-1"], None, "list"),
    ],
)
def test_read_key(value: object, key: str | None, why: str | None) -> None:
    found, error = read_key(value)
    assert found == key
    assert (error is None) if why is None else (error is not None and why in error)


def test_an_amqp_int_header_is_no_key_and_says_why() -> None:
    assert producer_key(None, {"k": 7}, "k") is None
    delivery = to_delivery(
        message_id="m", headers={"k": 7}, body=b"", redelivered=False, delivery_tag=1,
        key_header="k",
    )  # fmt: skip
    assert delivery.message_id is None and "int 7" in (delivery.key_error or "")
    assert to_delivery(
        message_id="m", headers={}, body=b"", redelivered=False, delivery_tag=1
    ).message_id == "m"  # fmt: skip


def test_faststream_decodes_a_bytes_header() -> None:
    msg: StreamMessage[Any] = StreamMessage(None, b"1.00", headers={"idempotency-key": b"pay-1"})
    delivery = asyncio.run(delivery_of(msg, "idempotency-key"))
    assert (delivery.message_id, delivery.key_error) == ("pay-1", None)
    msg = StreamMessage(None, b"1.00", headers={"idempotency-key": 12})
    assert asyncio.run(delivery_of(msg, "idempotency-key")).key_error is not None


@pytest.mark.parametrize("name", ["", " key", "key ", None, 3])
def test_a_key_name_that_names_no_header_is_refused(name: object) -> None:
    with pytest.raises(InvalidArgument) as info:
        check_key_name(name, "key_header", entry="X()")
    assert isinstance(info.value, ConfigurationError) and "X(): key_header" in str(info.value)


@pytest.mark.parametrize("value", [0, -1, True, 2.0, "5"])
def test_max_keyless_is_none_or_a_positive_int(value: object) -> None:
    assert check_max_keyless(None, entry="X()") is None and check_max_keyless(3, entry="X()") == 3
    with pytest.raises(InvalidArgument):
        check_max_keyless(value, entry="X()")


class Settler:
    """Records what would be done to the broker."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def give_back(self) -> None:
        self.log.append(f"give back {self.name}")


def keyless(n: int, **headers: Any) -> Delivery:
    return Delivery(None, b"", headers={"payment-id": f"p-{n}", **headers}, broker_ref=f"ref-{n}")


def keyed(n: int) -> Delivery:
    return Delivery(f"p-{n}", b"", broker_ref=f"ref-{n}")


def run(
    deliveries: list[Delivery], limit: int | None, log: list[str] | None = None
) -> tuple[list[str], KeylessStreak]:
    log = [] if log is None else log
    streak = KeylessStreak("payment_id", limit, stop_deliveries=lambda: log.append("cancel"))

    def settle(delivery: Delivery, settler: Settler) -> str:
        log.append(f"settle {settler.name}")
        return settler.name

    for delivery in deliveries:
        offer(streak, delivery, Settler(log, delivery.broker_ref), settle)
    return log, streak


def test_a_short_run_is_settled_when_a_keyed_delivery_follows_it() -> None:
    log, streak = run([keyless(1), keyless(2), keyed(3), keyless(4)], limit=3)
    assert log == ["settle ref-1", "settle ref-2", "settle ref-3"]
    assert [d.broker_ref for d, _ in streak.held] == ["ref-4"], "held until a keyed or idle"
    assert flush(streak, lambda d, s: s.name) == ["ref-4"] and not streak.held


def test_the_limit_gives_the_run_back_after_stopping_deliveries_and_raises() -> None:
    log: list[str] = []
    with pytest.raises(MissingKeyHeader) as info:
        run([keyed(0), keyless(1), keyless(2, other="x"), keyless(3)], limit=3, log=log)
    assert log == [
        "settle ref-0",
        "cancel",
        "give back ref-1",
        "give back ref-2",
        "give back ref-3",
    ]
    error = info.value
    assert (error.key, error.deliveries, error.carried) == (
        "payment_id",
        3,
        {"payment-id": 3, "other": 1},
    )
    assert "'payment_id' was missing on 3 consecutive deliveries" in str(error)
    assert "they carried 'payment-id' (3), 'other' (1)" in str(error)


def test_the_run_counts_a_redelivery_of_a_held_delivery_once() -> None:
    log, streak = run([keyless(1), keyless(1), keyless(2)], limit=3)
    assert log == [] and [d.broker_ref for d, _ in streak.held] == ["ref-1", "ref-2"]


def test_wrong_types_are_named_and_none_turns_the_rule_off() -> None:
    typed = Delivery(None, b"", headers={"payment_id": 7}, key_error="int", broker_ref="r")
    streak = KeylessStreak("payment_id", 1)
    with pytest.raises(MissingKeyHeader, match=r"present but not text: int \(1\)"):
        offer(streak, typed, Settler([], "r"), lambda d, s: None)
    log, _ = run([keyless(1), keyless(2)], limit=None)
    assert log == ["settle ref-1", "settle ref-2"]


def test_offer_async_gives_back_and_raises_like_offer() -> None:
    log: list[str] = []

    class AsyncSettler(Settler):
        async def give_back(self) -> None:  # type: ignore[override]
            self.log.append(f"give back {self.name}")

    async def settle(delivery: Delivery, settler: Any) -> None:
        log.append("settle")

    async def main() -> None:
        streak = KeylessStreak("k", 2)
        await offer_async(streak, keyless(1), AsyncSettler(log, "1"), settle)
        await offer_async(streak, keyless(2), AsyncSettler(log, "2"), settle)

    with pytest.raises(MissingKeyHeader):
        asyncio.run(main())
    assert log == ["give back 1", "give back 2"]


def test_a_quiet_queue_counts_the_run_across_idle_waits() -> None:
    """One keyless delivery per idle wait (a quiet queue with a misspelled key): each is
    dead-lettered as it waits, the run goes on counting, and the limit-th stops the
    consumer; at most limit - 1 are dead-lettered."""
    log: list[str] = []
    streak = KeylessStreak("payment_id", 3, stop_deliveries=lambda: log.append("cancel"))

    def settle(delivery: Delivery, settler: Settler) -> None:
        log.append(f"dead-letter {settler.name}")

    offer(streak, keyless(1), Settler(log, "ref-1"), settle)
    flush(streak, settle)  # the idle wait passed
    offer(streak, keyless(2), Settler(log, "ref-2"), settle)
    flush(streak, settle)
    with pytest.raises(MissingKeyHeader) as info:
        offer(streak, keyless(3), Settler(log, "ref-3"), settle)
    assert log == ["dead-letter ref-1", "dead-letter ref-2", "cancel", "give back ref-3"]
    assert (info.value.deliveries, info.value.dead_lettered) == (3, 2)
    assert "1 of them were given back to the broker unprocessed, 2 dead-lettered" in str(info.value)


def test_only_a_keyed_delivery_starts_the_count_again() -> None:
    log: list[str] = []
    streak = KeylessStreak("payment_id", 3)

    def settle(delivery: Delivery, settler: Settler) -> None:
        log.append(f"settle {settler.name}")

    for n in (1, 2):
        offer(streak, keyless(n), Settler(log, f"ref-{n}"), settle)
        flush(streak, settle)
    offer(streak, keyed(3), Settler(log, "ref-3"), settle)
    assert streak.count == 0
    for n in (4, 5):
        offer(streak, keyless(n), Settler(log, f"ref-{n}"), settle)
        flush(streak, settle)
    assert streak.count == 2 and log == [f"settle ref-{n}" for n in (1, 2, 3, 4, 5)]
