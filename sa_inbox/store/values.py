"""The inbox store's argument checks: times, durations, counts (before any SQL)."""

from __future__ import annotations

import datetime

from ..exc import InvalidArgument
from ..validation import positive_int, positive_seconds
from .schema import utc_now

__all__ = ["aware", "positive", "seconds"]


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
