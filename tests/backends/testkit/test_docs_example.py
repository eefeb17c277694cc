"""The test the README and ``docs/testing-your-handlers.md`` show, run as written: under 15
lines per handler, on a ``myapp.billing`` module holding what the example imports, on each
database through its sync driver (and the same test on the asyncio half, with an ``async
def`` handler and an ``async_sessionmaker``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.backends.testkit.conftest import ROOT, TIMEOUT

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.slow

DOCS = Path(ROOT) / "docs" / "testing-your-handlers.md"
README = Path(ROOT) / "README.md"

#: ``myapp/billing.py``: a ledger table, its inbox, a session factory on the test
#: database, and the handler the example checks.
BILLING = """
import json
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker
from sa_inbox import Inbox

URL = {url!r}
metadata = sa.MetaData()
inbox = Inbox(metadata)
ledger = sa.Table(
    "billing_ledger", metadata,
    sa.Column("id", sa.Integer, sa.Identity(), primary_key=True),
    sa.Column("payment", sa.String(64), nullable=False),
    sa.Column("cents", sa.Integer, nullable=False),
)
{session}
"""
SYNC = """
engine = sa.create_engine(URL)
metadata.drop_all(engine)
metadata.create_all(engine)
Session = sessionmaker(engine)

def apply_payment(session, delivery):
    cents = json.loads(delivery.body)["cents"]
    session.execute(ledger.insert().values(payment=delivery.message_id, cents=cents))
"""
ASYNC = """
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
ddl = sa.create_engine(URL.replace("+asyncpg", "+psycopg").replace("+aiomysql", "+pymysql")
                       .replace("+aiosqlite", ""))
metadata.drop_all(ddl)
metadata.create_all(ddl)
ddl.dispose()
Session = async_sessionmaker(create_async_engine(URL))

async def apply_payment(session, delivery):
    cents = json.loads(delivery.body)["cents"]
    await session.execute(ledger.insert().values(payment=delivery.message_id, cents=cents))
"""


def example(path: Path) -> str:
    """The first python block of ``path`` that uses the ``exactly_once`` fixture."""
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), re.S)
    return next(block for block in blocks if "def test_" in block and "exactly_once" in block)


def test_the_readme_shows_the_docs_example() -> None:
    assert example(README) == example(DOCS)
    assert len(example(DOCS).strip().splitlines()) < 15


def test_the_docs_example_passes_on_a_right_handler(
    pytester: pytest.Pytester, any_url: str
) -> None:
    asynchronous = "+aio" in any_url or "+asyncpg" in any_url
    pytester.mkpydir("myapp")
    billing = BILLING.format(url=any_url, session=ASYNC if asynchronous else SYNC)
    (pytester.path / "myapp" / "billing.py").write_text(billing)
    pytester.makepyfile(test_billing_exactly_once=example(DOCS))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=TIMEOUT)
    result.assert_outcomes(passed=1)
