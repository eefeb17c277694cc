"""Is the inbox's PostgreSQL server replicated so that a failover keeps what was acked?

The inbox makes a redelivered message change data once, but only on the data the database
keeps. A message is acked after its transaction's COMMIT returned. With asynchronous
streaming replication the COMMIT returns before any standby has the transaction's WAL: if
the primary dies then and a standby is promoted, the business change is lost together with
its claim, and the broker never redelivers a message that was acked. Measured here
(``benchmarks/pg_failover.py``, ``benchmarks/RESULTS.md``): acked messages lost at a
failover with an asynchronous standby, none with a synchronous one.

:func:`read_replication` reads, on PostgreSQL:

* ``pg_is_in_recovery()`` (the server is itself a standby);
* ``synchronous_standby_names`` and ``synchronous_commit`` as the probing session sees
  them (a role or database default, or a ``SET`` in the application's sessions, can differ);
* ``pg_stat_replication``: one row per connected standby with its ``sync_state`` (``async``,
  ``potential``, ``sync`` or ``quorum``; manual 28.2.3 "pg_stat_replication"). A role
  without ``pg_read_all_stats`` (or superuser) sees the rows with NULL details (manual
  22.5 "Predefined Roles"): such a standby's state is unknown. The settings alone still
  prove some hazards (an empty ``synchronous_standby_names``: no standby is synchronous);
  otherwise :func:`replication_unchecked` says the check could not be completed, and why.

:func:`replication_warnings` turns it into the two hazards of manual 27.2.8 "Synchronous
Replication" and 20.5 "synchronous_commit":

* ``sync-standby-missing``: ``synchronous_standby_names`` asks for synchronous standbys
  that are not connected: every COMMIT waits until they are (with ``synchronous_commit``
  ``on``, ``remote_write`` or ``remote_apply``), i.e. the consumers hang. On a server in
  recovery, the setting is what it will do once promoted (a standby made by
  ``pg_basebackup`` inherits the primary's ``synchronous_standby_names``);
* ``async-standbys``: standbys are connected but none is synchronous (``sync`` / ``quorum``),
  or ``synchronous_commit`` is ``local`` / ``off`` (a COMMIT does not wait for them): a
  failover can lose acked messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

__all__ = [
    "ReplicationState",
    "Standby",
    "read_replication",
    "replication_unchecked",
    "replication_warnings",
    "required_sync_standbys",
]

#: ``sync_state`` values of a standby whose flush a COMMIT waits for (manual 28.2.3).
SYNCHRONOUS_STATES = frozenset({"sync", "quorum"})
#: ``synchronous_commit`` levels that do not wait for any standby (manual 20.5).
LOCAL_COMMIT_LEVELS = frozenset({"off", "local"})


@dataclass(frozen=True)
class Standby:
    """One row of ``pg_stat_replication`` (None: hidden from the probing role)."""

    application_name: str | None
    state: str | None
    sync_state: str | None


@dataclass(frozen=True)
class ReplicationState:
    """What :func:`read_replication` read.

    :param in_recovery: the server is a standby (``pg_is_in_recovery()``).
    :param synchronous_standby_names: the setting, as the probing session sees it.
    :param synchronous_commit: the setting, as the probing session sees it.
    :param standbys: the connected standbys (``pg_stat_replication``).
    """

    in_recovery: bool
    synchronous_standby_names: str
    synchronous_commit: str
    standbys: list[Standby]

    @property
    def synchronous(self) -> list[Standby]:
        """The standbys a COMMIT waits for (``sync_state`` ``sync`` or ``quorum``)."""
        return [s for s in self.standbys if s.sync_state in SYNCHRONOUS_STATES]

    @property
    def visible(self) -> bool:
        """Whether every standby's ``sync_state`` could be read."""
        return all(s.sync_state is not None for s in self.standbys)


def read_replication(conn: Connection) -> ReplicationState | None:
    """Read the replication state of the server ``conn`` is on (see the module docstring).

    :param conn: a connection; nothing is written.
    :returns: the state on PostgreSQL; None on any other backend, and on a server that
        speaks PostgreSQL's protocol but lacks ``pg_is_in_recovery()`` or
        ``pg_stat_replication``.
    :raises sqlalchemy.exc.DBAPIError: if the catalog cannot be read (not wrapped).
    """
    if conn.dialect.name != "postgresql":
        return None
    try:
        with conn.begin_nested():  # a savepoint: a failure leaves the transaction usable
            recovery, names, commit = conn.execute(
                sa.text(
                    "SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names'), "
                    "current_setting('synchronous_commit')"
                )
            ).one()
            rows = conn.execute(
                sa.text(
                    "SELECT application_name, state, sync_state FROM pg_stat_replication "
                    "ORDER BY application_name"
                )
            ).all()
    except sa.exc.ProgrammingError:
        # A server speaking PostgreSQL's protocol without these functions or views
        # (undefined function / table, SQLSTATE 42883 / 42P01): nothing to judge.
        return None
    standbys = [Standby(name, state, sync) for name, state, sync in rows]
    return ReplicationState(bool(recovery), str(names), str(commit), standbys)


