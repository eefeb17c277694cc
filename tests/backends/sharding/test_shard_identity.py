"""Which server a claim runs on, in every URL form, on the two real PostgreSQL servers.

libpq's multi-host form (``postgresql://u@/db?host=127.0.0.1:PORT``, the failover form) and
Unix-socket URLs (``?host=/dir&port=PORT``) leave ``url.host`` and ``url.port`` empty; the
wrong-shard check asks the server instead, so a Session on shard b's server is refused for
a key of shard a in every form (the message is then applied once, on a), and a Session on
shard a's server is accepted in every form. Also: ``check_other_shards=True`` with a shard
that cannot be reached refuses with a typed error naming it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from decimal import Decimal

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from sa_inbox import Outcome, Result
from sa_inbox.exc import ShardUnavailable, WrongShard
from sa_inbox.sharding import ShardedInbox
from sa_inbox.sharding.asyncio import AsyncShardedInbox
from tests.support.app import CONSUMER, App

pytestmark = [pytest.mark.backend, pytest.mark.slow]

AMOUNT = Decimal("10.00")


def multi_host(url: sa.URL) -> sa.URL:
    """The same server in libpq's multi-host form: no host or port before the path."""
    return _located(url, {"host": f"{url.host}:{url.port}"})


def _located(url: sa.URL, query: dict[str, str]) -> sa.URL:
    """``url`` without host and port (``URL.set`` ignores None), located by ``query``."""
    form = sa.URL.create(
        url.drivername, url.username, url.password, database=url.database, query=query
    )
    assert form.host is None and form.port is None
    return form


