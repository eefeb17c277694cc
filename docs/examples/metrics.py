"""Metrics: Prometheus counters from the hooks, gauges sampled from the tables on scrape."""

import os

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy.orm import sessionmaker

from sa_inbox import Inbox, handle
from sa_inbox.hooks import MultiHooks
from sa_inbox.hooks.prometheus import InboxCollector, PrometheusHooks

registry = CollectorRegistry()  # in an application: prometheus_client.REGISTRY
hooks = MultiHooks(PrometheusHooks(registry))  # add OpenTelemetryHooks() for traces
metadata = sa.MetaData()
inbox = Inbox(metadata, hooks=hooks)  # the claim and handle() report here
engine = sa.create_engine(os.environ.get("DATABASE_URL", "sqlite:///metrics.db"))
metadata.drop_all(engine)
metadata.create_all(engine)
InboxCollector(engine, registry=registry)  # table rows and bytes, sampled on scrape
Session = sessionmaker(engine)



def bill(session):
    """The business change."""


for message_id in ("m-1", "m-2", "m-1"):
    handle(
        Session,
        inbox,
        message_id,
        "billing",
        bill,
        ack=lambda: None,
        nack=lambda: None,
    )

# start_http_server(9464, registry=registry) serves this to Prometheus
text = generate_latest(registry).decode()
print("\n".join(line for line in text.splitlines() if line.startswith("sa_inbox_claims")))
assert 'sa_inbox_claims_total{consumer="billing"} 2.0' in text
assert 'sa_inbox_duplicates_total{consumer="billing"} 1.0' in text
