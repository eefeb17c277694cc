"""The Kafka consumers' admission of fetched records (:class:`~sa_inbox.brokers.kafka.core.
Assignment`): the partitions owned, and with ``offsets="database"`` each one's floor, the
offset stored in the database when it was assigned. No broker, no database: the live
behaviour is in ``tests/backends/brokers/test_kafka.py``."""

from __future__ import annotations

from tests.conftest import importorskip

importorskip("aiokafka", "kafka")

from sa_inbox.brokers.kafka.core import Assignment  # noqa: E402
from sa_inbox.brokers.kafka.records import Record, make_record  # noqa: E402


def fetched(partition: int, *offsets: int, topic: str = "t") -> list[Record]:
    return [
        make_record(topic, partition, o, b"1", None, [], key_header="message_id") for o in offsets
    ]


def where(records: list[Record]) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


def test_records_of_partitions_not_owned_are_dropped_without_a_seek() -> None:
    assignment = Assignment()
    assignment.assigned([("t", 0)])
    admitted, seek = assignment.admit(fetched(0, 0, 1) + fetched(1, 0))
    assert where(admitted) == [(0, 0), (0, 1)] and seek == {}


def test_a_partition_fetched_below_its_floor_is_dropped_whole_and_sought_to_it() -> None:
    """Records before the stored offset never reach the claim; those at or past it in the
    same fetch go too (they come again after the seek, in order: none twice)."""
    assignment = Assignment()
    assignment.assigned([("t", 0), ("t", 1), ("t", 2)], {("t", 0): 5, ("t", 1): 2})
    records = fetched(0, 3, 4, 5, 6) + fetched(1, 2, 3) + fetched(2, 0, 1)
    admitted, seek = assignment.admit(records)
    assert where(admitted) == [(1, 2), (1, 3), (2, 0), (2, 1)], "at the floor, or none stored"
    assert seek == {("t", 0): 5}
    admitted, seek = assignment.admit(fetched(0, 5, 6))
    assert where(admitted) == [(0, 5), (0, 6)] and seek == {}


def test_floors_go_with_their_partitions() -> None:
    """A revoked partition's floor is forgotten; an assignment replaces its partitions'
    floors (a partition assigned again without a stored offset has none)."""
    assignment = Assignment()
    assignment.assigned([("t", 0), ("t", 1)], {("t", 0): 5, ("t", 1): 5})
    assignment.revoked([("t", 0)])
    assert assignment.floors == {("t", 1): 5}
    assert assignment.admit(fetched(0, 0)) == ([], {}), "not owned: dropped, no seek"
    assignment.assigned([("t", 0), ("t", 1)], {("t", 0): 7})
    assert assignment.floors == {("t", 0): 7}
    admitted, seek = assignment.admit(fetched(0, 6) + fetched(1, 0))
    assert where(admitted) == [(1, 0)] and seek == {("t", 0): 7}
