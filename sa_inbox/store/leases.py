"""The leased-row core: the statements of a table whose rows are leased, shared by the
inbox store (:class:`~sa_inbox.store.InboxStore`) and the outbox relay
(:class:`~sa_inbox.outbox.relay.RelayCore`).

Both tables hold rows that move ``pending ──lease──▶ processing ──▶ finished | dead``; a
lease sets ``status='processing'``, ``claimed_at``, the lease token ``claimed_by`` and
``attempts + 1``, and every later write is guarded by that token. :class:`LeaseShape` names
what differs between the two tables (the group column, the ordering partition and order,
the columns a lease returns, the statuses); :class:`LeasedRows` builds the one shape of each
statement on them: the lease's candidates (abandoned leases first, then pending rows), its
cached plans, the token-guarded updates, the reaper's candidates, replay, counts. How a
backend locks and limits the rows stays in :mod:`sa_inbox.dialects.store_claim`.
"""

from __future__ import annotations

import datetime
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from ..dialects import backend_for
from ..dialects.store_claim import CandidateQuery, ClaimPlan, StoreClaimDialect, update_claimed
from ..pool_guard import released_clean
from .replay import ReplayFilter, ReplayRules

__all__ = ["LeasePlans", "LeaseShape", "LeasedRows", "rowcount"]


@dataclass(frozen=True)
class LeaseShape:
    """What one kind of leased table names differently.

    :param group: the column a caller narrows to (``consumer_name``, ``destination``).
    :param partition: the columns of an ordered mode's partition (``consumer_name,
        aggregate_id``; ``destination``): one row of each in flight at a time.
    :param order: the lease order (``received_at, id``; ``id``).
    :param columns: the columns a lease returns.
    :param statuses: every status, in the order :meth:`LeasedRows.counts` lists them.
    :param arrived: the arrival time column a replay chooses by (``received_at``,
        ``created_at``).
    :param finished: the finishing time column a replay clears (``processed_at``,
        ``dispatched_at``).
    :param replayable: the statuses a replay resets (``dead`` and the finished one).
    :param error: the exception a bad replay filter raises (a ``ValueError`` subclass).
    :param recheck_ordered: whether an ordered lease checks its locked rows again where the
        dialect asks for it (``StoreClaimDialect.recheck_ordered``).
    :param pending: the status of a row waiting for a lease.
    :param processing: the status of a leased row.
    """

    group: str
    partition: tuple[str, ...]
    order: tuple[str, ...]
    columns: tuple[str, ...]
    statuses: tuple[str, ...]
    arrived: str
    finished: str
    replayable: tuple[str, ...]
    error: type[Exception]
    recheck_ordered: bool = True
    pending: str = "pending"
    processing: str = "processing"

    @property
    def replay(self) -> ReplayRules:
        """The table's replay rules (:class:`~sa_inbox.store.replay.ReplayRules`)."""
        return ReplayRules(
            group=self.group,
            arrived=self.arrived,
            finished=self.finished,
            statuses=self.replayable,
            pending=self.pending,
            error=self.error,
        )


class LeasePlans(NamedTuple):
    """A lease's cached statements (see :meth:`LeasedRows.plans`).

    :param abandoned: the lease of abandoned rows (``processing`` past the timeout).
    :param pending: the lease of pending rows.
    """

    abandoned: ClaimPlan
    pending: ClaimPlan


