"""``sa-inbox worker`` and ``sa-inbox store`` in real subprocesses, on real servers."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from sa_inbox.cli._common import ASYNC_URL_EXAMPLES
from sa_inbox.store import DEAD, DONE, PENDING, PROCESSING, Incoming
from tests.acceptance.cli_handler import STARTED
from tests.support.store_app import TABLE, StoreApp

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[2]
HANDLER = "tests.acceptance.cli_handler:record"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sa_inbox.cli", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def receive(app: StoreApp, count: int, consumer_name: str = "default") -> None:
    """``count`` messages for the consumer, ids ``m-0``… (``<consumer>-0``… for others)."""
    prefix = "m" if consumer_name == "default" else consumer_name
    with app.engine.begin() as conn:
        app.store.receive_many(
            conn,
            [Incoming(f"{prefix}-{i}", {"seq": i}) for i in range(count)],
            consumer_name=consumer_name,
        )


#: The summary ``sa-inbox worker`` prints, all counts zero.
NOTHING = {
    "processed": 0, "retried": 0, "dead": 0, "lost": 0, "released": 0, "errors": 0,
    "transient_retries": 0, "batch_reruns": 0, "reaped_dead": 0,
}  # fmt: skip


#: The async driver an ``async def`` handler runs on, per backend (oracledb is both).
ASYNC_URL_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "mysql": "mysql+aiomysql",
}


def async_url_of(url: str) -> str:
    """``url`` on its backend's async driver (see :data:`ASYNC_URL_DRIVERS`)."""
    parsed = sa.make_url(url)
    driver = ASYNC_URL_DRIVERS.get(parsed.get_backend_name(), parsed.drivername)
    return parsed.set(drivername=driver).render_as_string(hide_password=False)


def summary(out: str) -> dict[str, object]:
    """The JSON summary on the last line of ``sa-inbox worker``'s output."""
    printed: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return printed


def test_worker_command_drains_the_store(url: str, store_app: StoreApp) -> None:
    receive(store_app, 30)
    child = cli(
        "worker", "--url", url, "--table", TABLE, "--consumer", "default", "--handler", HANDLER,
        "--until-empty",
    )  # fmt: skip
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert summary(out) == {**NOTHING, "processed": 30, "reason": "empty"}
    assert sorted(store_app.effect_ids()) == sorted(f"m-{i}" for i in range(30))
    counts = cli("store", "counts", "--url", url, "--table", TABLE)
    out, err = counts.communicate(timeout=60)
    assert json.loads(out) == {PENDING: 0, PROCESSING: 0, DONE: 30, DEAD: 0}, err


def test_a_renamed_handler_takes_its_consumer_name_over_with_hand_over(
    url: str, store_app: StoreApp
) -> None:
    """The name's owner is the handler that first ran it: a renamed handler is refused
    (exit 3, the hint names --hand-over, nothing processed); with --hand-over it takes the
    name over and drains the store."""
    receive(store_app, 2)
    worker = ["worker", "--url", url, "--table", TABLE, "--consumer", "default", "--until-empty"]
    first = cli(*worker, "--handler", HANDLER)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0 and summary(out)["processed"] == 2, err
    with store_app.engine.begin() as conn:
        more = [Incoming(f"n-{i}", {"seq": 10 + i}) for i in range(3)]
        store_app.store.receive_many(conn, more, consumer_name="default")
    renamed = [*worker, "--handler", "tests.acceptance.cli_handler:record_renamed"]
    refused = cli(*renamed)
    out, err = refused.communicate(timeout=120)
    assert refused.returncode == 3, err
    assert "ConsumerNameTaken" in err and "run the worker once with --hand-over" in err, err
    assert summary(out)["processed"] == 0 and len(store_app.effect_ids()) == 2
    taken = cli(*renamed, "--hand-over")
    out, err = taken.communicate(timeout=120)
    assert taken.returncode == 0, err
    assert summary(out)["processed"] == 3 and len(store_app.effect_ids()) == 5
    assert "handed over from tests.acceptance.cli_handler.record to" in err, err
    again = cli(*renamed, "--hand-over")  # nothing to hand over: said so, and it runs
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0 and "record_renamed owns it already" in err, err
    usage = cli("worker", "--url", url, "--all-consumers", "--hand-over", "--handler", HANDLER)
    _, err = usage.communicate(timeout=60)
    assert usage.returncode == 2 and "--hand-over gives one consumer name" in err, err


