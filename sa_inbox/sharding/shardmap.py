"""The shard map: shard names to databases, validated once when the router is built."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from ..exc import InvalidMessageId
from ..validation import validate_key
from .exc import InvalidShardMap

__all__ = ["Shard", "ShardTarget", "build_shard_map", "database_identity"]

#: What a shard is given as: an Engine, or a sessionmaker bound to one.
Shard = sa.Engine | sessionmaker[Session]


@dataclass(frozen=True)
class ShardTarget:
    """One validated shard: its name, its engine and the session factory of its
    transactions."""

    name: str
    engine: sa.Engine
    session_factory: Callable[[], Session]


def database_identity(engine: sa.Engine) -> tuple[str, str, int | None, str]:
    """What names one database in a URL: backend, host, port and database name (the
    driver, user, password and options are left out, so two engines of one database with
    other drivers or pool settings are recognised as one). Two URLs that reach one server
    under two names (``localhost`` and ``127.0.0.1``) cannot be told apart without asking
    the server."""
    url = engine.url
    return (url.get_backend_name(), url.host or "", url.port, url.database or "")


def _engine_of(name: str, shard: object) -> tuple[sa.Engine, Callable[[], Session]]:
    if isinstance(shard, sa.Engine):
        return shard, sessionmaker(shard)
    if isinstance(shard, sessionmaker):
        bind: Any = shard.kw.get("bind")
        if isinstance(bind, sa.Engine):
            return bind, shard
        raise InvalidShardMap(
            f"shard {name!r}: the sessionmaker must be bound to an Engine (sessionmaker(engine)), "
            f"not {type(bind).__name__}"
        )
    raise InvalidShardMap(
        f"shard {name!r} must be an Engine or a sessionmaker bound to one, "
        f"not {type(shard).__name__}"
    )


def build_shard_map(shards: Mapping[str, Any]) -> dict[str, ShardTarget]:
    """Validate ``shards`` and return its targets by name.

    :param shards: shard name -> :class:`~sqlalchemy.engine.Engine` or ``sessionmaker``
        bound to one (a ``dict`` or any mapping; its order does not matter).
    :raises InvalidShardMap: for an empty map or one that is not a mapping, an invalid
        name (the rules of a message id, at most 255 characters), a shard that is not an
        Engine or bound sessionmaker, or two shards on one database
        (:func:`database_identity`).
    """
    if not isinstance(shards, Mapping):
        raise InvalidShardMap(
            f"shards must be a mapping of name -> Engine, not {type(shards).__name__}"
        )
    if not shards:
        raise InvalidShardMap("the shard map is empty: give at least one shard")
    targets: dict[str, ShardTarget] = {}
    seen: dict[tuple[str, str, int | None, str], str] = {}
    for name, shard in shards.items():
        try:
            validate_key(name, "shard name", 255)
        except InvalidMessageId as exc:
            raise InvalidShardMap(str(exc)) from None
        engine, factory = _engine_of(name, shard)
        identity = database_identity(engine)
        if identity in seen:
            raise InvalidShardMap(
                f"shards {seen[identity]!r} and {name!r} are the same database "
                f"({engine.url.render_as_string(hide_password=True)}): each shard needs its own"
            )
        seen[identity] = name
        targets[name] = ShardTarget(name, engine, factory)
    return targets
