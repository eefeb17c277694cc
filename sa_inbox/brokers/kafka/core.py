"""What the sync and asyncio Kafka consumers share: the options, the start-up check, the
keyless records, one poll's settlement and the offsets it lets the consumer commit.

The clients differ (confluent-kafka's ``Consumer`` on a thread, aiokafka's
``AIOKafkaConsumer`` on an event loop); everything between the fetched records and the
offsets to commit is here, in synchronous code (the asyncio consumer runs it in a
greenlet): :meth:`ConsumerCore.settle` takes one poll's :class:`~.records.Record` list and
returns a :class:`Settled` (the settlements, each partition's next offset, the partitions
to seek back to a record to retry).

**Offsets.** A partition's offset is committed only after the poll's database transaction
committed, once per poll and partition, as a contiguous watermark: past every record of the
poll, never past a record to retry (its partition is sought back to it, so it is fetched
again with the records behind it, which are then duplicates) nor past a keyless record held
until the adapter knows whether the run of them is the producer's or the consumer's (see
:mod:`sa_inbox.brokers.keys`). Commits are made only for partitions still assigned under
the assignment the records were fetched in (:class:`Assignment`): a rebalance in between
leaves their progress to their new owner, who fetches them again (duplicates).
"""

from __future__ import annotations

import abc
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ...claim import Inbox
from ...exc import InvalidArgument, MissingKeyHeader
from ...readiness import check_ready, check_ready_async
from ...validation import positive_int, positive_seconds, shown
from ..delivery import DeadLetterReason, Delivery, Settlement
from ..options import DeliveryOptions, options_of
from ..process import _detail, _refuse_unkeyed, _reporting
from ..process import _settled as _log_settled
from ..reconnect import Reconnects
from ..startup import Readiness, check_consumer, default_name
from .poll import PollRunner, next_offsets
from .records import DEFAULT_KEY_HEADER, Record, check_key_header
from .schema import KafkaTables, kafka_tables
from .state import Attempts, Offsets

__all__ = [
    "DEAD_LETTER_DETAIL",
    "DEAD_LETTER_MESSAGE_ID",
    "DEAD_LETTER_OFFSET",
    "DEAD_LETTER_PARTITION",
    "DEAD_LETTER_REASON",
    "DEAD_LETTER_SUFFIX",
    "DEAD_LETTER_TOPIC",
    "DEFAULT_MAX_RECORDS",
    "DEFAULT_POLL_TIMEOUT",
    "OFFSETS",
    "Assignment",
    "ConsumerCore",
    "KafkaReadiness",
    "Settled",
    "dead_letter_headers",
]

logger = logging.getLogger("sa_inbox.brokers.kafka")

Position = tuple[str, int]

#: Records fetched per poll at most (one transaction each).
DEFAULT_MAX_RECORDS = 500
#: Seconds one fetch waits for records (a stop is seen within it).
DEFAULT_POLL_TIMEOUT = 1.0
#: Where the group's offsets are kept: ``"kafka"`` (committed to the group coordinator
#: after the database commit) or ``"database"`` (stored in the claim's transaction too, and
#: sought to on assignment).
OFFSETS = ("kafka", "database")
#: Why a Kafka consumer refuses ``DeliveryOptions.retry_delay``: a failed record's
#: partition is sought back to it and fetched again at the next poll, and the records
#: behind it wait for it (a partition is one ordered log).
NO_RETRY_DELAY = "a failed record is fetched again at the next poll, in its partition's order"

#: The default dead-letter topic of topic ``t``: ``t`` + this.
DEAD_LETTER_SUFFIX = ".dead"

#: Headers a dead letter carries besides the original's.
DEAD_LETTER_REASON = "sa-inbox-dead-letter-reason"
DEAD_LETTER_DETAIL = "sa-inbox-dead-letter-detail"
DEAD_LETTER_MESSAGE_ID = "sa-inbox-message-id"
DEAD_LETTER_TOPIC = "sa-inbox-topic"
DEAD_LETTER_PARTITION = "sa-inbox-partition"
DEAD_LETTER_OFFSET = "sa-inbox-offset"


