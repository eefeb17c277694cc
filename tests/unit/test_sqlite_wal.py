"""One SQLite WAL set-up (``sa_inbox.bench.db.sqlite_wal``) for the benchmarks, the demo and
the tests that run worker processes."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from sa_inbox.bench import db
from sa_inbox.bench.db import make_engine, sqlite_wal
from sa_inbox.demo.db import make_engine as demo_engine
from tests.support.store_app import make_engine as store_test_engine


def _pragmas(engine: sa.Engine) -> tuple[str, int]:
    try:
        with engine.connect() as conn:
            mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar_one()
            synchronous = conn.exec_driver_sql("PRAGMA synchronous").scalar_one()
    finally:
        engine.dispose()
    return str(mode), int(synchronous)


def test_every_sqlite_engine_of_the_project_runs_in_wal(tmp_path: Path) -> None:
    for i, factory in enumerate([make_engine, demo_engine, store_test_engine]):
        engine = factory(f"sqlite:///{tmp_path}/{i}.db")
        assert _pragmas(engine) == ("wal", 1), factory  # synchronous=NORMAL is 1


def test_a_plain_engine_is_switched_and_others_are_left_alone(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/plain.db")
    assert sqlite_wal(engine) is engine
    assert sa.event.contains(engine, "connect", db._sqlite_pragmas)
    assert _pragmas(engine) == ("wal", 1)
    server = sa.create_engine("postgresql+psycopg://u@127.0.0.1:1/db")
    assert sqlite_wal(server) is server
    assert not sa.event.contains(server, "connect", db._sqlite_pragmas)
