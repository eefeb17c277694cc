"""A real SQLite database with the chaos run's tables, and a small plan."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from sa_inbox.chaos.workload import PREFIX, ChaosPlan, make_plan
from sa_inbox.demo.app import DemoSchema
from sa_inbox.demo.db import make_engine


@pytest.fixture
def plan() -> ChaosPlan:
    return make_plan(200, seed=11, duplicates=0.2, poison=3, accounts=10)


@pytest.fixture
def schema() -> DemoSchema:
    return DemoSchema(PREFIX)


@pytest.fixture
def engine(tmp_path: Path, schema: DemoSchema, plan: ChaosPlan) -> Iterator[sa.Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'chaos.db'}")
    schema.reset(engine, plan.accounts)
    yield engine
    engine.dispose()
