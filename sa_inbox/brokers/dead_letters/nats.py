"""NATS JetStream dead-letter streams, read and replayed with nats-py.

A dead letter is a message of the dead-letter stream, read by sequence (``STREAM.MSG.GET``
with ``next_by_subj``, so deleted sequences are skipped). A move publishes it to the subject
it came from (``Sa-Inbox-Subject``) and awaits the PubAck of the stream bound to that
subject, then deletes the dead letter (``STREAM.MSG.DELETE``). The republished message has
the dead letter's headers minus the ``Sa-Inbox-*`` ones, and its original ``Nats-Msg-Id``
back (``Sa-Inbox-Nats-Msg-Id``; for a dead letter made before that header existed, the
producer's key when no header kept holds it, the key header being then ``Nats-Msg-Id``).

JetStream drops a publish whose ``Nats-Msg-Id`` it saw inside the stream's
``duplicate_window`` (default 2 minutes; "JetStream Model Deep Dive", "Message
Deduplication"): such a dead letter is refused (left in place) until the window passed.

nats-py has only an asyncio client: the reader runs it on an event loop of its own, in a
thread of its own, so the calls work from any thread, an event loop's included (where they
block that loop while they wait: ``await asyncio.to_thread(replay, ...)`` there).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..._optional import optional_dependencies
from ...exc import DeadLetterQueueUnavailable, SourceRefused
from .model import DeadLetter
from .target import DeadLetterTarget

with optional_dependencies(__name__, "nats", "nats"):
    import nats
    import nats.errors
    import nats.js.errors

    from ..nats.delivery import (
        DEAD_LETTER_DETAIL,
        DEAD_LETTER_MESSAGE_ID,
        DEAD_LETTER_NATS_MSG_ID,
        DEAD_LETTER_REASON,
        DEAD_LETTER_SUBJECT,
    )

__all__ = ["NatsDeadLetters", "open_queue", "replay_headers"]

logger = logging.getLogger("sa_inbox.brokers.dead_letters")

T = TypeVar("T")

#: JetStream's API error code for "no message found" (a sequence past the end or deleted).
_NO_MESSAGE = 10037
#: The prefix of the headers the adapter adds to a dead letter.
_MARK = "Sa-Inbox-"


def open_queue(target: DeadLetterTarget, timeout: float) -> NatsDeadLetters:
    """:class:`NatsDeadLetters` on a new connection.

    :raises DeadLetterQueueUnavailable: if the server cannot be reached.
    """
    return NatsDeadLetters(target, timeout)


def replay_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """The headers a dead letter is replayed with (see the module's docstring)."""
    headers = dict(headers or {})
    kept = {k: v for k, v in headers.items() if not k.startswith((_MARK, "Nats-"))}
    original = headers.get(DEAD_LETTER_NATS_MSG_ID)
    key = headers.get(DEAD_LETTER_MESSAGE_ID)
    if original is None and key is not None and key not in kept.values():
        original = key
    if original is not None:
        kept["Nats-Msg-Id"] = original
    return kept


class NatsDeadLetters:
    """A JetStream dead-letter stream (a :class:`~.model.DeadLetterQueue`) on its own
    connection and event loop.

    :param target: the stream.
    :param timeout: seconds to connect (no reconnect) and for each reply.
    :raises DeadLetterQueueUnavailable: if the server cannot be reached.
    """

    def __init__(self, target: DeadLetterTarget, timeout: float) -> None:
        self.target = target
        self._timeout = timeout
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sa-inbox-nats")
        self._loop = asyncio.new_event_loop()
        self._nc: Any = None
        try:
            self._nc = self._run(self._connect())
        except BaseException:
            self._close_loop()
            raise
        self._js = self._nc.jetstream(timeout=timeout)

    async def _connect(self) -> Any:
        """One connection, within ``timeout`` (nats-py retries the first connect as it
        reconnects: ``max_reconnect_attempts=1`` and a deadline end it)."""
        connecting = nats.connect(
            self.target.url,
            connect_timeout=self._timeout,
            allow_reconnect=False,
            max_reconnect_attempts=1,
            reconnect_time_wait=0.1,
            error_cb=_log_error,
        )
        return await asyncio.wait_for(connecting, self._timeout)

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the reader's loop; nats-py's errors as
        :class:`~sa_inbox.exc.DeadLetterQueueUnavailable`."""
        try:
            return self._thread.submit(self._loop.run_until_complete, coroutine).result()
        except nats.js.errors.NotFoundError as exc:
            why = f"the stream {self.target.queue!r} does not exist ({exc.description})"
            raise DeadLetterQueueUnavailable(self.target.display, why) from exc
        except (nats.errors.Error, OSError) as exc:  # TimeoutError is an OSError
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise DeadLetterQueueUnavailable(self.target.display, why) from exc

    def count(self) -> int:
        """The stream's message count (``STREAM.INFO``)."""
        info = self._run(self._js.stream_info(self.target.queue))
        return int(info.state.messages)

    def scan(self) -> Iterator[DeadLetter]:
        """The messages up to the stream's last sequence at the start."""
        state = self._run(self._js.stream_info(self.target.queue)).state
        sequence, last = state.first_seq, state.last_seq
        while state.messages and sequence <= last:
            found = self._run(self._next(sequence))
            if found is None or found.seq > last:
                return
            yield _letter(found)
            sequence = found.seq + 1

    async def _next(self, sequence: int) -> Any:
        """The first message at or after ``sequence``, or None past the end."""
        try:
            return await self._js.get_msg(self.target.queue, seq=sequence, subject=">", next=True)
        except nats.js.errors.NotFoundError as exc:
            if exc.err_code == _NO_MESSAGE:
                return None
            raise

    def move(self, letter: DeadLetter) -> bool:
        """Publish to the source subject (awaiting the PubAck), then delete the dead letter.

        :raises SourceRefused: no stream holds the subject, or JetStream dropped the publish
            as a duplicate of its ``Nats-Msg-Id``.
        """
        assert letter.source is not None
        return self._run(self._move(letter, letter.source))

    async def _move(self, letter: DeadLetter, subject: str) -> bool:
        headers = replay_headers(letter.headers)
        try:
            ack = await self._js.publish(subject, letter.body, headers=headers or None)
        except nats.js.errors.NoStreamResponseError as exc:
            raise SourceRefused(f"no stream holds the subject {subject!r}") from exc
        if ack.duplicate:
            raise SourceRefused(
                f"stream {ack.stream} dropped it as a duplicate of Nats-Msg-Id "
                f"{headers.get('Nats-Msg-Id')!r} (inside its duplicate window: replay it "
                "again once the window has passed)"
            )
        return await self._remove(letter)

    async def _remove(self, letter: DeadLetter) -> bool:
        """Delete the dead letter (its copy is in the source stream, acked)."""
        try:
            return bool(await self._js.delete_msg(self.target.queue, int(letter.ref)))
        except nats.js.errors.NotFoundError:
            return False  # deleted by another replay meanwhile

    def close(self) -> None:
        """Close the connection, the loop and its thread."""
        if self._loop.is_closed():
            return
        with contextlib.suppress(nats.errors.Error, OSError):
            if self._nc is not None and not self._nc.is_closed:
                self._thread.submit(self._loop.run_until_complete, self._nc.close()).result()
        self._close_loop()

    def _close_loop(self) -> None:
        self._thread.submit(self._loop.close).result()
        self._thread.shutdown()


def _letter(message: Any) -> DeadLetter:
    headers: dict[str, str] = dict(message.headers or {})
    return DeadLetter(
        ref=str(message.seq),
        message_id=headers.get(DEAD_LETTER_MESSAGE_ID),
        reason=headers.get(DEAD_LETTER_REASON),
        detail=headers.get(DEAD_LETTER_DETAIL),
        source=headers.get(DEAD_LETTER_SUBJECT),
        body=message.data or b"",
        headers=headers,
        handle=message,
    )


async def _log_error(error: Exception) -> None:
    """nats-py's ``error_cb``: one ``DEBUG`` line (its default prints a traceback)."""
    logger.debug("nats: %s: %s", type(error).__name__, error)
