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
    "sa_inbox.brokers.options": "exported by sa_inbox.brokers",
    "sa_inbox.brokers.keys": "the key header's rules, run by each adapter",
    "sa_inbox.brokers.reconnect": "the reconnect loop of each adapter",
    "sa_inbox.brokers.startup": "each adapter's checks when made and at start",
    "sa_inbox.steps": "the step driver the adapters and the outage gate run on their own clients",
    "sa_inbox.brokers.rabbitmq.": "exported by sa_inbox.brokers.rabbitmq",
    "sa_inbox.brokers.redis.": "exported by sa_inbox.brokers.redis",
    "sa_inbox.brokers.nats.": "exported by sa_inbox.brokers.nats",
    "sa_inbox.brokers.dead_letters.": "exported by sa_inbox.brokers.dead_letters",
    "sa_inbox.brokers.kafka.": (
        "the Kafka consumers' parts (records, tables, polls, offsets, attempts), run on "
        "what the consumer checked when made; the public ones exported by sa_inbox.brokers.kafka"
    ),
    "sa_inbox.brokers.sqs.": (
        "the SQS consumers' parts (queue settings, receives, settlements, held messages), "
        "run on what the consumer checked when made; the public ones exported by "
        "sa_inbox.brokers.sqs"
    ),
    # the console: create_app checks its engine; the queries, routes and security run on it
    "sa_inbox.console.": (
        "the console's app, queries, routes and security, run on the engine create_app "
        "checked; the public ones exported by sa_inbox.console"
    ),
    # the exactly-once kit: check_exactly_once checks what it is given, then runs its parts
    "sa_inbox.testing.adapters": "the adapters' profiles, read by check_exactly_once",
    "sa_inbox.testing.checks": "check_exactly_once's checks, run on what it checked",
    "sa_inbox.testing.child": "check_exactly_once's child process, given what it checked",
    "sa_inbox.testing.kit": "check_exactly_once, exported by sa_inbox.testing",
    "sa_inbox.testing.memory": "MemoryStore, exported by sa_inbox.testing",
    "sa_inbox.testing.messages": (
        "Message and BrokerDelivery, exported by sa_inbox.testing; the made-up broker "
        "fields of check_exactly_once's deliveries"
    ),
    "sa_inbox.testing.modes": "the failure modes, exported by sa_inbox.testing",
    "sa_inbox.testing.observe": "the statement watch check_exactly_once installs",
    "sa_inbox.testing.outbound": "the recorder of the outbound= calls check_exactly_once makes",
    "sa_inbox.testing.proxy": "DatabaseProxy, exported by sa_inbox.testing",
    "sa_inbox.testing.report": "the report, exported by sa_inbox.testing",
    "sa_inbox.testing.run": "check_exactly_once's deliveries, run on what it checked",
    "sa_inbox.testing.targets": "check_exactly_once's targets, made of what it checked",
    "sa_inbox.testing.inject": "a command line (python -m sa_inbox.testing.inject)",
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


