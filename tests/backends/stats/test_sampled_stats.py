""":func:`sa_inbox.stats.collect` on real servers: exact counts on small tables, and the
sample of a large processed-messages table (estimates flagged, bounded reads) against the
exact figures of the same rows.

The table holds :data:`ROWS` claims over 7 days up to the database's clock, one every
:data:`SPACING`: ``billing`` (every other row) and ``audit`` (every fourth) throughout,
``legacy`` until 30 % of the window, ``shipping`` from 30 % to 50 %, then ``shipping-v2``,
whose first :data:`SHARED` claims are ids ``shipping`` had claimed (a renamed consumer). A
"large" table is made by lowering :data:`sa_inbox.stats.EXACT_BELOW` under the table's
size: the sample's code paths are the same at any size.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from rich.console import Console

from sa_inbox import Inbox
from sa_inbox import stats as stats_module
from sa_inbox.cli.stats import render
from sa_inbox.stats import (
    BISECT_PROBES,
    GROWTH_DAYS,
    SAMPLE_ROWS,
    SAMPLE_STRATA,
    ConsumerRename,
    ConsumerStats,
    InboxStats,
    collect,
)
from tests.conftest import importorskip

pytestmark = pytest.mark.backend

TABLE = "stats_sampled_inbox"
ROWS = 12_000
WINDOW = datetime.timedelta(days=7)
SPACING = WINDOW / ROWS
SHARED = 3


def consumer_of(n: int) -> str:
    if n % 2 == 0:
        return "billing"
    if n % 4 == 1:
        return "audit"
    if n < ROWS * 3 // 10:
        return "legacy"
    return "shipping" if n < ROWS // 2 else "shipping-v2"


def rows(now: Any) -> list[dict[str, Any]]:
    """The claims, oldest first; ``shipping-v2``'s first ones reuse ``shipping``'s ids."""
    made = [
        {
            "message_id": f"m-{n}",
            "consumer_name": consumer_of(n),
            "received_at": now - WINDOW + SPACING * (n + 1),
        }
        for n in range(ROWS)
    ]
    old = [r for r in made if r["consumer_name"] == "shipping"][-SHARED:]
    new = [r for r in made if r["consumer_name"] == "shipping-v2"][:SHARED]
    for renamed, earlier in zip(new, old, strict=True):
        renamed["message_id"] = earlier["message_id"]
    return made


@pytest.fixture
def filled(engine: sa.Engine) -> Iterator[sa.Engine]:
    metadata = sa.MetaData()
    inbox = Inbox(metadata, table_name=TABLE, consumers=False)
    metadata.drop_all(engine, checkfirst=True)
    metadata.create_all(engine)
    with engine.begin() as conn:
        now = conn.execute(sa.select(sa.func.current_timestamp())).scalar_one()
        conn.execute(inbox.table.insert(), rows(now))
    analyze(engine)
    yield engine
    metadata.drop_all(engine, checkfirst=True)


def analyze(engine: sa.Engine) -> None:
    """Fresh planner statistics, as autovacuum / InnoDB's automatic recalculation keep."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"ANALYZE {TABLE}")
        elif engine.dialect.name in ("mysql", "mariadb"):
            conn.exec_driver_sql(f"ANALYZE TABLE {TABLE}").all()


def sample(engine: sa.Engine, *, exact: bool = False) -> InboxStats:
    return collect(engine, inbox_table=TABLE, store_table=None, outbox_table=None, exact=exact)


def truth(engine: sa.Engine) -> dict[str, tuple[int, Any, Any]]:
    """Each consumer's rows, oldest and newest claim, counted by this test's own query."""
    t = sa.table(
        TABLE, sa.column("consumer_name"), sa.column("received_at", sa.DateTime(timezone=True))
    )
    query = sa.select(
        t.c.consumer_name,
        sa.func.count(),
        sa.func.min(t.c.received_at),
        sa.func.max(t.c.received_at),
    ).group_by(t.c.consumer_name)
    with engine.connect() as conn:
        return {name: (n, first, last) for name, n, first, last in conn.execute(query)}


