"""``sa-inbox relay`` in a real subprocess: relays a SQLite outbox to the live RabbitMQ until
empty (rows dispatched, the queue holds each message once with its id), SIGTERM stops a
running relay, bad input exits 2 or 3 with one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pika
import sqlalchemy as sa

from sa_inbox.brokers.rabbitmq import dead_letter_queue_name, declare_queue
from sa_inbox.outbox import Outbox
from tests.conftest import broker_url

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sa_inbox.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        **kw,
    )


def test_relay_until_empty_then_sigterm_and_errors(tmp_path: Path) -> None:
    amqp = broker_url("rabbitmq")
    url = f"sqlite:///{tmp_path}/a.db"
    engine = sa.create_engine(url)
    outbox = Outbox(metadata := sa.MetaData())
    metadata.create_all(engine)
    queue = f"sa-inbox-relay-cli-{uuid.uuid4().hex[:10]}"
    connection = pika.BlockingConnection(pika.URLParameters(amqp))
    channel = connection.channel()
    declare_queue(channel, queue)
    try:
        with engine.begin() as conn:
            ids = [outbox.publish(conn, queue, f"{n}".encode()) for n in range(3)]
        done = cli("relay", "--url", url, "--broker", amqp, "--until-empty")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {
            "claimed": 3,
            "dispatched": 3,
            "retried": 0,
            "dead": 0,
            "released": 0,
        }
        got = []
        while (message := channel.basic_get(queue, auto_ack=True))[0] is not None:
            got.append(message[1].message_id)
        assert got == ids

        running = subprocess.Popen(
            [sys.executable, "-m", "sa_inbox.cli", "relay", "--url", url, "--broker", amqp],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert running.stderr is not None
        assert running.stderr.readline().startswith("relay running")  # SIGTERM is handled
        time.sleep(0.3)
        running.send_signal(signal.SIGTERM)
        out, err = running.communicate(timeout=20)
        assert running.returncode == 0 and json.loads(out)["claimed"] == 0, err
    finally:
        channel.queue_delete(queue)
        channel.queue_delete(dead_letter_queue_name(queue))
        connection.close()
        engine.dispose()

    bad_scheme = cli("relay", "--url", url, "--broker", "mqtt://localhost:1883")
    assert bad_scheme.returncode == 2 and "no outbox publisher for 'mqtt'" in bad_scheme.stderr
    missing = cli("relay", "--url", url, "--broker", amqp, "--table", "nope")
    assert missing.returncode == 3
    assert "the outbox table 'nope' does not exist" in missing.stderr


def test_sa_inbox_purge_deletes_only_old_dispatched_outbox_rows(tmp_path: Path) -> None:
    """``sa-inbox purge --table outbox_messages`` recognises the outbox (its ``status`` and
    ``dispatched_at`` columns, reflected) and deletes its old dispatched rows only."""
    import datetime

    url = f"sqlite:///{tmp_path}/o.db"
    engine = sa.create_engine(url)
    outbox = Outbox(metadata := sa.MetaData())
    metadata.create_all(engine)
    old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=10)
    t = outbox.table
    with engine.begin() as conn:
        for _ in range(6):
            outbox.publish(conn, "q", b"x")
        conn.execute(t.update().where(t.c.id <= 3).values(status="dispatched", dispatched_at=old))
        conn.execute(t.update().where(t.c.id == 4).values(status="dead"))
    policy = ["--max-redelivery", "1d", "--max-replay", "2d", "--margin", "1h"]
    done = cli("purge", "--url", url, "--table", "outbox_messages", *policy)
    assert done.returncode == 0, done.stderr
    assert "deleted 3 rows" in done.stdout
    with engine.connect() as conn:
        left = sorted(conn.execute(sa.select(t.c.id, t.c.status)).all())
    assert left == [(4, "dead"), (5, "pending"), (6, "pending")]
    engine.dispose()
