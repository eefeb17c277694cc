"""The tally: what the consumers' settlement logs say happened.

Each consumer process appends one JSON line per settlement (:mod:`.consumer`). A SIGKILL
can cut the last line of a file short: a line that does not parse is skipped and counted
(:attr:`Tally.torn_lines`). A delivery whose consumer was killed before it was settled
leaves no line at all; the broker redelivers it, and that delivery is counted.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..brokers import Disposition

__all__ = ["ACKED", "FINAL", "LogFollower", "Tally", "acked_ids", "read_logs"]

#: The dispositions that settle a delivery for good (acked, or dead-lettered).
FINAL = frozenset(
    d.value for d in (Disposition.PROCESSED, Disposition.DUPLICATE, Disposition.DEAD_LETTERED)
)

#: The dispositions that ack a delivery (the broker will not deliver it again).
ACKED = frozenset(d.value for d in (Disposition.PROCESSED, Disposition.DUPLICATE))


@dataclass
class Tally:
    """Settlements counted from the logs.

    :param deliveries: settled deliveries (every line read).
    :param redeliveries: of those, deliveries with a broker delivery count above 1.
    :param processed: deliveries whose handler committed (:attr:`Disposition.PROCESSED`).
    :param duplicates: deliveries acked as duplicates, handler not run.
    :param retries: deliveries handed back for redelivery after a failure.
    :param dead_letters: ``message_id -> reason`` of each dead-lettered delivery.
    :param processed_ids: how many times each message id was settled as processed.
    :param torn_lines: lines cut short by a kill, skipped.
    :param crashes: crashes the consumers inflicted on themselves, by kind
        (``after_commit``, ``in_handler``: see :mod:`.consumer`).
    """

    deliveries: int = 0
    redeliveries: int = 0
    processed: int = 0
    duplicates: int = 0
    retries: int = 0
    dead_letters: dict[str, str] = field(default_factory=dict)
    processed_ids: Counter[str] = field(default_factory=Counter)
    torn_lines: int = 0
    crashes: Counter[str] = field(default_factory=Counter)

    def add(self, record: dict[str, object]) -> None:
        """Count one settlement record (a parsed log line), or one crash record.

        :raises ValueError: for an unknown disposition.
        """
        if "crash" in record:
            self.crashes[str(record["crash"])] += 1
            return
        disposition = Disposition(record["disposition"])
        message_id = str(record["id"])
        self.deliveries += 1
        count = record.get("delivery_count", 1)
        if isinstance(count, int) and count > 1:
            self.redeliveries += 1
        if disposition is Disposition.PROCESSED:
            self.processed += 1
            self.processed_ids[message_id] += 1
        elif disposition is Disposition.DUPLICATE:
            self.duplicates += 1
        elif disposition is Disposition.RETRY:
            self.retries += 1
        else:
            self.dead_letters[message_id] = str(record.get("reason"))

    def add_lines(self, lines: Iterable[str]) -> None:
        """Count every complete line; a line that does not parse is a torn line."""
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                self.torn_lines += 1
                continue
            self.add(record)


def read_logs(paths: Iterable[Path]) -> Tally:
    """The tally of every settlement log in ``paths`` (a missing file counts as empty)."""
    tally = Tally()
    for path in paths:
        if path.exists():
            with path.open(encoding="utf-8", errors="replace") as lines:
                tally.add_lines(lines)
    return tally


def acked_ids(paths: Iterable[Path]) -> dict[str, float]:
    """Every message id the logs in ``paths`` show acked (:data:`ACKED`), with the time
    (``time.time()``, logged after the ack) of its first ack; torn lines are skipped."""
    acks: dict[str, float] = {}
    for path in paths:
        if not path.exists():
            continue
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if record.get("disposition") in ACKED:
                    message_id, at = str(record["id"]), float(record["t"])
                    acks[message_id] = min(at, acks.get(message_id, at))
    return acks


class LogFollower:
    """Follows the settlement logs of a running chaos run: the complete lines appended since
    the last :meth:`poll`, counted (a torn or unfinished last line waits for its newline).

    :param directory: the directory of the ``consumer-*.jsonl`` logs.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.offsets: dict[Path, int] = {}
        #: Complete lines read so far (settlements and crashes).
        self.lines = 0
        #: Deliveries settled for good so far (acked as processed or duplicate, or
        #: dead-lettered): once it reaches the publishes, every copy may be settled.
        self.final = 0

    def poll(self) -> int:
        """Read what was appended; returns the number of new complete lines."""
        new = 0
        for path in sorted(self.directory.glob("consumer-*.jsonl")):
            offset = self.offsets.get(path, 0)
            with path.open("rb") as log:
                log.seek(offset)
                data = log.read()
            end = data.rfind(b"\n") + 1
            self.offsets[path] = offset + end
            for line in data[:end].splitlines():
                new += 1
                self.lines += 1
                try:
                    disposition = json.loads(line).get("disposition")
                except (json.JSONDecodeError, AttributeError):
                    continue  # a torn line joined by nothing: counted in the final tally
                self.final += disposition in FINAL
        return new
