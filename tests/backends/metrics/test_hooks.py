"""The hooks on real servers: every counter equals what the database holds afterwards.

N deliveries through :func:`sa_inbox.handle` (D redeliveries with the same digest, C with a
different one, recorded, F failing handlers) against SQLite, PostgreSQL and MariaDB; the
Prometheus endpoint scraped over HTTP with ``urllib`` and parsed with ``prometheus_client``'s
own text parser; the OpenTelemetry spans read from the SDK's in-memory exporter.
"""

from __future__ import annotations

import datetime
import logging
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from sa_inbox import Inbox, InboxStore, Outcome, RetentionPolicy, handle
from sa_inbox import purge as purge_rows
from sa_inbox.collision import COLLISIONS_TABLE, payload_hash
from sa_inbox.hooks import MultiHooks
from sa_inbox.hooks.opentelemetry import OpenTelemetryHooks
from sa_inbox.hooks.prometheus import InboxCollector, PrometheusHooks
from sa_inbox.stats import Sampler
from sa_inbox.store import Incoming, Worker
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend

AMOUNT = Decimal("5.00")
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"


class Failing(Exception):
    pass


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def prom(registry: CollectorRegistry) -> PrometheusHooks:
    return PrometheusHooks(registry)


@pytest.fixture
def mapp(engine: sa.Engine, prom: PrometheusHooks) -> Iterator[App]:
    app = App(engine, on_collision="record", hooks=prom)
    app.reset()
    yield app
    app.drop()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def deliver(app: App, message_id: str, digest: bytes, fail: bool = False, **kw: Any) -> Outcome:
    def handler(session: Any) -> None:
        app.apply_payment(session, message_id, 1, AMOUNT)
        if fail:
            raise Failing(message_id)

    return handle(
        app.Session,
        app.inbox,
        message_id,
        CONSUMER,
        handler,
        ack=lambda: None,
        nack=lambda: None,
        payload_hash=digest,
        **kw,
    ).outcome


def collisions_in_db(app: App) -> int:
    table = app.metadata.tables[COLLISIONS_TABLE]
    with app.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def test_counters_equal_the_database(mapp: App, registry: CollectorRegistry) -> None:
    new, redeliveries, collisions, failing = 7, 4, 3, 2
    for i in range(new):
        assert deliver(mapp, f"m-{i}", payload_hash(i)) is Outcome.PROCESSED
    for i in range(redeliveries):
        assert deliver(mapp, f"m-{i}", payload_hash(i)) is Outcome.DUPLICATE
    for i in range(collisions):
        assert deliver(mapp, f"m-{i}", payload_hash(-1 - i)) is Outcome.DUPLICATE
    for i in range(failing):
        assert deliver(mapp, f"f-{i}", payload_hash(i), fail=True) is Outcome.FAILED
    deliveries = new + redeliveries + collisions + failing

    label = {"consumer": CONSUMER}
    assert mapp.inbox_rows() == new and mapp.ledger_rows() == new
    assert mapp.balance(1) == AMOUNT * new
    assert collisions_in_db(mapp) == collisions
    # claims: claim statements that inserted the row; a failing handler's rolls back with it
    assert value(registry, "sa_inbox_claims_total", **label) == new + failing
    assert value(registry, "sa_inbox_duplicates_total", **label) == redeliveries
    assert value(registry, "sa_inbox_collisions_total", **label) == collisions
    assert value(registry, "sa_inbox_handler_failures_total", **label) == failing
    assert value(registry, "sa_inbox_claim_seconds_count", **label) == deliveries
    assert value(registry, "sa_inbox_handler_seconds_count", **label) == new + failing
    assert value(registry, "sa_inbox_transient_retries_total", **label) == 0


