"""The inbox store's argument checks: times, durations, counts (before any SQL)."""

from __future__ import annotations

import datetime

from ..exc import InvalidArgument
from ..validation import positive_int, positive_seconds, validate_key
from .schema import utc_now

__all__ = ["aware", "lease_window", "positive", "seconds"]


def aware(now: datetime.datetime | None) -> datetime.datetime:
    if now is None:
        return utc_now()
    if not isinstance(now, datetime.datetime) or now.tzinfo is None:
        raise InvalidArgument(f"now must be a time-zone aware datetime, not {now!r}")
    return now.astimezone(datetime.UTC)


def seconds(value: float, name: str) -> datetime.timedelta:
    return datetime.timedelta(seconds=positive_seconds(value, name, InvalidArgument))


def positive(value: int, name: str) -> int:
    return positive_int(value, name, InvalidArgument)


def lease_window(
    claimed_by: str,
    limit: int,
    max_attempts: int,
    visibility_timeout: float,
    now: datetime.datetime,
) -> tuple[str, datetime.datetime]:
    """A lease's checked arguments: its token, and the time before which a lease counts as
    abandoned (``now`` less ``visibility_timeout`` seconds).

    :raises InvalidArgument: for a ``limit`` or ``max_attempts`` that is not a positive int,
        or a ``visibility_timeout`` that is not a positive number of seconds.
    :raises InvalidMessageId: for an invalid ``claimed_by`` (at most 255 characters).
    """
    positive(limit, "limit")
    positive(max_attempts, "max_attempts")
    token = validate_key(claimed_by, "claimed_by", 255)
    return token, now - seconds(visibility_timeout, "visibility_timeout")
