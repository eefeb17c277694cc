"""Redis dead-letter streams, read and replayed with redis-py.

A dead letter is an entry of the dead-letter stream: the original entry's fields plus
:data:`~sa_inbox.brokers.redis.DEAD_LETTER_FIELDS` (``dead_letter_source`` names the stream
it came from). A move is one Lua script, :data:`REPLAY_SCRIPT`: ``XADD`` the original fields
to the source stream, then ``XDEL`` the dead letter. Redis runs a script atomically, and a
failing ``redis.call()`` ends it before the commands after it ("Scripting with Lua", "Redis
Lua API reference"), so a dead letter is either moved or left, never lost nor copied. The
source's consumer group reads the new entry as a first delivery (``XREADGROUP >``); the
producer's key field is among the fields moved.

Redis makes a stream with its first ``XADD``: a dead-letter stream that does not exist yet
holds no dead letter (a misspelled name reads as empty too).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from ..._optional import optional_dependencies
from ...exc import DeadLetterQueueUnavailable, SourceRefused
from .model import DeadLetter
from .target import DeadLetterTarget

with optional_dependencies(__name__, "redis", "redis"):
    import redis
    import redis.exceptions

    from ..redis.core import DEAD_LETTER_FIELDS, DEFAULT_BODY_FIELD, DEFAULT_KEY_FIELD

__all__ = ["REPLAY_SCRIPT", "RedisDeadLetters", "open_queue"]

#: KEYS: the dead-letter stream, the source stream. ARGV: the dead letter's id, then the
#: fields and values to add. Returns the new entry's id, or nil if the dead letter is gone
#: (nothing done). A failing XADD (a key of another type) ends it before the XDEL.
REPLAY_SCRIPT = """
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then
  return false
end
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 2))
redis.call('XDEL', KEYS[1], ARGV[1])
return id
"""

#: Entries read per ``XRANGE``.
_PAGE = 100
_MARKS = {name.encode() for name in DEAD_LETTER_FIELDS}


def open_queue(target: DeadLetterTarget, timeout: float) -> RedisDeadLetters:
    """:class:`RedisDeadLetters` on a new client, its connection checked (``PING``).

    :raises DeadLetterQueueUnavailable: if the server cannot be reached.
    """
    return RedisDeadLetters(target, timeout)


class RedisDeadLetters:
    """A Redis dead-letter stream (a :class:`~.model.DeadLetterQueue`).

    :param target: the stream.
    :param timeout: seconds to connect and for each reply.
    :raises DeadLetterQueueUnavailable: if the server cannot be reached.
    """

    def __init__(self, target: DeadLetterTarget, timeout: float) -> None:
        self.target = target
        self._client: Any = redis.Redis.from_url(
            target.url, socket_connect_timeout=timeout, socket_timeout=timeout
        )
        with self._boundary():
            self._client.ping()

    @contextlib.contextmanager
    def _boundary(self) -> Iterator[None]:
        """redis-py's errors as :class:`~sa_inbox.exc.DeadLetterQueueUnavailable`."""
        try:
            yield
        except redis.exceptions.RedisError as exc:
            why = f"{type(exc).__name__}: {exc}"
            raise DeadLetterQueueUnavailable(self.target.display, why) from exc

    def count(self) -> int:
        """``XLEN``; 0 for a key that does not exist.

        :raises DeadLetterQueueUnavailable: if the key holds no stream.
        """
        with self._boundary():
            kind = self._client.type(self.target.queue)
            if kind in (b"none", "none"):
                return 0
            if kind not in (b"stream", "stream"):
                raise redis.exceptions.ResponseError(
                    f"the key {self.target.queue!r} holds a {_text(kind)}, not a stream"
                )
            return int(self._client.xlen(self.target.queue))

    def scan(self) -> Iterator[DeadLetter]:
        """``XRANGE`` pages up to the last entry at the start."""
        if not self.count():
            return
        with self._boundary():
            ((last, _),) = self._client.xrevrange(self.target.queue, "+", "-", count=1)
        start: Any = "-"
        while True:
            with self._boundary():
                page = self._client.xrange(self.target.queue, start, last, count=_PAGE)
            for entry_id, fields in page:
                yield _letter(_text(entry_id), fields)
            if len(page) < _PAGE:
                return
            start = b"(" + _bytes(page[-1][0])

    def move(self, letter: DeadLetter) -> bool:
        """:data:`REPLAY_SCRIPT` for ``letter``.

        :raises SourceRefused: the source key holds no stream (``WRONGTYPE``).
        """
        assert letter.source is not None
        original = [item for pair in letter.handle.items() for item in pair]
        try:
            with self._boundary():
                moved = self._client.eval(
                    REPLAY_SCRIPT, 2, self.target.queue, letter.source, letter.ref, *original
                )
        except DeadLetterQueueUnavailable as exc:
            cause = exc.__cause__
            if isinstance(cause, redis.exceptions.ResponseError) and "WRONGTYPE" in str(cause):
                raise SourceRefused(f"the key {letter.source!r} holds no stream") from cause
            raise
        return moved is not None

    def close(self) -> None:
        with contextlib.suppress(redis.exceptions.RedisError):
            self._client.close()


def _letter(entry_id: str, fields: Mapping[bytes, bytes]) -> DeadLetter:
    named = {_text(name): value for name, value in fields.items()}
    original = {name: value for name, value in fields.items() if _bytes(name) not in _MARKS}
    body = named.get(DEFAULT_BODY_FIELD, b"")
    return DeadLetter(
        ref=entry_id,
        message_id=_optional(named.get(DEFAULT_KEY_FIELD)),
        reason=_optional(named.get("dead_letter_reason")),
        detail=_optional(named.get("dead_letter_detail")),
        source=_optional(named.get("dead_letter_source")),
        body=_bytes(body),
        headers={name: _text(value) for name, value in named.items()},
        handle=original,
    )


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _optional(value: Any) -> str | None:
    return None if value is None else _text(value)
