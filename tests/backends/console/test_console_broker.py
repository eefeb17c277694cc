"""Broker dead letters in the console, on the live Redis: counted in the overview, listed,
and replayed to their source stream through the JSON API and the forms (dry run first) by
:func:`sa_inbox.brokers.dead_letters.replay`; an XSS body renders as text."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from sa_inbox.console import Credentials, create_app
from tests.backends.console.conftest import BEARER, TOKEN
from tests.conftest import broker_url
from tests.support.console_app import ConsoleApp, csrf_token
from tests.support.store_app import make_engine


@pytest.fixture
def streams() -> Iterator[tuple[redis.Redis, str, str]]:
    client = redis.Redis.from_url(broker_url("redis"))
    source, dead = (f"sa-inbox-console:{uuid.uuid4().hex}" for _ in range(2))
    yield client, source, dead
    client.delete(source, dead)
    client.close()


@pytest.fixture
def capp(tmp_path: Path) -> Iterator[ConsoleApp]:
    engine = make_engine(f"sqlite:///{tmp_path}/console.db")
    app = ConsoleApp(engine)
    app.reset()
    yield app
    engine.dispose()


def dead_letter(client: redis.Redis, dead: str, source: str, message_id: str, body: str) -> None:
    """A dead letter as the Redis adapter writes it (its fields and the dead_letter_* ones)."""
    client.xadd(
        dead,
        {
            "message_id": message_id,
            "body": body,
            "dead_letter_reason": "delivery_limit",
            "dead_letter_detail": "delivered 5 times",
            "dead_letter_original_id": "1-0",
            "dead_letter_delivery_count": "5",
            "dead_letter_source": source,
        },
    )


def test_broker_dead_letters_are_listed_and_replayed_to_their_source(
    capp: ConsoleApp, streams: tuple[redis.Redis, str, str]
) -> None:
    client, source, dead = streams
    dead_letter(client, dead, source, "b-1", '{"amount": 1}')
    dead_letter(client, dead, source, "b-2", "<script>alert(1)</script>")
    queue = f"{broker_url('redis').rstrip('/')}/{dead}"
    app = create_app(
        capp.engine, allow_replay=True, auth=Credentials(token=TOKEN), dead_letter_queues=[queue]
    )
    c = TestClient(app)
    overview = c.get("/api/overview", headers=BEARER).json()
    assert [q["dead_letters"] for q in overview["dead_letter_queues"]] == [2]
    assert "broker-dead-letters" in {w["kind"] for w in overview["warnings"]}
    listed = c.get("/api/broker", params={"queue": 0}, headers=BEARER).json()
    assert [d["message_id"] for d in listed["dead_letters"]] == ["b-1", "b-2"]
    assert {d["source"] for d in listed["dead_letters"]} == {source}
    page = c.get("/broker", params={"queue": 0}, headers=BEARER).text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>" not in page
    assert c.get("/api/broker", params={"queue": 1}, headers=BEARER).status_code == 400
    # the form: a dry run first, then the confirmation moves them
    token = csrf_token(page)
    dry = c.post("/broker/replay", headers=BEARER, data={"queue": "0", "csrf_token": token})
    assert 'id="would-replay">2<' in dry.text
    assert client.xlen(dead) == 2 and client.xlen(source) == 0
    api = c.post("/api/broker/replay", json={"queue": 0, "limit": 1}, headers=BEARER).json()
    assert api["replayed"] == 1
    confirm = {"queue": "0", "csrf_token": token, "step": "confirm"}
    done = c.post("/broker/replay", headers=BEARER, data=confirm)
    assert 'id="replayed">1<' in done.text
    assert client.xlen(dead) == 0
    moved = [fields[b"message_id"] for _, fields in client.xrange(source)]
    assert moved == [b"b-1", b"b-2"]


def test_without_a_configured_queue_the_broker_pages_are_absent(capp: ConsoleApp) -> None:
    c = TestClient(create_app(capp.engine, auth=Credentials(token=TOKEN)))
    assert c.get("/api/broker", headers=BEARER).status_code == 404
