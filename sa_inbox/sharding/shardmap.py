"""The shard map: shard names to databases, validated once when the router is built."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from .._compat import session_options
from ..checks import is_asyncio_object
from ..exc import InvalidMessageId, InvalidShardMap, SyncAsyncMismatch
from ..validation import validate_key

__all__ = ["Shard", "ShardTarget", "build_shard_map", "database_identity", "url_locations"]

#: What a shard is given as: an Engine, or a sessionmaker bound to one.
Shard = sa.Engine | sessionmaker[Session]


@dataclass(frozen=True)
class ShardTarget:
    """One validated shard: its name, its engine and the session factory of its
    transactions."""

    name: str
    engine: sa.Engine
    session_factory: Callable[[], Session]


def _values(value: str | tuple[str, ...] | None) -> list[str]:
    """A query option's values: repeated (``?host=a&host=b``) or comma-separated."""
    if value is None:
        return []
    parts = [value] if isinstance(value, str) else list(value)
    return [item.strip() for part in parts for item in part.split(",")]


def url_locations(url: sa.URL) -> frozenset[str]:
    """Where a URL's connections go, as far as the URL says: ``host:port`` of the URL's
    authority, every ``?host=`` of libpq's multi-host form (``h:port`` pairs, or comma lists
    paired with ``?port=``: PostgreSQL manual, "Connection Strings", 34.1.1.3 "Specifying
    Multiple Hosts"), a Unix-socket directory given as ``?host=/dir``, MySQL's
    ``?unix_socket=``; ``{"default"}`` for none of these (the driver's default server)."""
    query = url.query
    hosts = _values(query.get("host"))
    ports = _values(query.get("port"))
    found = set()
    if url.host or url.port:
        found.add(f"{url.host or ''}:{url.port or ''}")
    for index, host in enumerate(hosts):
        port = ports[index] if index < len(ports) else (ports[0] if len(ports) == 1 else "")
        if ":" in host and not host.startswith("/") and not port:
            found.add(host)
        else:
            found.add(f"{host}:{port}")
    found.update(f"socket:{path}" for path in _values(query.get("unix_socket")))
    return frozenset(found or {"default"})


def database_identity(engine: sa.Engine) -> tuple[str, str, frozenset[str]]:
    """What names one database in a URL, compared when the map is built (without
    connecting): backend, database name and :func:`url_locations` (the driver, user,
    password and other options are left out, so two engines of one database with other
    drivers or pool settings are recognised as one). Two shards are one database when the
    backend and database name are equal and their locations share one. Two names of one
    server (``localhost`` and ``127.0.0.1``) cannot be told apart without asking it: the
    claim's check does ask it (:mod:`sa_inbox.sharding.identity`)."""
    url = engine.url
    return (url.get_backend_name(), url.database or "", url_locations(url))


def _same_database(
    one: tuple[str, str, frozenset[str]], other: tuple[str, str, frozenset[str]]
) -> bool:
    return one[:2] == other[:2] and bool(one[2] & other[2])


def _engine_of(name: str, shard: object) -> tuple[sa.Engine, Callable[[], Session]]:
    if is_asyncio_object(shard):
        raise SyncAsyncMismatch(
            f"shard {name!r} is {type(shard).__name__}, of the asyncio API; ShardedInbox "
            "takes an Engine or a sessionmaker bound to one: use AsyncShardedInbox "
            "(sa_inbox.sharding.asyncio) for AsyncEngines"
        )
    if isinstance(shard, sa.Engine):
        return shard, sessionmaker(shard)
    if isinstance(shard, sessionmaker):
        bind: Any = session_options(shard).get("bind")
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


def _shown(engine: sa.Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def build_shard_map(shards: Mapping[str, Any]) -> dict[str, ShardTarget]:
    """Validate ``shards`` and return its targets by name.

    :param shards: shard name -> :class:`~sqlalchemy.engine.Engine` or ``sessionmaker``
        bound to one (a ``dict`` or any mapping; its order does not matter).
    :raises InvalidShardMap: for an empty map or one that is not a mapping, an invalid
        name (the rules of a message id, at most 255 characters), a shard that is not an
        Engine or bound sessionmaker, or two shards on one database as far as their URLs
        tell (:func:`database_identity`).
    :raises SyncAsyncMismatch: for a shard of the asyncio API (an AsyncEngine, an
        async_sessionmaker).
    """
    if not isinstance(shards, Mapping):
        raise InvalidShardMap(
            f"shards must be a mapping of name -> Engine, not {type(shards).__name__}"
        )
    if not shards:
        raise InvalidShardMap("the shard map is empty: give at least one shard")
    targets: dict[str, ShardTarget] = {}
    for name, shard in shards.items():
        try:
            validate_key(name, "shard name", 255)
        except InvalidMessageId as exc:
            raise InvalidShardMap(str(exc)) from None
        engine, factory = _engine_of(name, shard)
        identity = database_identity(engine)
        for other in targets.values():
            if _same_database(database_identity(other.engine), identity):
                raise InvalidShardMap(
                    f"shards {other.name!r} ({_shown(other.engine)}) and {name!r} "
                    f"({_shown(engine)}) are the same database (backend, database name and "
                    "a host, port or socket in common): each shard needs its own"
                )
        targets[name] = ShardTarget(name, engine, factory)
    return targets