@pytest.mark.parametrize("handler", ["record_but_3", "record_async_but_3"])
def test_worker_command_in_batch_mode_fails_one_message_alone(
    url: str, store_app: StoreApp, handler: str
) -> None:
    receive(store_app, 10)
    if handler.startswith("record_async"):
        url = async_url_of(url)
    child = cli(
        "worker", "--url", url, "--table", TABLE, "--consumer", "default",
        "--handler", f"tests.acceptance.cli_handler:{handler}", "--transaction", "batch",
        "--batch-size", "10", "--max-attempts", "1", "--until-empty",
    )  # fmt: skip
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert summary(out) == {
        **NOTHING, "processed": 9, "dead": 1, "batch_reruns": 1, "reason": "empty"
    }  # fmt: skip
    assert sorted(store_app.effect_ids()) == sorted(f"m-{i}" for i in range(10) if i != 3)
    assert store_app.store.counts(store_app.engine) == {
        PENDING: 0, PROCESSING: 0, DONE: 9, DEAD: 1
    }  # fmt: skip


def _leased(store_app: StoreApp, child: subprocess.Popen[str], count: int) -> None:
    deadline = time.monotonic() + 60
    while store_app.store.counts(store_app.engine)[PROCESSING] < count:
        assert time.monotonic() < deadline and child.poll() is None, child.communicate()
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("handler", "stop", "code"),
    [
        ("record_slowly", "a second SIGINT", 130),
        ("record_slowly_async", "a second SIGINT", 130),
        ("exit_5", "the handler's SystemExit", 5),
    ],
)
def test_a_worker_stopped_at_once_gives_back_the_unstarted_messages(
    url: str, store_app: StoreApp, handler: str, stop: str, code: int, tmp_path: Path
) -> None:
    """A worker that must stop at once (Ctrl-C twice while a handler runs, or a handler
    raising SystemExit) ends without waiting for the handler: its transaction rolls back
    (no effect), the rest of the leased batch is pending again, and only the message in
    hand waits for the visibility timeout."""
    receive(store_app, 3)
    if handler.endswith("_async"):  # the asyncio worker, on the database's async driver
        url = async_url_of(url)
    started = tmp_path / "started"
    child = cli(
        "worker", "--url", url, "--table", TABLE, "--consumer", "default",
        "--handler", f"tests.acceptance.cli_handler:{handler}", "--batch-size", "3",
        env={STARTED: str(started)},
    )  # fmt: skip
    if stop == "a second SIGINT":
        _leased(store_app, child, 3)
        deadline = time.monotonic() + 60  # the first handler in hand, the others not started
        while not started.exists():
            assert time.monotonic() < deadline and child.poll() is None, child.communicate()
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        time.sleep(0.5)
        child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == code, err
    assert "released 2 unstarted messages" in err, err
    if code == 130:  # the summary so far, as at every other exit
        assert summary(out)["released"] == 2, out
    assert store_app.effect_ids() == []
    assert store_app.store.counts(store_app.engine) == {
        PENDING: 2, PROCESSING: 1, DONE: 0, DEAD: 0
    }  # fmt: skip


def test_worker_command_stops_on_sigterm(url: str, store_app: StoreApp) -> None:
    child = cli(
        "worker", "--url", url, "--table", TABLE, "--consumer", "default", "--handler", HANDLER,
        "--poll-interval", "0.1",
    )  # fmt: skip
    receive(store_app, 5)
    deadline = time.monotonic() + 60
    while len(store_app.effect_ids()) < 5:
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        assert time.monotonic() < deadline, "the worker did not process the messages"
        time.sleep(0.1)
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert summary(out) == {**NOTHING, "processed": 5, "reason": "stopped"}


def test_worker_log_names_the_message_the_error_and_the_outcome(
    url: str, store_app: StoreApp
) -> None:
    receive(store_app, 1)
    child = cli(
        "worker", "--url", url, "--table", TABLE, "--handler", "tests.acceptance.cli_handler:fail",
        "--consumer", "default", "--max-attempts", "2", "--backoff", "0", "--until-empty",
    )  # fmt: skip
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert summary(out) == {**NOTHING, "dead": 1, "retried": 1, "reason": "empty"}
    failures = [line for line in err.splitlines() if "WARNING" in line]
    assert len(failures) == 2, err
    error = "RuntimeError: no account for m-0"
    assert "m-0" in failures[0] and "attempt 1 of 2" in failures[0] and error in failures[0]
    assert "; retry at " in failures[0]
    assert "attempt 2 of 2" in failures[1] and error in failures[1]
    assert "; dead (max attempts reached)" in failures[1]
    assert store_app.store.counts(store_app.engine)[DEAD] == 1


