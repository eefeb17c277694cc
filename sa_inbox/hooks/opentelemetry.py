"""OpenTelemetry metrics and traces for sa-inbox (extra ``sa-inbox[opentelemetry]``).

:class:`OpenTelemetryHooks` records the counters and histograms of
:class:`~sa_inbox.hooks.prometheus.PrometheusHooks` through the OpenTelemetry metrics API,
built from :data:`sa_inbox.hooks.names.METRICS` (each metric's ``otel_name``, kind, unit
and attributes), and traces each delivery of :func:`sa_inbox.handle`::

    inbox.process            (kind CONSUMER; parent: the W3C traceparent of the headers)
    ├── inbox.claim          (per attempt)
    ├── inbox.handler        (per attempt, if the claim was new)
    ├── inbox.commit         (per attempt)
    └── inbox.ack

Every span carries ``messaging.message.id`` and ``messaging.consumer.group.name`` (the
OpenTelemetry messaging semantic conventions). The trace context is read from the headers
with the W3C Trace Context propagator (``traceparent``/``tracestate``), whatever global
propagator the application set.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager

from .._optional import optional_dependencies
from ..stats import Sampler
from . import InboxHooks, names
from .names import (
    CONSUMER_ATTRIBUTE,
    DEAD_LETTER_REASON_ATTRIBUTE,
    MESSAGE_ID_ATTRIBUTE,
    TABLE_ATTRIBUTE,
)

with optional_dependencies(__name__, "opentelemetry", "opentelemetry.trace"):
    from opentelemetry import metrics, trace
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "CONSUMER_ATTRIBUTE",
    "DEAD_LETTER_REASON_ATTRIBUTE",
    "MESSAGE_ID_ATTRIBUTE",
    "OpenTelemetryHooks",
]

_W3C = TraceContextTextMapPropagator()


class OpenTelemetryHooks(InboxHooks):
    """:class:`~sa_inbox.hooks.InboxHooks` on the OpenTelemetry API.

    :param tracer_provider: default: the global one (``trace.get_tracer_provider()``).
    :param meter_provider: default: the global one (``metrics.get_meter_provider()``).
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.tracer = trace.get_tracer("sa_inbox", tracer_provider=tracer_provider)
        self.meter = meter = metrics.get_meter("sa_inbox", meter_provider=meter_provider)
        self.claims = _counter(meter, names.CLAIMS)
        self.duplicates = _counter(meter, names.DUPLICATES)
        self.collisions = _counter(meter, names.COLLISIONS)
        self.retries = _counter(meter, names.TRANSIENT_RETRIES)
        self.failures = _counter(meter, names.HANDLER_FAILURES)
        self.dead_letters = _counter(meter, names.DEAD_LETTERS)
        self.claim_duration = _histogram(meter, names.CLAIM_SECONDS)
        self.handler_duration = _histogram(meter, names.HANDLER_SECONDS)
        self.purge_rows = _counter(meter, names.PURGE_ROWS)
        self.purge_duration = _histogram(meter, names.PURGE_SECONDS)
        self.outages = _counter(meter, names.DATABASE_OUTAGES)
        self.outage_duration = _histogram(meter, names.DATABASE_OUTAGE_SECONDS)

    def observe(self, sampler: Sampler) -> None:
        """Register observable gauges read from ``sampler`` at each collection (never on
        the hot path): the sampled metrics of :data:`sa_inbox.hooks.names.METRICS` that
        have an OpenTelemetry name (table rows and bytes, rows per consumer, store rows by
        status, the oldest pending row's age).

        :param sampler: e.g. ``Sampler(engine, store_table="inbox_store")``.
        """

        def tables(options: CallbackOptions) -> list[Observation]:
            return [Observation(t.rows, {TABLE_ATTRIBUTE: t.name}) for t in sampler.sample().tables]

        def sizes(options: CallbackOptions) -> list[Observation]:
            return [
                Observation(t.total_bytes, {TABLE_ATTRIBUTE: t.name})
                for t in sampler.sample().tables
                if t.total_bytes is not None
            ]

        def consumers(options: CallbackOptions) -> list[Observation]:
            return [
                Observation(c.rows, {CONSUMER_ATTRIBUTE: c.consumer_name})
                for c in sampler.sample().consumers
            ]

        def store(options: CallbackOptions) -> list[Observation]:
            sample = sampler.sample().store
            if sample is None:
                return []
            return [
                Observation(count, {CONSUMER_ATTRIBUTE: c.consumer_name, "status": status})
                for c in sample.consumers
                for status, count in c.counts.items()
            ]

        def oldest(options: CallbackOptions) -> list[Observation]:
            sample = sampler.sample().store
            if sample is None:
                return []
            return [
                Observation(c.oldest_pending_seconds, {CONSUMER_ATTRIBUTE: c.consumer_name})
                for c in sample.consumers
                if c.oldest_pending_seconds is not None
            ]

        for metric, callback in (
            (names.TABLE_ROWS, tables),
            (names.TABLE_BYTES, sizes),
            (names.CONSUMER_ROWS, consumers),
            (names.STORE_MESSAGES, store),
            (names.STORE_OLDEST_PENDING_SECONDS, oldest),
        ):
            assert metric.otel_name is not None
            self.meter.create_observable_gauge(
                metric.otel_name,
                [callback],
                unit=metric.unit or "",
                description=metric.description,
            )

    def claimed(
        self, consumer_name: str, *, new: int, duplicates: int, collisions: int, seconds: float
    ) -> None:
        attributes = {CONSUMER_ATTRIBUTE: consumer_name}
        if new:
            self.claims.add(new, attributes)
        if duplicates:
            self.duplicates.add(duplicates, attributes)
        if collisions:
            self.collisions.add(collisions, attributes)
        self.claim_duration.record(seconds, attributes)

    def handled(self, consumer_name: str, *, seconds: float, failed: bool) -> None:
        attributes = {CONSUMER_ATTRIBUTE: consumer_name}
        self.handler_duration.record(seconds, attributes)
        if failed:
            self.failures.add(1, attributes)

    def retried(self, consumer_name: str, *, attempt: int) -> None:
        self.retries.add(1, {CONSUMER_ATTRIBUTE: consumer_name})

    def purged(self, table: str, *, rows: int, seconds: float) -> None:
        self.purge_rows.add(rows, {TABLE_ATTRIBUTE: table})
        self.purge_duration.record(seconds, {TABLE_ATTRIBUTE: table})

    def database_outage(self, consumer_name: str, *, seconds: float) -> None:
        attributes = {CONSUMER_ATTRIBUTE: consumer_name}
        self.outages.add(1, attributes)
        self.outage_duration.record(seconds, attributes)

    def dead_lettered(self, consumer_name: str, reason: str) -> None:
        attributes = {CONSUMER_ATTRIBUTE: consumer_name, DEAD_LETTER_REASON_ATTRIBUTE: reason}
        self.dead_letters.add(1, attributes)

    def span(
        self,
        name: str,
        consumer_name: str,
        message_id: str,
        headers: Mapping[str, str] | None = None,
    ) -> AbstractContextManager[object]:
        return self._span(name, consumer_name, message_id, headers)

    @contextmanager
    def _span(
        self, name: str, consumer_name: str, message_id: str, headers: Mapping[str, str] | None
    ) -> Iterator[object]:
        context = _W3C.extract(dict(headers)) if headers else None
        kind = trace.SpanKind.CONSUMER if name == "inbox.process" else trace.SpanKind.INTERNAL
        attributes = {MESSAGE_ID_ATTRIBUTE: message_id, CONSUMER_ATTRIBUTE: consumer_name}
        with self.tracer.start_as_current_span(
            name, context=context, kind=kind, attributes=attributes
        ) as span:
            yield span


def _counter(meter: metrics.Meter, metric: names.Name) -> metrics.Counter:
    """The counter of ``metric`` on ``meter`` (its OpenTelemetry name, unit, description)."""
    assert (metric.otel_kind or metric.kind) == "counter" and metric.otel_name is not None
    return meter.create_counter(
        metric.otel_name, unit=metric.unit or "", description=metric.description
    )


def _histogram(meter: metrics.Meter, metric: names.Name) -> metrics.Histogram:
    """The histogram of ``metric`` on ``meter`` (its OpenTelemetry name, unit, description)."""
    assert (metric.otel_kind or metric.kind) == "histogram" and metric.otel_name is not None
    return meter.create_histogram(
        metric.otel_name, unit=metric.unit or "", description=metric.description
    )
