"""The hooks' cost: a delivery through :func:`sa_inbox.handle` with each kind of hooks.

Run from the repository root as ``python benchmarks/hooks_cost.py --url URL [--messages N]
[--rounds R] [--json PATH]``. Two measurements, both printed and written as JSON:

* **the no-op hooks' own work per delivery**: exactly the calls :func:`sa_inbox.handle` and
  :meth:`sa_inbox.Inbox.claim` make on a processed delivery (five ``span`` blocks,
  ``claimed``, ``handled``), timed with :func:`time.perf_counter_ns` over many repetitions,
  as a share of the median delivery's time;
* **deliveries per second** with the no-op hooks, :class:`PrometheusHooks` and
  :class:`OpenTelemetryHooks` (SDK providers with no exporter), in alternating rounds of
  ``messages`` deliveries each on the same engine (the order rotated every round), so the
  load of a shared machine falls on every contender alike; the median round of each is
  reported, with ``/proc/loadavg``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox.claim import Inbox
from sa_inbox.hooks import NOOP, InboxHooks
from sa_inbox.runner import handle

__all__ = ["main", "noop_cost_ns", "run"]


def noop_cost_ns(repeat: int = 200_000) -> float:
    """Nanoseconds of the no-op hooks' calls for one processed delivery (median of 5)."""
    samples = []
    for _ in range(5):
        start = time.perf_counter_ns()
        for _ in range(repeat):
            for name in ("inbox.process", "inbox.claim", "inbox.handler", "inbox.commit"):
                with NOOP.span(name, "c", "m", None):
                    pass
            NOOP.claimed("c", new=1, duplicates=0, collisions=0, seconds=0.0)
            NOOP.handled("c", seconds=0.0, failed=False)
            with NOOP.span("inbox.ack", "c", "m"):
                pass
        samples.append((time.perf_counter_ns() - start) / repeat)
    return statistics.median(samples)


def _contenders() -> dict[str, Callable[[], InboxHooks]]:
    contenders: dict[str, Callable[[], InboxHooks]] = {"noop": lambda: NOOP}
    try:
        from prometheus_client import CollectorRegistry

        from sa_inbox.hooks.prometheus import PrometheusHooks

        contenders["prometheus"] = lambda: PrometheusHooks(CollectorRegistry())
    except ImportError:  # pragma: no cover - the extra is not installed
        pass
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.trace import TracerProvider

        from sa_inbox.hooks.opentelemetry import OpenTelemetryHooks

        contenders["opentelemetry"] = lambda: OpenTelemetryHooks(TracerProvider(), MeterProvider())
    except ImportError:  # pragma: no cover
        pass
    return contenders


def _round(engine: sa.Engine, hooks: InboxHooks, messages: int) -> float:
    """Seconds for ``messages`` processed deliveries on a fresh inbox table."""
    metadata = sa.MetaData()
    inbox = Inbox(metadata, table_name="bench_hooks_inbox", hooks=hooks)
    ledger = sa.Table(
        "bench_hooks_ledger",
        metadata,
        sa.Column("id", sa.Integer, sa.Identity(), primary_key=True),
        sa.Column("message_id", sa.String(64), nullable=False),
        sa.Column("amount", sa.Numeric(10, 2), nullable=False),
    )
    metadata.drop_all(engine)
    metadata.create_all(engine)
    factory: Callable[[], Session] = sessionmaker(engine)
    ids = [uuid.uuid4().hex for _ in range(messages)]
    try:
        start = time.perf_counter()
        for mid in ids:

            def handler(session: Session, mid: str = mid) -> None:
                session.execute(ledger.insert().values(message_id=mid, amount=Decimal(1)))

            handle(factory, inbox, mid, "bench", handler, ack=lambda: None, nack=lambda: None)
        elapsed = time.perf_counter() - start
        with engine.connect() as conn:
            done = conn.execute(sa.select(sa.func.count()).select_from(ledger)).scalar_one()
        if done != messages:
            raise AssertionError(f"{done} ledger rows for {messages} deliveries")
        return elapsed
    finally:
        metadata.drop_all(engine)


def run(
    url: str, *, messages: int = 200, rounds: int = 5, noop_repeat: int = 200_000
) -> dict[str, Any]:
    """Run the benchmark; return its JSON document (figures and the machine load)."""
    engine = sa.create_engine(url)
    contenders = _contenders()
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    try:
        _round(engine, NOOP, min(messages, 20))  # warm-up: connections, statement cache
        names = list(contenders)
        for index in range(rounds):
            shift = index % len(names)  # rotate who goes first: no contender always starts
            for name in names[shift:] + names[:shift]:
                seconds[name].append(_round(engine, contenders[name](), messages))
    finally:
        engine.dispose()
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    per_delivery_ns = medians["noop"] / messages * 1e9
    cost = noop_cost_ns(noop_repeat)
    return {
        "backend": sa.make_url(url).get_backend_name(),
        "messages_per_round": messages,
        "rounds": rounds,
        "loadavg": _loadavg(),
        "deliveries_per_second_median": {n: messages / s for n, s in medians.items()},
        "ratio_to_noop": {n: medians["noop"] / s for n, s in medians.items()},
        "round_seconds": seconds,
        "noop_hooks_ns_per_delivery": cost,
        "noop_share_of_delivery": cost / per_delivery_ns,
        "delivery_ns_median": per_delivery_ns,
    }


def _loadavg() -> str | None:
    try:
        with open("/proc/loadavg") as f:
            return f.read().strip()
    except OSError:  # pragma: no cover - not Linux
        return None


def main(argv: list[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default="sqlite:///bench_hooks.db")
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None)
    parser.add_argument("--noop-repeat", type=int, default=200_000)
    args = parser.parse_args(argv)
    document = run(
        args.url, messages=args.messages, rounds=args.rounds, noop_repeat=args.noop_repeat
    )
    text = json.dumps(document, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":  # pragma: no cover
    main()
