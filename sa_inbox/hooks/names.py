"""Every name sa-inbox reports under, in one table: log events, spans and metrics.

:data:`NAMES` is the one list. :class:`~sa_inbox.hooks.prometheus.PrometheusHooks`,
:class:`~sa_inbox.hooks.prometheus.InboxCollector` and
:class:`~sa_inbox.hooks.opentelemetry.OpenTelemetryHooks` build their instruments from it,
:data:`sa_inbox.hooks.EVENTS` is its events, and :func:`reference` renders it as the
Markdown reference page (``docs/reference/telemetry.md``, written by
``scripts/telemetry_reference.py``). The repository's tests check
the README and the Grafana dashboard against it.

A metric's :attr:`Name.name` is the Prometheus name as scraped (a counter with its
``_total``); :attr:`Name.otel_name` is the OpenTelemetry instrument's, where there is one.
Labels are Prometheus label names; OpenTelemetry carries them as the attributes of
:data:`ATTRIBUTES` (the OpenTelemetry semantic conventions' names where there is one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ATTRIBUTES",
    "CLAIMS",
    "CLAIM_SECONDS",
    "COLLISIONS",
    "CONSUMER_ATTRIBUTE",
    "CONSUMER_ROWS",
    "DATABASE_OUTAGES",
    "DATABASE_OUTAGE_SECONDS",
    "DEAD_LETTERS",
    "DEAD_LETTER_REASON_ATTRIBUTE",
    "DUPLICATES",
    "EVENTS",
    "HANDLER_FAILURES",
    "HANDLER_SECONDS",
    "MESSAGE_ID_ATTRIBUTE",
    "METRICS",
    "NAMES",
    "PURGE_ROWS",
    "PURGE_SECONDS",
    "RECORDED_COLLISIONS",
    "SAMPLE_UP",
    "SPANS",
    "STORE_ATTEMPTS",
    "STORE_MESSAGES",
    "STORE_OLDEST_PENDING_SECONDS",
    "TABLE_ATTRIBUTE",
    "TABLE_BYTES",
    "TABLE_ROWS",
    "TRANSIENT_RETRIES",
    "Kind",
    "Name",
    "reference",
]

#: What a name is: a log record's ``extra["event"]``, a span of
#: :meth:`~sa_inbox.hooks.InboxHooks.span`, or a metric of that instrument kind.
Kind = Literal["event", "span", "counter", "histogram", "gauge"]

MESSAGE_ID_ATTRIBUTE = "messaging.message.id"
CONSUMER_ATTRIBUTE = "messaging.consumer.group.name"
TABLE_ATTRIBUTE = "db.collection.name"
#: Why a delivery was dead-lettered (a :class:`~sa_inbox.brokers.DeadLetterReason` value).
DEAD_LETTER_REASON_ATTRIBUTE = "sa_inbox.dead_letter.reason"

#: Prometheus label -> OpenTelemetry attribute.
ATTRIBUTES = {
    "consumer": CONSUMER_ATTRIBUTE,
    "table": TABLE_ATTRIBUTE,
    "reason": DEAD_LETTER_REASON_ATTRIBUTE,
    "status": "status",
    "attempts": "attempts",
    "outcome": "outcome",
}


@dataclass(frozen=True)
class Name:
    """One reported name.

    :param name: the log event, the span, or the Prometheus metric as scraped.
    :param kind: see :data:`Kind`.
    :param description: what it reports (a metric's help text).
    :param labels: a metric's Prometheus labels (see :data:`ATTRIBUTES`).
    :param unit: a metric's unit, UCUM as OpenTelemetry takes it (``"s"``, ``"By"``), or
        ``None`` for a count.
    :param otel_name: the OpenTelemetry instrument's name, or ``None`` where
        OpenTelemetry has no such instrument.
    :param otel_kind: the OpenTelemetry instrument's kind where it differs from ``kind``.
    :param sampled: a gauge read from the tables at each scrape or collection
        (:func:`sa_inbox.stats.collect`), not counted on the hot path.
    """

    name: str
    kind: Kind
    description: str
    labels: tuple[str, ...] = ()
    unit: str | None = None
    otel_name: str | None = None
    otel_kind: Kind | None = None
    sampled: bool = False

    @property
    def prometheus_name(self) -> str:
        """The name given to ``prometheus_client`` without its namespace and the
        ``_total`` it appends to a counter (``claims`` for ``sa_inbox_claims_total``)."""
        name = self.name.removeprefix("sa_inbox_")
        return name.removesuffix("_total") if self.kind == "counter" else name

    @property
    def otel_attributes(self) -> tuple[str, ...]:
        """The OpenTelemetry attributes of :attr:`labels`."""
        return tuple(ATTRIBUTES[label] for label in self.labels)


def _event(name: str, description: str) -> Name:
    return Name(name, "event", description)


def _span(name: str, description: str) -> Name:
    return Name(name, "span", description)


_CONSUMER = ("consumer",)
_TABLE = ("table",)

EVENTS = (
    _event(
        "inbox.claim.duplicate", "a delivery met its id already claimed: acked, handler skipped"
    ),
    _event("inbox.claim.collision", "a claim's payload digest differs from the stored one"),
    _event("inbox.claim.failed", "the claim failed (e.g. a collision raised): rolled back, nacked"),
    _event("inbox.handler.failed", "the handler or the database failed: rolled back, nacked"),
    _event(
        "inbox.commit.failed",
        "the commit failed, e.g. a Galera certification failure (1213) on the last attempt: "
        "rolled back, nacked",
    ),
    _event(
        "inbox.transaction.retry", "a deadlock or serialization failure: the transaction reruns"
    ),
    _event("inbox.configuration.error", "a configuration error: neither acked nor nacked"),
    _event("inbox.purge.done", "a purge finished (rows deleted, seconds)"),
    _event(
        "inbox.purge.retry",
        "a purge batch rolled back by a transient error (e.g. Galera 1213) reruns",
    ),
    _event(
        "inbox.database.unavailable",
        "the database cannot be reached: deliveries held uncounted, the database probed "
        "with back-off (once per outage, WARNING)",
    ),
    _event("inbox.database.available", "the database answers again: the outage's seconds (INFO)"),
    _event(
        "inbox.delivery.dead_lettered",
        "a broker delivery went to the dead-letter queue / stream, unprocessed (reason in "
        'extra["reason"]: a DeadLetterReason value)',
    ),
    _event(
        "inbox.connection.invalidated",
        "a failed transaction's connection was not clean: invalidated, not pooled",
    ),
    _event(
        "inbox.key.missing",
        "a run of deliveries without the key header passed the limit: the consumer stops "
        "(MissingKeyHeader, ERROR)",
    ),
)

SPANS = (
    _span("inbox.process", "one delivery (kind CONSUMER; the parent: a W3C traceparent)"),
    _span("inbox.claim", "the claim, per attempt"),
    _span("inbox.handler", "the handler, per attempt, if the claim was new"),
    _span("inbox.commit", "the commit, per attempt"),
    _span("inbox.ack", "the broker's ack"),
)

CLAIMS = Name(
    "sa_inbox_claims_total",
    "counter",
    "Messages newly claimed.",
    _CONSUMER,
    otel_name="sa_inbox.claims",
)
DUPLICATES = Name(
    "sa_inbox_duplicates_total",
    "counter",
    "Redeliveries skipped as already claimed.",
    _CONSUMER,
    otel_name="sa_inbox.duplicates",
)
COLLISIONS = Name(
    "sa_inbox_collisions_total",
    "counter",
    "Ids claimed by a different message.",
    _CONSUMER,
    otel_name="sa_inbox.collisions",
)
TRANSIENT_RETRIES = Name(
    "sa_inbox_transient_retries_total",
    "counter",
    "Transactions rerun after a deadlock or serialization failure.",
    _CONSUMER,
    otel_name="sa_inbox.transient_retries",
)
HANDLER_FAILURES = Name(
    "sa_inbox_handler_failures_total",
    "counter",
    "Handler runs rolled back.",
    _CONSUMER,
    otel_name="sa_inbox.handler_failures",
)
DEAD_LETTERS = Name(
    "sa_inbox_dead_letters_total",
    "counter",
    "Deliveries dead-lettered, by reason.",
    ("consumer", "reason"),
    otel_name="sa_inbox.dead_letters",
)
CLAIM_SECONDS = Name(
    "sa_inbox_claim_seconds",
    "histogram",
    "Claim latency in seconds.",
    _CONSUMER,
    "s",
    otel_name="sa_inbox.claim.duration",
)
HANDLER_SECONDS = Name(
    "sa_inbox_handler_seconds",
    "histogram",
    "Handler latency in seconds.",
    _CONSUMER,
    "s",
    otel_name="sa_inbox.handler.duration",
)
PURGE_ROWS = Name(
    "sa_inbox_purge_rows_total",
    "counter",
    "Rows deleted by purges.",
    _TABLE,
    otel_name="sa_inbox.purge.rows",
)
PURGE_SECONDS = Name(
    "sa_inbox_purge_seconds",
    "histogram",
    "Purge duration in seconds.",
    _TABLE,
    "s",
    otel_name="sa_inbox.purge.duration",
)
DATABASE_OUTAGES = Name(
    "sa_inbox_database_outages_total",
    "counter",
    "Database outages ridden out.",
    _CONSUMER,
    otel_name="sa_inbox.database.outages",
)
DATABASE_OUTAGE_SECONDS = Name(
    "sa_inbox_database_outage_seconds_total",
    "counter",
    "Seconds the database could not be reached.",
    _CONSUMER,
    "s",
    otel_name="sa_inbox.database.outage.duration",
    otel_kind="histogram",
)
TABLE_ROWS = Name(
    "sa_inbox_table_rows",
    "gauge",
    "Rows per table.",
    _TABLE,
    otel_name="sa_inbox.table.rows",
    sampled=True,
)
TABLE_BYTES = Name(
    "sa_inbox_table_bytes",
    "gauge",
    "Table plus index bytes.",
    _TABLE,
    "By",
    otel_name="sa_inbox.table.bytes",
    sampled=True,
)
CONSUMER_ROWS = Name(
    "sa_inbox_consumer_rows",
    "gauge",
    "Processed-message rows per consumer.",
    _CONSUMER,
    otel_name="sa_inbox.consumer.rows",
    sampled=True,
)
RECORDED_COLLISIONS = Name(
    "sa_inbox_recorded_collisions",
    "gauge",
    "Rows in the collisions table.",
    _CONSUMER,
    sampled=True,
)
STORE_MESSAGES = Name(
    "sa_inbox_store_messages",
    "gauge",
    "Store rows by status.",
    ("consumer", "status"),
    otel_name="sa_inbox.store.messages",
    sampled=True,
)
STORE_OLDEST_PENDING_SECONDS = Name(
    "sa_inbox_store_oldest_pending_seconds",
    "gauge",
    "Age of the oldest pending row.",
    _CONSUMER,
    "s",
    otel_name="sa_inbox.store.oldest_pending_age",
    sampled=True,
)
STORE_ATTEMPTS = Name(
    "sa_inbox_store_attempts",
    "gauge",
    "Unfinished rows by attempts made.",
    ("attempts",),
    sampled=True,
)
SAMPLE_UP = Name(
    "sa_inbox_sample_up",
    "gauge",
    "1 if the scrape's sample read the database, 0 if it failed (the other sampled "
    "gauges are then left out).",
    sampled=True,
)
RELAY_MESSAGES = Name(
    "sa_inbox_relay_messages_total",
    "counter",
    "Outbox rows the relay handled, by outcome.",
    ("outcome",),
)
RELAY_BATCHES = Name("sa_inbox_relay_batches_total", "counter", "Batches the relay leased.")

METRICS = (
    CLAIMS,
    DUPLICATES,
    COLLISIONS,
    TRANSIENT_RETRIES,
    HANDLER_FAILURES,
    DEAD_LETTERS,
    CLAIM_SECONDS,
    HANDLER_SECONDS,
    PURGE_ROWS,
    PURGE_SECONDS,
    DATABASE_OUTAGES,
    DATABASE_OUTAGE_SECONDS,
    TABLE_ROWS,
    TABLE_BYTES,
    CONSUMER_ROWS,
    RECORDED_COLLISIONS,
    STORE_MESSAGES,
    STORE_OLDEST_PENDING_SECONDS,
    STORE_ATTEMPTS,
    SAMPLE_UP,
    RELAY_MESSAGES,
    RELAY_BATCHES,
)

#: Every name sa-inbox reports under.
NAMES: tuple[Name, ...] = EVENTS + SPANS + METRICS


def _cell(values: tuple[str, ...] | str | None) -> str:
    if not values:
        return ""
    if isinstance(values, str):
        return f"`{values}`"
    return ", ".join(f"`{value}`" for value in values)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def reference() -> str:
    """:data:`NAMES` as a Markdown page: the log events, the spans, the metrics."""
    metric_rows = []
    for metric in METRICS:
        otel = _cell(metric.otel_name)
        if metric.otel_kind is not None:
            otel += f" ({metric.otel_kind})"
        source = "sampled" if metric.sampled else "hooks"
        metric_rows.append(
            [
                _cell(metric.name),
                metric.kind,
                _cell(metric.labels),
                metric.unit or "",
                otel,
                source,
                metric.description,
            ]
        )
    lines = [
        "# Log events, spans and metrics",
        "",
        "Generated from `sa_inbox.hooks.names` by `scripts/telemetry_reference.py`.",
        "",
        '## Log events (`extra["event"]`)',
        "",
        *_table(["event", "meaning"], [[_cell(e.name), e.description] for e in EVENTS]),
        "",
        "## Spans",
        "",
        *_table(["span", "what"], [[_cell(s.name), s.description] for s in SPANS]),
        "",
        "## Metrics",
        "",
        "OpenTelemetry attributes of the labels: "
        + ", ".join(f"`{label}` is `{attribute}`" for label, attribute in ATTRIBUTES.items())
        + ".",
        "",
        *_table(
            ["Prometheus", "kind", "labels", "unit", "OpenTelemetry", "source", "description"],
            metric_rows,
        ),
    ]
    return "\n".join(lines) + "\n"
