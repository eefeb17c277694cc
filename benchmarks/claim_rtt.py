"""The claim behind a network round trip: a business transaction with and without it.

Across availability zones a round trip costs 0.5-1 ms, so what the claim costs is the round
trips it adds. Here every connection crosses :class:`benchmarks.netdelay.DelayProxy`, which
holds each chunk 0.5 ms in each direction (``--delay-ms``; ``--delay-ms 0`` connects
directly, on loopback). The business transaction is the one of ``sa-inbox bench
claim_overhead``: insert a ledger row, add to an account's balance, commit (four round trips
on psycopg: ``BEGIN``, the insert, the update, ``COMMIT``; three on PyMySQL, whose
transaction begins implicitly). It is written as users write it, each way without and with
the claim, on a pooled engine (a checkout per transaction):

* ``core-handle``: ``handle(Session, inbox, message_id, "billing", handler)`` with a handler
  of Core statements, against ``with Session.begin() as session: handler(session)``;
* ``orm-handle``: the same with a handler of ORM calls (``session.add``, an ORM ``UPDATE``);
* ``orm-extension``: the session extension, ``register_claim()`` then the ORM calls, in
  ``with Claims.begin() as session:``, against the same block on a sessionmaker without it;
* ``core-connection``: ``with engine.begin() as conn: if inbox.claim(conn, …): …`` against
  the block without the claim.

The transactions alternate message by message (in a new random order each round),
so both sides of a ratio see the same moments of a shared machine. Per repeat and way: the
median latency without and with the claim and their ratio; the figures are the medians over
``--repeat`` repeats of those ratios (with their range). The ledger, balances and claims are
checked after each repeat. ``/proc/loadavg`` is sampled every 2 s. Prints a table; writes
``benchmarks/results/claim_rtt-<backend>.json`` (``--out``)::

    python -m benchmarks.claim_rtt --url "$SA_INBOX_TEST_POSTGRESQL_URL" --messages 300 --repeat 5
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session, sessionmaker

from benchmarks.loadavg import LoadSampler
from benchmarks.netdelay import DelayProxy, round_trip_us
from sa_inbox import handle, install, register_claim
from sa_inbox.bench.db import ACCOUNT, AMOUNT, LEDGER, Account, BenchSchema, LedgerEntry

CONSUMER = "billing"
RESULTS = Path(__file__).parent / "results"


def core_business(session: Session | sa.Connection, message_id: str) -> None:
    """The business change in Core statements: a ledger row, the balance."""
    session.execute(LEDGER.insert(), {"message_id": message_id, "account_id": 0, "amount": AMOUNT})
    session.execute(
        ACCOUNT.update().where(ACCOUNT.c.id == 0).values(balance=ACCOUNT.c.balance + AMOUNT)
    )


def orm_business(session: Session, message_id: str) -> None:
    """The business change in ORM calls: an added entity, an ORM-enabled UPDATE."""
    session.add(LedgerEntry(message_id=message_id, account_id=0, amount=AMOUNT))
    session.execute(
        sa.update(Account)
        .where(Account.id == 0)
        .values(balance=Account.balance + AMOUNT)
        .execution_options(synchronize_session=False)
    )


class Bench:
    """The engine, sessionmakers and inbox every way runs on."""

    def __init__(self, url: str) -> None:
        self.engine = sa.create_engine(url, pool_size=1, max_overflow=0)
        self.schema = BenchSchema(self.engine, accounts=1)
        self.inbox = self.schema.inbox
        self.plain: sessionmaker[Session] = sessionmaker(self.engine)
        self.claims: sessionmaker[Session] = sessionmaker(self.engine)
        install(self.claims)
        self.message_id = ""

    # Handlers named once, so the consumers table sees one owner per name.
    def core_handler(self, session: Session) -> None:
        core_business(session, self.message_id)

    def orm_handler(self, session: Session) -> None:
        orm_business(session, self.message_id)

    def _handle(self, handler: Callable[[Session], None], message_id: str) -> None:
        self.message_id = message_id
        consumer = f"{CONSUMER}-{handler.__name__}"  # one owner per consumer name
        result = handle(
            self.claims, self.inbox, message_id, consumer, handler, ack=_nothing, nack=_nothing
        )
        if result.outcome.value != "processed":
            raise SystemExit(f"{message_id}: {result.outcome} {result.error!r}")

    def core_handle_plain(self, message_id: str) -> None:
        self.message_id = message_id
        with self.plain.begin() as session:
            self.core_handler(session)

    def core_handle_claim(self, message_id: str) -> None:
        self._handle(self.core_handler, message_id)

    def orm_handle_plain(self, message_id: str) -> None:
        self.message_id = message_id
        with self.plain.begin() as session:
            self.orm_handler(session)

    def orm_handle_claim(self, message_id: str) -> None:
        self._handle(self.orm_handler, message_id)

    def orm_extension_plain(self, message_id: str) -> None:
        with self.plain.begin() as session:
            orm_business(session, message_id)

    def orm_extension_claim(self, message_id: str) -> None:
        with self.claims.begin() as session:
            register_claim(session, self.inbox, message_id, CONSUMER)
            orm_business(session, message_id)

    def core_connection_plain(self, message_id: str) -> None:
        with self.engine.begin() as conn:
            core_business(conn, message_id)

    def core_connection_claim(self, message_id: str) -> None:
        with self.engine.begin() as conn:
            if self.inbox.claim(conn, message_id, CONSUMER):
                core_business(conn, message_id)

    def ways(self) -> dict[str, tuple[Callable[[str], None], Callable[[str], None]]]:
        """way -> (without the claim, with it)."""
        return {
            "core-handle": (self.core_handle_plain, self.core_handle_claim),
            "orm-handle": (self.orm_handle_plain, self.orm_handle_claim),
            "orm-extension": (self.orm_extension_plain, self.orm_extension_claim),
            "core-connection": (self.core_connection_plain, self.core_connection_claim),
        }


def _nothing() -> None:
    return None


def one_repeat(bench: Bench, ways: list[str], messages: int, warmup: int) -> dict[str, Any]:
    """``warmup`` + ``messages`` transactions per way and side, alternating; the medians."""
    bench.schema.reset()
    pairs = bench.ways()
    times: dict[tuple[str, str], list[float]] = {
        (way, side): [] for way in ways for side in ("plain", "claim")
    }
    turns = [(way, side) for way in ways for side in ("plain", "claim")]
    shuffler = random.Random(messages)
    for i in range(-warmup, messages):
        for way, side in shuffler.sample(turns, len(turns)):
            run = pairs[way][0 if side == "plain" else 1]
            message_id = f"{side}-{way}-{i + warmup:06d}-{uuid.uuid4().hex[:6]}"
            t0 = time.perf_counter()
            run(message_id)
            elapsed = time.perf_counter() - t0
            if i >= 0:
                times[(way, side)].append(elapsed)
    transactions = (messages + warmup) * len(turns)
    expected = {
        "ledger_rows": transactions,
        "inbox_rows": (messages + warmup) * len(ways),
        "balance_total": str((AMOUNT * transactions).quantize(Decimal("0.01"))),
    }
    state = bench.schema.state()
    if state != expected:
        raise SystemExit(f"business state {state} differs from the expected {expected}")
    out: dict[str, Any] = {}
    for way in ways:
        plain = statistics.median(times[(way, "plain")]) * 1e6
        claim = statistics.median(times[(way, "claim")]) * 1e6
        out[way] = {"plain_us": plain, "claim_us": claim, "ratio": claim / plain}
    return out


def summarise(repeats: list[dict[str, Any]], ways: list[str]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for way in ways:
        ratios = [r[way]["ratio"] for r in repeats]
        summary[way] = {
            "plain_us": statistics.median(r[way]["plain_us"] for r in repeats),
            "claim_us": statistics.median(r[way]["claim_us"] for r in repeats),
            "ratio": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
    return summary


@contextmanager
def reached(url: str, delay_ms: float) -> Iterator[str]:
    """The URL the benchmark connects to: through a proxy, or ``url`` itself."""
    if delay_ms <= 0:
        yield url
        return
    with DelayProxy(url, delay_ms) as proxy:
        yield proxy.url


def versions() -> dict[str, str]:
    found = {}
    for name in ("sa-inbox", "sqlalchemy", "psycopg", "pymysql"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def main(args: argparse.Namespace) -> dict[str, Any]:
    ways = args.ways.split(",")
    started = datetime.datetime.now(datetime.UTC)
    direct = round_trip_us(sa.create_engine(args.url, poolclass=sa.pool.NullPool))
    with reached(args.url, args.delay_ms) as url:
        bench = Bench(url)
        backend = bench.engine.dialect.name
        rtt = round_trip_us(bench.engine)
        repeats: list[dict[str, Any]] = []
        try:
            with LoadSampler() as load:
                for n in range(args.repeat):
                    repeats.append(one_repeat(bench, ways, args.messages, args.warmup))
                    print(f"repeat {n + 1}/{args.repeat} done", flush=True)
            bench.schema.drop()
        finally:
            bench.engine.dispose()
    return {
        "scenario": "claim_rtt",
        "label": "business transaction with / without the claim, behind a delaying proxy",
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "backend": backend,
        "driver": bench.engine.dialect.driver,
        "delay_ms_each_way": args.delay_ms,
        "select_1_us": {"direct": direct, "through_proxy": rtt},
        "messages": args.messages,
        "warmup": args.warmup,
        "repeat": args.repeat,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "versions": versions(),
        },
        "loadavg": load.summary(),
        "repeats": repeats,
        "summary": summarise(repeats, ways),
    }


def table(results: dict[str, Any]) -> Table:
    rtt = results["select_1_us"]
    out = Table(
        "way",
        "µs without (median)",
        "µs with (median)",
        "added µs",
        "**with / without** (min-max)",
        title=(
            f"{results['backend']} ({results['driver']}): SELECT 1 {rtt['through_proxy']:.0f} µs "
            f"through the proxy, {rtt['direct']:.0f} µs direct; median of "
            f"{results['repeat']} repeats"
        ),
    )
    for way, f in results["summary"].items():
        out.add_row(
            way,
            f"{f['plain_us']:.0f}",
            f"{f['claim_us']:.0f}",
            f"{f['claim_us'] - f['plain_us']:+.0f}",
            f"{f['ratio']:.3f} ({f['ratio_min']:.3f}-{f['ratio_max']:.3f})",
        )
    load = results["loadavg"]
    out.caption = (
        f"load average during the run: median {load['median_1min']:.2f}, max "
        f"{load['max_1min']:.2f} (1-min, sampled every 2 s; {results['machine']['cpus']} CPUs)"
    )
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("SA_INBOX_TEST_POSTGRESQL_URL"))
    parser.add_argument("--delay-ms", type=float, default=0.5, help="per direction; 0: direct")
    parser.add_argument("--messages", type=int, default=300, help="timed, per way and side")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ways", default="core-handle,orm-handle,orm-extension,core-connection")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not args.url:
        parser.error("--url (or SA_INBOX_TEST_POSTGRESQL_URL) is required")
    if args.repeat < 5:
        parser.error("--repeat must be at least 5 (the figures are medians)")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    results = main(arguments)
    out = arguments.out or RESULTS / f"claim_rtt-{results['backend']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    Console(width=160).print(table(results))
    print(f"wrote {out}")
