"""The shard map's URL check in every URL form, the claim's server check on SQLite files,
and the typed errors of a failing ``assign`` and an unbound Session (no server needed: the
PostgreSQL forms are proven on two real servers in tests/backends/sharding)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from sa_inbox import Inbox, InboxError
from sa_inbox.exc import (
    InvalidBind,
    InvalidShardMap,
    ShardAssignmentFailed,
    UnknownShardIdentity,
    WrongShard,
)
from sa_inbox.sharding import ShardedInbox
from sa_inbox.sharding.shardmap import url_locations

PG = "postgresql+psycopg://postgres@/db"


def map_of(*urls: str) -> ShardedInbox:
    return ShardedInbox(
        Inbox(sa.MetaData()), {f"s{i}": sa.create_engine(url) for i, url in enumerate(urls)}
    )


def test_url_locations_read_every_form() -> None:
    assert url_locations(sa.make_url("postgresql://u@h:5432/db")) == {"h:5432"}
    assert url_locations(sa.make_url(f"{PG}?host=h1:5432&host=h2:5433")) == {
        "h1:5432",
        "h2:5433",
    }
    assert url_locations(sa.make_url(f"{PG}?host=h1,h2&port=1,2")) == {"h1:1", "h2:2"}
    assert url_locations(sa.make_url(f"{PG}?host=/run/pg&port=5432")) == {"/run/pg:5432"}
    assert url_locations(sa.make_url("mysql+pymysql://u@/d?unix_socket=/s")) == {"socket:/s"}
    assert url_locations(sa.make_url(PG)) == {"default"}


@pytest.mark.parametrize(
    "one, other",
    [
        (f"{PG}?host=127.0.0.1:1", f"{PG}?host=127.0.0.1:2"),
        (f"{PG}?host=/run/a&port=5432", f"{PG}?host=/run/b&port=5432"),
        (f"{PG}?host=/run/a&port=5432", f"{PG}?host=/run/a&port=5433"),
        ("mysql+pymysql://u@/d?unix_socket=/a", "mysql+pymysql://u@/d?unix_socket=/b"),
    ],
)
def test_two_servers_in_one_url_form_are_two_shards(one: str, other: str) -> None:
    assert map_of(one, other).names == ("s0", "s1")


@pytest.mark.parametrize(
    "one, other",
    [
        (f"{PG}?host=127.0.0.1:1", f"{PG}?host=127.0.0.1:1&connect_timeout=2"),
        (f"{PG}?host=h1:1&host=h2:2", f"{PG}?host=h2:2&host=h3:3"),  # h2 in both lists
        (f"{PG}?host=/run/a&port=5432", "postgresql+asyncpg://v@/db?host=/run/a&port=5432"),
        (PG, PG),
    ],
)
def test_one_server_twice_is_refused_naming_both_urls(one: str, other: str) -> None:
    with pytest.raises(InvalidShardMap, match="same database") as info:
        map_of(one, other)
    shown = [sa.make_url(url).render_as_string(hide_password=True) for url in (one, other)]
    assert all(url in str(info.value) for url in shown), info.value


def sqlite_router(tmp_path: Path) -> tuple[ShardedInbox, Inbox]:
    inbox = Inbox(sa.MetaData())
    engines = {name: sa.create_engine(f"sqlite:///{tmp_path}/{name}.db") for name in "ab"}
    for engine in engines.values():
        inbox.table.metadata.create_all(engine)
    return ShardedInbox(inbox, engines), inbox


def key_on(router: ShardedInbox, shard: str) -> str:
    return next(k for k in (f"t-{i}" for i in range(1000)) if router.shard_for(k) == shard)


def rows(engine: sa.Engine, inbox: Inbox) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(inbox.table)).scalar_one())


def test_the_claim_asks_which_file_a_sqlite_connection_is_on(tmp_path: Path) -> None:
    router, inbox = sqlite_router(tmp_path)
    key = key_on(router, "a")
    same = sa.create_engine(f"sqlite+pysqlite:///{tmp_path}/./a.db")  # another URL, same file
    other = sa.create_engine(f"sqlite:///{tmp_path}/b.db")
    memory = sa.create_engine("sqlite://")
    with Session(same) as session, session.begin():
        assert router.claim(session, "m-1", "c", shard_key=key)
    with pytest.raises(WrongShard, match="not on shard 'a'"), Session(other) as session:
        router.claim(session, "m-2", "c", shard_key=key)
    with pytest.raises(UnknownShardIdentity, match="incomplete"), Session(memory) as session:
        router.claim(session, "m-3", "c", shard_key=key)
    assert [rows(router.target(key).engine, inbox), rows(other, inbox)] == [1, 0]


def test_an_assign_that_raises_gives_a_typed_error_naming_the_key(tmp_path: Path) -> None:
    router, _ = sqlite_router(tmp_path)
    directory = {"acme": "a"}
    routed = ShardedInbox(
        router.inbox,
        {n: router.shard_inbox(n).target.engine for n in "ab"},
        assign=directory.__getitem__,
    )
    settled: list[str] = []
    with pytest.raises(ShardAssignmentFailed, match="'globex'") as info:
        routed.handle(
            "globex",
            "m-1",
            "c",
            lambda session: None,
            ack=lambda: settled.append("ack"),
            nack=lambda: settled.append("nack"),
        )
    assert isinstance(info.value, WrongShard) and isinstance(info.value, InboxError)
    assert isinstance(info.value.__cause__, KeyError) and info.value.shard_key == "globex"
    assert settled == []
    with pytest.raises(WrongShard, match="not a shard"):
        ShardedInbox(
            router.inbox, {"a": sa.create_engine("sqlite://")}, assign=lambda k: 7
        ).shard_for("x")  # type: ignore[arg-type,return-value]


def test_an_unbound_session_gives_a_typed_error(tmp_path: Path) -> None:
    router, inbox = sqlite_router(tmp_path)
    for claim in (
        lambda s: router.claim(s, "m-1", "c", shard_key="t-1"),
        lambda s: inbox.claim(s, "m-1", "c"),
    ):
        with Session() as session, pytest.raises(InvalidBind, match="bound to no engine") as info:
            claim(session)
        assert isinstance(info.value.__cause__, sa.exc.UnboundExecutionError)
