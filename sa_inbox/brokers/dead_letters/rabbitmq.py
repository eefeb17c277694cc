"""RabbitMQ's dead-letter queues, read and replayed with pika.

A dead letter is read with ``basic.get`` and held unacked, until the queue answers
``get-empty``; a move publishes it to the
default exchange with its source queue as the routing key (``mandatory``, on a channel in
confirm mode, so a missing queue is an ``UnroutableError`` and the broker's ``basic.ack``
of the publish is awaited: RabbitMQ docs, "Consumer Acknowledgements and Publisher
Confirms"), then ``basic.ack``\\ s the dead letter. Closing the channel returns every dead
letter read and not moved ("Automatic Requeueing").

The source is the ``x-sa-inbox-queue`` header the adapters set; for a message the broker
dead-lettered by itself (a ``basic.reject``, as FastStream's and Celery's dead letters are,
or an ``x-delivery-limit``), the queue of its latest ``x-death`` entry ("Dead Letter
Exchanges", section "Dead-Lettered Messages"). The republished message keeps the
dead letter's properties (``message_id`` and the key header among them) and headers, minus
the adapter's reason headers, ``x-delivery-count`` (a quorum queue would take it for the
message's own count) and the ``x-death`` family, plus :data:`REPLAY_HEADER`: a replayed
message that fails again comes back to the dead-letter queue with it (the adapters copy the
headers), and the replay that moved it does not read it again, so it ends.

A queue's message count leaves out the messages other channels hold unacked, or are giving
back: those are not read (a later replay takes them).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from ..._optional import optional_dependencies
from ...exc import DeadLetterQueueUnavailable, SourceRefused
from .model import DeadLetter
from .target import DeadLetterTarget

with optional_dependencies(__name__, "rabbitmq", "pika"):
    import pika
    import pika.exceptions

    from ..rabbitmq.message import (
        DELIVERY_COUNT_HEADER,
        DETAIL_HEADER,
        QUEUE_HEADER,
        REASON_HEADER,
    )

__all__ = [
    "REPLAYED_PROPERTIES",
    "REPLAY_HEADER",
    "RabbitMQDeadLetters",
    "open_queue",
    "replay_headers",
]

#: The properties a replayed message keeps (``user_id`` is left out: RabbitMQ refuses a
#: publish whose ``user_id`` is not the connection's user, "Validated User-ID").
REPLAYED_PROPERTIES = (
    "content_type",
    "content_encoding",
    "priority",
    "correlation_id",
    "reply_to",
    "message_id",
    "timestamp",
    "type",
    "app_id",
)
#: The header a replay marks the messages it moves with (its own random id).
REPLAY_HEADER = "x-sa-inbox-replay"
#: Headers the adapter, the broker or an earlier replay added, dropped on replay.
_DROPPED = {
    REASON_HEADER,
    DETAIL_HEADER,
    QUEUE_HEADER,
    DELIVERY_COUNT_HEADER,
    REPLAY_HEADER,
    "x-death",
}
_DROPPED_PREFIXES = ("x-first-death-", "x-last-death-")


def open_queue(target: DeadLetterTarget, timeout: float) -> RabbitMQDeadLetters:
    """:class:`RabbitMQDeadLetters` on a new connection.

    :raises DeadLetterQueueUnavailable: if the broker cannot be reached.
    """
    return RabbitMQDeadLetters(target, timeout)


def replay_headers(headers: Mapping[str, Any] | None) -> dict[str, Any]:
    """The headers a dead letter is replayed with (see the module's docstring)."""
    return {
        name: value
        for name, value in (headers or {}).items()
        if name not in _DROPPED and not name.startswith(_DROPPED_PREFIXES)
    }


class RabbitMQDeadLetters:
    """A RabbitMQ dead-letter queue (a :class:`~.model.DeadLetterQueue`) on its own
    connection and confirm-mode channel.

    :param target: the queue.
    :param timeout: seconds to connect (one attempt) and for each reply.
    :raises DeadLetterQueueUnavailable: if the broker cannot be reached.
    """

    def __init__(self, target: DeadLetterTarget, timeout: float) -> None:
        self.target = target
        self._replay_id = uuid.uuid4().hex
        parameters = pika.URLParameters(target.url)
        parameters.connection_attempts = 1
        parameters.socket_timeout = timeout
        parameters.stack_timeout = timeout
        parameters.blocked_connection_timeout = timeout
        with self._boundary():
            self._connection = pika.BlockingConnection(parameters)
            self._channel = self._connection.channel()
            self._channel.confirm_delivery()

    @contextlib.contextmanager
    def _boundary(self) -> Iterator[None]:
        """pika's errors as :class:`~sa_inbox.exc.DeadLetterQueueUnavailable`."""
        try:
            yield
        except pika.exceptions.ChannelClosedByBroker as exc:
            why = exc.reply_text
            if exc.reply_code == 404:
                why = f"the queue {self.target.queue!r} does not exist ({why})"
            raise DeadLetterQueueUnavailable(self.target.display, why) from exc
        except (pika.exceptions.AMQPError, OSError) as exc:
            why = f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc)  # pika's: ""
            raise DeadLetterQueueUnavailable(self.target.display, why) from exc

    def count(self) -> int:
        """The queue's ready messages (passive ``queue.declare``'s ``message_count``)."""
        with self._boundary():
            declared = self._channel.queue_declare(self.target.queue, passive=True)
        return int(declared.method.message_count)

    def scan(self) -> Iterator[DeadLetter]:
        """``basic.get`` until the queue is empty, each message held unacked; those this
        reader moved and that came back (:data:`REPLAY_HEADER`) are held, not read.

        :raises DeadLetterQueueUnavailable: (before the first get) if the queue is missing.
        """
        self.count()
        while True:
            with self._boundary():
                method, properties, body = self._channel.basic_get(self.target.queue)
            if method is None:
                return
            if (properties.headers or {}).get(REPLAY_HEADER) != self._replay_id:
                yield _letter(method, properties, body)

    def move(self, letter: DeadLetter) -> bool:
        """Publish to the source queue, confirmed, then ``basic.ack`` the dead letter.

        :raises SourceRefused: no queue of that name (``UnroutableError``), or the broker
            nacked the publish.
        """
        assert letter.source is not None
        method, properties, body = letter.handle
        replayed = {name: getattr(properties, name) for name in REPLAYED_PROPERTIES}
        replayed = {name: value for name, value in replayed.items() if value is not None}
        replayed["headers"] = {**replay_headers(properties.headers), REPLAY_HEADER: self._replay_id}
        replayed["delivery_mode"] = 2
        with self._boundary():
            try:
                self._channel.basic_publish(
                    "", letter.source, body, pika.BasicProperties(**replayed), mandatory=True
                )
            except pika.exceptions.UnroutableError as exc:
                raise SourceRefused(f"no queue named {letter.source!r}") from exc
            except pika.exceptions.NackError as exc:
                raise SourceRefused(f"the broker nacked the publish to {letter.source!r}") from exc
            self._remove(method)
        return True

    def _remove(self, method: Any) -> None:
        """``basic.ack`` the dead letter (its copy is in the source queue, confirmed)."""
        self._channel.basic_ack(method.delivery_tag)

    def close(self) -> None:
        """Close the connection: the dead letters read and not moved are returned."""
        with contextlib.suppress(pika.exceptions.AMQPError, OSError):
            if self._connection.is_open:
                self._connection.close()


def _letter(method: Any, properties: Any, body: bytes) -> DeadLetter:
    headers = dict(properties.headers or {})
    death = _latest_death(headers)
    reason = _text(headers.get(REASON_HEADER))
    detail = _text(headers.get(DETAIL_HEADER))
    source = _text(headers.get(QUEUE_HEADER))
    if source is None and death is not None:
        source = _text(death.get("queue"))
    if detail is None and death is not None:
        detail = f"x-death: {_text(death.get('reason'))} from {_text(death.get('queue'))}"
    return DeadLetter(
        ref=f"delivery tag {method.delivery_tag}",
        message_id=properties.message_id or None,
        reason=reason,
        detail=detail,
        source=source,
        body=body,
        headers=headers,
        handle=(method, properties, body),
    )


def _latest_death(headers: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The newest ``x-death`` entry (RabbitMQ keeps them newest first)."""
    deaths = headers.get("x-death")
    if isinstance(deaths, list) and deaths and isinstance(deaths[0], Mapping):
        return deaths[0]
    return None


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return None if value is None else str(value)