class LeasedRows:
    """The leased-row statements of ``table`` (see the module).

    :param table: a table with the columns ``id``, ``status``, ``available_at``,
        ``claimed_at``, ``claimed_by``, ``attempts`` and those ``shape`` names.
    :param shape: what the table names differently.
    """

    def __init__(self, table: sa.Table, shape: LeaseShape) -> None:
        self.table = table
        self.shape = shape
        self._replay = shape.replay
        # Engines whose lease check passed. No lock guards them: a racing first call runs
        # the same read-only check again, and no lock is ever held across SQL.
        self._checked: weakref.WeakSet[sa.Engine] = weakref.WeakSet()
        # The lease's statements per backend and kind of lease (see plans).
        self._plans: dict[tuple[StoreClaimDialect, bool, bool], LeasePlans] = {}

    # -- transactions ---------------------------------------------------------------------

    def dialect(self, engine: sa.Engine) -> StoreClaimDialect:
        """The lease dialect of ``engine``, after its one-time backend check.

        Lock-free and idempotent: a racing first call checks again on its own connection.

        :raises UnsupportedBackend: if the server is too old for the lease.
        """
        dialect = backend_for(engine.dialect.name).store_claim
        if engine not in self._checked:
            with engine.connect() as conn:
                dialect.check_backend(conn)
            self._checked.add(engine)
        return dialect

    @contextmanager
    def transaction(self, engine: sa.Engine) -> Iterator[tuple[Connection, StoreClaimDialect]]:
        """A short transaction on ``engine`` at the lease dialect's isolation level, its
        write lock taken; committed when the block ends.

        :raises MissingTable: if the table (or a column) does not exist.
        """
        with backend_for(engine.dialect.name).claim.translate_configuration_errors():
            dialect = self.dialect(engine)
            with engine.connect() as conn, dialect.begin(conn), released_clean(lambda: (conn,)):
                yield conn, dialect

    # -- the lease ------------------------------------------------------------------------

    def lease(
        self,
        engine: sa.Engine,
        *,
        token: str,
        limit: int,
        now: datetime.datetime,
        stale_before: datetime.datetime,
        max_attempts: int,
        group: str | None,
        ordered: bool,
        abandoned: bool = True,
    ) -> list[Mapping[Any, Any]]:
        """Lease up to ``limit`` rows in one transaction: abandoned leases first (unless
        ``abandoned`` is false), then pending rows (see :meth:`candidates`).

        :param token: the lease token written to ``claimed_by``.
        :param now: the lease time (``claimed_at``), and the bound on ``available_at``.
        :param stale_before: a ``processing`` row leased before it is abandoned.
        :param max_attempts: an abandoned row with this many attempts is not leased.
        :param group: the group's rows only, or ``None`` for every group.
        :param ordered: one row per partition in flight, in lease order.
        :returns: the leased rows' :attr:`LeaseShape.columns`, as the lease left them, in
            lease order.
        """
        parameters = {
            "now": now,
            "stale_before": stale_before,
            "max_attempts": max_attempts,
            "group": group,
            "claimed_at_now": now,
            "token": token,
        }

        def returned(row: RowMapping) -> dict[str, Any]:
            """A row's columns as the UPDATE leaves them (backends without RETURNING)."""
            return {**row, "claimed_by": token, "attempts": int(row["attempts"]) + 1}

        rows: list[Mapping[Any, Any]] = []
        with self.transaction(engine) as (conn, dialect):
            plans = self.plans(dialect, group is None, ordered)
            for plan in (plans.abandoned, plans.pending) if abandoned else (plans.pending,):
                rows.extend(dialect.run(conn, plan, limit - len(rows), parameters, returned))
                if len(rows) >= limit:
                    break
        return sorted(rows, key=lambda row: tuple(row[name] for name in self.shape.order))

    def candidates(
        self, now: Any, stale_before: Any, max_attempts: Any, group: Any, ordered: bool
    ) -> tuple[CandidateQuery, CandidateQuery]:
        """The lease's choice of rows: abandoned leases, then pending rows.

        Each is ``SELECT source.id FROM source WHERE <group> = :g AND status = :s AND …
        ORDER BY <order>``, on values or on bind parameters (a cached plan); a ``group`` of
        ``None`` leaves the group condition out. One query per ``status``, so that an index
        on ``(group, status, order)`` delivers rows in lease order and the scan stops after
        the limit.
        """
        shape = self.shape

        def query(status: str) -> CandidateQuery:
            def candidates(source: sa.FromClause) -> sa.Select[Any]:
                c = source.c
                if status == shape.pending:
                    leasable = c.available_at <= now
                else:
                    leasable = sa.and_(c.claimed_at < stale_before, c.attempts < max_attempts)
                where = sa.and_(c.status == status, leasable)
                if group is not None:
                    where = sa.and_(c[shape.group] == group, where)
                if ordered:
                    where = sa.and_(where, self.first_of_partition(source))
                return sa.select(c.id).where(where).order_by(*self._order(source))

            return candidates

        return query(shape.processing), query(shape.pending)

    def first_of_partition(self, source: sa.FromClause) -> sa.ColumnElement[bool]:
        """No other row of the partition is ``processing``, and none is ``pending`` ahead
        of this one in lease order."""
        shape = self.shape
        c = source.c
        e = self.table.alias("earlier")
        blocking = sa.select(e.c.id).where(
            *(e.c[name] == c[name] for name in shape.partition),
            e.c.id != c.id,
            sa.or_(
                e.c.status == shape.processing,
                sa.and_(e.c.status == shape.pending, _ahead(e, source, shape.order)),
            ),
        )
        return ~sa.exists(blocking)

    def plans(self, dialect: StoreClaimDialect, every_group: bool, ordered: bool) -> LeasePlans:
        """The lease's statements for ``dialect`` (abandoned leases, then pending rows),
        built once per backend and kind of lease; their bind parameters are ``now``,
        ``stale_before``, ``max_attempts``, ``group``, ``claimed_at_now`` and ``token``
        (see :meth:`lease`). No row is read back: the locked rows are returned with the
        lease's values applied (:data:`~sa_inbox.dialects.store_claim.Returned`)."""
        key = (dialect, every_group, ordered)
        plans = self._plans.get(key)
        if plans is None:
            t = self.table
            queries = self.candidates(
                sa.bindparam("now", type_=t.c.available_at.type),
                sa.bindparam("stale_before", type_=t.c.claimed_at.type),
                sa.bindparam("max_attempts", type_=t.c.attempts.type),
                None if every_group else sa.bindparam("group", type_=t.c[self.shape.group].type),
                ordered,
            )
            values = {
                "status": self.shape.processing,
                "claimed_at": sa.bindparam("claimed_at_now", type_=t.c.claimed_at.type),
                "claimed_by": sa.bindparam("token", type_=t.c.claimed_by.type),
                "attempts": t.c.attempts + 1,
            }
            columns = [t.c[name] for name in self.shape.columns]
            recheck = ordered and self.shape.recheck_ordered and dialect.recheck_ordered
            abandoned, pending = (
                dialect.plan(t, query, values, columns, read_back=False, recheck=recheck)
                for query in queries
            )
            plans = LeasePlans(abandoned, pending)
            self._plans[key] = plans
        return plans

    # -- writes under a lease -------------------------------------------------------------

    def update_leased(
        self, conn: Connection, row_id: int, token: str, values: Mapping[str, Any]
    ) -> bool:
        """Set ``values`` on row ``row_id`` if it is still ``processing`` under ``token``;
        whether it was."""
        t = self.table
        statement = (
            sa.update(t)
            .where(t.c.id == row_id, t.c.status == self.shape.processing, t.c.claimed_by == token)
            .values(dict(values))
        )
        return rowcount(conn, statement) == 1

    def update_leases(
        self, engine: sa.Engine, leases: Sequence[tuple[str, int]], values: Mapping[str, Any]
    ) -> int:
        """Set ``values`` on the rows of ``leases`` (``(token, id)`` each) still
        ``processing`` under their token, in one transaction
        (:func:`~sa_inbox.dialects.store_claim.update_claimed`); the rows updated."""
        if not leases:
            return 0
        with self.transaction(engine) as (conn, _):
            return update_claimed(conn, self.table, leases, values)

    def abandoned(
        self, stale_before: datetime.datetime, max_attempts: int, exhausted: bool, group: str | None
    ) -> CandidateQuery:
        """The reaper's candidates: ``processing`` rows leased before ``stale_before``,
        with ``max_attempts`` attempts or more (``exhausted``) or fewer, in lease order."""
        shape = self.shape

        def candidates(source: sa.FromClause) -> sa.Select[Any]:
            c = source.c
            used = c.attempts >= max_attempts if exhausted else c.attempts < max_attempts
            where = sa.and_(c.status == shape.processing, c.claimed_at < stale_before, used)
            if group is not None:
                where = sa.and_(c[shape.group] == group, where)
            return sa.select(c.id).where(where).order_by(*self._order(source))

        return candidates

    # -- inspection and replay ------------------------------------------------------------

    def replay(self, engine: sa.Engine, chosen: ReplayFilter, now: datetime.datetime) -> int:
        """Reset the chosen finished rows to pending (:class:`ReplayRules`), in one
        transaction; the rows reset.

        :raises Exception: :attr:`ReplayRules.error`, for a bad filter (nothing is sent).
        """
        statement = self._replay.update(self.table, chosen, now)
        with self.transaction(engine) as (conn, _):
            return rowcount(conn, statement)

    def replayable(self, engine: sa.Engine, chosen: ReplayFilter) -> int:
        """The rows :meth:`replay` with the same filter would reset now."""
        query = self._replay.count(self.table, chosen)
        with engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def counts(self, engine: sa.Engine, group: str | None) -> dict[str, int]:
        """Rows per status (every status present, 0 when none), of one group or of all."""
        t = self.table
        query = sa.select(t.c.status, sa.func.count()).group_by(t.c.status)
        if group is not None:
            query = query.where(t.c[self.shape.group] == group)
        with engine.connect() as conn:
            found = {str(status): int(count) for status, count in conn.execute(query)}
        return {status: found.get(status, 0) for status in self.shape.statuses}

    def has_unfinished(self, engine: sa.Engine, group: str | None) -> bool:
        """Whether a row (of the group, or of any) is ``pending`` or ``processing``: one
        ``SELECT id … LIMIT 1``."""
        t = self.table
        unfinished = t.c.status.in_((self.shape.pending, self.shape.processing))
        query = sa.select(t.c.id).where(unfinished).limit(1)
        if group is not None:
            query = query.where(t.c[self.shape.group] == group)
        with engine.connect() as conn:
            return conn.execute(query).first() is not None

    def _order(self, source: sa.FromClause) -> list[sa.ColumnElement[Any]]:
        return [source.c[name] for name in self.shape.order]


def _ahead(
    earlier: sa.FromClause, source: sa.FromClause, order: Sequence[str]
) -> sa.ColumnElement[bool]:
    """``earlier`` comes before ``source`` in ``order`` (compared column by column)."""
    first, *rest = order
    before = earlier.c[first] < source.c[first]
    if not rest:
        return before
    return sa.or_(
        before, sa.and_(earlier.c[first] == source.c[first], _ahead(earlier, source, rest))
    )


def rowcount(
    conn: Connection, statement: sa.Update, parameters: Mapping[str, Any] | None = None
) -> int:
    """The rows ``statement`` matched (``preserve_rowcount``: SQLAlchemy docs, "Getting
    Affected Row Count from UPDATE, DELETE")."""
    result = conn.execute(statement, parameters, execution_options={"preserve_rowcount": True})
    return int(result.rowcount)
