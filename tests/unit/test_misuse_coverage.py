"""Every public entry point of sa-inbox is in the misuse matrix, or is listed here as taking
no object that can be mixed up (only values, validated where they are used): a new entry
point cannot be forgotten."""

from __future__ import annotations

import enum
import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from types import ModuleType

import sa_inbox
from tests.backends.misuse.cases import ENTRY_POINTS

#: Modules whose ``__all__`` holds no entry point of the library's API, with the reason
#: (a name ending in ``.`` stands for every module under it). Every other module of the
#: package (its path has no ``_``-prefixed part) is public: each name of its ``__all__``
#: that is a function or a class (exceptions and enums aside) is an entry point.
INTERNAL: dict[str, str] = {
    # the lab: programs run from the command line (their inputs are command-line strings;
    # the library calls they make are the entry points below)
    "sa_inbox.bench": "benchmark scenarios, run by `sa-inbox bench`",
    "sa_inbox.chaos": "chaos runs, run by `sa-inbox chaos`",
    "sa_inbox.demo": "the demo, run by `sa-inbox demo`",
    "sa_inbox.cli": "the command line (click commands)",
    # the checks themselves, and the machinery the entry points run on what they checked
    "sa_inbox.checks": "the checks the entry points run on what they are given",
    "sa_inbox.handlers": "the runner's and worker's checks and calls of a handler",
    "sa_inbox.validation": "the checks of ids, lengths and durations",
    "sa_inbox.guard": "the runner's transaction guard, on the runner's own session",
    "sa_inbox.pool_guard": "the runner's pool guard, on the runner's own session",
    "sa_inbox.outage": "the consumers' outage gate, made by each consumer for itself",
    "sa_inbox.replication": "PostgreSQL's replication state, read by sa_inbox.stats",
    "sa_inbox.dialects": "per-backend SQL and error classifiers, called on checked binds",
    "sa_inbox.claim": "the claim path; its Inbox is exported by sa_inbox",
    "sa_inbox.schema": "the inbox table's columns; its factory and mixin are in sa_inbox",
    # a package's parts, whose public names the package exports
    "sa_inbox.asyncio.": "sa_inbox.asyncio's parts",
    "sa_inbox.store.": "the store's and the Worker's parts, exported by sa_inbox.store",
    "sa_inbox.outbox.": "the outbox's parts, exported by sa_inbox.outbox",
    "sa_inbox.retention.policy": "RetentionPolicy, exported by sa_inbox.retention",
    "sa_inbox.retention.purge": "the purge, exported by sa_inbox.retention",
    "sa_inbox.sharding.exc": "the sharding errors (exceptions)",
    "sa_inbox.sharding.identity": "a server's identity, read by ShardInbox's shard check",
    "sa_inbox.sharding.inbox": "ShardedInbox and ShardInbox, exported by sa_inbox.sharding",
    "sa_inbox.sharding.keys": "the shard-key digests, exported by sa_inbox.sharding",
    "sa_inbox.sharding.shardmap": "the shard map's validation, run by ShardedInbox()",
    "sa_inbox.brokers.delivery": "exported by sa_inbox.brokers",
    "sa_inbox.brokers.process": "exported by sa_inbox.brokers",
    "sa_inbox.brokers.keys": "the key header's rules, run by each adapter",
    "sa_inbox.brokers.reconnect": "the reconnect loop of each adapter",
    "sa_inbox.brokers.startup": "each adapter's checks when made and at start",
    "sa_inbox.brokers.rabbitmq.": "exported by sa_inbox.brokers.rabbitmq",
    "sa_inbox.brokers.redis.": "exported by sa_inbox.brokers.redis",
    "sa_inbox.brokers.nats.": "exported by sa_inbox.brokers.nats",
    "sa_inbox.brokers.dead_letters.": "exported by sa_inbox.brokers.dead_letters",
    # Alembic's side: operations Alembic runs (op.create_inbox_table(...)) with table names,
    # and the hooks it calls with its own objects; tests/backends/alembic round-trips them
    "sa_inbox.alembic": "the Alembic operations and autogenerate hooks",
    "sa_inbox.alembic_plugin": "the Alembic plugin's setup(), called by Alembic",
}


