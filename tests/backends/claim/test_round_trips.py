"""sa-inbox's own layer adds no round trip beyond the claim statement itself.

Proven by counting, not timing: a ``before_cursor_execute`` listener records every statement
SQLAlchemy sends, and a ``commit`` listener every commit, while the claim-overhead
benchmark's own transactions run (:mod:`sa_inbox.bench.claim_overhead`). The transaction
with the claim must send exactly the statements of the one without, plus one: the claim.
The only exception is the first claim on an engine, which runs the backend's one-time
checks (on MySQL/MariaDB, the key columns' collation), and they must never recur.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from sa_inbox.bench.claim_overhead import LAYERS, Context, Transaction
from sa_inbox.bench.db import INBOX_TABLE, BenchSchema

pytestmark = pytest.mark.backend


class Recorder:
    """Statements and commits sent through ``engine`` while :attr:`active`."""

    def __init__(self, engine: sa.Engine) -> None:
        self.statements: list[str] = []
        self.commits = 0
        event.listen(engine, "before_cursor_execute", self._statement)
        event.listen(engine, "commit", self._commit)

    def _statement(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        self.statements.append(" ".join(statement.split()))

    def _commit(self, conn: Any) -> None:
        self.commits += 1

    def record(self, transaction: Transaction, ctx: Context) -> tuple[list[str], int]:
        """Run one transaction with a fresh id; return its statements and commits."""
        self.statements, self.commits = [], 0
        transaction(ctx, str(uuid.uuid4()))
        return self.statements, self.commits


@pytest.fixture
def ctx(engine: sa.Engine) -> Iterator[Context]:
    schema = BenchSchema(engine)
    schema.reset()
    ctx = Context(engine, account=0)
    yield ctx
    ctx.close()
    schema.drop()


@pytest.mark.parametrize("layer", ["orm", "core"])
def test_claim_adds_exactly_one_statement(ctx: Context, layer: str) -> None:
    plain, claim = LAYERS[layer]
    recorder = Recorder(ctx.engine)
    # The very first claim on this engine (statement cache and backend check cold), then a
    # transaction without the claim, then a warm claim.
    first_claim, first_commits = recorder.record(claim, ctx)
    without, commits = recorder.record(plain, ctx)
    warm_claim, warm_commits = recorder.record(claim, ctx)

    assert commits == first_commits == warm_commits == 1
    # Every claim: exactly the business statements plus one, the claim, sent first.
    assert len(warm_claim) == len(without) + 1
    assert INBOX_TABLE in warm_claim[0]
    assert warm_claim[1:] == without
    assert ctx.engine.dialect.name != "mysql" or "SHOW WARNINGS" not in " ".join(warm_claim)
    # The first claim on an engine also runs the backend's one-time checks, never again:
    # on MySQL/MariaDB one information_schema query (key column collations), else none.
    one_time = first_claim[: len(first_claim) - len(warm_claim)]
    assert first_claim[len(one_time) :] == warm_claim
    assert len(one_time) == (1 if ctx.engine.dialect.name == "mysql" else 0)
    assert all("information_schema" in statement for statement in one_time)
    assert BenchSchema(ctx.engine).state()["inbox_rows"] == 2


def test_duplicate_claim_round_trips(ctx: Context) -> None:
    """A duplicate costs the claim statement, and nothing else, on every backend. On
    MySQL/MariaDB ``INSERT IGNORE`` reports the skipped row as one warning and no row
    inserted, which on this table can only be 1062 (no foreign key, partition or trigger;
    see ``MySQLClaim.skips_only_duplicates``), so ``SHOW WARNINGS`` is not read."""
    recorder = Recorder(ctx.engine)
    message_id = str(uuid.uuid4())
    for expected_claimed in (True, False):
        recorder.statements = []
        with ctx.conn.begin():
            assert ctx.inbox.claim(ctx.conn, message_id, "billing") is expected_claimed
    assert len(recorder.statements) == 1
    assert INBOX_TABLE in recorder.statements[0]
    assert BenchSchema(ctx.engine).state()["inbox_rows"] == 1
