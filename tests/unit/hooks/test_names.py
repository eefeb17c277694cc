"""One table of names (sa_inbox.hooks.names): the Prometheus and OpenTelemetry instruments
are built from it, the code logs no event it lacks, and the README, the Grafana dashboard
and the reference page name nothing else."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import sqlalchemy as sa
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest

from sa_inbox import Inbox, InboxStore
from sa_inbox.hooks import EVENTS
from sa_inbox.hooks.names import METRICS, NAMES, SPANS, reference
from sa_inbox.hooks.opentelemetry import OpenTelemetryHooks
from sa_inbox.hooks.prometheus import InboxCollector, PrometheusHooks, RelayMetrics
from sa_inbox.stats import Sampler

ROOT = Path(__file__).resolve().parents[3]
#: What prometheus_client appends to a metric's name in the exposition.
SUFFIXES = ("_bucket", "_sum", "_count", "_created")
HOOKED = [m for m in METRICS if not m.sampled]


def scraped_names(text: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}


def base_name(scraped: str, known: set[str]) -> str:
    """A scraped sample's metric: the name itself, or the name before a suffix."""
    if scraped in known:
        return scraped
    for suffix in SUFFIXES:
        stem = scraped.removesuffix(suffix)
        for candidate in (stem, f"{stem}_total"):
            if candidate in known:
                return candidate
    return scraped


def test_names_are_unique() -> None:
    assert len({n.name for n in NAMES}) == len(NAMES)
    otel = [m.otel_name for m in METRICS if m.otel_name is not None]
    assert len(set(otel)) == len(otel)


def test_prometheus_exports_exactly_the_table(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/n.db")
    metadata = sa.MetaData()
    inbox, store = Inbox(metadata), InboxStore(metadata)
    metadata.create_all(engine)
    with engine.begin() as conn:  # a row of each kind, so that every gauge has a sample
        inbox.claim(conn, "m", "c")
        store.receive(conn, "s", {})
    registry = CollectorRegistry()
    hooks = PrometheusHooks(registry)
    hooks.claimed("c", new=1, duplicates=1, collisions=1, seconds=0.001)
    hooks.handled("c", seconds=0.01, failed=True)
    hooks.retried("c", attempt=1)
    hooks.purged("t", rows=1, seconds=0.1)
    hooks.database_outage("c", seconds=1.0)
    hooks.dead_lettered("c", "delivery_limit")
    InboxCollector(engine, store_table="inbox_store", registry=registry)
    RelayMetrics(registry)
    scraped = scraped_names(generate_latest(registry).decode())
    engine.dispose()
    known = {m.name for m in METRICS}
    assert {base_name(name, known) for name in scraped} == known


def test_opentelemetry_instruments_are_the_table_s(tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    hooks = OpenTelemetryHooks(meter_provider=MeterProvider(metric_readers=[reader]))
    engine = sa.create_engine(f"sqlite:///{tmp_path}/o.db")
    metadata = sa.MetaData()
    inbox, store = Inbox(metadata), InboxStore(metadata)
    metadata.create_all(engine)
    with engine.begin() as conn:
        inbox.claim(conn, "m", "c")
        store.receive(conn, "s", {})
    hooks.observe(Sampler(engine, store_table="inbox_store"))
    hooks.claimed("c", new=1, duplicates=1, collisions=1, seconds=0.001)
    hooks.handled("c", seconds=0.01, failed=True)
    hooks.retried("c", attempt=1)
    hooks.purged("t", rows=1, seconds=0.1)
    hooks.database_outage("c", seconds=1.0)
    hooks.dead_lettered("c", "delivery_limit")
    data = reader.get_metrics_data()
    engine.dispose()
    recorded = {
        metric.name: (metric.unit, type(metric.data).__name__)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    kinds = {"counter": "Sum", "histogram": "Histogram", "gauge": "Gauge"}
    expected = {
        m.otel_name: (m.unit or "", kinds[m.otel_kind or m.kind])
        for m in METRICS
        if m.otel_name is not None
    }
    assert recorded == expected


def logged_event_names() -> set[str]:
    """Every ``inbox.<what>.<how>`` string of the package's code (f-strings expanded over
    the runner's phases)."""
    found: set[str] = set()
    for path in (ROOT / "sa_inbox").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if re.fullmatch(r"inbox\.[a-z_]+\.[a-z_]+", node.value):
                    found.add(node.value)
            elif isinstance(node, ast.JoinedStr):
                parts = [v.value if isinstance(v, ast.Constant) else "{}" for v in node.values]
                text = "".join(str(part) for part in parts)
                if re.fullmatch(r"inbox\.\{\}\.[a-z_]+", text):
                    found |= {text.replace("{}", phase) for phase in ("claim", "handler", "commit")}
    return found


def test_the_code_logs_only_events_of_the_table() -> None:
    found = logged_event_names()
    assert found >= {"inbox.claim.duplicate", "inbox.handler.failed"}
    assert found <= set(EVENTS)
    assert found == set(EVENTS)  # and the table lists no event the code never logs


def test_the_dashboard_plots_only_metrics_of_the_table() -> None:
    dashboard = json.loads((ROOT / "dashboards" / "sa-inbox.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\bsa_inbox_[a-z_]+", expr)}
    known = {m.name for m in METRICS}
    assert used and {base_name(name, known) for name in used} <= known


def _written_docs() -> str:
    """The README and the docs' pages, but the page generated from the table."""
    pages = [
        page
        for page in sorted((ROOT / "docs").rglob("*.md"))
        if "_build" not in page.parts and page.name != "telemetry.md"
    ]
    return "\n".join(path.read_text() for path in [ROOT / "README.md", *pages])


def test_the_docs_name_only_names_of_the_table() -> None:
    text = _written_docs()
    quoted = set(re.findall(r"`([^`\s]+)`", text))
    metrics = {q for q in quoted if re.fullmatch(r"sa_inbox_[a-z_]+(\{[a-z,]+\})?", q)}
    # the counters paragraph abbreviates "sa_inbox_x_total" as "_x_total"
    metrics |= {f"sa_inbox{q}" for q in quoted if re.fullmatch(r"_[a-z_]+(_total|_seconds)", q)}
    metrics = {re.sub(r"\{.*\}", "", name) for name in metrics}
    # a database, a cookie, an SQS message attribute
    metrics -= {"sa_inbox_test_gw0", "sa_inbox_console_csrf", "sa_inbox_dead_letter"}
    known = {m.name for m in METRICS}
    assert len(metrics) > 10 and metrics <= known, metrics - known
    events = {q for q in quoted if re.fullmatch(r"inbox\.[a-z_]+(\.[a-z_]+)?", q)}
    assert events and events <= {n.name for n in NAMES}, events - {n.name for n in NAMES}
    assert {s.name for s in SPANS} <= events


def test_the_reference_page_is_generated_from_the_table() -> None:
    page = ROOT / "docs" / "reference" / "telemetry.md"
    assert page.read_text() == reference(), "run: python scripts/telemetry_reference.py"
    assert all(f"`{n.name}`" in page.read_text() for n in NAMES)
