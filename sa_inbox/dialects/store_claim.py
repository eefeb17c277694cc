"""The shape every backend shares for the store's claim: lock a batch, mark it, read it back.

:meth:`sa_inbox.store.InboxStore.claim` runs :meth:`StoreClaimDialect.claim` in its own short
transaction. The store decides *which* rows are claimable (a ``SELECT id … WHERE … ORDER BY
received_at, id``, see :data:`CandidateQuery`) and *what* a claim writes (status, claim
token, attempt count); a backend module subclasses :class:`StoreClaimDialect` and specialises
only how the batch is locked and limited:

=============  ===================================================================
backend        claim
=============  ===================================================================
postgresql     ``UPDATE … WHERE id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)
               RETURNING …``: one statement
mysql/mariadb  ``SELECT id … LIMIT n FOR UPDATE SKIP LOCKED``, ``UPDATE … WHERE id IN``,
               ``SELECT …``: MySQL ≥ 8.0.1, MariaDB ≥ 10.6, READ COMMITTED
oracle         ``SELECT id … FOR UPDATE SKIP LOCKED`` without ``FETCH FIRST``
               (ORA-02014), only ``n`` rows fetched; then ``UPDATE`` and ``SELECT``
sqlite         ``BEGIN IMMEDIATE`` (one writer), ``SELECT id … LIMIT n``, ``UPDATE``,
               ``SELECT``
=============  ===================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.sql.expression import Executable

from ..exc import UnsupportedBackend

__all__ = ["CandidateQuery", "StoreClaimDialect", "require_version"]

#: Builds ``SELECT source.id FROM source WHERE <claimable> ORDER BY received_at, id`` on
#: ``source`` (the store table, or an alias of it when the query is nested in an UPDATE).
CandidateQuery = Callable[[sa.FromClause], sa.Select[Any]]


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
    """Claims of stored messages for one backend; the default is the three-statement form.

    :meth:`claim` runs the backend's single claim statement where it has one
    (:meth:`claim_statement`). Otherwise it locks at most ``limit`` candidate ids
    (:meth:`lock` builds the locking select, :meth:`locked_ids` fetches it), marks them
    with ``values`` in one ``UPDATE`` and reads the claimed rows back. It runs inside the
    caller's transaction (begun by the store, committed right after) and never commits.
    """

    #: Isolation level of the store's own short transactions; ``None`` keeps the engine's.
    #: READ COMMITTED: InnoDB then locks only the rows that match, with no gap locks, so
    #: claimers and receivers do not block each other (MySQL manual, "Transaction Isolation
    #: Levels"); it is already the default on PostgreSQL and Oracle.
    isolation_level: ClassVar[str | None] = "READ COMMITTED"

    def check_backend(self, conn: Connection) -> None:
        """Raise :class:`~sa_inbox.exc.UnsupportedBackend` if the server cannot claim.

        Called once per engine, before the first claim. The default accepts every server.
        """
        return None

    def begin_write(self, conn: Connection) -> None:
        """Called first in every store transaction that writes (claim, complete, fail).

        The default does nothing; SQLite takes its write lock here (``BEGIN IMMEDIATE``).
        """
        return None

    def lock(self, candidates: sa.Select[Any], limit: int) -> sa.Select[Any]:
        """``candidates`` limited to ``limit`` rows, locked, skipping rows locked by others."""
        return candidates.limit(limit).with_for_update(skip_locked=True)

    def locked_ids(self, conn: Connection, statement: sa.Select[Any], limit: int) -> list[int]:
        """Run the locking select and return at most ``limit`` ids."""
        return [int(value) for value in conn.execute(statement).scalars()]

    def claim(
        self,
        conn: Connection,
        table: sa.Table,
        candidates: CandidateQuery,
        limit: int,
        values: Mapping[str, Any],
    ) -> Sequence[RowMapping]:
        """Claim at most ``limit`` rows of ``table`` chosen by ``candidates``.

        :param conn: a connection in the store's claim transaction.
        :param table: the store table.
        :param candidates: see :data:`CandidateQuery`.
        :param limit: rows at most, >= 1.
        :param values: column -> value or SQL expression written to each claimed row.
        :returns: the claimed rows, all columns, as they are after the update.
        """
        statement = self.claim_statement(table, candidates, limit, values)
        if statement is not None:
            return conn.execute(statement).mappings().all()
        ids = self.locked_ids(conn, self.lock(candidates(table), limit), limit)
        if not ids:
            return []
        conn.execute(sa.update(table).where(table.c.id.in_(ids)).values(dict(values)))
        return conn.execute(sa.select(table).where(table.c.id.in_(ids))).mappings().all()

    def claim_statement(
        self,
        table: sa.Table,
        candidates: CandidateQuery,
        limit: int,
        values: Mapping[str, Any],
    ) -> Executable | None:
        """The single statement that claims and returns the rows, where the backend has one.

        :meth:`claim` runs it and reads its rows; ``None`` (the default) means the
        three-statement form. Parameters as for :meth:`claim`.
        """
        return None
