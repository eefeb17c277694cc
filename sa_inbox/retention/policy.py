"""How long processed-message rows must live: the retention window.

Every claim adds a row and nothing else removes it. A row may only go once the broker can no
longer deliver its message again: after the longest redelivery of an unacked message
(``max_redelivery``) plus the longest replay of old messages (``max_replay``: Kafka's
``retention.ms``, SQS's ``MessageRetentionPeriod``, a RabbitMQ stream's ``max-age``). Delete
it earlier and a late redelivery is claimed as new and processed a second time. So the
window is a correctness setting: :class:`RetentionPolicy` holds it, and
:func:`~sa_inbox.retention.purge` refuses to delete inside it.
"""

from __future__ import annotations

import datetime
from dataclasses import KW_ONLY, dataclass

from ..exc import InvalidArgument, RetentionWindowTooShort

__all__ = ["DEFAULT_MARGIN", "RetentionPolicy", "resolve_window"]

#: Safety margin added to the broker's limits: clock skew, consumer lag, slow acks.
DEFAULT_MARGIN = datetime.timedelta(hours=1)

_ZERO = datetime.timedelta(0)


def _duration(value: object, name: str) -> datetime.timedelta:
    if not isinstance(value, datetime.timedelta):
        raise InvalidArgument(f"{name} must be a datetime.timedelta, not {value!r}")
    if value < _ZERO:
        raise InvalidArgument(f"{name} must not be negative, not {value}")
    return value


@dataclass(frozen=True)
class RetentionPolicy:
    """The broker's limits, from which the shortest safe retention window follows.

    :param max_redelivery: the longest time the broker keeps redelivering a message that was
        not acked (visibility timeouts times ``maxReceiveCount`` on SQS, the consumer
        timeout and dead-letter policy on RabbitMQ, the longest consumer stall on Kafka);
        a positive :class:`datetime.timedelta`.
    :param max_replay: keyword-only and required: the longest time the broker keeps old
        messages that a consumer can be rewound to (Kafka ``retention.ms``, SQS
        ``MessageRetentionPeriod``, a stream's ``max-age``). Pass ``timedelta(0)``
        explicitly if messages are never replayed: there is no default, because a forgotten
        replay limit would let a replayed message be claimed as new and processed twice.
    :param margin: keyword-only; added on top for clock skew and consumer lag; default one
        hour.
    :raises TypeError: if ``max_replay`` is not given.
    :raises InvalidArgument: for a value that is not a timedelta, a negative one, or
        a zero ``max_redelivery``.

    Example::

        policy = RetentionPolicy(max_redelivery=timedelta(days=1), max_replay=timedelta(days=7))
        policy.window                     # 8 days 1 hour: rows younger than this stay
        purge(engine, older_than=policy)  # deletes rows older than policy.window
    """

    max_redelivery: datetime.timedelta
    _: KW_ONLY
    max_replay: datetime.timedelta
    margin: datetime.timedelta = DEFAULT_MARGIN

    def __post_init__(self) -> None:
        if _duration(self.max_redelivery, "max_redelivery") == _ZERO:
            raise InvalidArgument("max_redelivery must be positive: brokers redeliver")
        _duration(self.max_replay, "max_replay")
        _duration(self.margin, "margin")

    @property
    def window(self) -> datetime.timedelta:
        """The shortest retention window: ``max_redelivery + max_replay + margin``."""
        return self.max_redelivery + self.max_replay + self.margin

    def check(self, older_than: datetime.timedelta) -> datetime.timedelta:
        """Return ``older_than`` if purging rows older than it is safe under this policy.

        :param older_than: the age beyond which rows would be deleted.
        :raises RetentionWindowTooShort: if ``older_than`` is shorter than :attr:`window`.
        :raises InvalidArgument: if ``older_than`` is not a non-negative timedelta.
        """
        if _duration(older_than, "older_than") < self.window:
            raise RetentionWindowTooShort(older_than, self.window)
        return older_than


def resolve_window(
    older_than: RetentionPolicy | datetime.timedelta, policy: RetentionPolicy | None
) -> datetime.timedelta:
    """The checked window of a purge: a policy's own window, or a timedelta it allows.

    :raises InvalidArgument: for a bare timedelta with no policy to check it against.
    :raises RetentionWindowTooShort: as :meth:`RetentionPolicy.check`.
    """
    if isinstance(older_than, RetentionPolicy):
        return older_than.check(older_than.window)
    if policy is None:
        raise InvalidArgument(
            "older_than as a timedelta needs policy=RetentionPolicy(...): the window must be "
            "checked against the broker's redelivery and replay limits"
        )
    return policy.check(older_than)
