"""The wrong-shard check's MariaDB/MySQL identity, on the suite's real MariaDB server: two
databases of one server are two shards (``DATABASE()`` differs), and one database reached
over TCP or through the server's Unix socket (``?unix_socket=``, asked of the server) is one
shard."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox import Inbox
from sa_inbox.exc import WrongShard
from sa_inbox.sharding import ShardedInbox
from tests.conftest import backend_url

pytestmark = [pytest.mark.backend]


@pytest.fixture
def shards(tmp_path: object) -> Iterator[tuple[Inbox, dict[str, sa.URL]]]:
    """Shard a: the suite's database; shard b: ``<it>_shard_b`` on the same server."""
    a = sa.make_url(backend_url("mysql", tmp_path))
    urls = {"a": a, "b": a.set(database=f"{a.database}_shard_b")}
    server = sa.create_engine(a.set(database=""))
    with server.begin() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE IF NOT EXISTS `{urls['b'].database}`")
    inbox = Inbox(sa.MetaData(), table_name="shard_identity_inbox")
    engines = [sa.create_engine(url) for url in urls.values()]
    for engine in engines:
        inbox.table.drop(engine, checkfirst=True)
        inbox.table.create(engine)
    yield inbox, urls
    for engine in engines:
        inbox.table.drop(engine, checkfirst=True)
        engine.dispose()
    with server.begin() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{urls['b'].database}`")
    server.dispose()


def rows(url: sa.URL, inbox: Inbox) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(sa.select(sa.func.count()).select_from(inbox.table)).scalar_one()
            )
    finally:
        engine.dispose()


def test_mariadb_identity_tells_databases_apart_and_url_forms_not(
    shards: tuple[Inbox, dict[str, sa.URL]],
) -> None:
    inbox, urls = shards
    engines = {name: sa.create_engine(url) for name, url in urls.items()}
    with engines["a"].connect() as conn:
        path = conn.exec_driver_sql("SELECT @@socket").scalar_one()
    a = urls["a"]
    through_socket = sa.URL.create(
        a.drivername,
        a.username,
        a.password,
        database=a.database,
        query={**a.query, "unix_socket": str(path)},
    )
    others = [sa.create_engine(urls["b"]), sa.create_engine(through_socket)]
    try:
        router = ShardedInbox(inbox, engines)
        key = next(k for k in (f"t-{i}" for i in range(1000)) if router.shard_for(k) == "a")
        with (
            pytest.raises(WrongShard, match="not on shard 'a'"),
            Session(others[0]) as session,
            session.begin(),
        ):
            router.claim(session, "m-1", "c", shard_key=key)
        with Session(others[1]) as session, session.begin():
            assert router.claim(session, "m-1", "c", shard_key=key)
        assert [rows(urls["a"], inbox), rows(urls["b"], inbox)] == [1, 0]
    finally:
        for engine in (*engines.values(), *others):
            engine.dispose()