def test_store_replay_command(url: str, store_app: StoreApp) -> None:
    receive(store_app, 2)
    t = store_app.store.table
    with store_app.engine.begin() as conn:
        conn.execute(t.update().where(t.c.message_id == "m-1").values(status=DEAD))
    child = cli("store", "replay", "--url", url, "--table", TABLE, "--status", "dead")
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert json.loads(out) == {"replayed": 1}
    assert store_app.store.counts(store_app.engine)[PENDING] == 2


def test_replaying_done_rows_needs_yes_and_dry_run_only_counts(
    url: str, store_app: StoreApp
) -> None:
    receive(store_app, 3)
    t = store_app.store.table
    with store_app.engine.begin() as conn:
        conn.execute(t.update().where(t.c.message_id != "m-2").values(status=DONE))
    before = {PENDING: 1, PROCESSING: 0, DONE: 2, DEAD: 0}
    replay = ["store", "replay", "--url", url, "--table", TABLE, "--status", "done"]
    for group in ("store", "outbox"):  # no row named: a usage error, before the database
        unnamed = cli(group, "replay", "--url", "postgresql+psycopg://u@127.0.0.1:1/db")
        _, err = unnamed.communicate(timeout=60)
        assert unnamed.returncode == 2, err
        assert "name the rows to replay: --id ID (repeatable) or --status" in err, err

    refused = cli(*replay)
    out, err = refused.communicate(timeout=60)
    assert refused.returncode == 2, err
    assert "2 done rows would be reset to pending" in err and "--yes" in err
    assert store_app.store.counts(store_app.engine) == before, "nothing replayed"
    by_id = cli("store", "replay", "--url", url, "--table", TABLE, "--id", "1", "--id", "3")
    out, err = by_id.communicate(timeout=60)  # m-0 (id 1) is done: --yes needed as well
    assert by_id.returncode == 2 and "1 done rows would be reset" in err, err
    assert store_app.store.counts(store_app.engine) == before, "nothing replayed"

    dry = cli(*replay, "--dry-run")
    out, err = dry.communicate(timeout=60)
    assert dry.returncode == 0, err
    assert json.loads(out) == {"would_replay": 2}
    assert store_app.store.counts(store_app.engine) == before, "nothing replayed"

    confirmed = cli(*replay, "--yes")
    out, err = confirmed.communicate(timeout=60)
    assert confirmed.returncode == 0, err
    assert json.loads(out) == {"replayed": 2}
    assert store_app.store.counts(store_app.engine) == {**before, PENDING: 3, DONE: 0}


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        ("no_colon", "expected module:function"),
        ("tests.acceptance.nowhere:record", "cannot import"),
        ("tests.acceptance.cli_handler:missing", "has no 'missing'"),
        ("tests.acceptance.cli_handler:NOT_CALLABLE", "is not callable"),
        ("os:getcwd", "'os:getcwd' cannot be called as handler(session, message)"),
        (
            "tests.acceptance.cli_handler:one_argument",
            "cannot be called as handler(session, message)",
        ),
    ],
)
def test_bad_handler_is_a_usage_error(tmp_path: Path, handler: str, message: str) -> None:
    child = cli(
        "worker", "--url", f"sqlite:///{tmp_path}/x.db", "--consumer", "c", "--handler", handler
    )
    _, err = child.communicate(timeout=60)
    assert child.returncode == 2
    assert message in err


def test_a_handler_module_that_fails_on_import_is_a_usage_error(tmp_path: Path) -> None:
    """Not only a missing module: one whose own code raises while it is imported is one
    ``Error:`` line naming what it raised (exit 2), not a traceback."""
    (tmp_path / "broken_handlers.py").write_text('raise RuntimeError("import-time failure")\n')
    child = subprocess.Popen(
        [sys.executable, "-m", "sa_inbox.cli", "worker", "--url", f"sqlite:///{tmp_path}/x.db",
         "--consumer", "c", "--handler", "broken_handlers:pay"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])},
    )  # fmt: skip
    _, err = child.communicate(timeout=60)
    assert child.returncode == 2, err
    assert "importing 'broken_handlers' failed: RuntimeError: import-time failure" in err, err
    assert "Traceback" not in err and not (tmp_path / "x.db").exists()