def dead_letter_headers(
    record: Record, reason: DeadLetterReason, detail: str
) -> list[tuple[str, str | bytes | None]]:
    """The dead letter's headers: the original's, then the reason, the detail, the
    producer's key (when it had one) and where the record was (topic, partition, offset)."""
    added = {
        DEAD_LETTER_REASON: reason.value,
        DEAD_LETTER_DETAIL: detail,
        DEAD_LETTER_TOPIC: record.topic,
        DEAD_LETTER_PARTITION: str(record.partition),
        DEAD_LETTER_OFFSET: str(record.offset),
    }
    if record.delivery.message_id is not None:
        added[DEAD_LETTER_MESSAGE_ID] = record.delivery.message_id
    kept: list[tuple[str, str | bytes | None]] = [
        (name, value) for name, value in record.headers if name not in added
    ]
    return kept + [(name, value.encode()) for name, value in added.items()]


@dataclass(frozen=True)
class KafkaReadiness(Readiness):
    """The start-up check of :class:`~sa_inbox.brokers.startup.Readiness`, plus the
    adapter's own tables (:mod:`.schema`)."""

    tables: tuple[sa.Table, ...] = ()

    def check(self) -> None:
        super().check()
        check_ready(self.session_factory, self.tables, entry=self.entry)

    async def check_async(self) -> None:
        await super().check_async()
        await check_ready_async(self.session_factory, self.tables, entry=self.entry)


@dataclass
class Assignment:
    """The partitions a consumer owns now, the number of the assignment (each revocation
    and assignment makes a new one) and, with ``offsets="database"``, each owned
    partition's floor: the next offset stored in the database when it was assigned.

    **Floors.** Every record below a partition's floor was processed and its offset stored
    in the same transaction, so it never reaches the claim again: :meth:`admit` drops a
    partition's fetched records that start below its floor and has the consumer seek it to
    the floor. The seek on assignment alone does not promise that: aiokafka fetches a newly
    assigned partition from the group's committed offset (or resets it) while its
    ``on_partitions_assigned`` listener still awaits the database, and records fetched
    before the listener's seek may already be in the consumer's hands.
    """

    owned: set[Position] = field(default_factory=set)
    epoch: int = 0
    floors: dict[Position, int] = field(default_factory=dict)

    def assigned(
        self, positions: Iterable[Position], floors: Mapping[Position, int] | None = None
    ) -> None:
        """``positions`` are now owned; ``floors``: the stored next offsets of those that
        have one (``offsets="database"``)."""
        positions = set(positions)
        self.owned |= positions
        for position in positions:
            self.floors.pop(position, None)
        self.floors.update({p: o for p, o in (floors or {}).items() if p in positions})
        self.epoch += 1

    def revoked(self, positions: Iterable[Position]) -> None:
        positions = set(positions)
        self.owned -= positions
        for position in positions:
            self.floors.pop(position, None)
        self.epoch += 1

    def admit(self, records: Sequence[Record]) -> tuple[list[Record], dict[Position, int]]:
        """The fetched ``records`` that may be settled, and the partitions to seek.

        A record of a partition not owned is dropped (its owner fetches it). A partition
        whose records start below its floor has them all dropped (those at or past the floor
        too: they come again after the seek, in order) and is to be sought to its floor.
        """
        below = {
            r.position
            for r in records
            if r.position in self.floors and r.offset < self.floors[r.position]
        }
        admitted = [r for r in records if r.position in self.owned and r.position not in below]
        return admitted, {p: self.floors[p] for p in sorted(below) if p in self.owned}

    def committable(self, epoch: int, offsets: Mapping[Position, int]) -> dict[Position, int]:
        """The offsets of ``offsets`` that may be committed: none if the assignment changed
        since ``epoch`` (when the records were fetched), else those of partitions owned."""
        if epoch != self.epoch:
            return {}
        return {p: o for p, o in offsets.items() if p in self.owned}


