"""The runner's retry options: ``max_retries`` (re-runs after a transient error) and
``retry_backoff`` (a Backoff), their deprecated spellings ``max_attempts`` and ``backoff``
kept for one release with a DeprecationWarning at the caller's line (real transactions on
SQLite; the transient error is raised by the unit of work)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session, sessionmaker

from sa_inbox import Inbox, Outcome, handle, run_in_transaction
from sa_inbox import asyncio as sa_asyncio
from sa_inbox.backoff import Backoff
from sa_inbox.exc import InvalidArgument, TransientClaimError
from sa_inbox.runner import DEFAULT_MAX_RETRIES, DEFAULT_RETRY_BACKOFF


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/retries.db")
    yield engine
    engine.dispose()


class Flaky:
    """A unit of work whose first ``failures`` runs fail transiently; counts its runs."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.runs = 0

    def __call__(self, session: Any) -> str:
        self.runs += 1
        if self.runs <= self.failures:
            raise TransientClaimError("deadlock (simulated by the unit of work)")
        return "committed"


def test_max_retries_counts_the_re_runs(engine: sa.Engine) -> None:
    factory, waits = sessionmaker(engine), []
    work = Flaky(2)
    assert run_in_transaction(factory, work, max_retries=2, sleep=waits.append) == "committed"
    assert work.runs == 3 and len(waits) == 2
    work = Flaky(3)
    with pytest.raises(TransientClaimError):
        run_in_transaction(factory, work, max_retries=2, sleep=waits.append)
    assert work.runs == 3
    work = Flaky(1)
    with pytest.raises(TransientClaimError):
        run_in_transaction(factory, work, max_retries=0, sleep=waits.append)
    assert work.runs == 1


def test_the_defaults() -> None:
    assert DEFAULT_MAX_RETRIES == 4
    assert Backoff(base=0.02, maximum=1.0) == DEFAULT_RETRY_BACKOFF


def test_retry_backoff_bounds_each_wait(engine: sa.Engine) -> None:
    waits: list[float] = []
    backoff = Backoff(base=0.4, maximum=1.0)
    work = Flaky(4)
    run_in_transaction(sessionmaker(engine), work, retry_backoff=backoff, sleep=waits.append)
    assert len(waits) == 4
    assert all(0 <= wait <= backoff.delay(n) for n, wait in enumerate(waits, 1))


def test_the_old_names_still_work_with_a_deprecation_warning(engine: sa.Engine) -> None:
    factory, waits = sessionmaker(engine), []
    work = Flaky(2)
    with pytest.warns(DeprecationWarning, match="max_retries=N - 1") as caught:
        run_in_transaction(factory, work, max_attempts=3, sleep=waits.append)
    assert work.runs == 3 and caught[0].filename == __file__
    work = Flaky(3)
    with pytest.warns(DeprecationWarning), pytest.raises(TransientClaimError):
        run_in_transaction(factory, work, max_attempts=3, sleep=waits.append)
    assert work.runs == 3
    waits.clear()
    with pytest.warns(DeprecationWarning, match="retry_backoff=Backoff") as caught:
        run_in_transaction(factory, Flaky(3), backoff=2.0, sleep=waits.append)
    assert caught[0].filename == __file__
    assert len(waits) == 3 and all(0 <= wait <= 1.0 for wait in waits)  # capped at 1 s


@pytest.mark.parametrize(
    "options",
    [
        {"max_retries": -1},
        {"max_retries": True},
        {"max_retries": "2"},
        {"retry_backoff": 0.5},
        {"max_retries": 1, "max_attempts": 2},
        {"retry_backoff": Backoff(), "backoff": 0.1},
    ],
)
def test_bad_options_are_refused_before_anything(engine: sa.Engine, options: Any) -> None:
    work = Flaky(0)
    with pytest.raises(InvalidArgument):
        run_in_transaction(sessionmaker(engine), work, **options)
    assert work.runs == 0


def test_handle_takes_max_retries(engine: sa.Engine) -> None:
    metadata = sa.MetaData()
    inbox = Inbox(metadata, consumers=False)
    metadata.create_all(engine)
    runs, nacks = [], []

    def handler(session: Session) -> None:
        runs.append(1)
        raise TransientClaimError("deadlock (simulated by the handler)")

    result = handle(
        sessionmaker(engine),
        inbox,
        "m-1",
        "c",
        handler,
        ack=lambda: None,
        nack=lambda: nacks.append(1),
        max_retries=1,
        sleep=lambda seconds: None,
    )
    assert result.outcome is Outcome.FAILED and len(runs) == 2 and nacks == [1]
    with Session(engine) as session:
        assert not inbox.is_processed(session, "m-1", "c")
    with pytest.warns(DeprecationWarning) as caught:
        handle(
            sessionmaker(engine),
            inbox,
            "m-2",
            "c",
            lambda session: None,
            ack=lambda: None,
            nack=lambda: None,
            max_attempts=1,
        )
    assert caught[0].filename == __file__


def test_the_asyncio_runner_takes_the_same_options(tmp_path: Path) -> None:
    async def main() -> list[int]:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/async_retries.db")
        factory = async_sessionmaker(engine)
        runs: list[int] = []

        async def work(session: AsyncSession) -> None:
            runs.append(1)
            if len(runs) < 3:
                raise TransientClaimError("deadlock (simulated by the unit of work)")

        await sa_asyncio.run_in_transaction(
            factory, work, max_retries=2, retry_backoff=Backoff(0.001, 0.001)
        )
        with pytest.warns(DeprecationWarning) as caught:
            runs.clear()
            await sa_asyncio.run_in_transaction(factory, work, max_attempts=3, backoff=0.001)
        assert caught[0].filename == __file__
        await engine.dispose()
        return runs

    assert asyncio.run(main()) == [1, 1, 1]
