"""The Kafka side of :class:`sa_inbox.brokers.faststream.InboxMiddleware`
(``InboxMiddleware(..., kafka=True)`` on a FastStream ``KafkaBroker``).

Kafka keeps no delivery count, so the middleware counts failed attempts as this adapter's
consumers do: in ``inbox_kafka_attempts`` (:func:`~sa_inbox.brokers.kafka.kafka_tables`),
one row per ``(consumer_name, message_id)`` that failed at least once, through the same
statements (``sa_inbox.brokers.kafka.state.Attempts``). What differs is when they
run: FastStream hands the middleware one record at a time, so

- the record's failed attempts are read before its claim (one ``SELECT`` in a short
  transaction of its own; its delivery count is that plus one);
- a processed record's row is deleted in the claim's transaction;
- a failed attempt is written in a transaction of its own, before the record is sought
  back (retried) or dead-lettered.

A dead letter is the adapter's (:func:`~sa_inbox.brokers.kafka.dead_letter_headers`, the
topic ``<topic>.dead`` unless ``options.dead_letter`` names one), published with FastStream's
own producer (``KafkaBroker.publish``, which awaits the broker's acknowledgement).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...claim import Inbox
from ...exc import ConfigurationError, DatabaseUnavailable
from ...outage import OutageGate, Verdict, database_of, is_unavailable, probe_sessions_async
from ...runner import new_session
from ..delivery import DeadLetterReason
from ..process import _refuse_unkeyed
from ..startup import Readiness
from .core import DEAD_LETTER_SUFFIX, KafkaReadiness, dead_letter_headers
from .records import Record, check_key_header, make_record
from .schema import kafka_tables
from .state import Attempts

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

__all__ = ["KafkaSide"]


class KafkaSide:
    """What :class:`~sa_inbox.brokers.faststream.InboxMiddleware` needs for Kafka records.

    :param inbox: the middleware's inbox; its MetaData gets the adapter's tables.
    :param consumer_name: the consumer whose attempts are counted.
    :param key_header: the middleware's ``options.key_source`` (a record coordinate's name
        is refused: :func:`~sa_inbox.brokers.kafka.check_key_header`).
    :param dead_letter_topic: the middleware's ``options.dead_letter``: where dead letters
        go, or None: ``<topic>.dead``.
    :raises InvalidArgument: for such a key header.
    """

    def __init__(
        self,
        inbox: Inbox,
        consumer_name: str,
        key_header: str,
        dead_letter_topic: str | None,
        *,
        entry: str,
    ) -> None:
        self.key_header = check_key_header(key_header, entry=entry, what="options.key_source")
        self.dead_letter_topic = dead_letter_topic
        self.inbox = inbox
        self.consumer_name = consumer_name
        self.tables = kafka_tables(inbox)
        self.attempts = Attempts(self.tables, consumer_name)

    def readiness(self, readiness: Readiness) -> KafkaReadiness:
        """``readiness`` checking the attempts table too."""
        return KafkaReadiness(**vars(readiness), tables=(self.tables.attempts,))

    def record_of(self, raw: Any) -> Record:
        """The :class:`~sa_inbox.brokers.kafka.Record` of aiokafka's ``ConsumerRecord``
        (the key read as the adapter reads it: the last header of that name)."""
        return make_record(
            raw.topic,
            raw.partition,
            raw.offset,
            raw.value,
            raw.key,
            raw.headers,
            key_header=self.key_header,
        )

    def dead_letter_topic_of(self, record: Record) -> str:
        return self.dead_letter_topic or f"{record.topic}{DEAD_LETTER_SUFFIX}"

    # -- the attempts table ------------------------------------------------------------

    async def counted(
        self,
        record: Record,
        session_factory: Callable[[], AsyncSession],
        gate: OutageGate,
    ) -> Record:
        """``record`` with its delivery count: its failed attempts recorded, plus one. A
        record without a valid key is returned as it is (it is dead-lettered unread).

        While the database cannot be reached the read waits on ``gate``.

        :raises DatabaseUnavailable: if the consumer was stopped meanwhile.
        """
        key = record.delivery.message_id
        rejected = _refuse_unkeyed(record.delivery, self.inbox, self.consumer_name, 1)
        if key is None or rejected is not None:
            return record

        def read() -> int:
            with new_session(_sync(session_factory)) as session, session.begin():
                return self.attempts.read(session, [key]).get(key, 0)

        stored = await _riding_out(read, session_factory, gate)
        return record.counted(stored + 1) if stored else record

    async def clear(self, session: AsyncSession, record: Record) -> None:
        """Forget the attempts of ``record``, processed in ``session``'s transaction."""
        key = record.delivery.message_id
        if key is not None and record.delivery.delivery_count > 1:
            await session.run_sync(lambda sync: self.attempts.clear(sync, [key]))

    async def failed(
        self, record: Record, error: str, session_factory: Callable[[], AsyncSession]
    ) -> None:
        """Record one failed attempt of ``record`` (its delivery count), in a transaction
        of its own."""
        count = record.delivery.delivery_count
        await self._write(
            record, session_factory, lambda session, key: self.attempts.record(
                session, key, count, error
            )
        )  # fmt: skip

    async def forget(self, record: Record, session_factory: Callable[[], AsyncSession]) -> None:
        """Forget the attempts of ``record``, dead-lettered (its dead letter carries them: a
        replay starts at delivery 1), in a transaction of its own."""
        await self._write(
            record, session_factory, lambda session, key: self.attempts.clear(session, [key])
        )

    async def _write(
        self,
        record: Record,
        session_factory: Callable[[], AsyncSession],
        write: Callable[[Session, str], None],
    ) -> None:
        key = record.delivery.message_id
        if key is None:
            return

        def run() -> None:
            with new_session(_sync(session_factory)) as session, session.begin():
                write(session, key)

        from ...asyncio._bridge import in_greenlet

        await in_greenlet(run)

    # -- the dead-letter topic ---------------------------------------------------------

    async def publish_dead_letter(
        self, broker: Any, record: Record, reason: DeadLetterReason, detail: str
    ) -> None:
        """Publish ``record``'s dead letter through FastStream's ``KafkaBroker`` (its value,
        its Kafka key, the adapter's headers), awaiting the broker's acknowledgement.

        :raises ConfigurationError: if no ``KafkaBroker`` is in FastStream's context.
        """
        if broker is None or not callable(getattr(broker, "publish", None)):
            raise ConfigurationError(
                "InboxMiddleware(kafka=True) found no KafkaBroker in FastStream's context "
                "(Context('broker')) to publish the dead letter with"
            )
        headers = {
            name: value.decode("utf-8", "replace") if isinstance(value, bytes) else value or ""
            for name, value in dead_letter_headers(record, reason, detail)
        }
        await broker.publish(
            record.value,
            self.dead_letter_topic_of(record),
            key=record.key,
            headers=headers,
        )


def _sync(session_factory: Callable[[], AsyncSession]) -> Callable[[], Any]:
    from ...asyncio._bridge import sync_session_factory

    return sync_session_factory(session_factory)


async def _riding_out(
    read: Callable[[], int], session_factory: Callable[[], AsyncSession], gate: OutageGate
) -> int:
    """``read()`` in a greenlet; while the database cannot be reached, the gate's probe and
    back-off (as :func:`~sa_inbox.brokers.process_async` rides out an outage)."""
    from ...asyncio._bridge import in_greenlet

    if gate.database is None:
        gate.database = database_of(session_factory)
    probe = probe_sessions_async(session_factory)
    while True:
        try:
            return await in_greenlet(read)
        except ConfigurationError:
            raise
        except Exception as exc:
            if not is_unavailable(exc):
                raise
            if await gate.wait_async(exc, probe) is Verdict.STOPPED:
                raise DatabaseUnavailable(
                    "stopped while the database could not be reached; the record is left unsettled"
                ) from exc
