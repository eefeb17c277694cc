"""Prometheus metrics for sa-inbox (extra ``sa-inbox[prometheus]``, ``prometheus_client``).

:class:`PrometheusHooks` counts and times what the runner, worker, claim and purge report;
:class:`InboxCollector` samples the tables on each scrape (never on the hot path), from
:func:`sa_inbox.stats.collect`, cached for ``min_interval`` seconds. Both build their
metrics from :data:`sa_inbox.hooks.names.METRICS` (names, kinds, labels, help texts; the
reference page lists them).

``sa-inbox worker --metrics-port N`` and ``sa-inbox relay --metrics-port N`` serve the
process's metrics (:class:`PrometheusHooks`, :class:`RelayMetrics`) with
``prometheus_client.start_http_server``.

The dedup hit rate per consumer is ``rate(sa_inbox_duplicates_total[5m]) /
(rate(sa_inbox_claims_total[5m]) + rate(sa_inbox_duplicates_total[5m]))`` (the Grafana
dashboard in ``dashboards/sa-inbox.json`` plots it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import sqlalchemy as sa

from .._optional import optional_dependencies
from ..outbox.relay import RelayBatch
from ..stats import InboxStats, Sampler
from ..validation import first_line
from . import InboxHooks, names

with optional_dependencies(__name__, "prometheus", "prometheus_client"):
    from prometheus_client import CollectorRegistry, Counter, Histogram
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.registry import REGISTRY, Collector

__all__ = ["InboxCollector", "PrometheusHooks", "RelayMetrics"]

logger = logging.getLogger(__name__)


class PrometheusHooks(InboxHooks):
    """:class:`~sa_inbox.hooks.InboxHooks` that feed ``prometheus_client`` metrics.

    :param registry: where the metrics are registered (default: the process-wide
        ``prometheus_client.REGISTRY``; tests pass their own ``CollectorRegistry``).
    :param namespace: the metric name prefix.
    :raises ValueError: (``prometheus_client``'s) if the registry already holds metrics of
        these names (make one ``PrometheusHooks`` per registry and share it).
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, *, namespace: str = "sa_inbox"
    ) -> None:
        registry = REGISTRY if registry is None else registry

        def counter(metric: names.Name) -> Counter:
            return Counter(*_spec(metric), namespace=namespace, registry=registry)

        def histogram(metric: names.Name) -> Histogram:
            return Histogram(*_spec(metric), namespace=namespace, registry=registry)

        self.claims = counter(names.CLAIMS)
        self.duplicates = counter(names.DUPLICATES)
        self.collisions = counter(names.COLLISIONS)
        self.retries = counter(names.TRANSIENT_RETRIES)
        self.failures = counter(names.HANDLER_FAILURES)
        self.dead_letters = counter(names.DEAD_LETTERS)
        self.claim_seconds = histogram(names.CLAIM_SECONDS)
        self.handler_seconds = histogram(names.HANDLER_SECONDS)
        self.purge_rows = counter(names.PURGE_ROWS)
        self.purge_seconds = histogram(names.PURGE_SECONDS)
        self.outages = counter(names.DATABASE_OUTAGES)
        self.outage_seconds = counter(names.DATABASE_OUTAGE_SECONDS)

    def claimed(
        self, consumer_name: str, *, new: int, duplicates: int, collisions: int, seconds: float
    ) -> None:
        if new:
            self.claims.labels(consumer_name).inc(new)
        if duplicates:
            self.duplicates.labels(consumer_name).inc(duplicates)
        if collisions:
            self.collisions.labels(consumer_name).inc(collisions)
        self.claim_seconds.labels(consumer_name).observe(seconds)

    def handled(self, consumer_name: str, *, seconds: float, failed: bool) -> None:
        self.handler_seconds.labels(consumer_name).observe(seconds)
        if failed:
            self.failures.labels(consumer_name).inc()

    def retried(self, consumer_name: str, *, attempt: int) -> None:
        self.retries.labels(consumer_name).inc()

    def purged(self, table: str, *, rows: int, seconds: float) -> None:
        self.purge_rows.labels(table).inc(rows)
        self.purge_seconds.labels(table).observe(seconds)

    def database_outage(self, consumer_name: str, *, seconds: float) -> None:
        self.outages.labels(consumer_name).inc()
        self.outage_seconds.labels(consumer_name).inc(seconds)

    def dead_lettered(self, consumer_name: str, reason: str) -> None:
        self.dead_letters.labels(consumer_name, reason).inc()


def _spec(metric: names.Name) -> tuple[str, str, tuple[str, ...]]:
    """The name (without namespace), help text and labels of ``metric``'s instrument."""
    return metric.prometheus_name, metric.description, metric.labels


