"""Message-id formats compared by the index-hotspot benchmark, UUIDv7 included.

Python 3.11's :mod:`uuid` has no version 7, so :func:`uuid7` implements RFC 9562, section
5.7 ("UUID Version 7"): a 48-bit big-endian Unix timestamp in milliseconds, the version
nibble ``0111``, 12 bits of sub-millisecond clock precision (section 6.2, method 3,
"Replace Leftmost Random Bits with Increased Clock Precision"), the variant bits ``10``, and
62 random bits. Ids made later sort later (as text and as bytes), so inserts land at the
right edge of a B-tree, like sequential ids.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable

__all__ = ["KEY_FORMATS", "KeyFactory", "key_factory", "uuid7"]

#: A key factory maps a message's global sequence number (0, 1, ...) to its message_id.
KeyFactory = Callable[[int], str]

_SUB_MS_STEPS = 4096  # 12 bits of sub-millisecond precision (RFC 9562, 6.2 method 3)


def uuid7(now_ns: int | None = None) -> uuid.UUID:
    """A version 7 UUID (RFC 9562, 5.7) for the time ``now_ns``.

    :param now_ns: nanoseconds since the Unix epoch; default :func:`time.time_ns`.
    :returns: a :class:`uuid.UUID` with ``version == 7`` and the RFC 4122/9562 variant.
    """
    ns = time.time_ns() if now_ns is None else now_ns
    unix_ms, rest_ns = divmod(ns, 1_000_000)
    sub_ms = rest_ns * _SUB_MS_STEPS // 1_000_000
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (unix_ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= sub_ms << 64
    value |= 0b10 << 62
    value |= rand_b
    return uuid.UUID(int=value)


def _uuid4(sequence: int) -> str:
    return str(uuid.uuid4())


def _uuid7(sequence: int) -> str:
    return str(uuid7())


def _sequential(sequence: int) -> str:
    return f"{sequence:020d}"


def _hash_prefixed(sequence: int) -> str:
    prefix = hashlib.sha256(str(sequence).encode()).hexdigest()[:4]
    return f"{prefix}-{sequence:020d}"


#: name -> (factory, description); the names are the ``key_format`` values in the JSON.
KEY_FORMATS: dict[str, tuple[KeyFactory, str]] = {
    "uuid4": (_uuid4, "random UUIDv4, 36 characters"),
    "uuid7": (_uuid7, "time-ordered UUIDv7 (RFC 9562), 36 characters"),
    "sequential": (_sequential, "monotonic counter, zero-padded, 20 characters"),
    "hash-prefixed": (
        _hash_prefixed,
        "4 hex chars of SHA-256(counter) + '-' + counter, 25 characters",
    ),
}


def key_factory(name: str) -> KeyFactory:
    """The factory of key format ``name`` (a key of :data:`KEY_FORMATS`).

    :raises ValueError: for an unknown format name.
    """
    try:
        return KEY_FORMATS[name][0]
    except KeyError:
        raise ValueError(f"unknown key format {name!r}; known: {sorted(KEY_FORMATS)}") from None