def test_a_handler_with_the_wrong_signature_is_refused_before_any_message(
    url: str, store_app: StoreApp
) -> None:
    receive(store_app, 3)
    child = cli(
        "worker", "--url", url, "--table", TABLE, "--all-consumers", "--handler", "os:getcwd",
        "--until-empty",
    )  # fmt: skip
    out, err = child.communicate(timeout=60)
    assert child.returncode == 2, err
    assert "cannot be called as handler(session, message)" in err and out == ""
    assert store_app.store.counts(store_app.engine) == {PENDING: 3, PROCESSING: 0, DONE: 0, DEAD: 0}


def test_missing_table_is_reported(tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / "x.db").close()  # the database exists, the table does not
    child = cli(
        "worker", "--url", f"sqlite:///{tmp_path}/x.db", "--all-consumers", "--handler", HANDLER
    )
    _, err = child.communicate(timeout=60)
    assert child.returncode == 3
    assert "the store table 'inbox_store' does not exist" in err


def test_store_counts_covers_every_consumer_unless_one_is_named(
    url: str, store_app: StoreApp
) -> None:
    receive(store_app, 2, "billing")
    receive(store_app, 1)
    every = cli("store", "counts", "--url", url, "--table", TABLE)
    out, err = every.communicate(timeout=60)
    assert json.loads(out) == {PENDING: 3, PROCESSING: 0, DONE: 0, DEAD: 0}, err
    assert json.loads(out) == store_app.store.counts(store_app.engine), "as the library"
    billing = cli("store", "counts", "--url", url, "--table", TABLE, "--consumer", "billing")
    out, err = billing.communicate(timeout=60)
    assert json.loads(out) == {PENDING: 2, PROCESSING: 0, DONE: 0, DEAD: 0}, err


def test_worker_needs_a_consumer_or_all_consumers(url: str, store_app: StoreApp) -> None:
    receive(store_app, 2, "billing")
    receive(store_app, 1, "shipping")
    worker = ["worker", "--url", url, "--table", TABLE, "--handler", HANDLER, "--until-empty"]
    for ambiguous in ([], ["--consumer", "billing", "--all-consumers"]):
        refused = cli(*worker, *ambiguous)
        out, err = refused.communicate(timeout=60)
        assert refused.returncode == 2, err
        assert "--consumer NAME, or pass --all-consumers" in err and out == ""
    assert store_app.store.counts(store_app.engine)[PENDING] == 3, "nothing processed"

    billing = cli(*worker, "--consumer", "billing")
    out, err = billing.communicate(timeout=120)
    assert billing.returncode == 0, err
    assert summary(out) == {**NOTHING, "processed": 2, "reason": "empty"}
    assert sorted(store_app.effect_ids()) == ["billing-0", "billing-1"]

    every = cli(*worker, "--all-consumers")
    out, err = every.communicate(timeout=120)
    assert every.returncode == 0, err
    assert summary(out) == {**NOTHING, "processed": 1, "reason": "empty"}
    assert sorted(store_app.effect_ids()) == ["billing-0", "billing-1", "shipping-0"]


def test_worker_max_messages(url: str, store_app: StoreApp) -> None:
    receive(store_app, 5)
    child = cli(
        "worker", "--url", url, "--table", TABLE, "--consumer", "default", "--handler", HANDLER,
        "--batch-size", "2", "--max-messages", "3",
    )  # fmt: skip
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert summary(out) == {**NOTHING, "processed": 3, "reason": "max_messages"}
    assert store_app.store.counts(store_app.engine) == {PENDING: 2, PROCESSING: 0, DONE: 3, DEAD: 0}


def test_a_configuration_error_stops_the_worker_with_exit_code_3(
    url: str, store_app: StoreApp
) -> None:
    receive(store_app, 3)
    child = cli(
        "worker", "--url", url, "--table", TABLE, "--consumer", "default",
        "--handler", "tests.acceptance.cli_handler:misconfigured", "--until-empty",
    )  # fmt: skip
    out, err = child.communicate(timeout=120)
    assert child.returncode == 3, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "Error: InvalidSessionFactory: the handler was deployed with Session.begin"
    )
    assert summary(out) == {**NOTHING, "released": 3, "reason": "error"}
    t = store_app.store.table
    with store_app.engine.connect() as conn:
        rows = conn.execute(sa.select(t.c.status, t.c.attempts, t.c.last_error))
        assert {tuple(r) for r in rows} == {(PENDING, 0, None)}, "no attempt counted"