def unix_socket(url: sa.URL) -> sa.URL:
    """The same server through its Unix socket (the directory asked of the server)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            directory = conn.exec_driver_sql(
                "SELECT current_setting('unix_socket_directories')"
            ).scalar_one()
    finally:
        engine.dispose()
    first = str(directory).split(",")[0].strip()
    return _located(url, {"host": first, "port": str(url.port)})


FORMS: dict[str, Callable[[sa.URL], sa.URL]] = {"multi-host": multi_host, "socket": unix_socket}


@pytest.fixture
def urls(shard_urls: dict[str, str]) -> Iterator[dict[str, sa.URL]]:
    """Both servers' URLs with the same database name (created on b if missing)."""
    a, b = sa.make_url(shard_urls["a"]), sa.make_url(shard_urls["b"])
    b = b.set(database=a.database)
    admin = sa.create_engine(b.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            exists = conn.exec_driver_sql(
                "SELECT 1 FROM pg_database WHERE datname = %(name)s", {"name": a.database}
            ).first()
            if exists is None:
                conn.exec_driver_sql(f'CREATE DATABASE "{a.database}"')
    finally:
        admin.dispose()
    yield {"a": a, "b": b}


@pytest.fixture
def apps(urls: dict[str, sa.URL]) -> Iterator[dict[str, App]]:
    apps = {name: App(sa.create_engine(url)) for name, url in urls.items()}
    for app in apps.values():
        app.reset()
    yield apps
    for app in apps.values():
        app.drop()
        app.engine.dispose()


def key_on(router: ShardedInbox, shard: str) -> str:
    return next(k for k in (f"tenant-{i}" for i in range(1000)) if router.shard_for(k) == shard)


def state(apps: dict[str, App]) -> dict[str, tuple[int, Decimal, int]]:
    return {n: (a.ledger_rows(), a.balance(1), a.inbox_rows()) for n, a in apps.items()}


def deliver(router: ShardedInbox, app: App, key: str, message_id: str) -> tuple[Outcome, list[str]]:
    result, settled = deliver_result(router, app, key, message_id)
    return result.outcome, settled


def deliver_result(
    router: ShardedInbox, app: App, key: str, message_id: str
) -> tuple[Result, list[str]]:
    """``router.handle`` of one payment by the consumer's one handler: its result, and
    ``ack`` / ``nack`` as they were called."""
    settled: list[str] = []

    def pay(session: Session) -> None:
        app.apply_payment(session, message_id, 1, AMOUNT)

    result = router.handle(
        key,
        message_id,
        CONSUMER,
        pay,
        ack=lambda: settled.append("ack"),
        nack=lambda: settled.append("nack"),
    )
    return result, settled


@pytest.mark.parametrize("form", FORMS)
def test_two_servers_in_one_url_form_with_one_database_name_are_two_shards(
    apps: dict[str, App], urls: dict[str, sa.URL], form: str
) -> None:
    engines = {name: sa.create_engine(FORMS[form](url)) for name, url in urls.items()}
    try:
        router = ShardedInbox(apps["a"].inbox, engines)
        assert router.names == ("a", "b")
        for shard in ("a", "b"):
            key = key_on(router, shard)
            assert deliver(router, apps[shard], key, f"m-{shard}") == (Outcome.PROCESSED, ["ack"])
            assert deliver(router, apps[shard], key, f"m-{shard}") == (Outcome.DUPLICATE, ["ack"])
        assert state(apps) == {"a": (1, AMOUNT, 1), "b": (1, AMOUNT, 1)}
    finally:
        for engine in engines.values():
            engine.dispose()


@pytest.mark.parametrize("shard_a_form", ["tcp", *FORMS])
@pytest.mark.parametrize("form", FORMS)
def test_a_claim_on_shard_b_server_for_a_key_of_a_is_refused_and_applied_once(
    apps: dict[str, App], urls: dict[str, sa.URL], form: str, shard_a_form: str
) -> None:
    """The trial's applied-twice scenario: a Session on b's server (URL in ``form``) claims
    for a key of shard a and writes the payment; it must be refused, so that the correct
    redelivery to a applies it, once."""
    shard_a = (
        apps["a"].engine
        if shard_a_form == "tcp"
        else sa.create_engine(FORMS[shard_a_form](urls["a"]))
    )
    other = sa.create_engine(FORMS[form](urls["b"]))
    try:
        router = ShardedInbox(apps["a"].inbox, {"a": shard_a, "b": apps["b"].engine})
        key = key_on(router, "a")
        with (
            pytest.raises(WrongShard, match="not on shard 'a'"),
            Session(other) as session,
            session.begin(),
        ):
            router.claim(session, "m-1", CONSUMER, shard_key=key)
            apps["b"].apply_payment(session, "m-1", 1, AMOUNT)
        assert state(apps) == {"a": (0, 0, 0), "b": (0, 0, 0)}
        assert deliver(router, apps["a"], key, "m-1") == (Outcome.PROCESSED, ["ack"])
        assert deliver(router, apps["a"], key, "m-1") == (Outcome.DUPLICATE, ["ack"])
        assert state(apps) == {"a": (1, AMOUNT, 1), "b": (0, 0, 0)}
    finally:
        other.dispose()
        if shard_a is not apps["a"].engine:
            shard_a.dispose()


@pytest.mark.parametrize("form", FORMS)
def test_a_session_of_another_engine_on_the_shard_server_is_accepted(
    apps: dict[str, App], urls: dict[str, sa.URL], form: str
) -> None:
    """The server is asked, not the URL: shard a's server reached through another URL form
    is shard a."""
    same = sa.create_engine(FORMS[form](urls["a"]))
    try:
        router = ShardedInbox(apps["a"].inbox, {n: a.engine for n, a in apps.items()})
        key = key_on(router, "a")
        with Session(same) as session, session.begin():
            assert router.claim(session, "m-1", CONSUMER, shard_key=key)
            apps["a"].apply_payment(session, "m-1", 1, AMOUNT)
        assert deliver(router, apps["a"], key, "m-1") == (Outcome.DUPLICATE, ["ack"])
        assert state(apps) == {"a": (1, AMOUNT, 1), "b": (0, 0, 0)}
    finally:
        same.dispose()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_check_other_shards_refuses_with_the_unreachable_shard_named(
    apps: dict[str, App], urls: dict[str, sa.URL]
) -> None:
    """Shard b unreachable (nothing listens on its port): a new message of shard a is
    refused with ShardUnavailable naming b, rolled back and nacked; without the check it is
    applied. The coupling the README documents."""
    down = sa.create_engine(
        urls["b"].set(host="127.0.0.1", port=_closed_port(), query={"connect_timeout": "2"})
    )
    try:
        checked = ShardedInbox(
            apps["a"].inbox, {"a": apps["a"].engine, "b": down}, check_other_shards=True
        )
        key = key_on(checked, "a")
        result, settled = deliver_result(checked, apps["a"], key, "m-1")
        assert result.outcome is Outcome.FAILED and settled == ["nack"]
        assert isinstance(result.error, ShardUnavailable) and result.error.shard == "b"
        assert isinstance(result.error.__cause__, sa.exc.OperationalError)
        assert state({"a": apps["a"]}) == {"a": (0, 0, 0)}
        plain = ShardedInbox(apps["a"].inbox, {"a": apps["a"].engine, "b": down})
        assert deliver(plain, apps["a"], key, "m-1") == (Outcome.PROCESSED, ["ack"])
        assert state({"a": apps["a"]}) == {"a": (1, AMOUNT, 1)}
    finally:
        down.dispose()


def test_the_async_router_asks_the_server_too(
    apps: dict[str, App], urls: dict[str, sa.URL]
) -> None:
    """AsyncShardedInbox: an AsyncSession on b's server (multi-host URL) is refused for a key
    of a; one on a's server through its socket is accepted (the identity is read in the
    claim's greenlet)."""

    async def scenario() -> None:
        engines = {n: create_async_engine(u) for n, u in urls.items()}
        wrong = create_async_engine(multi_host(urls["b"]))
        right = create_async_engine(unix_socket(urls["a"]))
        try:
            router = AsyncShardedInbox(apps["a"].inbox, engines)
            key = next(k for k in (f"t-{i}" for i in range(1000)) if router.shard_for(k) == "a")
            with pytest.raises(WrongShard, match="not on shard 'a'"):
                async with AsyncSession(wrong) as session, session.begin():
                    await router.claim(session, "m-1", CONSUMER, shard_key=key)
            async with AsyncSession(right) as session, session.begin():
                assert await router.claim(session, "m-2", CONSUMER, shard_key=key)
        finally:
            for engine in (*engines.values(), wrong, right):
                await engine.dispose()

    asyncio.run(scenario())
    assert [app.inbox_rows() for app in apps.values()] == [1, 0]