def test_prometheus_endpoint_scraped_over_http(
    mapp: App, registry: CollectorRegistry, engine: sa.Engine
) -> None:
    store = InboxStore(mapp.metadata, table_name="metrics_store")
    store.table.create(engine)
    with engine.begin() as conn:
        store.receive_many(conn, [Incoming(f"s-{i}", {"i": i}) for i in range(5)])
    with engine.begin() as conn:  # one dead letter, one done
        t = store.table
        conn.execute(
            t.update().where(t.c.message_id == "s-0").values(status="dead", last_error="boom")
        )
        conn.execute(t.update().where(t.c.message_id == "s-1").values(status="done"))
    deliver(mapp, "m-1", payload_hash(1))
    deliver(mapp, "m-1", payload_hash(1))
    deliver(mapp, "m-1", payload_hash(2))
    InboxCollector(engine, store_table="metrics_store", registry=registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        port = server.server_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            assert reply.status == 200
            text = reply.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    c = (("consumer", CONSUMER),)
    assert samples[("sa_inbox_claims_total", c)] == 1
    assert samples[("sa_inbox_duplicates_total", c)] == 1
    assert samples[("sa_inbox_collisions_total", c)] == 1
    assert samples[("sa_inbox_consumer_rows", c)] == mapp.inbox_rows() == 1
    assert samples[("sa_inbox_recorded_collisions", c)] == 1
    assert samples[("sa_inbox_table_rows", (("table", "inbox_processed_messages"),))] == 1
    assert samples[("sa_inbox_table_rows", (("table", "metrics_store"),))] == 5
    store_labels = (("consumer", "default"), ("status", "{}"))
    counts = store.counts(engine)
    for status, count in counts.items():
        key = (
            "sa_inbox_store_messages",
            tuple(sorted((("consumer", "default"), ("status", status)))),
        )
        assert samples[key] == count, (status, store_labels)
    assert counts == {"pending": 3, "processing": 0, "done": 1, "dead": 1}
    assert samples[("sa_inbox_store_oldest_pending_seconds", (("consumer", "default"),))] >= 0
    if (
        engine.dialect.name != "sqlite"
        or ("sa_inbox_table_bytes", (("table", "metrics_store"),)) in samples
    ):
        assert samples[("sa_inbox_table_bytes", (("table", "metrics_store"),))] > 0


def test_spans_and_otel_metrics(engine: sa.Engine) -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    otel = OpenTelemetryHooks(tracer_provider, MeterProvider(metric_readers=[reader]))
    app = App(engine, hooks=MultiHooks(otel, PrometheusHooks(CollectorRegistry())))
    app.reset()
    try:
        headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_SPAN}-01"}
        assert deliver(app, "t-1", payload_hash(1), headers=headers) is Outcome.PROCESSED
        first = exporter.get_finished_spans()
        exporter.clear()
        assert deliver(app, "t-1", payload_hash(1)) is Outcome.DUPLICATE
        second = exporter.get_finished_spans()
        otel.observe(Sampler(engine, min_interval=0))
        data = reader.get_metrics_data()
        rows_in_db = app.inbox_rows()
    finally:
        app.drop()

    by_name = {span.name: span for span in first}
    assert sorted(by_name) == [
        "inbox.ack",
        "inbox.claim",
        "inbox.commit",
        "inbox.handler",
        "inbox.process",
    ]
    root = by_name["inbox.process"]
    assert format(root.context.trace_id, "032x") == TRACE_ID
    assert root.parent is not None and format(root.parent.span_id, "016x") == PARENT_SPAN
    for name in ("inbox.claim", "inbox.handler", "inbox.commit", "inbox.ack"):
        span = by_name[name]
        assert span.parent is not None and span.parent.span_id == root.context.span_id, name
        assert span.context.trace_id == root.context.trace_id
        assert span.attributes["messaging.message.id"] == "t-1"
        assert span.attributes["messaging.consumer.group.name"] == CONSUMER
    claim, handler, commit = (by_name[n] for n in ("inbox.claim", "inbox.handler", "inbox.commit"))
    assert claim.end_time <= handler.start_time and handler.end_time <= commit.start_time
    # the duplicate: a new trace (no headers), a claim and an ack, no handler, no parent
    names = sorted(span.name for span in second)
    assert names == ["inbox.ack", "inbox.claim", "inbox.commit", "inbox.process"]
    assert next(s for s in second if s.name == "inbox.process").parent is None

    points = {
        metric.name: sum(p.value for p in metric.data.data_points)  # type: ignore[attr-defined]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name in ("sa_inbox.claims", "sa_inbox.duplicates")
    }
    assert points == {"sa_inbox.claims": 1, "sa_inbox.duplicates": 1}
    gauges = {
        (metric.name, tuple(sorted(p.attributes.items()))): p.value  # type: ignore[attr-defined]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name in ("sa_inbox.table.rows", "sa_inbox.consumer.rows")
        for p in metric.data.data_points  # type: ignore[attr-defined]
    }
    table = (("db.collection.name", "inbox_processed_messages"),)
    assert gauges[("sa_inbox.table.rows", table)] == rows_in_db == 1
    assert gauges[("sa_inbox.consumer.rows", (("messaging.consumer.group.name", CONSUMER),))] == 1


