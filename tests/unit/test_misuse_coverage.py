"""Every public entry point of sa-inbox is in the misuse matrix, or is listed here as taking
no object that can be mixed up (only values, validated where they are used): a new entry
point cannot be forgotten."""

from __future__ import annotations

import enum
import inspect
from collections.abc import Iterator
from types import ModuleType

import sa_inbox
import sa_inbox.asyncio
import sa_inbox.brokers
import sa_inbox.brokers.celery
import sa_inbox.brokers.dead_letters
import sa_inbox.brokers.faststream
import sa_inbox.brokers.nats
import sa_inbox.brokers.rabbitmq
import sa_inbox.brokers.redis
import sa_inbox.collision
import sa_inbox.outbox
import sa_inbox.retention
import sa_inbox.runner
import sa_inbox.store
from tests.backends.misuse.cases import ENTRY_POINTS

#: The public modules whose ``__all__`` holds the entry points.
MODULES: tuple[ModuleType, ...] = (
    sa_inbox,
    sa_inbox.asyncio,
    sa_inbox.outbox,
    sa_inbox.brokers,
    sa_inbox.brokers.rabbitmq,
    sa_inbox.brokers.redis,
    sa_inbox.brokers.nats,
    sa_inbox.brokers.faststream,
    sa_inbox.brokers.celery,
    sa_inbox.brokers.dead_letters,
)

#: Public names of modules whose ``__all__`` also holds the package's own helpers.
PUBLIC_NAMES: tuple[tuple[ModuleType, tuple[str, ...]], ...] = (
    (sa_inbox.store, ("Incoming", "StoredMessage")),
    (sa_inbox.retention, ("StorePurgeResult", "purge_store")),
    (sa_inbox.runner, ("is_transient",)),
    (sa_inbox.collision, ("payload_hash",)),
)

#: Entry points that take no sa-inbox, SQLAlchemy or broker object: nothing to mix up.
TAKES_NO_OBJECT = {
    "Backoff()": "seconds",
    "Backoff.delay": "an attempt count",
    "Backoff.jittered": "an attempt count and a random source",
    "Inbox.validate": "ids and strings; sends nothing",
    "AsyncInbox.validate": "ids and strings; sends nothing",
    "InboxMessageMixin()": "a declarative mixin: SQLAlchemy checks the mapping",
    "InboxStore.candidates": "builds a query; sends nothing",
    "Incoming()": "a message's values",
    "StoredMessage()": "a row's values",
    "Result()": "a runner's outcome",
    "StorePurgeResult()": "a purge's counts",
    "RetentionPolicy()": "durations, validated by RetentionPolicy",
    "RetentionPolicy.check": "a duration",
    "Worker.run_once": "the worker's store and handler were checked when it was made",
    "Worker.process": "a StoredMessage the worker's store returned",
    "Worker.reap": "the worker's own store",
    "Worker.stop": "nothing",
    "Worker.run": "limits and a signal switch",
    "Worker.own_consumer_name": "the worker's own store and handler, checked when it was made",
    "Worker.begin_run": "limits, as Worker.run",
    "Worker.stopping": "nothing",
    "Worker.retry_at": "a StoredMessage the worker's store returned",
    "Worker.count": "a stats key and an amount",
    "AsyncWorker.run": "limits and a signal switch",
    "AsyncWorker.stop": "nothing",
    "OutboxRelay.run_once": "the relay's own engine and publisher, checked when it was made",
    "OutboxRelay.run": "limits",
    "OutboxRelay.stop": "nothing",
    "AsyncOutboxRelay.run_once": "the relay's own engine and publisher, checked when made",
    "AsyncOutboxRelay.run": "limits",
    "AsyncOutboxRelay.stop": "nothing",
    "Outbox.row": "a message's values; sends nothing",
    "OutboxMessage()": "a message's values",
    "RelayBatch()": "a relay round's counts",
    "Publisher()": "a Protocol: the relays check the publisher given to them",
    "Publisher.publish": "a Protocol method",
    "Publisher.close": "a Protocol method",
    "sa_inbox.idempotency_key": "strings",
    "sa_inbox.runner.is_transient": "an exception and a dialect name",
    "sa_inbox.collision.payload_hash": "a payload",
    "sa_inbox.outbox.uuid7": "a time",
    "sa_inbox.asyncio.AsyncHandler": "a type alias",
    # the broker adapters: what is not a consumer takes a broker's message, channel or
    # client, or values; the consumers' objects are checked when they are made
    "Delivery()": "a delivery's values",
    "Settlement()": "a settlement's values",
    "Settler()": "a Protocol: process() is given the adapter's settler",
    "Settler.ack": "a Protocol method",
    "Settler.retry": "a Protocol method",
    "Settler.dead_letter": "a Protocol method",
    "StopFlag()": "a Protocol",
    "StopFlag.is_set": "a Protocol method",
    "StreamSettings()": "values, validated by StreamSettings",
    "BlockingConsumer.stop": "nothing",
    "AsyncConsumer.stop": "nothing",
    "RedisStreamConsumer.poll": "a flag; the consumer's objects were checked when it was made",
    "RedisStreamConsumer.ensure_group": "the consumer's own client",
    "AsyncRedisStreamConsumer.poll": "a flag; the consumer's objects were checked when made",
    "AsyncRedisStreamConsumer.ensure_group": "the consumer's own client",
    **{
        f"{settler}{member}": "a broker message and channel, settled as the consumer decides"
        for settler in ("PikaSettler", "AioPikaSettler", "JetStreamSettler")
        for member in ("()", ".ack", ".retry", ".give_back", ".dead_letter")
    },
    **{
        f"{publisher}{member}": "a broker URL or client; the relays check the publisher"
        for publisher, members in (
            ("RabbitMQPublisher", ("()", ".connect", ".publish", ".close", ".is_unavailable")),
            (
                "AioPikaPublisher",
                ("()", ".connect", ".publish", ".publish_many", ".close", ".is_unavailable"),
            ),
            ("RedisStreamPublisher", ("()", ".fields", ".publish", ".close", ".is_unavailable")),
            ("JetStreamPublisher", ("()", ".headers", ".publish", ".close", ".is_unavailable")),
            ("BlockingJetStreamPublisher", ("()", ".publish", ".close", ".is_unavailable")),
            ("ConnectingJetStreamPublisher", ("()", ".publish", ".close", ".is_unavailable")),
        )
        for member in members
    },
    # the dead letters: a broker URL, a name and values, each checked before connecting
    # (tests/unit/test_dead_letter_arguments.py)
    **{
        name: "a broker URL and values, checked before connecting"
        for name in (
            "sa_inbox.brokers.dead_letters.count",
            "sa_inbox.brokers.dead_letters.peek",
            "sa_inbox.brokers.dead_letters.replay",
            "sa_inbox.brokers.dead_letters.sample",
            "DeadLetterTarget()",
            "DeadLetterTarget.of",
            "DeadLetterTarget.parse",
        )
    },
    "DeadLetter()": "a dead letter's values, as a reader found them",
    "DeadLetter.as_dict": "nothing",
    "ReplayResult()": "a replay's counts",
    "ReplayResult.as_dict": "nothing",
    **{
        f"sa_inbox.brokers.{name}": "a broker message's, channel's or consumer's values"
        for name in (
            "rabbitmq.aio_pika_delivery",
            "rabbitmq.pika_delivery",
            "rabbitmq.to_delivery",
            "rabbitmq.producer_key",
            "rabbitmq.delivery_count",
            "rabbitmq.dead_letter_queue_name",
            "rabbitmq.queue_arguments",
            "rabbitmq.declare_queue",
            "rabbitmq.declare_queue_async",
            "redis.to_delivery",
            "nats.to_delivery",
            "nats.dead_letter_headers",
            "nats.consumer_config",
            "nats.ensure_consumer",
            "nats.backoff",
            "nats.RetryDelay",
            "faststream.delivery_of",
            "celery.delivery_of",
        )
    },
}


