"""The sharding helper without a server: the stable assignment, the claim's digest, and the
validation of the shard map, the inbox and the keys (all raised before any SQL)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from sa_inbox import ConfigurationError, Inbox, InboxError, processed_messages_table
from sa_inbox.exc import (
    InvalidMessageId,
    InvalidObject,
    InvalidShardKey,
    InvalidShardMap,
    WrongShard,
)
from sa_inbox.sharding import ShardedInbox, rendezvous_shard, shard_key_digest
from sa_inbox.sharding.keys import claim_digest, split_digest

REPOSITORY = Path(__file__).resolve().parents[3]
NAMES = ["eu", "us", "ap"]
#: Computed once by hand from the rule; a change of the rule would move existing claims.
PINNED = ["eu", "ap", "eu", "ap", "ap", "eu"]


def engines(*urls: str) -> dict[str, sa.Engine]:
    return {f"s{i}": sa.create_engine(url) for i, url in enumerate(urls)}


def two_shards(tmp_path: object) -> dict[str, sa.Engine]:
    return {
        "a": sa.create_engine(f"sqlite:///{tmp_path}/a.db"),
        "b": sa.create_engine(f"sqlite:///{tmp_path}/b.db"),
    }


def test_the_assignment_is_the_documented_sha256_rendezvous() -> None:
    for key in ("tenant-1", "tenant-2", "ümlaut", "x" * 255):
        weights = {n: hashlib.sha256(f"{n}\0{key}".encode()).digest() for n in NAMES}
        assert rendezvous_shard(key, NAMES) == max(weights, key=weights.__getitem__)
    # pinned values: a change of the rule would move every existing claim
    assert [rendezvous_shard(f"tenant-{i}", NAMES) for i in range(6)] == PINNED


def test_the_assignment_is_the_same_in_another_process_and_in_any_order() -> None:
    code = (
        "from sa_inbox.sharding import rendezvous_shard as r;"
        "print(','.join(r(f'tenant-{i}', ['ap', 'us', 'eu']) for i in range(50)))"
    )
    other = (
        subprocess.run(
            [sys.executable, "-c", code],
            check=True,
            capture_output=True,
            text=True,
            env={"PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPOSITORY)},
            cwd=REPOSITORY,
        )
        .stdout.strip()
        .split(",")
    )
    assert other == [rendezvous_shard(f"tenant-{i}", NAMES) for i in range(50)]


def test_adding_a_shard_moves_only_the_keys_the_new_shard_wins() -> None:
    keys = [f"k-{i}" for i in range(3000)]
    before = {k: rendezvous_shard(k, NAMES) for k in keys}
    after = {k: rendezvous_shard(k, [*NAMES, "sa"]) for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert all(after[k] == "sa" for k in moved)
    assert 0.18 < len(moved) / len(keys) < 0.32  # about 1/4
    spread = Counter(before.values())
    assert min(spread.values()) > 900  # about 1000 each of 3


def test_the_claim_digest_holds_the_key_then_the_payload() -> None:
    key = shard_key_digest("t-1")
    assert len(key) == 32 and key != shard_key_digest("t-2")
    assert claim_digest("t-1", None) == key
    assert split_digest(claim_digest("t-1", b"p" * 32)) == (key, b"p" * 32)
    assert split_digest(claim_digest("t-1", None)) == (key, None)
    assert split_digest(None) == (None, None)
    assert split_digest(b"short") == (None, None)  # a plain Inbox's digest
    with pytest.raises(InvalidMessageId, match="at most 32"):
        claim_digest("t-1", b"p" * 33)
    with pytest.raises(InvalidMessageId, match="bytes"):
        claim_digest("t-1", "text")  # type: ignore[arg-type]


@pytest.mark.parametrize("key", [None, 42, "", " x", "a\0b", "x" * 256])
def test_an_invalid_shard_key_is_refused(tmp_path: object, key: object) -> None:
    router = ShardedInbox(Inbox(sa.MetaData()), two_shards(tmp_path))
    with pytest.raises(InvalidShardKey) as info:
        router.shard_for(key)  # type: ignore[arg-type]
    assert isinstance(info.value, InboxError) and isinstance(info.value, ValueError)


def test_shard_map_errors(tmp_path: object) -> None:
    inbox = Inbox(sa.MetaData())
    a = sa.create_engine(f"sqlite:///{tmp_path}/a.db")
    cases: list[tuple[object, str]] = [
        ({}, "empty"),
        ([("a", a)], "mapping"),
        ({"": a}, "empty"),
        ({" a": a}, "whitespace"),
        ({"a": "sqlite://"}, "Engine or a sessionmaker"),
        ({"a": sessionmaker()}, "bound to an Engine"),
        ({"a": a, "b": sa.create_engine(f"sqlite+pysqlite:///{tmp_path}/a.db")}, "same database"),
        (
            {
                "a": sa.create_engine("postgresql+psycopg://u:secret@h:5432/db"),
                "b": sessionmaker(sa.create_engine("postgresql+asyncpg://v@h:5432/db")),
            },
            "same database",
        ),
    ]
    for shards, message in cases:
        with pytest.raises(InvalidShardMap, match=message) as info:
            ShardedInbox(inbox, shards)  # type: ignore[arg-type]
        assert isinstance(info.value, ConfigurationError)
        assert "secret" not in str(info.value)


def test_the_inbox_must_store_the_key_and_raise_on_a_change(tmp_path: object) -> None:
    shards = two_shards(tmp_path)
    no_hash = sa.Table(
        "p",
        sa.MetaData(),
        sa.Column("message_id", sa.String(10), primary_key=True),
        sa.Column("consumer_name", sa.String(10), primary_key=True),
        sa.Column("received_at", sa.DateTime()),
    )
    with pytest.raises(InvalidShardMap, match="payload_hash"):
        ShardedInbox(Inbox.for_table(no_hash), shards)
    with pytest.raises(InvalidShardMap, match="on_collision='raise'"):
        ShardedInbox(Inbox(sa.MetaData(), on_collision="record"), shards)
    with pytest.raises(InvalidObject, match="takes an Inbox as inbox, not Table"):
        ShardedInbox(processed_messages_table(sa.MetaData()), shards)  # type: ignore[arg-type]
    with pytest.raises(InvalidShardMap, match="callable"):
        ShardedInbox(Inbox(sa.MetaData()), shards, assign="a")  # type: ignore[arg-type]


def test_a_directory_assignment_must_name_a_shard(tmp_path: object) -> None:
    directory = {"acme": "a", "globex": "b", "initech": "c"}
    router = ShardedInbox(Inbox(sa.MetaData()), two_shards(tmp_path), assign=directory.__getitem__)
    assert router.shard_for("acme") == "a" and router.shard_for("globex") == "b"
    assert router.target("globex").engine is router.session_factory("globex").kw["bind"]  # type: ignore[attr-defined]
    with pytest.raises(WrongShard, match="'c', which is not a shard"):
        router.shard_for("initech")
    with pytest.raises(WrongShard):
        router.shard_inbox("c")
