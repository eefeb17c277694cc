"""The hooks through the asyncio runner, on every async driver: the sync runner runs in a
greenlet, and the spans still nest (an outer span of the caller's task is the parent of
``inbox.process``), and the counters equal the database's rows."""

from __future__ import annotations

import functools

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from sa_inbox import Inbox, Outcome
from sa_inbox.asyncio import handle
from sa_inbox.hooks import MultiHooks
from sa_inbox.hooks.opentelemetry import OpenTelemetryHooks
from sa_inbox.hooks.prometheus import PrometheusHooks
from tests.backends.asyncio.test_async import pay, run
from tests.support.app import CONSUMER, App

pytestmark = pytest.mark.backend


def test_async_spans_nest_and_counters_match(app: App, async_url: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    inbox = Inbox.for_table(
        app.inbox.table, hooks=MultiHooks(OpenTelemetryHooks(provider), PrometheusHooks(registry))
    )

    async def scenario(engine: AsyncEngine) -> tuple[list[Outcome], int]:
        Session = async_sessionmaker(engine)
        with provider.get_tracer("test").start_as_current_span("outer") as outer:
            outcomes = [
                (
                    await handle(
                        Session,
                        inbox,
                        "a-1",
                        CONSUMER,
                        functools.partial(pay, app, message_id="a-1"),
                        ack=lambda: None,
                        nack=lambda: None,
                    )
                ).outcome
                for _ in range(2)
            ]
        return outcomes, outer.get_span_context().span_id

    outcomes, outer_id = run(async_url, scenario)
    assert outcomes == [Outcome.PROCESSED, Outcome.DUPLICATE]
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.name == "inbox.process"]
    assert len(roots) == 2 and all(r.parent and r.parent.span_id == outer_id for r in roots)
    first = roots[0].context.span_id
    children = sorted(s.name for s in spans if s.parent and s.parent.span_id == first)
    assert children == ["inbox.ack", "inbox.claim", "inbox.commit", "inbox.handler"]
    assert app.inbox_rows() == 1 and app.ledger_rows() == 1
    value = registry.get_sample_value
    assert value("sa_inbox_claims_total", {"consumer": CONSUMER}) == app.inbox_rows()
    assert value("sa_inbox_duplicates_total", {"consumer": CONSUMER}) == 1