class RelayMetrics:
    """Counts what an outbox relay does: pass :meth:`observe` as the relay's ``on_batch``
    (:class:`~sa_inbox.outbox.OutboxRelay`, :class:`~sa_inbox.asyncio.AsyncOutboxRelay`).

    ``sa_inbox_relay_messages_total{outcome}``: rows ``dispatched`` (confirmed by the
    broker), ``retried`` (refused, pending again after the back-off), ``dead`` and
    ``released`` (given back unpublished: the broker could not be reached);
    ``sa_inbox_relay_batches_total``: batches leased.

    :param registry: as :class:`PrometheusHooks`.
    :param namespace: the metric name prefix.
    """

    OUTCOMES = ("dispatched", "retried", "dead", "released")

    def __init__(
        self, registry: CollectorRegistry | None = None, *, namespace: str = "sa_inbox"
    ) -> None:
        registry = REGISTRY if registry is None else registry
        self.messages = Counter(
            *_spec(names.RELAY_MESSAGES), namespace=namespace, registry=registry
        )
        self.batches = Counter(*_spec(names.RELAY_BATCHES), namespace=namespace, registry=registry)
        for outcome in self.OUTCOMES:
            self.messages.labels(outcome)

    def observe(self, batch: RelayBatch) -> None:
        """Count one batch (never raises)."""
        self.batches.inc()
        for outcome in self.OUTCOMES:
            count = getattr(batch, outcome)
            if count:
                self.messages.labels(outcome).inc(count)


class InboxCollector(Collector):
    """Gauges sampled from the database on scrape: table rows and bytes, rows per consumer,
    recorded collisions, and the store's backlog (see :func:`sa_inbox.stats.collect`).

    One scrape runs the queries of :func:`~sa_inbox.stats.collect` on ``engine`` (counts,
    ``MIN(received_at)``, the catalog's sizes), at most once per ``min_interval`` seconds;
    scrapes in between get the cached sample. A sample that fails (the database down, a
    table unreadable) leaves the sampled gauges out of that scrape and sets
    ``sa_inbox_sample_up`` to 0, logged at WARNING: the registry's other metrics are still
    served.

    :param engine: the database.
    :param inbox_table: the processed-messages table's name, or None.
    :param store_table: the inbox store's table name, or None.
    :param min_interval: seconds a sample is reused for.
    :param registry: registered there (None: not registered; call ``registry.register``).
    :raises ValueError: (``prometheus_client``'s) if the registry already holds metrics of
        these names (another ``InboxCollector``: make one per registry).
    """

    def __init__(
        self,
        engine: sa.Engine,
        *,
        inbox_table: str | None = "inbox_processed_messages",
        store_table: str | None = None,
        min_interval: float = 15.0,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.sampler = Sampler(
            engine, inbox_table=inbox_table, store_table=store_table, min_interval=min_interval
        )
        if registry is not None:
            registry.register(self)

    def sample(self) -> InboxStats:
        """The latest sample (see :class:`~sa_inbox.stats.Sampler`)."""
        return self.sampler.sample()

    def describe(self) -> Iterator[Metric]:
        """The families :meth:`collect` yields, empty: the registry checks their names when
        it registers the collector (a second collector of the same names is refused) and
        reads no sample then."""
        for metric in names.METRICS:
            if metric.sampled:
                yield _gauge(metric)

    def collect(self) -> Iterator[Metric]:
        up = _gauge(names.SAMPLE_UP)
        try:
            stats = self.sample()
        except sa.exc.SQLAlchemyError as exc:
            logger.warning("the inbox metrics' sample failed: %s", first_line(exc))
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        rows, size = _gauge(names.TABLE_ROWS), _gauge(names.TABLE_BYTES)
        for table in stats.tables:
            rows.add_metric([table.name], table.rows)
            if table.total_bytes is not None:
                size.add_metric([table.name], table.total_bytes)
        yield rows
        yield size
        yield from _consumer_gauges(stats)
        yield from _store_gauges(stats)


def _gauge(metric: names.Name) -> GaugeMetricFamily:
    """An empty sampled gauge of ``metric`` (:data:`sa_inbox.hooks.names.METRICS`)."""
    return GaugeMetricFamily(metric.name, metric.description, labels=metric.labels)


def _consumer_gauges(stats: InboxStats) -> Iterator[Metric]:
    consumers, collisions = _gauge(names.CONSUMER_ROWS), _gauge(names.RECORDED_COLLISIONS)
    for consumer in stats.consumers:
        consumers.add_metric([consumer.consumer_name], consumer.rows)
        collisions.add_metric([consumer.consumer_name], consumer.collisions)
    yield consumers
    yield collisions


def _store_gauges(stats: InboxStats) -> Iterator[Metric]:
    store = stats.store
    if store is None:
        return
    messages = _gauge(names.STORE_MESSAGES)
    oldest = _gauge(names.STORE_OLDEST_PENDING_SECONDS)
    attempts = _gauge(names.STORE_ATTEMPTS)
    for consumer in store.consumers:
        for status, count in consumer.counts.items():
            messages.add_metric([consumer.consumer_name, status], count)
        if consumer.oldest_pending_seconds is not None:
            oldest.add_metric([consumer.consumer_name], consumer.oldest_pending_seconds)
    for made, count in sorted(store.attempts.items()):
        attempts.add_metric([str(made)], count)
    yield messages
    yield oldest
    yield attempts
