"""UUIDv7 message ids: assigned once, when the message is recorded in the outbox.

A UUIDv7 (RFC 9562, section 5.7) starts with the Unix time in milliseconds (48 bits), then
the version (7), 12 random bits, the variant (``10``) and 62 random bits. Ids made later
sort later, millisecond by millisecond, so an index on them grows at its right edge; the
74 random bits make a collision between two producers negligible. Python 3.11 has no
``uuid.uuid7`` (3.14 adds one), so it is built here from ``os.urandom``.
"""

from __future__ import annotations

import os
import time
import uuid

__all__ = ["uuid7"]

_MASK_48 = (1 << 48) - 1
_MASK_62 = (1 << 62) - 1


def uuid7(unix_ms: int | None = None) -> uuid.UUID:
    """A new UUIDv7 (RFC 9562, section 5.7).

    :param unix_ms: the timestamp in milliseconds since the Unix epoch; default now
        (``time.time_ns() // 1_000_000``).
    :returns: the UUID; ``str()`` of it is the 36-character canonical form.
    """
    ms = time.time_ns() // 1_000_000 if unix_ms is None else unix_ms
    random = int.from_bytes(os.urandom(10), "big")
    rand_a = random >> 68  # the top 12 of the 80 random bits
    rand_b = random & _MASK_62
    value = (ms & _MASK_48) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    return uuid.UUID(int=value)