def test_a_small_table_is_counted_exactly(filled: sa.Engine) -> None:
    """Under EXACT_BELOW (and on SQLite at any size): every figure exact, none flagged."""
    stats = sample(filled)
    expected = truth(filled)
    assert not stats.estimated and stats.sampled_rows == 0
    (table,) = stats.tables
    assert (table.rows, table.estimated) == (ROWS, False)
    assert {c.consumer_name: (c.rows, c.oldest, c.newest) for c in stats.consumers} == expected
    assert all(c.estimated == () for c in stats.consumers)
    assert stats.renames == [ConsumerRename("shipping", "shipping-v2", SHARED)]
    assert sum(sum(g.rows) for g in stats.growth) == ROWS
    assert not any(g.estimated for g in stats.growth)


def test_sqlite_is_counted_whatever_its_size(
    filled: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    if filled.dialect.name != "sqlite":
        pytest.skip("SQLite has no planner estimate; the servers are sampled below")
    monkeypatch.setattr(stats_module, "EXACT_BELOW", 0)
    stats = sample(filled)
    assert not stats.estimated and stats.tables[0].rows == ROWS


@pytest.fixture
def large(filled: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> sa.Engine:
    """The table taken for a large one: EXACT_BELOW under its size."""
    if filled.dialect.name == "sqlite":
        pytest.skip("SQLite is always counted")
    monkeypatch.setattr(stats_module, "EXACT_BELOW", ROWS // 10)
    return filled


def by_name(stats: InboxStats) -> dict[str, ConsumerStats]:
    return {c.consumer_name: c for c in stats.consumers}


def test_a_large_table_is_sampled_and_every_estimate_flagged(large: sa.Engine) -> None:
    stats = sample(large)
    expected = truth(large)
    (table,) = stats.tables
    assert table.estimated and stats.estimated
    # PostgreSQL's reltuples is exact after an ANALYZE that read every row; InnoDB's
    # TABLE_ROWS extrapolates from a few sampled pages
    assert 0.5 * ROWS <= table.rows <= 2 * ROWS
    found = by_name(stats)
    assert set(found) == set(expected)
    assert sum(c.rows for c in stats.consumers) == pytest.approx(table.rows, abs=len(found))
    for name, (count, oldest, newest) in expected.items():
        consumer = found[name]
        assert "rows" in consumer.estimated
        # the sample's share of each consumer, against the true share
        assert consumer.rows / table.rows == pytest.approx(count / ROWS, abs=0.02), name
        # the oldest/newest claim: exact, and flagged only where it was bisected
        assert (consumer.oldest, consumer.newest) == (oldest, newest), name
    assert found["billing"].estimated == found["audit"].estimated == ("rows",)
    assert found["legacy"].estimated == ("rows", "newest")
    assert found["shipping"].estimated == ("rows", "oldest", "newest")
    assert found["shipping-v2"].estimated == ("rows", "oldest")


def test_the_sample_reads_a_bounded_number_of_rows(large: sa.Engine) -> None:
    """The strata (with the growth's day edges), the newest rows and the bisections of the
    consumers that started or stopped inside the table, whatever its size."""
    stats = sample(large)
    bisected = sum(len(c.estimated) - 1 for c in stats.consumers)
    strata = SAMPLE_STRATA + GROWTH_DAYS + 1
    bound = strata * SAMPLE_ROWS + bisected * BISECT_PROBES * SAMPLE_ROWS
    assert 0 < stats.sampled_rows <= bound
    assert bisected == 4  # legacy's newest, shipping's oldest and newest, shipping-v2's oldest


def test_a_renamed_consumer_is_found_in_a_sampled_table(large: sa.Engine) -> None:
    (rename,) = sample(large).renames
    assert (rename.old, rename.new, rename.shared) == ("shipping", "shipping-v2", SHARED)
    # every claim of shipping-v2 lies within RENAME_SCAN entries of its first one here
    assert rename.checked == truth(large)["shipping-v2"][0]


def test_the_growth_of_a_sampled_table_is_estimated_per_day(large: sa.Engine) -> None:
    estimated = {g.group: g for g in sample(large).growth}
    exact = {g.group: g for g in sample(large, exact=True).growth}
    assert set(estimated) == set(exact)
    for name, day in estimated.items():
        assert day.estimated and not exact[name].estimated
        for got, want in zip(day.rows, exact[name].rows, strict=True):
            assert got == pytest.approx(want, abs=0.02 * ROWS), name


def test_exact_counts_every_row_however_large(large: sa.Engine) -> None:
    stats = sample(large, exact=True)
    assert not stats.estimated and stats.sampled_rows == 0
    assert stats.tables[0].rows == ROWS and not stats.tables[0].estimated
    assert {c.consumer_name: (c.rows, c.oldest, c.newest) for c in stats.consumers} == truth(large)
    assert stats.renames == [ConsumerRename("shipping", "shipping-v2", SHARED)]


def test_the_report_marks_the_estimates(large: sa.Engine) -> None:
    def printed(stats: InboxStats) -> str:
        console = Console(width=200, record=True)
        console.print(render(stats, []))
        return console.export_text()

    sampled = printed(sample(large))
    assert f"~{sample(large).tables[0].rows}" in sampled
    assert "~ estimated" in sampled and "--exact" in sampled
    exact = printed(sample(large, exact=True))
    assert "~" not in exact and str(ROWS) in exact


def test_the_prometheus_scrape_reports_the_sample(large: sa.Engine) -> None:
    """InboxCollector reads the same queries: its gauges are the sample's estimates."""
    importorskip("sa_inbox.hooks.prometheus", "prometheus")
    from prometheus_client import CollectorRegistry

    from sa_inbox.hooks.prometheus import InboxCollector

    registry = CollectorRegistry()
    InboxCollector(large, inbox_table=TABLE, min_interval=0, registry=registry)
    scraped = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in registry.collect()
        for sample in family.samples
    }
    expected = sample(large)
    assert scraped[("sa_inbox_sample_up", ())] == 1
    assert scraped[("sa_inbox_table_rows", (("table", TABLE),))] == expected.tables[0].rows
    for consumer in expected.consumers:
        key = ("sa_inbox_consumer_rows", (("consumer", consumer.consumer_name),))
        assert scraped[key] == consumer.rows


def test_a_failed_sample_leaves_the_rest_of_the_scrape_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The database refusing connections (a port nothing listens on): the scrape still
    serves the registry's other metrics, with ``sa_inbox_sample_up`` 0 and no sampled
    gauge, and one WARNING line; the next scrape tries the database again."""
    importorskip("sa_inbox.hooks.prometheus", "prometheus")
    from prometheus_client import CollectorRegistry, generate_latest

    from sa_inbox.hooks.prometheus import InboxCollector, PrometheusHooks

    down = sa.create_engine("postgresql+psycopg://nobody@127.0.0.1:9/none?connect_timeout=2")
    registry = CollectorRegistry()
    hooks = PrometheusHooks(registry)
    hooks.claimed("billing", new=1, duplicates=0, collisions=0, seconds=0.001)
    InboxCollector(down, inbox_table=TABLE, min_interval=0, registry=registry)
    for _ in range(2):
        with caplog.at_level("WARNING", logger="sa_inbox.hooks.prometheus"):
            text = generate_latest(registry).decode()
        assert "sa_inbox_sample_up 0.0" in text
        assert 'sa_inbox_claims_total{consumer="billing"} 1.0' in text
        assert "sa_inbox_table_rows{" not in text
    warned = [r for r in caplog.records if r.name == "sa_inbox.hooks.prometheus"]
    assert len(warned) == 2 and all("sample failed" in r.getMessage() for r in warned)
    assert all("\n" not in r.getMessage() for r in warned)


def test_registering_reads_nothing_and_a_second_collector_is_refused(tmp_path: Any) -> None:
    """The registry learns the collector's names from ``describe()`` (no sample at
    registration) and refuses a second collector of the same names, whose series every
    scrape would list twice."""
    importorskip("sa_inbox.hooks.prometheus", "prometheus")
    from prometheus_client import CollectorRegistry

    from sa_inbox.hooks.prometheus import InboxCollector

    engine = sa.create_engine(f"sqlite:///{tmp_path}/metrics.db")
    statements: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    registry = CollectorRegistry()
    InboxCollector(engine, inbox_table=TABLE, registry=registry)
    assert statements == []
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        InboxCollector(engine, inbox_table=TABLE, registry=registry)
    scraped = [s.name for family in registry.collect() for s in family.samples]
    assert scraped.count("sa_inbox_sample_up") == 1 and statements != []
