"""A Kafka poll of 500 through the adapter's claim path, against the same rows on the raw
driver, and one transaction per record (the choice the adapter did not make).

Run from the repository root (SA_INBOX_TEST_POSTGRESQL_URL / SA_INBOX_TEST_MYSQL_URL set)::

    python benchmarks/kafka_poll.py --records 500 --repeat 5

Per database and round, the three variants alternate (their order rotates each round):

* ``adapter``: :class:`sa_inbox.brokers.kafka.poll.PollRunner` on 500 records, what the
  consumers run after a fetch: ``claim_batch`` (one statement), the attempts read, the
  handler per record (a ledger insert and a balance update, on the DBAPI cursor of the
  session's connection: the business rows cost the same in both variants), one commit;
* ``raw``: the same rows on the DBAPI connection in one transaction: one multi-row
  insert-or-skip of the 500 claims (``ON CONFLICT DO NOTHING`` / ``INSERT IGNORE``), then
  the ledger insert and the balance update per record, one commit;
* ``per_record``: the adapter's runner on each record alone (500 transactions).

No broker is involved (the records are made in memory): this measures the database side of
a poll. Prints the median milliseconds per poll and the ratios (also the *paired* ratio:
the median over rounds of each round's adapter/raw, the two runs of a round being
neighbours in time, so steadier on a shared machine) and the load average before and
after; writes
``benchmarks/results/kafka_poll.json``. Every run is checked: 500 ledger rows, 500 claims.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox.brokers.delivery import Delivery
from sa_inbox.brokers.kafka import kafka_tables
from sa_inbox.brokers.kafka.poll import PollRunner
from sa_inbox.brokers.kafka.records import make_record
from sa_inbox.brokers.kafka.state import Attempts
from sa_inbox.outage import OutageGate, probe_sessions
from tests.support.app import CONSUMER, App

OUT = Path(__file__).parent / "results" / "kafka_poll.json"


def records(n: int) -> list[Any]:
    run = uuid.uuid4().hex[:8]
    return [
        make_record(
            "payments", 0, i, b"1.00", None, [("message_id", f"{run}-{i}".encode())],
            key_header="message_id",
        )
        for i in range(n)
    ]  # fmt: skip


LEDGER = "INSERT INTO ledger (message_id, account_id, amount) VALUES (%s, 1, 1.00)"
BALANCE = "UPDATE accounts SET balance = balance + 1.00 WHERE id = 1"


def handler(app: App) -> Callable[[Session, Delivery], None]:
    """The business rows written as ``raw`` writes them (the DBAPI cursor of the session's
    connection, in its transaction): the two variants differ only by the claim path."""

    def apply(session: Session, delivery: Delivery) -> None:
        dbapi = session.connection().connection.dbapi_connection
        assert dbapi is not None
        cursor = dbapi.cursor()
        cursor.execute(LEDGER, (delivery.message_id,))
        cursor.execute(BALANCE)

    return apply


def runner(app: App) -> PollRunner:
    tables = kafka_tables(app.inbox)
    return PollRunner(
        session_factory=app.Session,
        inbox=app.inbox,
        consumer_name=CONSUMER,
        handler=handler(app),
        max_deliveries=5,
        attempts=Attempts(tables, CONSUMER),
        offsets=None,
        dead_letter=lambda *_: None,
        gate=OutageGate(CONSUMER),
        probe=probe_sessions(app.Session),
        sleep=time.sleep,
    )


def adapter(app: App, batch: list[Any]) -> float:
    run = runner(app)
    started = time.perf_counter()
    result = run.run(batch, batch, {})
    seconds = time.perf_counter() - started
    assert len(result.processed) == len(batch)
    return seconds


def per_record(app: App, batch: list[Any]) -> float:
    run = runner(app)
    started = time.perf_counter()
    for record in batch:
        run.run([record], [record], {})
    return time.perf_counter() - started


def raw(app: App, batch: list[Any]) -> float:
    backend = app.engine.dialect.name
    claim = (
        "INSERT INTO inbox_processed_messages (message_id, consumer_name) VALUES {} "
        "ON CONFLICT DO NOTHING"
        if backend != "mysql"
        else "INSERT IGNORE INTO inbox_processed_messages (message_id, consumer_name) VALUES {}"
    )
    ids = [r.delivery.message_id for r in batch]
    with app.engine.connect() as conn:
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None
        started = time.perf_counter()
        cursor = dbapi.cursor()
        cursor.execute(
            claim.format(", ".join(["(%s, %s)"] * len(ids))),
            [v for i in ids for v in (i, CONSUMER)],
        )
        for message_id in ids:
            cursor.execute(LEDGER, (message_id,))
            cursor.execute(BALANCE)
        dbapi.commit()
        return time.perf_counter() - started


VARIANTS = {"adapter": adapter, "raw": raw, "per_record": per_record}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    urls = {
        "postgresql": os.environ["SA_INBOX_TEST_POSTGRESQL_URL"],
        "mariadb": os.environ["SA_INBOX_TEST_MYSQL_URL"],
    }
    results: dict[str, Any] = {
        "records": args.records,
        "repeat": args.repeat,
        "load_average_before": os.getloadavg(),
    }
    for backend, url in urls.items():
        app = App(sa.create_engine(url))
        kafka_tables(app.inbox)
        figures: dict[str, list[float]] = {name: [] for name in VARIANTS}
        names = list(VARIANTS)
        for round_ in range(args.repeat):
            order = names[round_ % 3 :] + names[: round_ % 3]
            for name in order:
                app.reset()
                seconds = VARIANTS[name](app, records(args.records))
                assert len(app_ledger(app)) == args.records, name
                figures[name].append(seconds * 1000)
        app.drop()
        app.engine.dispose()
        medians = {name: statistics.median(values) for name, values in figures.items()}
        paired = statistics.median(
            a / r for a, r in zip(figures["adapter"], figures["raw"], strict=True)
        )
        results[backend] = {
            "ms_per_poll": medians,
            "runs_ms": figures,
            "adapter_over_raw": medians["adapter"] / medians["raw"],
            "paired_adapter_over_raw": paired,
            "per_record_over_adapter": medians["per_record"] / medians["adapter"],
        }
        print(
            f"{backend}: adapter {medians['adapter']:.1f} ms, raw {medians['raw']:.1f} ms, "
            f"per record {medians['per_record']:.1f} ms per poll of {args.records}; "
            f"adapter/raw x{medians['adapter'] / medians['raw']:.2f} "
            f"(paired, median of the rounds' ratios: x{paired:.2f}), "
            f"per-record/adapter x{medians['per_record'] / medians['adapter']:.1f}"
        )
    results["load_average_after"] = os.getloadavg()
    print(
        "load average (1, 5, 15 min): before "
        + ", ".join(f"{x:.1f}" for x in results["load_average_before"])
        + "; after "
        + ", ".join(f"{x:.1f}" for x in results["load_average_after"])
    )
    OUT.write_text(json.dumps(results, indent=2) + "\n")


def app_ledger(app: App) -> list[str]:
    with app.engine.connect() as conn:
        return list(conn.execute(sa.select(app.ledger.c.message_id)).scalars())


if __name__ == "__main__":
    main()