@dataclass
class Settled:
    """One poll's outcome for the consumer's edge.

    :param settlements: each record's settlement (reported already).
    :param commit: partition -> next offset, to commit to the group.
    :param seek: partition -> offset to fetch from again (a record to retry, or the first
        keyless record given back).
    """

    settlements: list[Settlement] = field(default_factory=list)
    commit: dict[Position, int] = field(default_factory=dict)
    seek: dict[Position, int] = field(default_factory=dict)


@dataclass
class _Keyless:
    """The keyless records held across polls (:mod:`sa_inbox.brokers.keys`'s rule, on
    Kafka: a held record's partition is committed up to it only)."""

    limit: int | None
    held: list[Record] = field(default_factory=list)

    def first_held(self) -> dict[Position, int]:
        firsts: dict[Position, int] = {}
        for record in self.held:
            firsts.setdefault(record.position, record.offset)
        return firsts

    def drop(self, positions: Iterable[Position]) -> None:
        lost = set(positions)
        self.held = [r for r in self.held if r.position not in lost]


SessionT = TypeVar("SessionT")


class ConsumerCore(abc.ABC, Generic[SessionT]):
    """The options and the poll settlement of one Kafka consumer (see the module).

    The parameters are those of :class:`~sa_inbox.brokers.kafka.AsyncConsumer` and
    :class:`~sa_inbox.brokers.kafka.Consumer`; ``asynchronous`` says which, and each
    consumer makes its client's options (:meth:`_client_configs`) and state
    (:meth:`_client_state`).

    :raises ConfigurationError: as each consumer documents.
    """

    asynchronous = False

    def __init__(
        self,
        topics: str | Sequence[str],
        *,
        bootstrap_servers: str,
        group_id: str,
        session_factory: Callable[[], SessionT],
        inbox: Inbox | Any,
        handler: Callable[[SessionT, Delivery], Any],
        consumer_name: str | None = None,
        offsets: Literal["kafka", "database"] = "kafka",
        max_records: int = DEFAULT_MAX_RECORDS,
        poll_timeout: float = DEFAULT_POLL_TIMEOUT,
        config: Mapping[str, Any] | None = None,
        producer_config: Mapping[str, Any] | None = None,
        options: DeliveryOptions | None = None,
    ) -> None:
        entry = f"{type(self).__name__}()"
        self.entry = entry
        shared = options_of(options, entry, refused=[("retry_delay", NO_RETRY_DELAY)])
        max_deliveries = shared.limit()
        dead_letter_topic = shared.dead_letter
        self.topics = _topics(topics, entry)
        if not isinstance(group_id, str) or not group_id:
            raise InvalidArgument(f"{entry}: group_id must be a non-empty string")
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers:
            raise InvalidArgument(f"{entry}: bootstrap_servers must be 'host:port'")
        self.bootstrap_servers = bootstrap_servers
        self.group_id = group_id
        self.consumer_name = default_name(consumer_name, group_id)
        readiness = check_consumer(
            entry,
            session_factory=session_factory,
            inbox=inbox,
            handler=handler,
            consumer_name=self.consumer_name,
            max_deliveries=max_deliveries,
            asynchronous=self.asynchronous,
        )
        self.key_header = check_key_header(
            shared.key(DEFAULT_KEY_HEADER), entry=entry, what="options.key_source"
        )
        if offsets not in OFFSETS:
            raise InvalidArgument(f"{entry}: offsets must be one of {OFFSETS}, not {offsets!r}")
        if dead_letter_topic is not None and (
            not isinstance(dead_letter_topic, str) or dead_letter_topic in self.topics
        ):
            raise InvalidArgument(
                f"{entry}: options.dead_letter must be a topic name other than the consumed "
                f"ones, not {dead_letter_topic!r}"
            )
        if dead_letter_topic is not None:
            _check_topic(dead_letter_topic, "options.dead_letter", entry)
        self.dead_letter_topic = dead_letter_topic
        self.max_records = positive_int(max_records, "max_records", InvalidArgument)
        self.poll_timeout = positive_seconds(poll_timeout, "poll_timeout", InvalidArgument)
        self.max_deliveries = max_deliveries
        self.inbox: Inbox = readiness.inbox
        self.tables: KafkaTables = kafka_tables(self.inbox)
        self.offsets_in_database = offsets == "database"
        used = [self.tables.attempts, *([self.tables.offsets] if self.offsets_in_database else [])]
        self.readiness = KafkaReadiness(**vars(readiness), tables=tuple(used))
        self.session_factory = session_factory
        self.handler = handler
        self.on_settled = _reporting(self.inbox, self.consumer_name, shared.on_settled)
        self.attempts = Attempts(self.tables, self.consumer_name)
        self.offsets = (
            Offsets(self.tables, self.consumer_name) if self.offsets_in_database else None
        )
        self.assignment = Assignment()
        self._keyless = _Keyless(shared.max_keyless)
        #: The records dead-lettered unread behind a record to retry: their partition is
        #: sought back before them, so they are fetched again, and not published twice.
        self._dead_lettered: set[tuple[Position, int]] = set()
        self.config, self.producer_config = self._client_configs(
            bootstrap_servers, dict(config or {}), dict(producer_config or {})
        )
        self.reconnects = Reconnects(f"Kafka consumer {group_id} of {', '.join(self.topics)}")
        self._extra_stop: Any = None
        self._client_state()

    @abc.abstractmethod
    def _client_configs(
        self, bootstrap_servers: str, config: dict[str, Any], producer_config: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The consumer's and the dead-letter producer's client options, from the user's.

        :raises InvalidArgument: for an option the consumer sets itself.
        """

    @abc.abstractmethod
    def _client_state(self) -> None:
        """Set the client's attributes (no connection is made here)."""

    # -- names -----------------------------------------------------------------------

    def dead_letter_topic_of(self, record: Record) -> str:
        """Where ``record``'s dead letter goes: ``dead_letter_topic``, or
        ``<topic>.dead``."""
        return self.dead_letter_topic or f"{record.topic}{DEAD_LETTER_SUFFIX}"

    # -- one poll ----------------------------------------------------------------------

    def settle(self, records: Sequence[Record], runner: PollRunner) -> Settled:
        """Settle one poll (the records of partitions owned when they were fetched), in
        fetch order; an empty poll settles the keyless records held (a short run).

        :raises MissingKeyHeader: when ``max_keyless`` keyless records come in a row: none
            of them is dead-lettered, nothing of the poll is committed, and their
            partitions are to be sought back (the consumer stops; a consumer started again
            fetches them from the last committed offsets).
        :raises ConfigurationError, DatabaseUnavailable: from the poll's transaction.
        """
        streak = self._keyless
        flushed: list[Record] = []
        keyed: list[Record] = []
        settled: list[Settlement] = []
        unread: list[Record] = []  # dead-lettered without a transaction
        for record in records:
            delivery = record.delivery
            if streak.limit is not None and delivery.message_id is None:
                streak.held.append(record)
                if len(streak.held) >= streak.limit:
                    self._give_back()
                continue
            rejected = _refuse_unkeyed(
                delivery, self.inbox, self.consumer_name, self.max_deliveries
            )
            if streak.held:  # a keyed record after them: a short run, the producer's
                flushed += streak.held
                streak.held = []
            if rejected is None:
                keyed.append(record)
            else:
                unread.append(record)
                settled += self._dead_letter_now(record, rejected, runner)
        if not records and streak.held:
            flushed, streak.held = streak.held, []
        for record in flushed:
            rejected = _refuse_unkeyed(
                record.delivery, self.inbox, self.consumer_name, self.max_deliveries
            )
            assert rejected is not None  # keyless
            unread.append(record)
            settled += self._dead_letter_now(record, rejected, runner)
        everything = [*flushed, *records]
        held = streak.first_held()
        result = runner.run(keyed, everything, held)
        settled += result.settlements()
        for settlement in settled:
            _log_settled(settlement, self.on_settled)
        commit = next_offsets(everything, result.retried, held)
        seek = {r.position: r.offset for r in reversed(result.retried)}
        self._dead_lettered.update(
            (r.position, r.offset)
            for r in unread
            if r.position in seek and r.offset > seek[r.position]
        )
        return Settled(settled, commit, seek)

    def _give_back(self) -> None:
        streak = self._keyless
        error = MissingKeyHeader(
            self.key_header,
            len(streak.held),
            _carried(streak.held),
            _wrong(streak.held, self.key_header),
        )
        streak.held = []
        raise error

    def _dead_letter_now(
        self, record: Record, settlement: Settlement, runner: PollRunner
    ) -> list[Settlement]:
        """Publish ``record``'s dead letter (rule 1: no valid key), awaiting the broker;
        nothing for a record fetched again behind a retry, whose dead letter was published
        (and reported) when it was first fetched."""
        if (record.position, record.offset) in self._dead_lettered:
            self._dead_lettered.discard((record.position, record.offset))
            return []
        assert settlement.reason is not None
        runner.dead_letter(record, settlement.reason, _detail(settlement))
        return [settlement]

    # -- the records' owners -----------------------------------------------------------

    def revoked(self, positions: Iterable[Position]) -> None:
        """Partitions taken away: held keyless records of theirs are dropped (their new
        owner fetches them again); offsets fetched before are no longer committed."""
        positions = set(positions)
        self._keyless.drop(positions)
        self._dead_lettered = {d for d in self._dead_lettered if d[0] not in positions}
        self.assignment.revoked(positions)

    def assigned(
        self, positions: Iterable[Position], floors: Mapping[Position, int] | None = None
    ) -> None:
        """Partitions given; ``floors``: their stored offsets (see :class:`Assignment`)."""
        self.assignment.assigned(positions, floors)

    def admit(self, records: Sequence[Record]) -> tuple[list[Record], dict[Position, int]]:
        """One fetch's records to settle, and the partitions to seek to their floors
        (:meth:`Assignment.admit`); a partition dropped is logged at DEBUG."""
        admitted, seek = self.assignment.admit(records)
        for (topic, partition), offset in seek.items():
            logger.debug(
                "consumer %s: records of %s[%d] before its stored offset %d dropped, sought there",
                self.consumer_name,
                topic,
                partition,
                offset,
                extra={"action": "below_stored_offset"},
            )
        return admitted, seek

    def stored_offsets(
        self, session: Session, positions: Iterable[Position]
    ) -> dict[Position, int]:
        """``offsets="database"``: the stored next offset of each assigned partition that
        has one (the consumer seeks there)."""
        assert self.offsets is not None
        return self.offsets.read(session, set(positions))

    def offsets_unread(self, error: Exception) -> None:
        """Log that the stored offsets could not be read (``error``): the consumer fetches
        from the group's committed offsets instead, behind the database's."""
        logger.warning(
            "consumer %s: stored offsets not read (%s); fetching from the group's "
            "committed offsets (records already processed come again as duplicates)",
            self.consumer_name,
            error,
            extra={"action": "offsets_unread"},
        )


def _carried(records: Sequence[Record]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in records:
        for name in record.delivery.headers:
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def _wrong(records: Sequence[Record], key_header: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in records:
        if record.delivery.key_error is not None:
            counts["bytes"] = counts.get("bytes", 0) + 1
    return counts


#: A legal Kafka topic name: ASCII letters and digits, ``.``, ``_`` and ``-``, at most 249
#: characters (Kafka's ``Topic.validate``; Kafka documentation, "Topic-Level Configs").
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _topics(topics: object, entry: str) -> tuple[str, ...]:
    if isinstance(topics, str):
        names: tuple[object, ...] = (topics,)
    elif isinstance(topics, Iterable):
        names = tuple(topics)
    else:
        names = ()
    if not names or not all(isinstance(n, str) and n for n in names):
        raise InvalidArgument(f"{entry}: topics must be a topic name or a list of them")
    checked = tuple(str(name) for name in names)
    for name in checked:
        _check_topic(name, "topic", entry)
    return checked


def _check_topic(name: str, what: str, entry: str) -> None:
    if not TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidArgument(
            f"{entry}: {what} {shown(name)} is not a Kafka topic name (ASCII letters, digits, "
            "'.', '_' and '-', at most 249 characters)"
        )
