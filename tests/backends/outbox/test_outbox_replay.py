"""Replaying the outbox's rows (``RelayCore.replay``, ``sa-inbox outbox``): dead rows sent
again once the cause of their refusal is fixed, dispatched rows only when asked (published a
second time, with their message_id), on each database against the live Redis; filters that
choose no rows are refused and change nothing."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from sa_inbox import Backoff
from sa_inbox.brokers.redis import Publisher
from sa_inbox.exc import InvalidArgument
from sa_inbox.outbox import OutboxRelay
from sa_inbox.outbox.relay import RelayCore
from tests.backends.outbox.test_relay_outage import NO_RETRY, SETTINGS, statuses
from tests.backends.outbox.test_relay_streams import oapp, read_stream, record
from tests.conftest import broker_url
from tests.support.outbox_app import OutboxApp

__all__ = ["oapp"]  # fixtures

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[3]


def test_dead_rows_replayed_once_the_cause_is_fixed_are_published(oapp: OutboxApp) -> None:
    """The fix for a refused message (here a Redis key that is not a stream) comes after its
    attempts ran out: ``RelayCore.replay`` sends its dead rows again, once each, and only
    those of the destination asked for; dispatched rows are replayed only when asked."""
    client = redis.Redis.from_url(broker_url("redis"), **NO_RETRY)
    broken, other = (f"sa-inbox-outbox:{uuid.uuid4().hex}" for _ in range(2))
    client.set(broken, "not a stream")
    client.set(other, "not a stream")
    try:
        dead = record(oapp, broken, 2)
        also_dead = record(oapp, other, 1)
        settings = {**SETTINGS, "backoff": Backoff(0.01, 0.01)}
        relay = OutboxRelay(oapp.engine, oapp.outbox, Publisher(client), **settings)
        assert relay.run(until_empty=True).dead == 3
        client.delete(broken)  # the cause fixed, for one destination
        core = relay.core
        chosen = {"status": "dead", "destination": broken}
        assert core.replayable(**chosen) == 2
        assert core.replay(**chosen) == 2
        assert core.counts(broken) == {"pending": 2, "processing": 0, "dispatched": 0, "dead": 0}
        assert relay.run(until_empty=True).dispatched == 2
        assert statuses(oapp, dead)[0][:2] == ("dispatched", 1)
        assert [m for m, _, _ in read_stream(client, broken)] == dead
        assert [s for s, _, _ in statuses(oapp, also_dead)] == ["dead"]
        # a replay of dispatched rows publishes them a second time, with their message_id
        assert core.replay(ids=[r["id"] for r in oapp.outbox_rows("dispatched")]) == 2
        assert relay.run(until_empty=True).dispatched == 2
        assert [m for m, _, _ in read_stream(client, broken)] == dead + dead
    finally:
        client.delete(broken, other)
        client.close()


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({}, "needs ids, a status or a time range"),
        ({"destination": "d"}, "needs ids, a status or a time range"),
        ({"status": "pending"}, "must be dead or dispatched"),
        ({"created_from": datetime.datetime(2026, 1, 1)}, "time-zone aware"),
        ({"ids": "12"}, "an iterable of ints"),  # not the rows 1 and 2
        ({"ids": ["1"]}, "must be ints"),
        ({"ids": 12}, "an iterable of ints"),
    ],
)
def test_a_replay_without_a_row_filter_is_refused_and_changes_nothing(
    oapp: OutboxApp, filters: dict[str, Any], message: str
) -> None:
    ids = record(oapp, "d", 1)
    with oapp.engine.begin() as conn:
        conn.execute(sa.update(oapp.outbox.table).values(status="dead", attempts=3))
    core = RelayCore(oapp.engine, oapp.outbox)
    with pytest.raises(InvalidArgument, match=message):
        core.replay(**filters)
    assert statuses(oapp, ids) == [("dead", 3, None)]


def outbox_cli(oapp: OutboxApp, *args: str) -> subprocess.CompletedProcess[str]:
    """``sa-inbox outbox ARGS --url <the app's database>`` in a subprocess."""
    url = oapp.engine.url.render_as_string(hide_password=False)
    return subprocess.run(
        [sys.executable, "-m", "sa_inbox.cli", "outbox", *args, "--url", url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_the_outbox_command_counts_and_replays(oapp: OutboxApp) -> None:
    dead = record(oapp, "payments", 2)
    sent = record(oapp, "payments", 1)
    other = record(oapp, "refunds", 1)
    t = oapp.outbox.table
    with oapp.engine.begin() as conn:
        conn.execute(sa.update(t).where(t.c.message_id.in_(dead + other)).values(status="dead"))
        conn.execute(sa.update(t).where(t.c.message_id.in_(sent)).values(status="dispatched"))

    counted = outbox_cli(oapp, "counts", "--destination", "payments")
    assert counted.returncode == 0, counted.stderr
    assert json.loads(counted.stdout) == {"pending": 0, "processing": 0, "dispatched": 1, "dead": 2}
    dry = outbox_cli(oapp, "replay", "--status", "dead", "--dry-run")
    assert json.loads(dry.stdout) == {"would_replay": 3}
    unconfirmed = outbox_cli(oapp, "replay", "--status", "dispatched")
    assert unconfirmed.returncode == 2 and "1 dispatched rows would be reset" in unconfirmed.stderr
    sent_id = str(oapp.outbox_rows("dispatched")[0]["id"])
    by_id = outbox_cli(oapp, "replay", "--id", sent_id)  # a dispatched row: --yes as well
    assert by_id.returncode == 2 and "1 dispatched rows would be reset" in by_id.stderr
    no_filter = outbox_cli(oapp, "replay", "--destination", "payments")
    assert (
        no_filter.returncode == 2
        and "name the rows to replay: --id ID (repeatable) or --status" in no_filter.stderr
    )
    assert [r["status"] for r in oapp.outbox_rows()] == ["dead", "dead", "dispatched", "dead"]

    replayed = outbox_cli(oapp, "replay", "--status", "dead", "--destination", "payments")
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == {"replayed": 2}
    confirmed = outbox_cli(oapp, "replay", "--status", "dispatched", "--yes")
    assert json.loads(confirmed.stdout) == {"replayed": 1}
    assert [r["status"] for r in oapp.outbox_rows()] == ["pending", "pending", "pending", "dead"]
