"""Replay: finished rows of a table of claimed messages reset to ``pending``.

The inbox store's ``dead`` and ``done`` rows (:meth:`~sa_inbox.store.InboxStore.replay`,
``sa-inbox store replay``) and the outbox's ``dead`` and ``dispatched`` rows
(:meth:`~sa_inbox.outbox.relay.RelayCore.replay`, ``sa-inbox outbox replay``) follow one
rule set, :class:`ReplayRules`, on their own column names.

:func:`guarded_replay` is the one confirmation rule of every replay front end (``sa-inbox
store replay`` / ``outbox replay`` and the console, :mod:`sa_inbox.console`): count first; a
replay that would reset rows whose messages went through (``done``, ``dispatched``) runs
only once confirmed, since their messages are handled a second time.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

__all__ = ["ReplayFilter", "ReplayOutcome", "ReplayRules", "guarded_replay"]


@dataclass(frozen=True)
class ReplayFilter:
    """The rows a replay chooses: those matching every filter given.

    :param ids: row ids.
    :param status: a replayable status (``dead``, or the table's finished status).
    :param arrived_from: arrived at or after this aware datetime.
    :param arrived_before: arrived before this aware datetime.
    :param group: the consumer (store) or destination (outbox); alone it chooses no rows.
    """

    ids: Iterable[int] | None = None
    status: str | None = None
    arrived_from: datetime.datetime | None = None
    arrived_before: datetime.datetime | None = None
    group: str | None = None


@dataclass(frozen=True)
class ReplayRules:
    """What a replay of one kind of table may choose and what it resets.

    :param group: the column :attr:`ReplayFilter.group` compares (``consumer_name``,
        ``destination``).
    :param arrived: the arrival time column (``received_at``, ``created_at``).
    :param finished: the finishing time column, cleared (``processed_at``,
        ``dispatched_at``).
    :param statuses: the statuses that can be replayed (``dead`` and the finished one).
    :param pending: the status replayed rows get.
    :param error: the exception a bad filter raises (a ``ValueError`` subclass).
    """

    group: str
    arrived: str
    finished: str
    statuses: tuple[str, ...]
    pending: str
    error: type[Exception]

    def update(self, table: sa.Table, chosen: ReplayFilter, now: datetime.datetime) -> sa.Update:
        """``UPDATE`` the chosen rows to ``pending``, claimable at ``now`` (aware), with no
        attempt, no claim and no finishing time; ``last_error`` is kept.

        :raises error: as :meth:`where`, or if ``now`` is not an aware datetime.
        """
        values = {
            "status": self.pending,
            "attempts": 0,
            "available_at": self._utc(now),
            "claimed_at": None,
            "claimed_by": None,
            self.finished: None,
        }
        return sa.update(table).where(*self.where(table, chosen)).values(values)

    def count(self, table: sa.Table, chosen: ReplayFilter) -> sa.Select[Any]:
        """``SELECT count(*)`` of the rows :meth:`update` would reset.

        :raises error: as :meth:`where`.
        """
        return sa.select(sa.func.count()).select_from(table).where(*self.where(table, chosen))

    def where(self, table: sa.Table, chosen: ReplayFilter) -> list[sa.ColumnElement[bool]]:
        """The chosen rows' conditions, and a replayable status.

        :raises error: if no row filter is given (the group alone chooses none), the
            status cannot be replayed, or a time is not an aware datetime.
        """
        c = table.c
        conditions: list[sa.ColumnElement[bool]] = []
        if chosen.ids is not None:
            conditions.append(c.id.in_(self._ids(chosen.ids)))
        if chosen.status is not None:
            if chosen.status not in self.statuses:
                allowed = " or ".join(self.statuses)
                raise self.error(f"replay status must be {allowed}: {chosen.status!r}")
            conditions.append(c.status == chosen.status)
        if chosen.arrived_from is not None:
            conditions.append(c[self.arrived] >= self._utc(chosen.arrived_from))
        if chosen.arrived_before is not None:
            conditions.append(c[self.arrived] < self._utc(chosen.arrived_before))
        if not conditions:
            raise self.error("replay needs ids, a status or a time range")
        if chosen.group is not None:
            conditions.append(c[self.group] == chosen.group)
        conditions.append(c.status.in_(self.statuses))
        return conditions

    def _ids(self, ids: Iterable[int]) -> list[int]:
        """The row ids, sorted; anything but an iterable of ints (a string: its characters
        would be taken for ids) raises :attr:`error`."""
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise self.error(f"replay ids must be an iterable of ints, not {ids!r}")
        chosen = list(ids)
        wrong = [i for i in chosen if not isinstance(i, int) or isinstance(i, bool)]
        if wrong:
            raise self.error(f"replay ids must be ints: {wrong[:5]!r}")
        return sorted(set(chosen))

    def _utc(self, moment: datetime.datetime) -> datetime.datetime:
        """``moment`` in UTC; a naive or non-datetime value raises :attr:`error`."""
        if not isinstance(moment, datetime.datetime) or moment.tzinfo is None:
            raise self.error(f"a replay time must be a time-zone aware datetime: {moment!r}")
        return moment.astimezone(datetime.UTC)


@dataclass(frozen=True)
class ReplayOutcome:
    """What :func:`guarded_replay` found and did.

    :param chosen: rows the filters chose when counted.
    :param finished: of those, rows whose messages went through (0 when the replay's
        status is ``dead``: never counted then).
    :param replayed: rows reset to pending; None when nothing was reset (a dry run, or a
        replay of finished rows that was not confirmed).
    """

    chosen: int
    finished: int
    replayed: int | None

    @property
    def needs_confirmation(self) -> bool:
        """Whether the replay was refused for want of a confirmation (nothing changed)."""
        return self.replayed is None and self.finished > 0


def guarded_replay(
    count: Callable[[str | None], int],
    replay: Callable[[], int],
    *,
    status: str | None,
    finished: str,
    dry_run: bool,
    confirmed: bool,
) -> ReplayOutcome:
    """Count the rows a replay chooses, then reset them unless it is a dry run or it would
    reset ``finished`` rows without ``confirmed``.

    :param count: counts the rows the replay would reset, of the given status (None: the
        replay's ``status``, as given).
    :param replay: resets them; returns how many.
    :param status: the replay's status filter (None: every replayable status).
    :param finished: the status of rows whose messages went through (``done``,
        ``dispatched``): resetting any (chosen by status or by id) needs ``confirmed``.
    :param dry_run: only count.
    :param confirmed: the caller confirmed that finished rows are handled again.
    :raises InvalidArgument: (from ``count`` / ``replay``) for filters the replay refuses.
    """
    chosen = count(status)
    again = count(finished) if chosen and status in (None, finished) else 0
    if dry_run or (again and not confirmed):
        return ReplayOutcome(chosen, again, None)
    return ReplayOutcome(chosen, again, replay())
