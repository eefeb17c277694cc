"""A live source of sa-inbox metrics for Prometheus, and the plot of what Prometheus scraped.

``python scripts/metrics_demo.py serve --url URL --port 9464 --seconds 120`` runs
deliveries through :func:`sa_inbox.handle` (new messages, redeliveries, id collisions
recorded, failing handlers) and an inbox store with a :class:`~sa_inbox.Worker` (some
messages go dead), with :class:`PrometheusHooks` and an :class:`InboxCollector` served on
``/metrics``; ``python scripts/metrics_demo.py plot --prometheus http://127.0.0.1:19090
--out docs/metrics.png`` reads the dashboard's queries back from the Prometheus server's
HTTP API (``/api/v1/query_range``) and draws them with matplotlib.

Used to make docs/metrics.png (docs/how-to/metrics.md) from a real Prometheus scrape (the
dashboard itself, ``dashboards/sa-inbox.json``, is for Grafana, which is not installed here).
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
import urllib.parse
import urllib.request
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from prometheus_client import REGISTRY, start_http_server
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox import Inbox, InboxStore, Worker, handle
from sa_inbox.collision import payload_hash
from sa_inbox.hooks.prometheus import InboxCollector, PrometheusHooks

CONSUMERS = ("billing", "shipping")


class Boom(Exception):
    pass


def serve(url: str, port: int, seconds: float, rate: float) -> None:
    engine = sa.create_engine(url)
    metadata = sa.MetaData()
    hooks = PrometheusHooks()
    inbox = Inbox(metadata, on_collision="record", hooks=hooks)
    store = InboxStore(metadata)
    ledger = sa.Table(
        "demo_metrics_ledger",
        metadata,
        sa.Column("id", sa.Integer, sa.Identity(), primary_key=True),
        sa.Column("message_id", sa.String(64)),
        sa.Column("amount", sa.Numeric(10, 2)),
    )
    metadata.drop_all(engine)
    metadata.create_all(engine)
    InboxCollector(engine, store_table="inbox_store", min_interval=2.0, registry=REGISTRY)
    start_http_server(port, addr="127.0.0.1")
    factory: Any = sessionmaker(engine)

    def store_handler(session: Session, message: Any) -> None:
        time.sleep(random.uniform(0.001, 0.01))
        if message.payload.get("poison"):
            raise Boom(message.message_id)

    worker = Worker(
        store.bind(engine), store_handler, max_attempts=2, hooks=hooks, poll_interval=0.2
    )
    stop = threading.Event()
    thread = threading.Thread(target=lambda: worker.run(max_seconds=seconds), daemon=True)
    thread.start()
    rng = random.Random(7)
    seen: list[tuple[str, str, int]] = []
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline and not stop.is_set():
        n += 1
        consumer = rng.choice(CONSUMERS)
        roll = rng.random()
        if seen and roll < 0.2:
            consumer, mid, body = rng.choice(seen)  # a redelivery
        elif seen and roll < 0.23:
            consumer, mid, _ = rng.choice(seen)
            body = -n  # another producer reused the id
        else:
            mid, body = f"m-{n}", n
            seen.append((consumer, mid, body))
        fail = rng.random() < 0.04

        def handler(session: Session, mid: str = mid, fail: bool = fail) -> None:
            time.sleep(rng.uniform(0.001, 0.02))
            session.execute(ledger.insert().values(message_id=mid, amount=Decimal(1)))
            if fail:
                raise Boom(mid)

        handle(
            factory,
            inbox,
            mid,
            consumer,
            handler,
            ack=lambda: None,
            nack=lambda: None,
            payload_hash=payload_hash(body),
        )
        if n % 5 == 0:
            with engine.begin() as conn:
                store.receive(conn, f"s-{n}", {"n": n, "poison": rng.random() < 0.05})
        # deliveries come about three times faster in the middle third
        phase = (time.monotonic() - (deadline - seconds)) / seconds
        time.sleep(max(0.0, 1 / rate * (0.3 if 0.33 < phase < 0.66 else 1)))
    worker.stop()
    thread.join(timeout=30)
    time.sleep(5)  # a last scrape
    engine.dispose()


PLOTS = [
    (
        "Claims and duplicates /s",
        [
            ("sum by (consumer) (rate(sa_inbox_claims_total[30s]))", "claims {consumer}"),
            ("sum by (consumer) (rate(sa_inbox_duplicates_total[30s]))", "duplicates {consumer}"),
        ],
    ),
    (
        "Dedup hit rate",
        [
            (
                "sum by (consumer) (rate(sa_inbox_duplicates_total[30s])) / (sum by (consumer) "
                "(rate(sa_inbox_claims_total[30s])) + sum by (consumer) "
                "(rate(sa_inbox_duplicates_total[30s])))",
                "{consumer}",
            )
        ],
    ),
    ("Collisions (total)", [("sum by (consumer) (sa_inbox_collisions_total)", "{consumer}")]),
    (
        "Handler failures /s",
        [("sum by (consumer) (rate(sa_inbox_handler_failures_total[30s]))", "{consumer}")],
    ),
    (
        "Claim latency p99 (s)",
        [
            (
                "histogram_quantile(0.99, sum by (le, consumer) "
                "(rate(sa_inbox_claim_seconds_bucket[30s])))",
                "{consumer}",
            )
        ],
    ),
    (
        "Handler latency p99 (s)",
        [
            (
                "histogram_quantile(0.99, sum by (le, consumer) "
                "(rate(sa_inbox_handler_seconds_bucket[30s])))",
                "{consumer}",
            )
        ],
    ),
    ("Store backlog", [('sum by (status) (sa_inbox_store_messages{status!="done"})', "{status}")]),
    ("Oldest pending age (s)", [("max(sa_inbox_store_oldest_pending_seconds)", "oldest")]),
    ("Table rows", [("sa_inbox_table_rows", "{table}")]),
]


def query_range(prometheus: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": 2})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{params}", timeout=30) as r:
        document = json.load(r)
    if document["status"] != "success":
        raise RuntimeError(document)
    return document["data"]["result"]  # type: ignore[no-any-return]


def plot(prometheus: str, out: str, minutes: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = time.time()
    start = end - minutes * 60
    fig, axes = plt.subplots(3, 3, figsize=(15, 10))
    for ax, (title, queries) in zip(axes.flat, PLOTS, strict=True):
        for expr, label in queries:
            for series in query_range(prometheus, expr, start, end):
                xs = [float(t) - start for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                ax.plot(xs, ys, label=label.format(**series["metric"]) if "{" in label else label)
        ax.set_title(title)
        ax.set_xlabel("seconds")
        ax.legend(fontsize=7)
    fig.suptitle(
        f"sa-inbox metrics scraped by Prometheus ({prometheus}), queries of "
        "dashboards/sa-inbox.json"
    )
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--url", default="sqlite:///metrics_demo.db")
    s.add_argument("--port", type=int, default=9464)
    s.add_argument("--seconds", type=float, default=120)
    s.add_argument("--rate", type=float, default=40, help="deliveries per second, about")
    p = sub.add_parser("plot")
    p.add_argument("--prometheus", default="http://127.0.0.1:19090")
    p.add_argument("--out", default="docs/metrics.png")
    p.add_argument("--minutes", type=float, default=3)
    args = parser.parse_args()
    if args.command == "serve":
        serve(args.url, args.port, args.seconds, args.rate)
    else:
        plot(args.prometheus, args.out, args.minutes)


if __name__ == "__main__":
    main()