def test_worker_imports_the_handler_from_the_working_directory(
    url: str, store_app: StoreApp, tmp_path: Path
) -> None:
    """As uvicorn and celery do: the ``sa-inbox`` script, run where the handler's module is,
    imports it without PYTHONPATH (``python -m`` would add the directory by itself)."""
    receive(store_app, 2)
    (tmp_path / "my_handlers.py").write_text(
        "from tests.acceptance.cli_handler import record\n\n\n"
        "def handle(session, message):\n"
        "    record(session, message)\n"
    )
    script = Path(sys.executable).parent / "sa-inbox"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)  # for tests.acceptance.cli_handler only, not the temp dir
    done = subprocess.run(
        [str(script), "worker", "--url", url, "--table", TABLE, "--consumer", "default",
         "--handler", "my_handlers:handle", "--until-empty"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert summary(done.stdout)["processed"] == 2
    assert sorted(store_app.effect_ids()) == ["m-0", "m-1"]


def test_store_replay_covers_every_consumer_unless_one_is_named(
    url: str, store_app: StoreApp
) -> None:
    receive(store_app, 1, "billing")
    receive(store_app, 1)
    t = store_app.store.table
    with store_app.engine.begin() as conn:
        conn.execute(t.update().values(status=DEAD))
    replay = ["store", "replay", "--url", url, "--table", TABLE, "--status", "dead"]
    billing = cli(*replay, "--consumer", "billing")
    out, err = billing.communicate(timeout=60)
    assert json.loads(out) == {"replayed": 1}, err
    every = cli(*replay)
    out, err = every.communicate(timeout=60)
    assert json.loads(out) == {"replayed": 1}, err
    assert store_app.store.counts(store_app.engine) == {PENDING: 2, PROCESSING: 0, DONE: 0, DEAD: 0}


def test_worker_command_runs_an_async_handler_on_the_asyncio_worker(
    url: str, store_app: StoreApp
) -> None:
    """An ``async def`` handler is detected at start and run by the AsyncWorker through the
    URL's async driver: the same summary, each message applied once."""
    receive(store_app, 12)
    child = cli(
        "worker", "--url", async_url_of(url), "--table", TABLE, "--consumer", "default",
        "--handler", "tests.acceptance.cli_handler:record_async", "--concurrency", "3",
        "--until-empty",
    )  # fmt: skip
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert summary(out) == {**NOTHING, "processed": 12, "reason": "empty"}
    assert sorted(store_app.effect_ids()) == sorted(f"m-{i}" for i in range(12))


def test_an_async_handler_on_a_sync_only_driver_is_refused(url: str, store_app: StoreApp) -> None:
    """The CLI keeps the URL's driver: an ``async def`` handler on a driver without an
    asyncio side (pysqlite, PyMySQL) is refused with one line naming the async driver's URL
    (exit 2), nothing processed; psycopg 3 (``postgresql+psycopg``) has one and runs it."""
    receive(store_app, 3)
    child = cli(
        "worker", "--url", url, "--table", TABLE, "--consumer", "default",
        "--handler", "tests.acceptance.cli_handler:record_async", "--until-empty",
    )  # fmt: skip
    _, err = child.communicate(timeout=120)
    counts = store_app.store.counts(store_app.engine)
    parsed = sa.make_url(url)
    if parsed.get_backend_name() in ("postgresql", "oracle"):  # psycopg 3, oracledb: both
        assert child.returncode == 0 and counts[DONE] == 3, err
        return
    assert child.returncode == 2, err
    error = [line for line in err.splitlines() if line.startswith("Error:")]
    assert error == [
        f"Error: Invalid value for --url: {parsed.drivername} has no asyncio side and an "
        "async def --handler runs on an AsyncSession: give the URL of an async driver "
        f"({ASYNC_URL_EXAMPLES[parsed.get_backend_name()]})"
    ]
    assert counts[PENDING] == 3 and store_app.effect_ids() == []
