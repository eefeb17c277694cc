"""Replay and inspection of the store's rows: finished rows reset to pending, rows counted."""

from __future__ import annotations

import datetime
from collections.abc import Iterable

import sqlalchemy as sa

from .base import StoreBase, on_engine
from .replay import ReplayFilter
from .values import aware

__all__ = ["StoreAdmin"]


class StoreAdmin(StoreBase):
    """Replay and inspection: finished rows reset to pending, rows counted."""

    @on_engine
    def replay(
        self,
        engine: sa.Engine,
        *,
        ids: Iterable[int] | None = None,
        status: str | None = None,
        received_from: datetime.datetime | None = None,
        received_before: datetime.datetime | None = None,
        consumer_name: str | None = None,
        now: datetime.datetime | None = None,
    ) -> int:
        """Reset chosen rows to ``pending`` so workers process them again.

        Rows are chosen by all the given filters together: ``ids`` (row ids), ``status``
        (``"dead"`` or ``"done"``), ``received_at`` in ``[received_from, received_before)``
        (aware datetimes), ``consumer_name``. Rows being
        processed are never touched, and neither are ``pending`` rows (they will be
        processed anyway). Replayed rows get ``attempts = 0`` and ``available_at = now``;
        ``last_error`` is kept. Replaying ``done`` rows processes their messages a second
        time: count them first with :meth:`replayable`.

        :returns: the number of rows reset.
        :raises InvalidArgument: if no row filter is given (``consumer_name`` alone
            does not choose rows), ``status`` is neither ``"dead"`` nor ``"done"``, or a time
            is not an aware datetime.
        """
        chosen = ReplayFilter(ids, status, received_from, received_before, consumer_name)
        return self.leased_rows.replay(engine, chosen, aware(now))

    @on_engine
    def replayable(
        self,
        engine: sa.Engine,
        *,
        ids: Iterable[int] | None = None,
        status: str | None = None,
        received_from: datetime.datetime | None = None,
        received_before: datetime.datetime | None = None,
        consumer_name: str | None = None,
    ) -> int:
        """The number of rows :meth:`replay` with the same filters would reset now.

        :raises InvalidArgument: as :meth:`replay`.
        """
        chosen = ReplayFilter(ids, status, received_from, received_before, consumer_name)
        return self.leased_rows.replayable(engine, chosen)

    @on_engine
    def counts(self, engine: sa.Engine, consumer_name: str | None = None) -> dict[str, int]:
        """Rows per status (every status present, 0 when none)."""
        return self.leased_rows.counts(engine, consumer_name)

    @on_engine
    def has_unfinished(self, engine: sa.Engine, *, consumer_name: str | None = None) -> bool:
        """Whether any row of the consumer is still ``pending`` or ``processing``.

        What :meth:`Worker.run(until_empty=True) <sa_inbox.store.worker.Worker.run>` waits for:
        a pending row may be waiting out its back-off, a processing row may be in another
        worker's hands (or abandoned, and leased again after the visibility timeout).
        ``dead`` and ``done`` rows are finished. One ``SELECT id … LIMIT 1`` on the claim
        index; with ``consumer_name=None`` (every consumer) the index cannot be used by
        its first column, and a store with no unfinished row is read to the end.

        :param engine: the store's database.
        :param consumer_name: the consumer, or ``None`` for every consumer.
        :returns: True if at least one such row exists now.
        """
        return self.leased_rows.has_unfinished(engine, consumer_name)