def _exported(cls: type) -> bool:
    return any(getattr(module, cls.__name__, None) is cls for module in MODULES)


#: Classes composed of parts, one module each, that no public module exports (the inbox
#: store's receive, transitions, admin and base): the parts' members are the class's own.
COMPOSED = {"InboxStore"}


def _own_members(cls: type) -> Iterator[tuple[str, object]]:
    """The members ``cls`` defines, with those of its parts (see :data:`COMPOSED`)."""
    seen: set[str] = set()
    parts = [c for c in cls.__mro__[1:] if c.__module__.startswith("sa_inbox.")]
    composed = cls.__name__ in COMPOSED
    for owner in (cls, *(c for c in parts if composed and not _exported(c))):
        for attribute, member in vars(owner).items():
            if attribute not in seen:
                seen.add(attribute)
                yield attribute, member


def public_entry_points() -> Iterator[str]:
    """``module.function``, ``Class()`` and ``Class.method`` for each public name."""
    for module, names in (*((m, tuple(m.__all__)) for m in MODULES), *PUBLIC_NAMES):
        for name in names:
            value = getattr(module, name)
            if isinstance(value, type):
                if issubclass(value, BaseException | enum.Enum):
                    continue
                yield f"{value.__name__}()"
                for attribute, member in _own_members(value):
                    if attribute.startswith("_"):
                        continue
                    if inspect.isfunction(member) or isinstance(member, classmethod):
                        yield f"{value.__name__}.{attribute}"
            elif callable(value):
                yield f"{module.__name__}.{name}"


def test_every_public_entry_point_has_a_misuse_case() -> None:
    missing = sorted(
        entry
        for entry in set(public_entry_points())
        if entry not in ENTRY_POINTS and entry not in TAKES_NO_OBJECT
    )
    assert not missing, f"add a case to tests/backends/misuse/cases.py for {missing}"


def test_the_exemptions_are_entry_points_without_a_case() -> None:
    entries = set(public_entry_points())
    assert not set(TAKES_NO_OBJECT) - entries, "an exemption names no public entry point"
    assert not set(TAKES_NO_OBJECT) & ENTRY_POINTS, "an exempt entry point has a case"