#: The events of the hooks, as entry points (``.claimed``...).
_HOOK_EVENTS = (".claimed", ".handled", ".retried", ".purged", ".dead_lettered", ".database_outage")

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
    "sa_inbox.brokers.stop_on_signals": (
        "a callable and signal numbers, checked (tests/unit/test_stop_on_signals.py)"
    ),
    "AsyncOutboxRelay.run_once": "the relay's own engine and publisher, checked when made",
    "AsyncOutboxRelay.run": "limits",
    "AsyncOutboxRelay.stop": "nothing",
    "Outbox.row": "a message's values; sends nothing",
    "OutboxMessage()": "a message's values",
    "RelayBatch()": "a relay round's counts",
    "sa_inbox.outbox.Publisher()": "a Protocol: the relays check the publisher given to them",
    "sa_inbox.outbox.Publisher.publish": "a Protocol method",
    "sa_inbox.outbox.Publisher.close": "a Protocol method",
    "sa_inbox.idempotency_key": "strings",
    "sa_inbox.runner.is_transient": "an exception and a dialect name",
    "sa_inbox.collision.payload_hash": "a payload",
    "sa_inbox.outbox.uuid7": "a time",
    # the broker adapters: what is not a consumer takes a broker's message, channel or
    # client, or values; the consumers' objects are checked when they are made
    "Delivery()": "a delivery's values",
    "DeliveryOptions()": "values and callables, checked when made (test_delivery_options.py)",
    "DeliveryOptions.limit": "a default count",
    "DeliveryOptions.key": "a default name",
    "DeliveryOptions.delay": "a default delay function",
    "Settlement()": "a settlement's values",
    "Settler()": "a Protocol: process() is given the adapter's settler",
    "Settler.ack": "a Protocol method",
    "Settler.retry": "a Protocol method",
    "Settler.dead_letter": "a Protocol method",
    "StopFlag()": "a Protocol",
    "StopFlag.is_set": "a Protocol method",
    "StreamSettings()": "values, validated by StreamSettings",
    "sa_inbox.brokers.rabbitmq.Consumer.stop": "nothing",
    "sa_inbox.brokers.rabbitmq.AsyncConsumer.stop": "nothing",
    "sa_inbox.brokers.nats.AsyncConsumer.stop": "nothing",
    "sa_inbox.brokers.redis.Consumer.poll": (
        "a flag; the consumer's objects were checked when it was made"
    ),
    "sa_inbox.brokers.redis.Consumer.ensure_group": "the consumer's own client",
    "sa_inbox.brokers.redis.AsyncConsumer.poll": (
        "a flag; the consumer's objects were checked when made"
    ),
    "sa_inbox.brokers.redis.AsyncConsumer.ensure_group": "the consumer's own client",
    **{
        f"{settler}{member}": "a broker message and channel, settled as the consumer decides"
        for settler in ("PikaSettler", "AioPikaSettler", "JetStreamSettler")
        for member in ("()", ".ack", ".retry", ".give_back", ".dead_letter")
    },
    **{
        f"{publisher}{member}": "a broker URL or client; the relays check the publisher"
        for publisher, members in (
            (
                "sa_inbox.brokers.rabbitmq.Publisher",
                ("()", ".connect", ".publish", ".close", ".is_unavailable"),
            ),
            (
                "sa_inbox.brokers.rabbitmq.AsyncPublisher",
                ("()", ".connect", ".publish", ".publish_many", ".close", ".is_unavailable"),
            ),
            (
                "sa_inbox.brokers.redis.Publisher",
                ("()", ".fields", ".publish", ".close", ".is_unavailable"),
            ),
            (
                "sa_inbox.brokers.nats.AsyncPublisher",
                ("()", ".headers", ".publish", ".close", ".is_unavailable"),
            ),
            ("sa_inbox.brokers.nats.Publisher", ("()", ".publish", ".close", ".is_unavailable")),
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
            "DailyGrowth()",
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
        for hooks, members in (
            ("InboxHooks", (*_HOOK_EVENTS, ".span")),
            ("MultiHooks", (*_HOOK_EVENTS, ".span")),
            ("PrometheusHooks", _HOOK_EVENTS),
            ("OpenTelemetryHooks", (*_HOOK_EVENTS, ".span", ".observe")),
        )
        for member in ("()", *members)
    },
    "InboxCollector.collect": "the collector's own Sampler, checked when it was made",
    "InboxCollector.describe": "takes nothing: the metric families' names, from names.METRICS",
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
    "sa_inbox.stats.DeadLetter()": "a dead row's values, as sa_inbox.stats.dead_letters read it",
    "sa_inbox.brokers.dead_letters.DeadLetter()": "a dead letter's values, as a reader found them",
    "sa_inbox.brokers.dead_letters.DeadLetter.as_dict": "nothing",
    "ReplayResult()": "a replay's counts",
    "ReplayResult.as_dict": "nothing",
    # Kafka and SQS: the consumers' objects are checked when they are made (their cases);
    # what else they export takes values, or is the consumer's own
    **{
        f"sa_inbox.brokers.{consumer}.{method}": reason
        for consumer, methods in (
            ("kafka.Consumer", ("stop",)),
            ("kafka.AsyncConsumer", ("stop",)),
            ("sqs.Consumer", ("poll", "queue", "close")),
            ("sqs.AsyncConsumer", ("poll", "queue", "aclose")),
        )
        for method in methods
        for reason in (
            {
                "poll": "nothing; the consumer's objects were checked when it was made",
                "queue": "nothing; the consumer's own client, checked when it was made",
            }.get(method, "nothing"),
        )
    },
    **{
        f"sa_inbox.brokers.kafka.{publisher}{member}": (
            "a broker address and values (outbox messages); the relays check the publisher"
        )
        for publisher, members in (
            (
                "Publisher",
                (
                    "()",
                    ".publish",
                    ".publish_many",
                    ".close",
                    ".is_unavailable",
                    ".key_of",
                    ".headers",
                ),
            ),
            ("AsyncPublisher", ("()", ".publish", ".publish_many", ".close")),
        )
        for member in members
    },
    **{
        f"sa_inbox.brokers.sqs.{member}": "outbox messages; the client was checked when made"
        for member in (
            "Publisher.publish",
            "Publisher.close",
            "AsyncPublisher.publish",
            "AsyncPublisher.close",
        )
    },
    "KafkaTables()": "made by kafka_tables (its case) for a checked Inbox",
    "Record()": "a Kafka record's values, as the consumer read it",
    "Record.counted": "a delivery count",
    "sa_inbox.brokers.kafka.check_key_header": "a header name",
    "sa_inbox.brokers.kafka.dead_letter_headers": "a Record, a reason and a detail: values",
    "sa_inbox.brokers.kafka.to_delivery": "a record's topic, partition, offset, value and headers",
    "QueueSettings()": "values, validated by QueueSettings",
    "sa_inbox.brokers.sqs.client_options": "an sqs:// URL",
    "sa_inbox.brokers.sqs.to_delivery": "a received message's values and names",
    # the console's values: credentials, hosts; Console is made by create_app (its cases)
    "Console()": "made by create_app (its cases) from the engine it checked",
    "Credentials()": "strings, validated by Credentials",
    "Credentials.from_environment": "an environment mapping of strings",
    "Credentials.check_bearer": "a header's string",
    "Credentials.check_password": "strings",
    "Credentials.check_login": "strings",
    "sa_inbox.console.check_bind": "a host and a flag",
    "sa_inbox.console.is_loopback": "a host",
    # the hooks' values and the relay's metrics
    "Name()": "a metric's name, kind and description",
    "sa_inbox.hooks.names.reference": "nothing; the names' reference text",
    "RelayMetrics()": "a prometheus_client registry and a name prefix",
    "RelayMetrics.observe": "a RelayBatch a relay returned",
    "sa_inbox.runner.retry_options": "an entry's name, counts and a Backoff",
    "DeadLetterFilter()": "the filters' strings, times and an id",
    # the exactly-once kit: values, messages and faults armed in this process
    "Message()": "a message's values",
    "BrokerDelivery()": "a delivery's made-up broker values",
    "BrokerDelivery.to_delivery": "a key header's name",
    "FailureMode()": "a failure mode's texts",
    "Finding()": "a value sa-inbox returns",
    "Finding.render": "nothing",
    **{
        f"Report{member}": "a value sa-inbox returns"
        for member in ("()", ".add", ".skip", ".note", ".modes", ".render")
    },
    **{
        f"DatabaseProxy{member}": "a database URL, a host, a port and seconds"
        for member in ("()", ".start", ".close", ".cut", ".restore", ".outage", ".down")
    },
    "HeldClaims()": "made by claims_held_together",
    "HeldClaims.arrive": "nothing: called by the claim it holds",
    "sa_inbox.testing.faults.broker_fault": "a broker URL, a fault's name and its values",
    "sa_inbox.testing.faults.register_broker_fault": "a URL scheme, a name and the fault function",
    "sa_inbox.testing.faults.claims_held_together": "a count and seconds",
    "sa_inbox.testing.faults.clear_faults": "nothing",
    "sa_inbox.testing.faults.crash_after_commit": "a count",
    "sa_inbox.testing.faults.stall_before_commit": "seconds and a count",
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


def _shared_class_names(modules: list[ModuleType]) -> set[str]:
    """Names that several public classes bear (``Consumer`` of Kafka and of SQS): each is
    known by its module, ``sa_inbox.brokers.kafka.Consumer()``, so a case of one cannot
    stand for the other."""
    classes: dict[str, set[int]] = {}
    for module in modules:
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if isinstance(value, type):
                classes.setdefault(value.__name__, set()).add(id(value))
    return {name for name, found in classes.items() if len(found) > 1}


def public_entry_points() -> Iterator[str]:
    """``module.function``, ``Class()`` and ``Class.method`` for each public name (each
    object once, named after the shallowest public module exporting it; a class name
    several classes bear, after its module too: ``module.Class()``)."""
    seen: set[int] = set()
    modules = public_modules()
    shared = _shared_class_names(modules)
    for module in modules:
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
                known = value.__name__
                if known in shared:
                    known = f"{module.__name__}.{known}"
                yield f"{known}()"
                for attribute, member in _own_members(value):
                    if attribute.startswith("_"):
                        continue
                    if inspect.isfunction(member) or isinstance(member, classmethod):
                        yield f"{known}.{attribute}"
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
