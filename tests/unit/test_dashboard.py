"""The Grafana dashboard in the repo plots only metrics sa-inbox exports (names checked
against a live registry: PrometheusHooks and InboxCollector on a SQLite file)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest

from sa_inbox import Inbox, InboxStore
from sa_inbox.hooks.prometheus import InboxCollector, PrometheusHooks

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "sa-inbox.json"


def exported_names(tmp_path: Path) -> set[str]:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/d.db")
    metadata = sa.MetaData()
    inbox, store = Inbox(metadata), InboxStore(metadata)
    metadata.create_all(engine)
    registry = CollectorRegistry()
    hooks = PrometheusHooks(registry)
    with engine.begin() as conn:  # one sample of every labelled metric
        inbox.claim(conn, "m", "c")
        store.receive(conn, "s", {})
    hooks.claimed("c", new=1, duplicates=1, collisions=1, seconds=0.001)
    hooks.handled("c", seconds=0.01, failed=True)
    hooks.retried("c", attempt=1)
    hooks.purged("t", rows=1, seconds=0.1)
    hooks.dead_lettered("c", "delivery_limit")
    InboxCollector(engine, store_table="inbox_store", registry=registry)
    text = generate_latest(registry).decode()
    engine.dispose()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}


def test_every_dashboard_metric_is_exported(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\bsa_inbox_[a-z_]+", expr)}
    exported = exported_names(tmp_path)
    assert used and used <= exported, used - exported
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
