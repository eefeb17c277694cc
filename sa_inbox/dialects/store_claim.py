"""The shape every backend shares for the store's claim: lock a batch, mark it, read it back.

:meth:`sa_inbox.store.InboxStore.lease` runs :meth:`StoreClaimDialect.claim` in its own
short transaction. The store decides *which* rows are claimable (:data:`CandidateQuery`)
and *what* a claim writes; a backend subclasses :class:`StoreClaimDialect` and specialises
only how the batch is locked and limited:

=============  ===================================================================
backend        claim
=============  ===================================================================
postgresql     ``UPDATE … WHERE id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)
               RETURNING …``: one statement
mysql/mariadb  a plain read of ``4n`` candidates locked by primary key ``FOR UPDATE SKIP
               LOCKED`` (:attr:`~StoreClaimDialect.find_first`), then ``UPDATE … WHERE id
               IN``: MySQL ≥ 8.0.1, MariaDB ≥ 10.6, READ COMMITTED
oracle         ``SELECT … FOR UPDATE SKIP LOCKED`` without ``FETCH FIRST``
               (ORA-02014), only ``n`` rows fetched; then ``UPDATE``
sqlite         ``BEGIN IMMEDIATE`` (one writer), ``SELECT … LIMIT n``, ``UPDATE``
=============  ===================================================================

Without ``RETURNING``, the locking ``SELECT`` reads the claimed rows and the caller's
``returned`` function applies the ``UPDATE``'s values to them (the rows stay locked to the
commit); without ``returned`` they are read back after the ``UPDATE``.

.. seealso:: ``docs/discussions/store-claim.md``, "The shape of a claim".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.sql.expression import Executable

from ..exc import InvalidArgument, UnsupportedBackend

__all__ = [
    "CLAIM_WINDOW",
    "LIMIT",
    "WINDOW",
    "ByPrimaryKey",
    "CandidateQuery",
    "ClaimPlan",
    "Limit",
    "Returned",
    "StoreClaimDialect",
    "require_version",
    "update_claimed",
]

#: Builds ``SELECT source.id FROM source WHERE <claimable> ORDER BY received_at, id`` on
#: ``source`` (the store table, or an alias of it when the query is nested in an UPDATE).
CandidateQuery = Callable[[sa.FromClause], sa.Select[Any]]
#: A claimed row as the claim's ``UPDATE`` leaves it, from the row as read under its lock
#: (all columns): what :meth:`StoreClaimDialect.claim` returns where there is no ``RETURNING``.
Returned = Callable[[RowMapping], Mapping[Any, Any]]
#: A claim's row limit: a number, or the bind parameter :data:`LIMIT` of a planned claim.
Limit = int | sa.BindParameter[int]
#: A statement :meth:`StoreClaimDialect.by_primary_key` takes and returns.
ByPrimaryKey = TypeVar("ByPrimaryKey", sa.Select[Any], sa.Update)
#: The name of a planned claim's row-limit bind parameter (see :meth:`StoreClaimDialect.plan`).
LIMIT = "claim_limit"
#: The name of the bind parameter of a :attr:`~StoreClaimDialect.find_first` claim's window:
#: how many candidates its plain read lists (``limit * CLAIM_WINDOW``).
WINDOW = "claim_window"
#: With :attr:`StoreClaimDialect.find_first`, the claim's plain read lists ``limit *
#: CLAIM_WINDOW`` candidates and the lock takes the first ``limit`` of them that no other
#: claim holds: up to three other open claims of the same size are passed in one statement
#: (``docs/discussions/store-claim.md``, "The claim window").
CLAIM_WINDOW = 4


@dataclass(frozen=True)
class ClaimPlan:
    """The statements of a claim, built once (:meth:`StoreClaimDialect.plan`), run with
    their bind parameters' values (:meth:`StoreClaimDialect.run`).

    :param single: the backend's one claim statement (``UPDATE … RETURNING``), if any.
    :param lock: otherwise, the locking ``SELECT`` (ids, or every column returned).
    :param update: the ``UPDATE`` of the locked ids (bound as ``ids``).
    :param read_back: the ``SELECT`` of the claimed rows after it, or ``None``.
    :param recheck: a plain ``SELECT`` of the locked ids that still meet the candidate
        condition, run before the ``UPDATE`` (:attr:`StoreClaimDialect.recheck_ordered`),
        or ``None``.
    :param window: where the dialect locks through a plain read
        (:attr:`StoreClaimDialect.find_first`): ``SELECT count(*)`` of the candidates in
        the window ``lock`` reads (bound as :data:`WINDOW`), run when the lock came back
        short. ``None`` otherwise: ``lock`` is the locking scan of the candidates.
    :param scan: with ``window``, the locking scan of the candidates not among those
        locked (bound as ``held``), run when the count fills a window.
    :param rest: with ``window``, ``lock`` without the rows it locked (bound as ``held``),
        run when the count is short of a window but holds candidates other than those
        locked (see :attr:`StoreClaimDialect.find_first`).
    """

    single: Executable | None = None
    lock: sa.Select[Any] | None = None
    update: Executable | None = None
    read_back: sa.Select[Any] | None = None
    recheck: sa.Select[Any] | None = None
    window: sa.Select[Any] | None = None
    scan: sa.Select[Any] | None = None
    rest: sa.Select[Any] | None = None


def update_claimed(
    conn: Connection,
    table: sa.Table,
    claims: Sequence[tuple[str, int]],
    values: Mapping[str, Any],
) -> int:
    """Update the rows of ``claims`` that are still ``processing`` under their claim: one
    ``UPDATE … WHERE id IN (…) AND status = 'processing' AND claimed_by = :token`` per
    claim token, in token order, each with its ids sorted (a row another claimer took over
    since, after the visibility timeout, is left alone).

    :param conn: a Connection in the caller's transaction.
    :param table: a table with the store's ``id``, ``status`` and ``claimed_by`` columns (the
        inbox store's or the outbox's).
    :param claims: ``(claimed_by, id)`` per row.
    :param values: the columns to set (column name to value or SQL expression).
    :returns: the rows updated.
    """
    t = table
    updated = 0
    for token in sorted({token for token, _ in claims}):
        ids = sorted(row_id for claimed_by, row_id in claims if claimed_by == token)
        statement = (
            sa.update(t)
            .where(t.c.id.in_(ids), t.c.status == "processing", t.c.claimed_by == token)
            .values(dict(values))
        )
        result = conn.execute(statement, execution_options={"preserve_rowcount": True})
        updated += int(result.rowcount)
    return updated


def require_version(conn: Connection, minimum: tuple[int, ...], product: str, feature: str) -> None:
    """Raise :class:`~sa_inbox.exc.UnsupportedBackend` if the server is older than ``minimum``.

    :param conn: a connection to the server; its dialect knows ``server_version_info``.
    :param minimum: the first version with ``feature``, e.g. ``(10, 6)``.
    :param product: the product name for the message (``"MariaDB"``).
    :param feature: what the version is needed for (``"FOR UPDATE SKIP LOCKED"``).
    """
    version = tuple(conn.dialect.server_version_info or ())
    if version < minimum:
        shown = ".".join(map(str, version)) or "unknown"
        needed = ".".join(map(str, minimum))
        raise UnsupportedBackend(
            f"{product} {shown} has no {feature}; the inbox store's worker needs "
            f"{product} {needed} or newer"
        )


class StoreClaimDialect:
    """Claims of stored messages for one backend; the default locks with a SELECT, then UPDATEs.

    :meth:`claim` runs the backend's single claim statement where it has one
    (:meth:`claim_statement`). Otherwise it locks at most ``limit`` candidate rows
    (:meth:`lock` builds the locking select, :meth:`locked_rows` fetches it), marks them
    with ``values`` in one ``UPDATE`` and reads the claimed rows back, or applies the
    caller's ``returned`` to the locked rows. :meth:`plan` builds those statements once
    and :meth:`run` executes them. It runs inside the
    caller's transaction (begun by the store, committed right after) and never commits.
    """

    #: Isolation level of the store's own short transactions; ``None`` keeps the engine's.
    #: READ COMMITTED: InnoDB then locks only the rows that match, with no gap locks, so
    #: claimers and receivers do not block each other (MySQL manual, "Transaction Isolation
    #: Levels"); it is already the default on PostgreSQL and Oracle.
    isolation_level: ClassVar[str | None] = "READ COMMITTED"
    #: Whether a claim lists its candidates with a plain, non-locking read and locks them
    #: through the primary key, in one statement: ``SELECT … FROM (SELECT id … ORDER BY
    #: received_at, id LIMIT <window>) AS claim_window JOIN <table> ON <table>.id =
    #: claim_window.id WHERE <the candidate condition> LIMIT n FOR UPDATE SKIP LOCKED``,
    #: the window ``n * CLAIM_WINDOW`` candidates (:data:`CLAIM_WINDOW`), joined in that
    #: order (:meth:`join_in_order`). When the lock comes back short, ``SELECT count(*)``
    #: of the window, a newer snapshot, decides what follows: nothing if the candidates
    #: left are the rows locked; the locking scan past the rows locked if they fill a
    #: window (others' open claims hold them, still pending to a plain read); else the
    #: window again without the rows locked, since the lock's window may have ended before
    #: candidates that the new one lists (other claims committed rows of it in between).
    #: Worth it where a locking read of the claim index costs much more than a plain one
    #: (InnoDB, see the MySQL dialect). The same rows
    #: are claimed: the derived table is a plain read, which at READ COMMITTED sees every
    #: committed row and locks none ("A locking read clause in an outer statement does not
    #: lock the rows of a table in a nested subquery": MySQL manual, 15.7.2.4 "Locking
    #: Reads"), and the outer locking read evaluates the candidate condition again on the
    #: latest committed version of each row it locks, so a row another claimer took since
    #: the statement began is not returned. Claims with ``recheck`` (the store's ordered
    #: claims) keep the locking scan (see :meth:`plan`); the outbox relay's ordered claim
    #: passes no ``recheck`` and locks through the window, whose ``NOT EXISTS`` reads the
    #: same snapshot as its candidates.
    find_first: ClassVar[bool] = False
    #: Whether an ordered claim checks its locked rows again, in a second, plain
    #: ``SELECT``, before marking them. Needed where the locking read sees rows committed
    #: after its statement began while a subquery of the same statement does not: InnoDB's
    #: locking read reads the latest committed version of each row, but its ``NOT EXISTS``
    #: (an earlier message of the aggregate still pending) is a consistent read of the
    #: statement's snapshot (MySQL manual, 15.7.2.3 "Consistent Nonlocking Reads" and
    #: 15.7.2.4 "Locking Reads": "a locking read clause in an outer statement does not lock
    #: the rows of a table in a nested subquery"). Two messages of one aggregate received
    #: while a claim runs were then both claimed in one batch, the later one handled before
    #: the earlier one had succeeded (seen on MariaDB 10.11: 1 run in 12 of the ordered
    #: stress test). The second statement's snapshot holds every row the locking read saw.
    recheck_ordered: ClassVar[bool] = False

    def check_backend(self, conn: Connection) -> None:
        """Raise :class:`~sa_inbox.exc.UnsupportedBackend` if the server cannot claim.

        Called once per engine, before the first claim. The default accepts every server.
        """
        return None

    @contextmanager
    def begin(self, conn: Connection) -> Iterator[None]:
        """One of the store's own short transactions (claim, reap, the relay's claims) on
        ``conn``, a Connection just taken from its engine: begun at :attr:`isolation_level`
        with :meth:`begin_write` run first, committed when the block ends, rolled back if
        it raises.

        The default sets the level as SQLAlchemy's ``isolation_level`` execution option of
        ``conn``: SQLAlchemy sets it on the driver connection, and sets it back when the
        connection returns to the pool (SQLAlchemy docs, "Setting Transaction Isolation
        Levels including DBAPI Autocommit").
        """
        if self.isolation_level is not None:
            conn.execution_options(isolation_level=self.isolation_level)
        with conn.begin():
            self.begin_write(conn)
            yield

    def begin_write(self, conn: Connection) -> None:
        """Called first in every store transaction that writes (claim, complete, fail).

        The default does nothing; SQLite takes its write lock here (``BEGIN IMMEDIATE``).
        """
        return None

    def lock(self, candidates: sa.Select[Any], limit: Limit) -> sa.Select[Any]:
        """``candidates`` limited to ``limit`` rows, locked, skipping rows locked by others."""
        return candidates.limit(limit).with_for_update(skip_locked=True)

    def locked_rows(
        self,
        conn: Connection,
        statement: sa.Select[Any],
        limit: int,
        parameters: Mapping[str, Any],
    ) -> Sequence[RowMapping]:
        """Run the locking select with ``parameters``; at most ``limit`` of its rows."""
        return conn.execute(statement, dict(parameters)).mappings().all()

    def ids_in(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        """``column`` is one of the list bound as ``ids`` (the default: an expanding ``IN``).

        A statement built with it is built once and cached; PostgreSQL binds the list as one
        array (``= ANY(:ids)``) instead of one parameter per id.
        """
        return column.in_(sa.bindparam("ids", expanding=True))

    def claim(
        self,
        conn: Connection,
        table: sa.Table,
        candidates: CandidateQuery,
        limit: int,
        values: Mapping[str, Any],
        returned: Returned | None = None,
        columns: Sequence[sa.Column[Any]] | None = None,
    ) -> Sequence[Mapping[Any, Any]]:
        """Claim at most ``limit`` rows of ``table`` chosen by ``candidates``: :meth:`plan`
        and :meth:`run` in one call (the statements built for this claim only).

        :param conn: a connection in the store's claim transaction.
        :param table: the store table.
        :param candidates: see :data:`CandidateQuery`.
        :param limit: rows at most, >= 1.
        :param values: column -> value or SQL expression written to each claimed row.
        :param returned: the claim's ``values`` applied in Python to a row read under its
            lock (see :data:`Returned`): the rows are then read by the locking ``SELECT``
            and not read back; ``None`` reads them back after the ``UPDATE``.
        :param columns: the columns returned (default all); with ``returned``, those it
            reads must be among them.
        :returns: the claimed rows, as they are after the update.
        """
        plan = self.plan(table, candidates, values, columns, read_back=returned is None)
        return self.run(conn, plan, limit, {}, returned)

    def plan(
        self,
        table: sa.Table,
        candidates: CandidateQuery,
        values: Mapping[str, Any],
        columns: Sequence[sa.Column[Any]] | None = None,
        *,
        read_back: bool = True,
        recheck: bool = False,
    ) -> ClaimPlan:
        """Build a claim's statements once, for :meth:`run` to execute many times (a cached plan
        saves each claim the statements' construction and SQLAlchemy's cache-key walk).

        The row limit is the bind parameter :data:`LIMIT`; ``candidates`` and ``values`` may hold
        bind parameters of their own (their values are :meth:`run`'s ``parameters``).

        :param read_back: read the rows back after the ``UPDATE`` (backends without
            ``RETURNING``); ``False``: the locking ``SELECT`` reads ``columns`` and :meth:`run`
            applies its ``returned`` to them.
        :param recheck: check the locked rows against ``candidates`` again before the
            ``UPDATE`` (see :attr:`recheck_ordered`); the single-statement claim ignores it.
        Other parameters as for :meth:`claim`.

        .. seealso:: ``docs/discussions/store-claim.md``, "A claim's plan, built once".
        """
        limit = sa.bindparam(LIMIT, type_=sa.Integer())
        single = self.claim_statement(table, candidates, limit, values, columns)
        if single is not None:
            return ClaimPlan(single=single)
        wanted = list(table.c if columns is None else columns)
        read = sa.select(*wanted).where(self.ids_in(table.c.id)) if read_back else None
        locked = [table.c.id] if read_back else wanted
        plan = ClaimPlan(
            lock=self.lock(candidates(table), limit).with_only_columns(*locked),
            update=sa.update(table).where(self.ids_in(table.c.id)).values(dict(values)),
            read_back=read,
            recheck=candidates(table).where(self.ids_in(table.c.id)) if recheck else None,
        )
        if not self.find_first or recheck:
            # The store's ordered claim keeps the locking scan: a plain read of its
            # candidates (one per aggregate) can read the whole backlog, and its lock by
            # primary key deadlocked with other claimers' locking scans
            # (docs/discussions/store-claim.md, "The ordered claim").
            return plan
        window = candidates(table.alias("candidate")).limit(
            sa.bindparam(WINDOW, type_=sa.Integer())
        )
        held = table.c.id.not_in(sa.bindparam("held", expanding=True))
        return replace(
            plan,
            lock=self.lock_window(candidates(table).with_only_columns(*locked), window, table),
            window=sa.select(sa.func.count()).select_from(window.subquery(WINDOW)),
            scan=self.lock(candidates(table).where(held), limit).with_only_columns(*locked),
            rest=self.lock_window(
                candidates(table).where(held).with_only_columns(*locked), window, table
            ),
        )

    def lock_window(
        self, candidates: sa.Select[Any], window: sa.Select[Any], table: sa.Table
    ) -> sa.Select[Any]:
        """The :attr:`find_first` claim's one locking statement: the rows of ``table`` whose
        ids ``window`` lists (a plain ``SELECT id … LIMIT :claim_window`` of the candidates,
        as a derived table), joined in the window's order (:meth:`join_in_order`) through
        the primary key (:meth:`by_primary_key`), that still meet ``candidates``' condition,
        at most :data:`LIMIT` of them, skipping rows locked by others."""
        listed = window.subquery(WINDOW)
        return self.by_primary_key(
            self.join_in_order(
                candidates.select_from(listed.join(table, table.c.id == listed.c.id))
                .order_by(None)
                .limit(sa.bindparam(LIMIT, type_=sa.Integer()))
                .with_for_update(skip_locked=True)
            ),
            table,
        )

    def join_in_order(self, statement: sa.Select[Any]) -> sa.Select[Any]:
        """``statement``, a join, made to read its tables in the order written (the derived
        window first, then the store table by primary key); the default leaves the join
        order to the optimizer."""
        return statement

    def by_primary_key(self, statement: ByPrimaryKey, table: sa.Table) -> ByPrimaryKey:
        """``statement``, a ``SELECT`` or ``UPDATE`` of the store table's rows chosen by
        ``id`` (``table``), made to reach them through the primary key; the default leaves
        the access path to the optimizer."""
        return statement

    def run(
        self,
        conn: Connection,
        plan: ClaimPlan,
        limit: int,
        parameters: Mapping[str, Any],
        returned: Returned | None = None,
    ) -> Sequence[Mapping[Any, Any]]:
        """Claim at most ``limit`` rows with ``plan``'s statements and ``parameters``.

        :param returned: required by a plan without read-back (see :meth:`plan`).
        :returns: the claimed rows, as they are after the update.
        :raises InvalidArgument: for a plan without read-back and no ``returned``.
        """
        bound = {**parameters, LIMIT: limit}
        if plan.single is not None:
            return conn.execute(plan.single, bound).mappings().all()
        assert plan.lock is not None and plan.update is not None
        if plan.read_back is None and returned is None:
            raise InvalidArgument("a claim plan without read-back needs its returned function")
        rows = self._lock(conn, plan, limit, bound)
        if rows and plan.recheck is not None:
            locked = [int(row["id"]) for row in rows]
            still = set(conn.execute(plan.recheck, {**bound, "ids": locked}).scalars())
            rows = [row for row in rows if int(row["id"]) in still]
        if not rows:
            return []
        ids = [int(row["id"]) for row in rows]
        conn.execute(plan.update, {**parameters, "ids": ids})
        if plan.read_back is None:
            assert returned is not None
            return [returned(row) for row in rows]
        return conn.execute(plan.read_back, {"ids": ids}).mappings().all()

    def _lock(
        self, conn: Connection, plan: ClaimPlan, limit: int, bound: Mapping[str, Any]
    ) -> Sequence[RowMapping]:
        """Lock at most ``limit`` candidate rows with ``plan`` (see :attr:`find_first`)."""
        assert plan.lock is not None
        if plan.window is None:
            return self.locked_rows(conn, plan.lock, limit, bound)
        assert plan.scan is not None and plan.rest is not None
        window = {**bound, WINDOW: limit * CLAIM_WINDOW}
        rows = self.locked_rows(conn, plan.lock, limit, window)
        if len(rows) == limit:
            return rows
        # The count reads a newer snapshot than the lock did: it still lists the rows we
        # locked and those other open claims hold (pending to a plain read until they
        # commit), but no longer those that other claims committed since the lock.
        listed = conn.execute(plan.window, window).scalar_one()
        if listed <= len(rows):
            return rows  # every candidate left is one we locked
        more = {**window, "held": [row["id"] for row in rows], LIMIT: limit - len(rows)}
        # A full window: others' open claims may hold more of it than it had to spare; the
        # locking scan skips the rows locked by others and goes on past them, as a claim
        # without find_first does. Short of a window: every candidate left is in a new
        # window, but the lock's may have ended before some of them (others committed
        # claims of its rows in between, or rows arrived): the window again, without ours.
        again = plan.scan if listed >= window[WINDOW] else plan.rest
        return [*rows, *self.locked_rows(conn, again, limit - len(rows), more)]

    def claim_statement(
        self,
        table: sa.Table,
        candidates: CandidateQuery,
        limit: Limit,
        values: Mapping[str, Any],
        columns: Sequence[sa.Column[Any]] | None = None,
    ) -> Executable | None:
        """The single statement that claims and returns the rows, where the backend has one.

        :meth:`claim` runs it and reads its rows; ``None`` (the default) means the
        ``SELECT`` and ``UPDATE`` form. Parameters as for :meth:`claim`.
        """
        return None
