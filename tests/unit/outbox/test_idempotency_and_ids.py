"""``idempotency_key`` is pinned to known values (a change would make every in-flight
redelivery call the remote service with a new key), checked against an independent SHA-1
computation of RFC 9562's UUIDv5; ``uuid7`` has the layout of RFC 9562, section 5.7."""

from __future__ import annotations

import hashlib
import time
import uuid

import pytest

from sa_inbox.exc import InvalidMessageId
from sa_inbox.idempotency import NAMESPACE, idempotency_key
from sa_inbox.outbox import uuid7

PINNED = [
    (("pay-1", "billing", "stripe:charge"), "80daab10-547a-53e6-94e2-5526398c9401"),
    (("pay-1", "billing", "email:receipt"), "a3eadce5-60d2-51bc-8603-cb8509e68c60"),
    (("pay-2", "billing", "stripe:charge"), "9afb1778-6d42-5441-a2d7-00d9fde19f86"),
    (("pay-1", "shipping", "stripe:charge"), "8abb008b-544e-5b16-9509-d625c75b03a3"),
    (("aé", "b", "c"), "4fe687e5-1d53-580e-8bec-616b9b892c66"),
]


def test_the_namespace_is_pinned() -> None:
    assert str(NAMESPACE) == "37862b5f-18fa-533f-bb7e-c656e369641b"


@pytest.mark.parametrize(("args", "expected"), PINNED)
def test_keys_are_pinned_and_are_rfc_9562_uuid5(args: tuple[str, str, str], expected: str) -> None:
    assert idempotency_key(*args) == expected
    # RFC 9562, 5.5: SHA-1(namespace bytes + name bytes), first 16 bytes, version 5, variant 10.
    digest = bytearray(hashlib.sha1(NAMESPACE.bytes + "\0".join(args).encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    assert str(uuid.UUID(bytes=bytes(digest))) == expected


def test_the_parts_cannot_run_into_each_other() -> None:
    assert idempotency_key("a", "bc", "d") != idempotency_key("ab", "c", "d")


@pytest.mark.parametrize(
    "args", [("", "c", "e"), ("m", " c", "e"), ("m", "c", "e\x00"), ("m", "c", 5)]
)
def test_invalid_parts_are_refused(args: tuple[object, object, object]) -> None:
    with pytest.raises(InvalidMessageId):
        idempotency_key(*args)  # type: ignore[arg-type]


def test_uuid7_layout_and_order() -> None:
    ms = 1_700_000_000_123
    value = uuid7(ms)
    assert value.version == 7 and value.variant == uuid.RFC_4122
    assert value.int >> 80 == ms
    before = time.time_ns() // 1_000_000
    ids = [uuid7() for _ in range(200)]
    assert len(set(ids)) == 200
    assert all(before <= i.int >> 80 <= time.time_ns() // 1_000_000 for i in ids)
    assert uuid7(ms).int >> 80 < uuid7(ms + 1).int >> 80