def test_worker_and_purge_hooks(
    engine: sa.Engine, registry: CollectorRegistry, prom: PrometheusHooks
) -> None:
    metadata = sa.MetaData()
    store = InboxStore(metadata, table_name="hooks_store")
    inbox = Inbox(metadata, table_name="hooks_inbox", hooks=prom)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    try:
        with engine.begin() as conn:
            store.receive_many(conn, [Incoming(f"w-{i}", {"fail": i < 2}) for i in range(6)])

        def handler(session: Any, message: Any) -> None:
            if message.payload["fail"]:
                raise Failing(message.message_id)

        Worker(store.bind(engine), handler, max_attempts=1, hooks=prom).run(
            until_empty=True, max_seconds=30
        )
        counts = store.counts(engine)
        assert counts["done"] == 4 and counts["dead"] == 2
        label = {"consumer": "default"}
        assert value(registry, "sa_inbox_handler_seconds_count", **label) == 6
        assert value(registry, "sa_inbox_handler_failures_total", **label) == counts["dead"]

        old = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
        with engine.begin() as conn:
            conn.execute(
                inbox.table.insert(),
                [
                    {"message_id": f"old-{i}", "consumer_name": "c", "received_at": old}
                    for i in range(3)
                ],
            )
            conn.execute(inbox.table.insert(), [{"message_id": "new", "consumer_name": "c"}])
        policy = RetentionPolicy(
            max_redelivery=datetime.timedelta(hours=1), max_replay=datetime.timedelta(days=1)
        )
        deleted = purge_rows(engine, older_than=policy, table=inbox)
        with engine.connect() as conn:
            left = conn.execute(sa.select(sa.func.count()).select_from(inbox.table)).scalar_one()
        assert deleted == 3 and left == 1
        assert value(registry, "sa_inbox_purge_rows_total", table="hooks_inbox") == 3
        assert value(registry, "sa_inbox_purge_seconds_count", table="hooks_inbox") == 1
    finally:
        metadata.drop_all(engine)


def test_batch_mode_worker_reports_each_handler_run(
    engine: sa.Engine, registry: CollectorRegistry, prom: PrometheusHooks
) -> None:
    """In batch mode the handlers run in one transaction: each run is still reported (its
    share of the transaction's time), and a failure counted, as the store's rows say."""
    metadata = sa.MetaData()
    store = InboxStore(metadata, table_name="hooks_batch_store")
    metadata.drop_all(engine)
    metadata.create_all(engine)
    try:
        with engine.begin() as conn:
            store.receive_many(conn, [Incoming(f"b-{i}", {"fail": i == 3}) for i in range(8)])

        def handler(session: Any, message: Any) -> None:
            if message.payload["fail"]:
                raise Failing(message.message_id)

        worker = Worker(
            store.bind(engine), handler, max_attempts=1, hooks=prom, transaction="batch"
        )
        worker.run(until_empty=True, max_seconds=30)
        counts = store.counts(engine)
        assert counts["done"] == 7 and counts["dead"] == 1
        label = {"consumer": "default"}
        assert value(registry, "sa_inbox_handler_failures_total", **label) == counts["dead"]
        assert value(registry, "sa_inbox_handler_seconds_count", **label) == 8
    finally:
        metadata.drop_all(engine)


def test_log_events_carry_names_and_ids(mapp: App, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="sa_inbox")
    deliver(mapp, "l-1", payload_hash(1))
    deliver(mapp, "l-1", payload_hash(1))
    deliver(mapp, "l-1", payload_hash(2))
    deliver(mapp, "l-2", payload_hash(1), fail=True)
    events = {
        (r.event, r.message_id): r.getMessage()  # type: ignore[attr-defined]
        for r in caplog.records
        if hasattr(r, "event")
    }
    for event, message_id in [
        ("inbox.claim.duplicate", "l-1"),
        ("inbox.claim.collision", "l-1"),
        ("inbox.handler.failed", "l-2"),
    ]:
        assert message_id in events[(event, message_id)]


def test_store_receives_report_as_claims(
    engine: sa.Engine, registry: CollectorRegistry, prom: PrometheusHooks
) -> None:
    """A store receive counts as a claim: new, duplicates and collisions move as the stored
    rows say, for ``receive`` and ``receive_many``."""
    metadata = sa.MetaData()
    store = InboxStore(metadata, table_name="hooks_recv_store", on_collision="record", hooks=prom)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    try:
        with engine.begin() as conn:
            assert store.receive(conn, "r-1", {"n": 1}) is True
            assert store.receive(conn, "r-1", {"n": 1}) is False  # a redelivery
            other = {"n": 2}
            assert store.receive(conn, "r-1", other, payload_hash=payload_hash(other)) is False
            polled = [Incoming(f"r-{i}", {"n": i}) for i in range(1, 5)]
            assert store.receive_many(conn, polled) == {"r-2", "r-3", "r-4"}
        assert store.counts(engine)["pending"] == 4
        label = {"consumer": "default"}
        assert value(registry, "sa_inbox_claims_total", **label) == 4
        assert value(registry, "sa_inbox_duplicates_total", **label) == 2
        assert value(registry, "sa_inbox_collisions_total", **label) == 1
    finally:
        metadata.drop_all(engine)
