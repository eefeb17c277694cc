"""What the console reads and does on the database and the brokers: each a plain function
on an Engine (the routes run them in Starlette's thread pool).

The overview is :func:`sa_inbox.stats.collect` and :func:`~sa_inbox.stats.stats_warnings`
(the queries and verdicts of ``sa-inbox stats --check``), the dead-letter lists
:func:`sa_inbox.stats.dead_letters`, the replays :meth:`InboxStore.replay
<sa_inbox.store.InboxStore.replay>` and :meth:`RelayCore.replay
<sa_inbox.outbox.relay.RelayCore.replay>` under the confirmation rule of
:func:`sa_inbox.store.replay.guarded_replay` (the CLI's), and the broker's dead letters
:mod:`sa_inbox.brokers.dead_letters`. Only the lookup of one message id and a row's detail
are the console's own queries, each on the table's unique key (or primary key).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import sqlalchemy as sa

from ..collision import payload_hash
from ..exc import InvalidArgument
from ..outbox import Outbox
from ..outbox.relay import RelayCore
from ..outbox.schema import DEFAULT_OUTBOX_TABLE, DISPATCHED, outbox_table
from ..schema import DEFAULT_TABLE_NAME
from ..stats import (
    DEAD_LETTERS_SHOWN,
    DeadLetter,
    DeadLetterFilter,
    InboxStats,
    StatsWarning,
    collect,
    dead_letters,
    stats_warnings,
)
from ..store import InboxStore
from ..store.replay import ReplayOutcome, guarded_replay
from ..store.schema import DEAD, DEFAULT_STORE_TABLE, DONE, inbox_store_table

__all__ = [
    "MAX_FILTERED_IDS",
    "SOURCES",
    "Lookup",
    "ReplayRequest",
    "Tables",
    "dead_letter_detail",
    "list_dead_letters",
    "lookup",
    "overview",
    "replay",
]

#: The tables a dead letter can be in, and the status of their rows whose messages went
#: through (a replay of those needs a confirmation).
SOURCES = {"store": DONE, "outbox": DISPATCHED}
#: A replay by filter that names an error text replays the ids it matches: at most this many.
MAX_FILTERED_IDS = 1000


@dataclass(frozen=True)
class Tables:
    """The tables the console reads: None for one the service does not have.

    :raises InvalidArgument: for a name that is not a non-empty string.
    """

    inbox: str | None = DEFAULT_TABLE_NAME
    store: str | None = DEFAULT_STORE_TABLE
    outbox: str | None = DEFAULT_OUTBOX_TABLE
    schema: str | None = None

    def __post_init__(self) -> None:
        for name in ("inbox", "store", "outbox", "schema"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidArgument(f"the console's {name} table must be a name or None")

    def of(self, source: str) -> str:
        """The table of a dead-letter ``source``.

        :raises InvalidArgument: for an unknown source, or one the console has no table of.
        """
        if source not in SOURCES:
            raise InvalidArgument(f"source must be one of {', '.join(SOURCES)}: {source!r}")
        name: str | None = getattr(self, source)
        if name is None:
            raise InvalidArgument(f"the console was given no {source} table")
        return name

    def present(self, engine: sa.Engine) -> dict[str, str]:
        """role -> table name, for the tables that exist now."""
        inspector = sa.inspect(engine)
        return {
            role: name
            for role in ("inbox", "store", "outbox")
            if (name := getattr(self, role)) is not None
            and inspector.has_table(name, schema=self.schema)
        }


def overview(
    engine: sa.Engine,
    tables: Tables,
    *,
    retention: datetime.timedelta | None,
    pending_threshold: datetime.timedelta,
    dead_letter_queues: Sequence[Any] = (),
    broker_timeout: float = 5.0,
) -> tuple[InboxStats, list[StatsWarning]]:
    """The sample and verdicts of ``sa-inbox stats --check`` (see :mod:`sa_inbox.stats`),
    the broker dead-letter queues counted when given."""
    stats = collect(
        engine,
        inbox_table=tables.inbox,
        store_table=tables.store,
        schema=tables.schema,
        outbox_table=tables.outbox,
    )
    if dead_letter_queues:
        from ..brokers.dead_letters import sample

        stats = replace(
            stats, dead_letter_queues=sample(dead_letter_queues, timeout=broker_timeout)
        )
    found = stats_warnings(stats, retention=retention, pending_threshold=pending_threshold)
    return stats, found


@dataclass(frozen=True)
class Lookup:
    """Where one message id is: its claims in the processed-messages table (one per
    consumer), its store rows (one per consumer) and its outbox row; each a dict of
    JSON-ready values (times ISO 8601, digests hex)."""

    message_id: str
    claims: list[dict[str, Any]] = field(default_factory=list)
    stored: list[dict[str, Any]] = field(default_factory=list)
    published: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return bool(self.claims or self.stored or self.published)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "found": self.found}


def lookup(engine: sa.Engine, tables: Tables, message_id: str) -> Lookup:
    """Where ``message_id`` is (see :class:`Lookup`): one query per table, on its key.

    :raises InvalidArgument: for an empty or over-long id.
    """
    if not isinstance(message_id, str) or not message_id or len(message_id) > 1000:
        raise InvalidArgument("a message id is 1 to 1000 characters")
    present = tables.present(engine)
    missing = [
        n for r in ("inbox", "store", "outbox") if (n := getattr(tables, r)) and r not in present
    ]
    found = Lookup(message_id, missing=missing)
    with engine.connect() as conn:
        if "inbox" in present:
            found.claims.extend(_claims(conn, present["inbox"], tables.schema, message_id))
        if "store" in present:
            t = inbox_store_table(sa.MetaData(), table_name=present["store"], schema=tables.schema)
            rows = conn.execute(sa.select(t).where(t.c.message_id == message_id).order_by(t.c.id))
            found.stored.extend(_row(r, "store") for r in rows.mappings())
        if "outbox" in present:
            t = outbox_table(sa.MetaData(), table_name=present["outbox"], schema=tables.schema)
            rows = conn.execute(sa.select(t).where(t.c.message_id == message_id))
            found.published.extend(_row(r, "outbox") for r in rows.mappings())
    return found


#: The processed-messages table's typed columns (the others are strings).
CLAIM_TYPES: dict[str, Any] = {
    "received_at": sa.DateTime(timezone=True),
    "payload_hash": sa.LargeBinary(),
}


def _claims(
    conn: sa.Connection, name: str, schema: str | None, message_id: str
) -> list[dict[str, Any]]:
    """The processed-messages rows of ``message_id``: the columns the table has (the
    optional ones, ``message_type``, ``correlation_id`` and ``payload_hash``, may be
    absent)."""
    columns = {c["name"] for c in sa.inspect(conn).get_columns(name, schema=schema)}
    wanted = ["consumer_name", "received_at", "message_type", "correlation_id", "payload_hash"]
    t = sa.table(
        name,
        sa.column("message_id", sa.String()),
        *(sa.column(c, CLAIM_TYPES.get(c, sa.String())) for c in wanted if c in columns),
        schema=schema,
    )
    query = sa.select(*(t.c[c] for c in wanted if c in columns)).where(t.c.message_id == message_id)
    return [_plain(dict(row)) for row in conn.execute(query.order_by(t.c.consumer_name)).mappings()]


def _row(row: Any, source: str) -> dict[str, Any]:
    """A store or outbox row, JSON-ready: the payload shown as text (JSON indented, an
    outbox body decoded as UTF-8 where it is, else hex) with its :func:`payload_hash`."""
    values = dict(row)
    payload = values.pop("payload")
    values["payload_hash"] = payload_hash(payload).hex()
    if source == "store":
        values["payload_text"] = json.dumps(payload, indent=2, ensure_ascii=False, default=str)
    else:
        body = bytes(payload)
        try:
            values["payload_text"] = body.decode("utf-8")
        except UnicodeDecodeError:
            values["payload_text"] = f"(binary, {len(body)} bytes) {body[:512].hex()}"
    values["source"] = source
    return _plain(values)


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, datetime.datetime):
            value = value.isoformat()
        elif isinstance(value, bytes | bytearray | memoryview):
            value = bytes(value).hex()
        out[key] = value
    return out


def list_dead_letters(
    engine: sa.Engine,
    tables: Tables,
    source: str,
    chosen: DeadLetterFilter,
    limit: int = DEAD_LETTERS_SHOWN * 5,
) -> list[DeadLetter]:
    """The dead rows of the store or the outbox (``source``) that ``chosen`` matches, the
    newest first (:func:`sa_inbox.stats.dead_letters`); [] if the table does not exist.

    :raises InvalidArgument: as :meth:`Tables.of`.
    """
    name = tables.of(source)
    if not sa.inspect(engine).has_table(name, schema=tables.schema):
        return []
    with engine.connect() as conn:
        return dead_letters(conn, source, name, schema=tables.schema, chosen=chosen, limit=limit)


def dead_letter_detail(
    engine: sa.Engine, tables: Tables, source: str, row_id: int
) -> dict[str, Any] | None:
    """The whole row ``row_id`` of the store or the outbox, JSON-ready (see :func:`_row`),
    or None if there is none."""
    name = tables.of(source)
    metadata = sa.MetaData()
    t = (
        inbox_store_table(metadata, table_name=name, schema=tables.schema)
        if source == "store"
        else outbox_table(metadata, table_name=name, schema=tables.schema)
    )
    with engine.connect() as conn:
        row = conn.execute(sa.select(t).where(t.c.id == row_id)).mappings().first()
    return None if row is None else _row(row, source)


@dataclass(frozen=True)
class ReplayRequest:
    """Which rows of the store or outbox a replay chooses.

    :param source: ``"store"`` or ``"outbox"``.
    :param ids: row ids (the selected, or the one of a detail page).
    :param status: ``dead`` (the dead-letter pages), the finished status, or None (every
        replayable status: the rows ``ids`` name).
    :param group: the consumer (store) or destination (outbox).
    :param error: a substring of ``last_error``: the replay takes the ids of the dead rows
        it matches, at most :data:`MAX_FILTERED_IDS`.
    :param arrived_from: arrived at or after (aware).
    :param arrived_before: arrived before (aware).
    """

    source: str
    ids: tuple[int, ...] | None = None
    status: str | None = DEAD
    group: str | None = None
    error: str | None = None
    arrived_from: datetime.datetime | None = None
    arrived_before: datetime.datetime | None = None

    def describe(self) -> dict[str, Any]:
        """JSON-ready, for the log and the confirmation page."""
        return _plain({k: v for k, v in asdict(self).items() if v not in (None, ())})


def replay(
    engine: sa.Engine, tables: Tables, chosen: ReplayRequest, *, dry_run: bool, confirmed: bool
) -> ReplayOutcome:
    """Replay the rows ``chosen`` names, by the rule of
    :func:`~sa_inbox.store.replay.guarded_replay` (the CLI's): counted first; rows whose
    messages went through are reset only when ``confirmed``.

    :raises InvalidArgument: for filters the replay refuses (no row filter, a status that
        cannot be replayed, a naive time), or an error text matching more than
        :data:`MAX_FILTERED_IDS` dead rows.
    """
    name = tables.of(chosen.source)
    ids = list(chosen.ids) if chosen.ids is not None else None
    if chosen.error:
        matched = list_dead_letters(
            engine,
            tables,
            chosen.source,
            DeadLetterFilter(
                chosen.group, chosen.error, chosen.arrived_from, chosen.arrived_before
            ),
            limit=MAX_FILTERED_IDS + 1,
        )
        if len(matched) > MAX_FILTERED_IDS:
            raise InvalidArgument(
                f"the error text matches more than {MAX_FILTERED_IDS} dead letters: narrow "
                "the filter (consumer, time range)"
            )
        found = {d.id for d in matched}
        ids = sorted(found if ids is None else found.intersection(ids))
    filters: dict[str, Any] = {"ids": ids, "status": chosen.status}
    finished = SOURCES[chosen.source]
    if chosen.source == "store":
        store = InboxStore(sa.MetaData(), table_name=name, schema=tables.schema)
        filters.update(
            consumer_name=chosen.group,
            received_from=chosen.arrived_from,
            received_before=chosen.arrived_before,
        )
        return guarded_replay(
            lambda status: store.replayable(engine, **{**filters, "status": status}),
            lambda: store.replay(engine, **filters),
            status=chosen.status,
            finished=finished,
            dry_run=dry_run,
            confirmed=confirmed,
        )
    core = RelayCore(engine, Outbox(sa.MetaData(), table_name=name, schema=tables.schema))
    filters.update(
        destination=chosen.group,
        created_from=chosen.arrived_from,
        created_before=chosen.arrived_before,
    )
    return guarded_replay(
        lambda status: core.replayable(**{**filters, "status": status}),
        lambda: core.replay(**filters),
        status=chosen.status,
        finished=finished,
        dry_run=dry_run,
        confirmed=confirmed,
    )
