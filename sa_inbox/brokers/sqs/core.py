"""What the boto3 and aiobotocore consumers share: the settings, the queue's checks, every
SQS request and what its reply means.

The consumers differ only in how a request reaches SQS (``client.delete_message_batch(...)``
or ``await client.delete_message_batch(...)``). Everything else lives here, once, written as
steps (generators) that *yield* the :class:`Call` to make and get its reply back; a client
error is thrown into the step. The sync consumer drives them with :func:`drive`, the asyncio
one with :func:`~sa_inbox.brokers.sqs.aio.drive_async`.

SQS rules relied on (Amazon SQS API Reference and Developer Guide; checked on moto's server
mode by ``tests/backends/brokers/sqs/``):

- ``ReceiveMessage`` hides each message it returns for the visibility timeout (its
  ``VisibilityTimeout`` parameter, in whole seconds) and increments its
  ``ApproximateReceiveCount``; every receive counts, whatever the consumer does with it;
- ``DeleteMessage`` takes the receipt handle of a receive. "If you receive a message more
  than once, the ReceiptHandle is different each time"; with a handle that is not the most
  recent, "the request will still succeed, but the message might not be deleted" (AWS);
  moto deletes the message. ``ChangeMessageVisibility`` after the visibility timeout
  passed "might result in an error" (AWS); moto accepts any handle the message ever had.
  Neither is trusted: a delete or an extension that fails is logged, and a message that
  comes back after its change committed is skipped by the inbox claim as a duplicate;
- ``ChangeMessageVisibility`` restarts the timeout from the call, up to 12 hours from the
  receive ("Amazon SQS visibility timeout"); ``VisibilityTimeout=0`` makes it visible now;
- a redrive policy moves a message to its dead-letter queue on the receive after
  ``maxReceiveCount`` receives ("Using dead-letter queues in Amazon SQS");
- on a FIFO queue, no further message of a ``MessageGroupId`` is returned while one of
  that group is in flight ("Amazon SQS FIFO queue ... message grouping"); one receive may
  return several messages of one group, in order.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from ... import steps
from ...backoff import Backoff
from ...exc import ConfigurationError, InvalidArgument
from ...validation import first_line, positive_int
from ..delivery import DeadLetterReason, Delivery
from ..options import RetryDelay
from ..process import DEFAULT_MAX_DELIVERIES
from ..startup import ClientKind
from ..startup import check_client as check_kind
from .message import (
    DEFAULT_KEY_ATTRIBUTE,
    SYSTEM_ATTRIBUTES,
    Received,
    dead_letter_attributes,
    to_delivery,
)

__all__ = [
    "CLIENT",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_RETRY_DELAY",
    "DEFAULT_VISIBILITY_TIMEOUT",
    "DEFAULT_WAIT_TIME",
    "MAX_VISIBILITY_TIMEOUT",
    "Call",
    "Held",
    "QueueInfo",
    "QueueSettings",
    "RetryDelay",
    "SqsSettler",
    "Step",
    "check_client",
    "drive",
    "is_connection_error",
    "is_missing_queue",
    "queue_name",
]

logger = logging.getLogger("sa_inbox.brokers.sqs")

#: What a botocore client raises for a refused call or a lost connection: thrown into the
#: step that made the call.
CLIENT_ERRORS = (ClientError, BotoConnectionError, HTTPClientError)

T = TypeVar("T")

#: Seconds a received message stays hidden (``ReceiveMessage``'s ``VisibilityTimeout``).
DEFAULT_VISIBILITY_TIMEOUT = 30
#: Seconds one ``ReceiveMessage`` long-polls (``WaitTimeSeconds``, 0-20): a stop is seen
#: within it.
DEFAULT_WAIT_TIME = 1
#: Messages per receive (``MaxNumberOfMessages``, 1-10).
DEFAULT_BATCH_SIZE = 10
#: The longest visibility timeout SQS takes: 12 hours.
MAX_VISIBILITY_TIMEOUT = 43_200
#: Entries per ``DeleteMessageBatch`` / ``ChangeMessageVisibilityBatch``.
BATCH_ENTRIES = 10

#: ``delay(receive_count) -> seconds`` a failed message stays hidden before its next receive.
#: 1 s after the first failure, doubling, at most 60 s.
DEFAULT_RETRY_DELAY: RetryDelay = Backoff(base=1.0, maximum=60.0).delay

#: A step: yields calls, receives their replies (or the client's error thrown in), returns T.
Step = Generator["Call", Any, T]


@dataclass(frozen=True)
class Call:
    """One SQS client call: ``getattr(client, operation)(**kwargs)``."""

    operation: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` says SQS could not be reached or could not answer now: botocore's
    connection errors (refused, reset, timed out: ``EndpointConnectionError``,
    ``ConnectionClosedError``, ``ReadTimeoutError``, ...) or a 5xx / throttling reply, after
    the client's own retries."""
    if isinstance(exc, BotoConnectionError | HTTPClientError):
        return True
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        code = str(exc.response.get("Error", {}).get("Code", ""))
        return int(status or 0) >= 500 or "Throttl" in code or code == "RequestThrottled"
    return False