_NUM_SYNC = re.compile(r"^\s*(?:(?:FIRST|ANY)\s+)?(\d+)\s*\(", re.IGNORECASE)


def required_sync_standbys(names: str) -> int:
    """How many synchronous standbys ``synchronous_standby_names`` asks for: 0 if empty, the
    ``num_sync`` of ``[FIRST|ANY] num_sync (name, ...)``, else 1 (a plain list: the first
    connected name is the synchronous one; manual 20.6.2 "Primary Server")."""
    if not names.strip():
        return 0
    match = _NUM_SYNC.match(names)
    return int(match.group(1)) if match else 1


def replication_warnings(state: ReplicationState) -> list[tuple[str, str]]:
    """The hazards of ``state`` as ``(kind, text)`` pairs (kinds in the module docstring).

    A standby's ``sync_state`` hidden from the probing role (see :func:`replication_unchecked`)
    does not hide the hazards the settings alone prove: an empty
    ``synchronous_standby_names`` makes every standby asynchronous, ``synchronous_commit``
    ``local`` / ``off`` makes a COMMIT wait for none (manual 20.6.2 "Primary Server", 20.5
    "synchronous_commit"), and fewer standbys connected than ``num_sync`` means fewer
    synchronous ones.

    :param state: what :func:`read_replication` read.
    """
    found: list[tuple[str, str]] = []
    waits = state.synchronous_commit not in LOCAL_COMMIT_LEVELS
    required = required_sync_standbys(state.synchronous_standby_names)
    names = state.synchronous_standby_names
    if required and waits:
        # Hidden states: the connected standbys bound the synchronous ones from above.
        connected = len(state.synchronous) if state.visible else len(state.standbys)
        if state.in_recovery:
            found.append(
                (
                    "sync-standby-missing",
                    f"this standby has synchronous_standby_names = '{names}': once promoted, "
                    "every COMMIT on it waits for a synchronous standby of its own (reset it "
                    "when promoting)",
                )
            )
        elif connected < required:
            at_most = "" if state.visible else "at most "
            found.append(
                (
                    "sync-standby-missing",
                    f"synchronous_standby_names = '{names}' asks for {required} synchronous "
                    f"standby(s), {at_most}{connected} connected: every COMMIT waits "
                    "(the consumers hang)",
                )
            )
    if state.standbys and not state.in_recovery:
        if not required or (state.visible and not state.synchronous):
            found.append(
                (
                    "async-standbys",
                    f"{len(state.standbys)} standby(s), none synchronous "
                    "(synchronous_standby_names is empty or names none of them): a failover "
                    "can lose messages already acked",
                )
            )
        elif not waits:
            found.append(
                (
                    "async-standbys",
                    f"synchronous_commit = {state.synchronous_commit}: a COMMIT does not wait "
                    "for any standby, a failover can lose messages already acked",
                )
            )
    return found


def replication_unchecked(state: ReplicationState) -> str | None:
    """Why the standby check of ``state`` could not be completed, or None if it was.

    It cannot be when the probing role lacks ``pg_read_all_stats`` (and is no superuser):
    it sees one row of ``pg_stat_replication`` per standby but their ``sync_state`` is NULL
    (PostgreSQL manual 28.2.3 "pg_stat_replication", 22.5 "Predefined Roles"), so with a
    non-empty ``synchronous_standby_names``, a COMMIT that waits and at least ``num_sync``
    standbys connected, whether one of them is synchronous is unknown. The cases the
    settings decide alone are warned by :func:`replication_warnings`.

    :param state: what :func:`read_replication` read.
    """
    required = required_sync_standbys(state.synchronous_standby_names)
    if (
        state.in_recovery
        or state.visible
        or not required
        or state.synchronous_commit in LOCAL_COMMIT_LEVELS
        or len(state.standbys) < required
    ):
        return None
    return (
        f"the standby check could not be completed: {len(state.standbys)} standby(s) "
        "connected, but their sync_state is hidden from this role (it lacks "
        'pg_read_all_stats; PostgreSQL manual 28.2.3 "pg_stat_replication", 22.5 '
        '"Predefined Roles"), so whether one is synchronous for synchronous_standby_names '
        f"= '{state.synchronous_standby_names}' is unknown: GRANT pg_read_all_stats TO the "
        "probing role"
    )
