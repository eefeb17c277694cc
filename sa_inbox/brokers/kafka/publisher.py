"""The outbox relay's Kafka publishers: :class:`Publisher` (threads) and
:class:`AsyncPublisher` (asyncio), both on confluent-kafka's (librdkafka's) producer.

Each outbox row becomes one record of the topic ``message.destination``: the value is the
payload, the headers are the row's plus ``key_header`` = the row's ``message_id`` (the
header :class:`~sa_inbox.brokers.kafka.AsyncConsumer` reads the producer's key from), and
the record's Kafka key (the partitioning key: records of one key stay in order in one
partition) is chosen per destination by ``keys``.

Kafka rules relied on (Apache Kafka documentation, "Producer Configs": ``acks``,
``enable.idempotence``; librdkafka's CONFIGURATION.md): with ``acks=all`` the leader
acknowledges a record once every in-sync replica has it; the idempotent producer
(``enable.idempotence=true``) numbers its batches so that the broker writes a batch the
producer retried once only, and keeps the order of one partition across retries. Both are
set by default. A publish returns once librdkafka's delivery report for the record came
(``flush``), its error raised.

The relay's ``is_unavailable`` (:func:`sa_inbox.outbox.publisher.broker_unavailable`):
the broker could not be reached when librdkafka reports a transport error, every broker
down, a timed-out or undelivered record (``_TRANSPORT``, ``_ALL_BROKERS_DOWN``,
``_MSG_TIMED_OUT``, ``_TIMED_OUT``, ``REQUEST_TIMED_OUT``, ``NOT_ENOUGH_REPLICAS``,
``LEADER_NOT_AVAILABLE``, ``NOT_LEADER_FOR_PARTITION``: retriable errors of the cluster, not
of the message); a refused record (``MSG_SIZE_TOO_LARGE``, ``TOPIC_AUTHORIZATION_FAILED``,
``INVALID_RECORD``) is the message's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from ...exc import InvalidArgument
from ...outbox.message import OutboxMessage
from .records import DEFAULT_KEY_HEADER, check_key_header

__all__ = ["DEFAULT_PUBLISH_TIMEOUT", "AsyncPublisher", "KeyFor", "Publisher"]

#: Seconds a publish waits for the broker's acknowledgement of its records.
DEFAULT_PUBLISH_TIMEOUT = 30.0

#: ``key(message) -> bytes | str | None``: the record's Kafka key for one outbox message.
KeyFor = Callable[[OutboxMessage], bytes | str | None]

#: librdkafka error codes that say the cluster could not be reached or could not take the
#: record now (not that it refused this record).
_UNREACHABLE = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._RESOLVE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)


class Publisher:
    """Publishes outbox messages to Kafka (an outbox
    :class:`~sa_inbox.outbox.publisher.Publisher`), each acknowledged before it returns.

    :param bootstrap_servers: ``host:port[,host:port]``.
    :param key_header: the header of the outbox ``message_id`` (default ``message_id``,
        the consumer's default).
    :param keys: destination (topic) -> ``key(message)``, the record's Kafka key for that
        topic (e.g. ``lambda m: m.headers["account_id"]``, so an account's records stay in
        order in one partition); a topic not named here gets ``default_key``.
    :param default_key: the Kafka key of the other topics' records; default None (the
        producer spreads them over the partitions).
    :param config: more librdkafka producer properties; ``acks`` is ``all`` and
        ``enable.idempotence`` true unless given here.
    :param timeout: seconds a publish waits for its acknowledgements.
    :raises InvalidArgument: for an invalid ``key_header`` (see
        :func:`~sa_inbox.brokers.kafka.records.check_key_header`), ``keys`` that is no
        mapping of callables, or a ``timeout`` that is not > 0.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        key_header: str = DEFAULT_KEY_HEADER,
        keys: Mapping[str, KeyFor] | None = None,
        default_key: KeyFor | None = None,
        config: Mapping[str, Any] | None = None,
        timeout: float = DEFAULT_PUBLISH_TIMEOUT,
    ) -> None:
        entry = f"{type(self).__name__}()"
        self.key_header = check_key_header(key_header, entry=entry)
        self.keys = dict(keys or {})
        if not all(callable(key) for key in self.keys.values()) or (
            default_key is not None and not callable(default_key)
        ):
            raise InvalidArgument(f"{entry}: keys maps topics to key(message) functions")
        self.default_key = default_key
        if not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidArgument(f"{entry}: timeout must be > 0 seconds, not {timeout!r}")
        self.timeout = float(timeout)
        self.config = {
            "bootstrap.servers": bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            **dict(config or {}),
        }
        self._producer: Producer | None = None

    @property
    def producer(self) -> Producer:
        """The librdkafka producer, made at the first publish."""
        if self._producer is None:
            self._producer = Producer(self.config)
        return self._producer

    def key_of(self, message: OutboxMessage) -> bytes | str | None:
        """The record's Kafka key for ``message`` (see ``keys``)."""
        key = self.keys.get(message.destination, self.default_key)
        return None if key is None else key(message)

    def headers(self, message: OutboxMessage) -> list[tuple[str, str | bytes | None]]:
        """The record's headers: the message's, then ``key_header`` = its ``message_id``."""
        kept: list[tuple[str, str | bytes | None]] = [
            (k, v.encode()) for k, v in message.headers.items() if k != self.key_header
        ]
        return [*kept, (self.key_header, message.message_id.encode())]

    def _produce(self, messages: Sequence[OutboxMessage]) -> list[list[BaseException | None]]:
        """Hand every message to librdkafka; each gets a one-slot list its delivery report
        fills."""
        reports: list[list[BaseException | None]] = []
        for message in messages:
            report: list[BaseException | None] = []
            reports.append(report)
            try:
                self.producer.produce(
                    message.destination,
                    value=message.payload,
                    key=self.key_of(message),
                    headers=self.headers(message),
                    on_delivery=_reporter(report),
                )
            except (KafkaException, BufferError) as exc:
                report.append(exc)
        return reports

    def _results(self, reports: list[list[BaseException | None]]) -> list[Exception | None]:
        results: list[Exception | None] = []
        for report in reports:
            if not report:
                results.append(
                    KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, "no delivery report"))
                )
            else:
                error = report[0]
                results.append(error if isinstance(error, Exception) or error is None else None)
        return results

    def publish(self, message: OutboxMessage) -> None:
        """Publish one record and wait for its acknowledgement.

        :raises KafkaException: the broker refused it, or did not acknowledge it within
            ``timeout`` (``_MSG_TIMED_OUT``).
        """
        (error,) = self.publish_many([message])
        if error is not None:
            raise error

    def publish_many(self, messages: Sequence[OutboxMessage]) -> list[Exception | None]:
        """Publish a batch and wait once for every acknowledgement (the relay's batch path):
        one result per message, None for a record the broker acknowledged."""
        reports = self._produce(messages)
        self.producer.flush(self.timeout)
        return self._results(reports)

    def is_unavailable(self, error: BaseException) -> bool:
        """Whether ``error`` says the cluster could not be reached (see the module), not
        that it refused the record."""
        if isinstance(error, KafkaException) and error.args:
            kafka_error = error.args[0]
            if isinstance(kafka_error, KafkaError):
                return kafka_error.code() in _UNREACHABLE or bool(kafka_error.retriable())
        return isinstance(error, OSError | BufferError)

    def close(self) -> None:
        """Wait for the records in flight (up to ``timeout``), then drop the producer."""
        if self._producer is not None:
            self._producer.flush(self.timeout)
            self._producer = None


class AsyncPublisher(Publisher):
    """:class:`Publisher` for :class:`~sa_inbox.asyncio.AsyncOutboxRelay`: the same records;
    the wait for the acknowledgements (librdkafka's ``flush``) runs in a worker thread, so
    the event loop keeps running."""

    async def publish(self, message: OutboxMessage) -> None:  # type: ignore[override]
        """:meth:`Publisher.publish`, awaited."""
        (error,) = await self.publish_many([message])
        if error is not None:
            raise error

    async def publish_many(  # type: ignore[override]
        self, messages: Sequence[OutboxMessage]
    ) -> list[Exception | None]:
        """:meth:`Publisher.publish_many`, awaited."""
        reports = self._produce(messages)
        await asyncio.to_thread(self.producer.flush, self.timeout)
        return self._results(reports)

    async def close(self) -> None:  # type: ignore[override]
        """:meth:`Publisher.close`, awaited."""
        if self._producer is not None:
            await asyncio.to_thread(self._producer.flush, self.timeout)
            self._producer = None


def _reporter(report: list[BaseException | None]) -> Callable[[Any, Any], None]:
    def on_delivery(error: KafkaError | None, _message: Any) -> None:
        report.append(None if error is None else KafkaException(error))

    return on_delivery