def _internal(name: str) -> bool:
    return any(
        name.startswith(module)
        if module.endswith(".")
        else name == module or name.startswith(f"{module}.")
        for module in INTERNAL
    )


def public_modules() -> list[ModuleType]:
    """Every public module of the package, shallowest first (a name exported by several
    is known by the shallowest: ``sa_inbox.handle``, not ``sa_inbox.runner.handle``)."""
    names = [
        info.name
        for info in pkgutil.walk_packages(sa_inbox.__path__, "sa_inbox.")
        if not any(part.startswith("_") for part in info.name.split("."))
        and not _internal(info.name)
    ]
    names.sort(key=lambda name: (name.count("."), name))
    return [sa_inbox, *(importlib.import_module(name) for name in names)]


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
    # values the library returns (reports, results, rows): made by sa-inbox, read by users
    **{
        name: "a value sa-inbox returns"
        for name in (
            "Batch()",
            "ConsumerRename()",
            "ConsumerStats()",
            "DeadLetterQueueStats()",
            "InboxStats()",
            "InboxStats.as_dict",
            "InboxStats.oldest_processed",
            "MaintenanceResult()",
            "OutboxDestinationStats()",
            "OutboxStats()",
            "OutboxStats.total",
            "OutboxStats.oldest_pending_seconds",
            "Partition()",
            "ReapResult()",
            "ShardTarget()",
            "StatsWarning()",
            "StoreConsumerStats()",
            "StoreStats()",
            "StoreStats.total",
            "TableStats()",
            "WorkerSummary()",
            "WorkerSummary.as_dict",
            "WorkerSummary.from_stats",
        )
    },
    # the hooks: called by sa-inbox with names, counts and seconds
    **{
        f"{hooks}{member}": "called by sa-inbox with names, counts and seconds"
        for hooks in (
            "InboxHooks",
            "NoopHooks",
            "MultiHooks",
            "PrometheusHooks",
            "OpenTelemetryHooks",
        )
        for member in (
            "()",
            ".claimed",
            ".handled",
            ".retried",
            ".purged",
            ".dead_lettered",
            ".database_outage",
            ".span",
            ".observe",
        )
        if f"{hooks}{member}" not in ("InboxHooks.database_outage", "InboxHooks.observe")
        and not (member == ".observe" and hooks != "OpenTelemetryHooks")
    },
    "InboxCollector.collect": "the collector's own Sampler, checked when it was made",
    "InboxCollector.sample": "the collector's own Sampler, checked when it was made",
    "Sampler.sample": "the sampler's own engine, checked when it was made",
    # the in-memory store of sa_inbox.testing: no database, no SQLAlchemy object
    **{
        f"MemoryStore{member}": "an in-memory store for users' tests: values and messages"
        for member in (
            "()",
            ".receive",
            ".receive_many",
            ".lease",
            ".claim",
            ".complete",
            ".complete_batch",
            ".fail",
            ".release",
            ".reap",
            ".has_unfinished",
            ".is_transient",
            ".replay",
            ".counts",
            ".row",
        )
    },
    "MemoryRow()": "a MemoryStore's row",
    "MemoryRow.key": "a MemoryStore's row",
    # the store protocol and the bound store the Worker runs
    **{
        f"MessageStore{member}": "a Protocol: the Worker checks the store given to it"
        for member in (
            "()",
            ".lease",
            ".complete",
            ".complete_batch",
            ".fail",
            ".release",
            ".reap",
            ".has_unfinished",
            ".is_transient",
        )
    },
    **{
        f"BoundStore{member}": "made by InboxStore.bind (its cases); run by the Worker"
        for member in (
            "()",
            ".lease",
            ".claim",
            ".complete",
            ".complete_batch",
            ".fail",
            ".release",
            ".reap",
            ".has_unfinished",
            ".is_transient",
            ".is_unavailable",
            ".probe",
            ".ensure_owner",
            ".renew",
        )
    },
    **{
        f"UTCDateTime{member}": "a column type: SQLAlchemy calls it"
        for member in (
            "()",
            ".load_dialect_impl",
            ".process_bind_param",
            ".process_result_value",
        )
    },
    # made by the Inbox for its own table, run by the claim on its checked connection
    "CollisionCheck()": "made by the Inbox for its table",
    "CollisionCheck.check": "run by the claim on its checked connection",
    "CollisionCheck.found": "run by the claim on its checked connection",
    "Consumers()": "made by the Inbox and the InboxStore for their table",
    "Consumers.of": "made by the Inbox and the InboxStore for their table",
    "PurgeTarget()": "made by purge_target_of (its case) for a checked table",
    "PurgeTarget.clock": "run by the purge on its checked connection",
    "PurgeTarget.expired": "a cut-off time; builds a clause",
    "ShardInbox()": "made by ShardedInbox for each shard",
    # values: ids, names, keys, durations, digests
    **{
        name: "ids, names, keys, durations or payloads"
        for name in (
            "ShardedInbox.is_processed",
            "ShardedInbox.claimed_elsewhere",
            "ShardedInbox.session_factory",
            "ShardedInbox.shard_for",
            "ShardedInbox.shard_identity",
            "ShardedInbox.shard_inbox",
            "ShardedInbox.target",
            "AsyncShardedInbox.session_factory",
            "AsyncShardedInbox.shard_for",
            "sa_inbox.sharding.rendezvous_shard",
            "sa_inbox.sharding.shard_key_digest",
            "sa_inbox.collision.canonical_json",
            "sa_inbox.collision.check_mode",
            "sa_inbox.collision.payload_hash_of_row",
            "sa_inbox.collision.store_digests",
            "sa_inbox.consumers.consumer_name_length_for",
            "sa_inbox.consumers.consumers_flag",
            "sa_inbox.consumers.handler_name",
            "sa_inbox.retention.partitions.partition_range",
            "sa_inbox.retention.resolve_window",
            "sa_inbox.runner.check_max_attempts",
            "sa_inbox.stats.stats_warnings",
            "sa_inbox.store.utc_now",
        )
    },
    "sa_inbox.consumers.consumers_for": "made by the Inbox and the InboxStore for their table",
    "sa_inbox.consumers.shared_consumers_table": "the consumers table of a checked table",
    "sa_inbox.consumers.stands_for": "sa-inbox's own wrappers of a handler",
    "sa_inbox.consumers.owned_as": "a name and a handler, of either half (kept as it is)",
    "sa_inbox.consumers.owner_name": "a handler's name; sends nothing",
    "sa_inbox.retention.database_now": "a PurgeTarget clock, run on the purge's connection",
    "sa_inbox.retention.python_utc_now": "a PurgeTarget clock, run on the purge's connection",
    "sa_inbox.retention.store_purge_targets": (
        "the store's two tables (an AsyncInboxStore's are its store's); the purge checks the bind"
    ),
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
            "faststream.delivery_of",
            "celery.delivery_of",
        )
    },
}


def _exported(cls: type) -> bool:
    return any(getattr(module, cls.__name__, None) is cls for module in public_modules())


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
    """``module.function``, ``Class()`` and ``Class.method`` for each public name (each
    object once, named after the shallowest public module exporting it)."""
    seen: set[int] = set()
    for module in public_modules():
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, type):
                if issubclass(value, BaseException | enum.Enum):
                    continue
                if not value.__module__.startswith("sa_inbox"):
                    continue  # a type alias of a builtin (WarningCode = str)
                yield f"{value.__name__}()"
                for attribute, member in _own_members(value):
                    if attribute.startswith("_"):
                        continue
                    if inspect.isfunction(member) or isinstance(member, classmethod):
                        yield f"{value.__name__}.{attribute}"
            elif inspect.isfunction(value):  # not a type alias (Handler = Callable[...])
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
    stale = sorted(set(TAKES_NO_OBJECT) - entries)
    assert not stale, f"exemptions that name no public entry point: {stale}"
    assert not set(TAKES_NO_OBJECT) & ENTRY_POINTS, "an exempt entry point has a case"
