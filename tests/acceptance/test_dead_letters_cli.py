"""``sa-inbox dead-letters count | list | replay`` and ``sa-inbox stats --check
--dead-letters`` in a real subprocess, against the live RabbitMQ, Redis and NATS brokers
holding real dead letters (made by the adapters' consumers on a SQLite file): the JSON, the
exit codes (20 while a dead-letter queue holds dead letters, 0 once it is empty, 21 when it
cannot be read, never 0), and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa

from sa_inbox.stats import WARNING_CODES
from tests.backends.brokers.dead_letter_sides import SIDES, Payments, Rabbit, Side
from tests.conftest import broker_url
from tests.support.app import App

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[2]
UNREACHABLE = "amqp://guest:secret@127.0.0.1:1/%2F/payments.dead-letter"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sa_inbox.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/inbox.db")
    app = App(engine)
    app.reset()
    yield app
    app.drop()
    engine.dispose()


@pytest.fixture(params=list(SIDES))
def side(request: pytest.FixtureRequest) -> Iterator[Side]:
    side = SIDES[request.param](broker_url(request.param))
    yield side
    side.delete()


def check(app: App, *targets: str, json_out: bool = False) -> subprocess.CompletedProcess[str]:
    options = [option for target in targets for option in ("--dead-letters", target)]
    url = app.engine.url.render_as_string(hide_password=False)
    return cli(
        "stats", "--url", url, "--check", "--broker-timeout", "2", *options,
        *(["--json"] if json_out else []),
    )  # fmt: skip


def test_count_list_replay_and_the_check_on_each_broker(side: Side, app: App) -> None:
    handler = Payments(app, poison={"bad-1"})
    side.publish([(None, "1.00"), ("bad-1", "2.00")])
    side.consume(app, app.inbox, handler, 4)  # the keyless one, the poison one thrice
    target = ("--broker", side.url, "--queue", side.dead)

    counted = cli("dead-letters", "count", *target)
    assert counted.returncode == 0, counted.stderr
    assert json.loads(counted.stdout)["dead_letters"] == 2

    listed = cli("dead-letters", "list", *target, "--json")
    assert listed.returncode == 0, listed.stderr
    letters = [json.loads(line) for line in listed.stdout.splitlines()]
    assert sorted((d["reason"], d["message_id"]) for d in letters) == [
        ("delivery_limit", "bad-1"),
        ("missing_message_id", None),
    ]
    table = cli("dead-letters", "list", *target, "--reason", "delivery_limit")
    assert table.returncode == 0 and "bad-1" in table.stdout
    assert "missing_message_id" not in table.stdout

    failing = check(app, side.target(), json_out=True)
    assert failing.returncode == WARNING_CODES["broker-dead-letters"] == 20, failing.stderr
    document = json.loads(failing.stdout)
    assert [q["dead_letters"] for q in document["dead_letter_queues"]] == [2]
    assert [w["kind"] for w in document["warnings"]] == ["broker-dead-letters"]
    report = check(app, side.target())
    assert report.returncode == 20 and "Broker dead letters" in report.stdout

    dry = cli("dead-letters", "replay", *target, "--reason", "delivery_limit", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["would_replay"] == 1
    assert json.loads(cli("dead-letters", "count", *target).stdout)["dead_letters"] == 2

    if hasattr(side, "wait_out_the_duplicate_window"):
        side.wait_out_the_duplicate_window()
    handler.fixed = True
    moved = cli("dead-letters", "replay", *target, "--reason", "delivery_limit")
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["replayed"] == 1
    assert side.consume(app, app.inbox, handler, 1)[0].delivery.message_id == "bad-1"
    assert app.ledger_rows("bad-1") == 1 and app.balance(1) == Decimal("2.00")

    rest = cli("dead-letters", "replay", *target, "--limit", "5")
    assert rest.returncode == 0 and json.loads(rest.stdout)["replayed"] == 1
    assert check(app, side.target()).returncode == 0


def test_a_dead_letter_queue_that_cannot_be_read_is_never_healthy(app: App) -> None:
    found = check(app, UNREACHABLE, json_out=True)
    assert found.returncode == WARNING_CODES["broker-dead-letters-unread"] == 21, found.stderr
    (queue,) = json.loads(found.stdout)["dead_letter_queues"]
    assert queue["dead_letters"] is None and "secret" not in found.stdout
    report = check(app, UNREACHABLE)
    assert report.returncode == 21 and "cannot read" in report.stdout


def test_the_lowest_code_wins_and_an_empty_queue_is_healthy(app: App) -> None:
    side = Rabbit(broker_url("rabbitmq"))
    try:
        assert check(app, side.target()).returncode == 0
        side.publish([(None, "1.00")])
        side.consume(app, app.inbox, Payments(app), 1)
        assert check(app, side.target(), UNREACHABLE).returncode == 20
    finally:
        side.delete()


@pytest.mark.parametrize(
    "args",
    [
        ["stats", "--url", "sqlite://", "--dead-letters", "amqp://host/"],
        ["stats", "--url", "sqlite://", "--dead-letters", "kafka://host/q"],
        ["dead-letters", "count", "--broker", "kafka://host", "--queue", "q"],
        ["dead-letters", "count", "--broker", "nats://host", "--queue", "a.b"],
        ["dead-letters", "replay", "--broker", "amqp://host", "--queue", "q", "--limit", "0"],
        ["dead-letters", "replay", "--broker", "amqp://host", "--queue", "q", "--reason", "x"],
        ["dead-letters", "count", "--broker", "amqp://host", "--queue", "q", "--timeout", "0"],
    ],
)
def test_usage_errors_exit_2_before_connecting(args: list[str]) -> None:
    done = cli(*args)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr


def test_a_broker_that_cannot_be_reached_exits_3_on_one_line() -> None:
    done = cli("dead-letters", "count", "--broker", UNREACHABLE.rsplit("/", 1)[0], "--queue", "q")
    assert done.returncode == 3, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("Error: cannot read the dead letters of") and "secret" not in line


def test_a_replay_that_left_dead_letters_in_place_exits_1(app: App) -> None:
    side = Rabbit(broker_url("rabbitmq"))
    try:
        side.publish([(None, "1.00")])
        side.consume(app, app.inbox, Payments(app), 1)
        side.channel.queue_delete(side.queue)  # the source is gone
        done = cli("dead-letters", "replay", "--broker", side.url, "--queue", side.dead)
        assert done.returncode == 1, done.stderr
        result = json.loads(done.stdout)
        assert result["replayed"] == 0 and "no queue named" in result["refused"][0]
    finally:
        side.delete()


def test_the_check_counts_the_dead_letters_with_an_async_drivers_url(tmp_path: Path) -> None:
    """The database is read on an event loop (aiosqlite); the brokers are counted outside
    it (NATS runs a loop of its own)."""
    from tests.backends.brokers.dead_letter_sides import Nats

    engine = sa.create_engine(f"sqlite:///{tmp_path}/inbox.db")
    App(engine).reset()
    engine.dispose()
    side = Nats(broker_url("nats"))
    try:
        url = f"sqlite+aiosqlite:///{tmp_path}/inbox.db"
        done = cli("stats", "--url", url, "--check", "--json", "--dead-letters", side.target())
        assert done.returncode == 0, done.stderr
        assert [q["dead_letters"] for q in json.loads(done.stdout)["dead_letter_queues"]] == [0]
    finally:
        side.delete()