def is_missing_queue(exc: BaseException | None) -> bool:
    """Whether ``exc`` is SQS's "no such queue" (``QueueDoesNotExist``, or the query
    protocol's ``AWS.SimpleQueueService.NonExistentQueue``)."""
    if not isinstance(exc, ClientError):
        return False
    code = str(exc.response.get("Error", {}).get("Code", ""))
    return code in ("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue")


def error_code(exc: BaseException) -> str:
    """A client error's code (``ReceiptHandleIsInvalid``), else the exception's name."""
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", "")) or type(exc).__name__
    return type(exc).__name__


def queue_name(queue: str) -> str:
    """The queue's name: ``queue`` itself, or the last path segment of a queue URL."""
    return queue.rstrip("/").rpartition("/")[2] if _is_url(queue) else queue


def _is_url(queue: str) -> bool:
    return queue.startswith(("http://", "https://"))


# -- settings ----------------------------------------------------------------------------


def _whole_seconds(value: object, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgument(
            f"{name} must be a whole number of seconds from {low} to {high} (SQS takes "
            f"integers), not {value!r}"
        )
    return value


@dataclass(frozen=True)
class QueueSettings:
    """One consumer's configuration (see :class:`~sa_inbox.brokers.sqs.Consumer` for each
    parameter); checked on construction, before any request.

    :raises InvalidArgument: for an empty queue or key attribute name, a visibility timeout
        that is not a whole number of seconds in 1-43,200, a wait time outside 0-20, a batch
        size outside 1-10, a ``max_deliveries`` that is not an int >= 1, a dead-letter
        queue equal to the queue.
    """

    queue: str
    key_attribute: str = DEFAULT_KEY_ATTRIBUTE
    deduplication_id_key: bool = False
    dead_letter_queue: str | None = None
    visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT
    heartbeat: bool = True
    wait_time: int = DEFAULT_WAIT_TIME
    batch_size: int = DEFAULT_BATCH_SIZE
    max_deliveries: int | None = None
    retry_delay: RetryDelay = DEFAULT_RETRY_DELAY

    def __post_init__(self) -> None:
        for name, value in (("queue", self.queue), ("options.key_source", self.key_attribute)):
            if not isinstance(value, str) or not value or value != value.strip():
                raise InvalidArgument(f"{name} must be a non-empty name, not {value!r}")
        if self.dead_letter_queue is not None:
            dead = self.dead_letter_queue
            if not isinstance(dead, str) or not dead or dead != dead.strip():
                raise InvalidArgument(f"options.dead_letter must be a queue name or URL: {dead!r}")
            if queue_name(dead) == queue_name(self.queue):
                raise InvalidArgument("options.dead_letter must differ from the queue")
        _whole_seconds(self.visibility_timeout, "visibility_timeout", 1, MAX_VISIBILITY_TIMEOUT)
        _whole_seconds(self.wait_time, "wait_time", 0, 20)
        positive_int(self.batch_size, "batch_size", InvalidArgument)
        if self.batch_size > 10:
            raise InvalidArgument(f"batch_size must be 1-10 (SQS's limit), not {self.batch_size}")
        if self.max_deliveries is not None:
            positive_int(self.max_deliveries, "max_deliveries", InvalidArgument)
        if not callable(self.retry_delay):
            raise InvalidArgument("retry_delay must be a function of the receive count")

    @property
    def heartbeat_every(self) -> float:
        """Seconds between two extensions of a held message's visibility: a third of the
        visibility timeout, so two may fail before the message shows again."""
        return self.visibility_timeout / 3


@dataclass(frozen=True)
class QueueInfo:
    """The queue as the consumer found it at start (:func:`resolve`).

    :param url: the queue's URL.
    :param name: its name.
    :param fifo: a FIFO queue.
    :param redrive_limit: the redrive policy's ``maxReceiveCount``, or None without one.
    :param dead_letter_url: the adapter's own dead-letter queue's URL, or None: dead letters
        are then left to the redrive policy.
    :param max_deliveries: the delivery limit in force (see the consumer's
        ``max_deliveries``).
    """

    url: str
    name: str
    fifo: bool
    redrive_limit: int | None
    dead_letter_url: str | None
    max_deliveries: int


def resolve(settings: QueueSettings) -> Step[QueueInfo]:
    """Find the queue (and the dead-letter queue), read their attributes, and refuse what
    the consumer cannot serve.

    :raises ConfigurationError: no dead-letter path (no ``options.dead_letter`` and no redrive
        policy); a ``max_deliveries`` that differs from the redrive policy's
        ``maxReceiveCount`` when the policy is the dead-letter path; ``deduplication_id_key``
        on a standard queue or a queue with content-based deduplication; a dead-letter queue
        of the other kind (FIFO / standard) than the queue.
        A queue or dead-letter queue that does not exist is one too, naming the setting.
    :raises botocore.exceptions.ClientError: other refusals.
    """
    url = yield from _queue_url(settings.queue, "queue")
    attributes = yield from _attributes(url, ["All"], "queue")
    fifo = attributes.get("FifoQueue") == "true"
    name = queue_name(url)
    redrive_limit = _redrive_limit(attributes)
    if settings.deduplication_id_key:
        _check_deduplication_key(name, fifo, attributes)
    dead_letter_url = None
    if settings.dead_letter_queue is not None:
        dead_letter_url = yield from _queue_url(settings.dead_letter_queue, "options.dead_letter")
        dead = yield from _attributes(dead_letter_url, ["FifoQueue"], "options.dead_letter")
        if (dead.get("FifoQueue") == "true") != fifo:
            kind = "FIFO" if fifo else "standard"
            raise ConfigurationError(
                f"SQS queue {name} is a {kind} queue: its options.dead_letter must be one too "
                "(SQS: a queue and its dead-letter queue are of one kind)"
            )
    return QueueInfo(
        url, name, fifo, redrive_limit, dead_letter_url, _limit(settings, name, redrive_limit)
    )


def _queue_url(queue: str, role: str) -> Step[str]:
    if _is_url(queue):
        return queue
    reply = yield from _found(Call("get_queue_url", {"QueueName": queue}), queue, role)
    return str(reply["QueueUrl"])


def _attributes(url: str, names: list[str], role: str) -> Step[Mapping[str, str]]:
    call = Call("get_queue_attributes", {"QueueUrl": url, "AttributeNames": names})
    reply = yield from _found(call, queue_name(url), role)
    return dict(reply.get("Attributes", {}))


def _found(call: Call, queue: str, role: str) -> Step[Any]:
    """``call``'s reply; SQS's "no such queue" as a :class:`ConfigurationError` naming the
    consumer's setting (``queue`` or ``options.dead_letter``)."""
    try:
        return (yield call)
    except ClientError as exc:
        if is_missing_queue(exc):
            raise ConfigurationError(
                f"SQS {role} {queue!r} does not exist at this endpoint (region): create it, "
                f"or check the name ({first_line(exc)})"
            ) from exc
        raise


def _redrive_limit(attributes: Mapping[str, str]) -> int | None:
    policy = attributes.get("RedrivePolicy")
    if not policy:
        return None
    try:
        return int(json.loads(policy)["maxReceiveCount"])
    except (ValueError, KeyError, TypeError):
        return None


def _check_deduplication_key(name: str, fifo: bool, attributes: Mapping[str, str]) -> None:
    if not fifo:
        raise ConfigurationError(
            f"deduplication_id_key: SQS queue {name} is a standard queue, whose messages "
            "carry no MessageDeduplicationId"
        )
    if attributes.get("ContentBasedDeduplication") == "true":
        raise ConfigurationError(
            f"deduplication_id_key: SQS queue {name} has content-based deduplication, so a "
            "message sent without a MessageDeduplicationId gets the SHA-256 of its body: two "
            "messages with the same body would be one. Key on a message attribute the "
            "producer sets (options.key_source), or turn content-based deduplication off"
        )


def _limit(settings: QueueSettings, name: str, redrive_limit: int | None) -> int:
    """The delivery limit in force (see the consumer's ``max_deliveries``)."""
    if settings.dead_letter_queue is not None:
        return settings.max_deliveries or DEFAULT_MAX_DELIVERIES
    if redrive_limit is None:
        raise ConfigurationError(
            f"SQS queue {name} has no redrive policy and no options.dead_letter was given: a "
            "poison message would come back for its whole retention period. Give the queue "
            "a redrive policy (SQS moves it after maxReceiveCount receives) or name a dead-letter "
            "queue in options.dead_letter (the consumer moves it after max_deliveries)"
        )
    if settings.max_deliveries not in (None, redrive_limit):
        raise ConfigurationError(
            f"SQS queue {name}: options.max_deliveries={settings.max_deliveries}, but its redrive "
            f"policy moves a message after maxReceiveCount={redrive_limit} receives and it is "
            "the dead-letter path here (no options.dead_letter): leave max_deliveries None or "
            "make them equal"
        )
    return redrive_limit


def receive_call(settings: QueueSettings, info: QueueInfo) -> Call:
    """``ReceiveMessage``: up to ``batch_size`` messages, hidden ``visibility_timeout``
    seconds, long-polling ``wait_time`` seconds, with every message attribute and the
    system attributes the consumer reads."""
    return Call(
        "receive_message",
        {
            "QueueUrl": info.url,
            "MaxNumberOfMessages": settings.batch_size,
            "WaitTimeSeconds": settings.wait_time,
            "VisibilityTimeout": settings.visibility_timeout,
            "MessageAttributeNames": ["All"],
            "MessageSystemAttributeNames": list(SYSTEM_ATTRIBUTES),
        },
    )


def receive(settings: QueueSettings, info: QueueInfo) -> Step[list[Received]]:
    """One ``ReceiveMessage``; the messages, in order."""
    reply = yield receive_call(settings, info)
    return [Received.of(raw) for raw in reply.get("Messages") or []]


# -- the messages held ---------------------------------------------------------------------


@dataclass
class _Hold:
    message: Received
    extended_at: float
    acked: bool = False


class Held:
    """The messages a consumer received and has not deleted or handed back: their
    visibility is kept up (the heartbeat, the outage gate's keep-alive). Thread-safe: the
    sync consumer's heartbeat thread reads it (the lock is held for dictionary work only,
    never across a request).

    :param clock: monotonic seconds.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[str, _Hold] = {}

    def add(self, messages: Sequence[Received]) -> None:
        now = self._clock()
        with self._lock:
            for message in messages:
                self._held[message.receipt_handle] = _Hold(message, now)

    def drop(self, message: Received) -> None:
        with self._lock:
            self._held.pop(message.receipt_handle, None)

    def holds(self, message: Received) -> bool:
        with self._lock:
            return message.receipt_handle in self._held

    def ack(self, message: Received) -> None:
        """Mark ``message`` committed: kept up until its delete."""
        with self._lock:
            hold = self._held.get(message.receipt_handle)
            if hold is not None:
                hold.acked = True

    def acked(self) -> list[Received]:
        """The committed messages not deleted yet, taken out (their delete is the caller's)."""
        with self._lock:
            done = [h.message for h in self._held.values() if h.acked]
            for message in done:
                del self._held[message.receipt_handle]
        return done

    def due(self, every: float | None) -> list[Received]:
        """The messages whose visibility was last set ``every`` seconds ago or more (all
        for None), marked extended now."""
        now = self._clock()
        with self._lock:
            due = [h for h in self._held.values() if every is None or now - h.extended_at >= every]
            for hold in due:
                hold.extended_at = now
        return [h.message for h in due]

    def clear(self) -> None:
        """Hold nothing any more (a lost connection: what was held shows again)."""
        with self._lock:
            self._held.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)


def extend(info: QueueInfo, held: Held, messages: Sequence[Received], seconds: int) -> Step[None]:
    """``ChangeMessageVisibilityBatch`` of ``messages`` to ``seconds`` from now, ten at a
    time. A message SQS refuses (its handle stale: another receive took it; past the 12-hour
    limit) is logged once and no longer extended: if it shows again, another worker may
    receive it, and the inbox claim makes the later one a duplicate."""
    extra = {"VisibilityTimeout": seconds}
    return _batches(info, "change_message_visibility_batch", "extend", messages, extra, held)


def delete(info: QueueInfo, messages: Sequence[Received]) -> Step[None]:
    """``DeleteMessageBatch`` of committed messages, ten at a time. A delete SQS refuses
    (a stale handle) is logged: the message comes back and the inbox claim skips it as a
    duplicate. A delete SQS accepts may still leave the message (AWS, a stale handle):
    the same."""
    return _batches(info, "delete_message_batch", "delete", messages, {}, None)


def _batches(
    info: QueueInfo,
    operation: str,
    what: str,
    messages: Sequence[Received],
    extra: Mapping[str, Any],
    held: Held | None,
) -> Step[None]:
    """``operation`` on ``messages`` ten at a time, each entry its receipt handle and
    ``extra``; the messages SQS refuses are logged (:func:`_log_failed`, as ``what``).

    :raises ClientError: a lost connection (the other errors fail the chunk, logged).
    """
    for chunk in _chunks(messages):
        entries = [
            {"Id": str(n), "ReceiptHandle": m.receipt_handle, **extra} for n, m in enumerate(chunk)
        ]
        try:
            reply = yield Call(operation, {"QueueUrl": info.url, "Entries": entries})
        except ClientError as exc:
            if is_connection_error(exc):
                raise
            _log_failed(info, what, chunk, {str(n): exc for n in range(len(chunk))}, held)
            continue
        _log_failed(info, what, chunk, _failures(reply), held)


def _chunks(messages: Sequence[Received]) -> list[Sequence[Received]]:
    return [messages[i : i + BATCH_ENTRIES] for i in range(0, len(messages), BATCH_ENTRIES)]


def _failures(reply: Mapping[str, Any]) -> dict[str, object]:
    return {
        str(failed.get("Id")): f"{failed.get('Code')}: {failed.get('Message', '')}"
        for failed in reply.get("Failed") or []
    }


def _log_failed(
    info: QueueInfo,
    what: str,
    chunk: Sequence[Received],
    failures: Mapping[str, object],
    held: Held | None,
) -> None:
    for n, message in enumerate(chunk):
        failure = failures.get(str(n))
        if failure is None:
            continue
        if held is not None:
            if not held.holds(message):
                continue  # settled meanwhile: the extension raced its delete
            held.drop(message)
        logger.warning(
            "SQS queue %s: could not %s message %s (%s): its receipt handle is stale or "
            "refused; if it is received again, the inbox claim skips it as a duplicate "
            "once committed",
            info.name,
            what,
            message.message_id,
            _describe(failure),
            extra={"action": f"{what}_failed", "sqs_message_id": message.message_id},
        )


def set_visibility(info: QueueInfo, message: Received, seconds: int, what: str) -> Step[bool]:
    """``ChangeMessageVisibility`` of one message; a refusal (a stale handle) is logged and
    False returned: the message shows again when its visibility timeout ends anyway."""
    try:
        yield Call(
            "change_message_visibility",
            {
                "QueueUrl": info.url,
                "ReceiptHandle": message.receipt_handle,
                "VisibilityTimeout": seconds,
            },
        )
    except ClientError as exc:
        if is_connection_error(exc):
            raise
        logger.warning(
            "SQS queue %s: could not %s message %s (%s): it shows again when its "
            "visibility timeout ends",
            info.name,
            what,
            message.message_id,
            _describe(exc),
            extra={"action": f"{what}_failed", "sqs_message_id": message.message_id},
        )
        return False
    return True


def _describe(error: object) -> str:
    if isinstance(error, BaseException):
        return f"{error_code(error)}: {' '.join(str(error).split())[:200]}"
    return " ".join(str(error).split())[:300]


# -- settling ----------------------------------------------------------------------------


class SqsSettler:
    """The :class:`~sa_inbox.brokers.Settler` of one received message. Each method runs
    its step with ``run`` (the sync consumer returns the result, the asyncio one the
    awaitable of it).

    - :meth:`ack` marks the message committed; the consumer deletes the committed messages
      of a receive with ``DeleteMessageBatch`` once they are all settled (a consumer killed
      before that leaves them to come back, as duplicates);
    - :meth:`retry` hides the message ``retry_delay(receive count)`` seconds
      (``ChangeMessageVisibility``), so it comes back then, counted;
    - :meth:`dead_letter` sends it to the consumer's ``options.dead_letter`` (the body, its
      attributes and :data:`~sa_inbox.brokers.sqs.message.DEAD_LETTER_ATTRIBUTE`; on a FIFO
      queue its ``MessageGroupId`` and, as ``MessageDeduplicationId``, its SQS
      ``MessageId``, so a second dead letter of it inside SQS's 5-minute deduplication
      interval is dropped), then deletes it; without an ``options.dead_letter`` it makes the
      message visible again for the queue's redrive policy to move (the receive after
      ``maxReceiveCount``); the reason is then only logged;
    - :meth:`give_back` makes it visible again at once (a run of keyless messages): SQS
      counts its next receive, as it counts every receive.

    :param info: the queue.
    :param settings: the consumer's settings.
    :param held: the consumer's held messages.
    :param message: the message.
    :param delivery: its delivery (the key and the count).
    :param run: runs a step: ``drive(step, client)`` or its asyncio twin.
    """

    def __init__(
        self,
        info: QueueInfo,
        settings: QueueSettings,
        held: Held,
        message: Received,
        delivery: Delivery,
        run: Callable[[Step[Any]], Any],
    ) -> None:
        self.info = info
        self.settings = settings
        self.held = held
        self.message = message
        self.delivery = delivery
        self._run = run

    def ack(self) -> None:
        """Mark the message committed (deleted with the receive's other committed ones)."""
        self.held.ack(self.message)

    def retry(self) -> Any:
        """Hide the message ``retry_delay(receive count)`` seconds."""
        self.held.drop(self.message)
        seconds = _seconds(self.settings.retry_delay(self.delivery.delivery_count))
        return self._run(set_visibility(self.info, self.message, seconds, "hand back"))

    def give_back(self) -> Any:
        """Make the message visible again now (its next receive counts)."""
        self.held.drop(self.message)
        return self._run(set_visibility(self.info, self.message, 0, "give back"))

    def dead_letter(self, reason: DeadLetterReason, detail: str) -> Any:
        """Send the dead letter and delete the message; or leave it to the redrive policy.

        :raises botocore.exceptions.ClientError: if the dead-letter queue refused the send
            (the message is left as it is: it shows again after its visibility timeout).
        """
        return self._run(self._dead_letter(reason, detail))

    def _dead_letter(self, reason: DeadLetterReason, detail: str) -> Step[None]:
        info, message = self.info, self.message
        if info.dead_letter_url is None:
            self.held.drop(message)
            logger.warning(
                "SQS queue %s: message %s (%s) left to the queue's redrive policy "
                "(maxReceiveCount %s): %s",
                info.name,
                self.delivery.message_id,
                message.message_id,
                info.redrive_limit,
                detail,
                extra={"action": "redrive", "reason": reason.value},
            )
            yield from set_visibility(info, message, 0, "hand back")
            return
        send: dict[str, Any] = {
            "QueueUrl": info.dead_letter_url,
            "MessageBody": message.body,
            "MessageAttributes": dead_letter_attributes(
                message,
                self.delivery,
                reason,
                detail,
                source=info.name,
                key_attribute=self.settings.key_attribute,
            ),
        }
        if info.fifo:
            send["MessageGroupId"] = message.group_id or info.name
            send["MessageDeduplicationId"] = message.message_id
        yield Call("send_message", send)
        self.held.drop(message)
        yield from delete(info, [message])


def _seconds(value: float) -> int:
    """Whole seconds for ``VisibilityTimeout`` (rounded up; 0-43,200)."""
    if not value > 0:
        return 0
    return min(MAX_VISIBILITY_TIMEOUT, math.ceil(value))


def delivery_of(settings: QueueSettings, info: QueueInfo, message: Received) -> Delivery:
    """The delivery of ``message`` on this consumer's key."""
    return to_delivery(
        message,
        queue=info.name,
        key_attribute=settings.key_attribute,
        deduplication_id_key=settings.deduplication_id_key,
    )


# -- the client -------------------------------------------------------------------------------


#: The SQS clients: boto3's blocking one, aiobotocore's asyncio one.
CLIENT = ClientKind(
    broker="SQS",
    method="get_queue_url",
    asyncio_module="aiobotocore",
    blocking="boto3.client('sqs')",
    asyncio="an entered aiobotocore client (async with "
    "get_session().create_client('sqs') as client)",
)


def check_client(client: object, *, asynchronous: bool, entry: str) -> None:
    """Refuse a client the consumer or publisher cannot drive, before any request
    (:func:`sa_inbox.brokers.startup.check_client` with :data:`CLIENT`; an aiobotocore
    client not entered with ``async with`` is no client).

    :raises SyncAsyncMismatch: for a client of the other half.
    :raises InvalidObject: for anything that is not an SQS client.
    """
    check_kind(client, CLIENT, asynchronous=asynchronous, entry=entry)


# -- the sync I/O edge -----------------------------------------------------------------------


def run_call(client: Any, call: Call) -> Any:
    """Make one call on a boto3 SQS client."""
    return getattr(client, call.operation)(**call.kwargs)


def drive(step: Step[T], client: Any) -> T:
    """Run a step to its end on a boto3 client; a client error is thrown into it.

    :raises botocore.exceptions.ClientError: what the step does not handle.
    :raises botocore.exceptions.BotoCoreError: a connection error (thrown in first).
    """
    return steps.drive(step, functools.partial(run_call, client), CLIENT_ERRORS)
