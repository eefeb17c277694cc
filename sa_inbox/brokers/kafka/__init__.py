"""Kafka: consume topics through a consumer group exactly once in effect (extra
``sa-inbox[kafka]``: aiokafka for :class:`AsyncConsumer`, confluent-kafka for
:class:`Consumer` and the outbox publishers).

Each poll is claimed (:meth:`~sa_inbox.Inbox.claim_batch`, one statement) and handled in
one database transaction; the partitions' offsets are committed only after it commits, as
contiguous watermarks that never pass a record to retry; failed attempts are counted in
the database (Kafka keeps no delivery count) and a record past ``max_deliveries`` goes to
the dead-letter topic, so its partition moves on. With ``offsets="database"`` (either
consumer) the offsets are also stored in the claim's own transaction and each assigned
partition starts there: no record below the stored offset is settled. The key is the
producer's header (``message_id`` by default), never the record's topic, partition or
offset.

Producer side: the id in a header, the same on every retry of the publish::

    producer.produce("payments", value=body, key=account_id,
                     headers={"message_id": payment_id})

Consumer side::

    consumer = AsyncConsumer(
        "payments", bootstrap_servers="localhost:9092", group_id="billing",
        session_factory=async_sessionmaker(engine), inbox=inbox, handler=apply,
    )
    await consumer.run()
"""

from __future__ import annotations

from ..._optional import optional_dependencies
from .records import COORDINATES as COORDINATES
from .records import DEFAULT_KEY_HEADER as DEFAULT_KEY_HEADER
from .records import Record as Record
from .records import check_key_header as check_key_header
from .records import to_delivery as to_delivery
from .schema import ATTEMPTS_TABLE as ATTEMPTS_TABLE
from .schema import OFFSETS_TABLE as OFFSETS_TABLE
from .schema import KafkaTables as KafkaTables
from .schema import kafka_tables as kafka_tables

with optional_dependencies(__name__, "kafka", "aiokafka", "confluent_kafka"):
    from .aio import AsyncConsumer as AsyncConsumer
    from .consumer import Consumer as Consumer
    from .core import DEAD_LETTER_DETAIL as DEAD_LETTER_DETAIL
    from .core import DEAD_LETTER_MESSAGE_ID as DEAD_LETTER_MESSAGE_ID
    from .core import DEAD_LETTER_OFFSET as DEAD_LETTER_OFFSET
    from .core import DEAD_LETTER_PARTITION as DEAD_LETTER_PARTITION
    from .core import DEAD_LETTER_REASON as DEAD_LETTER_REASON
    from .core import DEAD_LETTER_SUFFIX as DEAD_LETTER_SUFFIX
    from .core import DEAD_LETTER_TOPIC as DEAD_LETTER_TOPIC
    from .core import DEFAULT_MAX_RECORDS as DEFAULT_MAX_RECORDS
    from .core import DEFAULT_POLL_TIMEOUT as DEFAULT_POLL_TIMEOUT
    from .core import dead_letter_headers as dead_letter_headers
    from .publisher import AsyncPublisher as AsyncPublisher
    from .publisher import Publisher as Publisher

__all__ = [
    "ATTEMPTS_TABLE",
    "COORDINATES",
    "DEAD_LETTER_DETAIL",
    "DEAD_LETTER_MESSAGE_ID",
    "DEAD_LETTER_OFFSET",
    "DEAD_LETTER_PARTITION",
    "DEAD_LETTER_REASON",
    "DEAD_LETTER_SUFFIX",
    "DEAD_LETTER_TOPIC",
    "DEFAULT_KEY_HEADER",
    "DEFAULT_MAX_RECORDS",
    "DEFAULT_POLL_TIMEOUT",
    "OFFSETS_TABLE",
    "AsyncConsumer",
    "AsyncPublisher",
    "Consumer",
    "KafkaTables",
    "Publisher",
    "Record",
    "check_key_header",
    "dead_letter_headers",
    "kafka_tables",
    "to_delivery",
]
