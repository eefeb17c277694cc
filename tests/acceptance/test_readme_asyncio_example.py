"""The README's first asyncio example, run as written against the live RabbitMQ and
PostgreSQL: the code block is read from README.md (the first ``python`` block of the
"asyncio" section), its placeholder URLs and queue name replaced by the test's, and run as
a script in a real process.

Two payments, one published twice, and a message without a key: each payment is applied
once, the copy acked as a duplicate, the keyless message dead-lettered to
``<queue>.dead-letter``, the queue left empty; SIGTERM stops the consumer and the script
exits 0 (``run()`` returns on ``stop()``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pika
import pytest
import sqlalchemy as sa

from tests.conftest import backend_url, broker_url

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: The placeholders of the example's URLs, as the README writes them.
DATABASE_PLACEHOLDER = '"postgresql+asyncpg://…"'
BROKER_PLACEHOLDER = '"amqp://…"'
QUEUE = '"payments"'


def first_asyncio_example() -> str:
    """The first ``python`` code block after the README's ``## asyncio`` heading."""
    text = README.read_text()
    section = text.split("\n## asyncio\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "no python block in the README's asyncio section"
    return match.group(1)


def test_the_example_is_the_consumer_it_says() -> None:
    """What the rest of this test relies on: the placeholders, the queue, the stop."""
    code = first_asyncio_example()
    for needed in (DATABASE_PLACEHOLDER, BROKER_PLACEHOLDER, QUEUE, "signal.SIGTERM"):
        assert needed in code, needed
    assert "asyncio.run(main())" in code


def _wait(condition: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _messages(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def test_the_first_asyncio_example_runs_against_the_live_servers(tmp_path: Path) -> None:
    sync_url = sa.make_url(backend_url("postgresql", tmp_path))
    async_url = sync_url.set(drivername="postgresql+asyncpg").render_as_string(False)
    amqp_url = broker_url("rabbitmq")
    queue = f"readme_{uuid.uuid4().hex[:10]}"
    code = (
        first_asyncio_example()
        .replace(DATABASE_PLACEHOLDER, repr(async_url))
        .replace(BROKER_PLACEHOLDER, repr(amqp_url))
        .replace(QUEUE, repr(queue))
    )
    script = tmp_path / "readme_asyncio.py"
    script.write_text(code)

    # the example's tables, made from its own declarations (everything before main())
    declarations: dict[str, object] = {}
    exec(compile(code.split("async def main()", 1)[0], str(script), "exec"), declarations)
    metadata = declarations["metadata"]
    assert isinstance(metadata, sa.MetaData)
    engine = sa.create_engine(sync_url)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    process = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def declared() -> bool:
            probe = pika.BlockingConnection(pika.URLParameters(amqp_url))
            try:
                probe.channel().queue_declare(queue, passive=True)
                return True
            except pika.exceptions.ChannelClosedByBroker:
                return False
            finally:
                if probe.is_open:
                    probe.close()

        _wait(declared, 30, "the example to declare its queue")
        for message_id in ("pay-1", "pay-2", "pay-1", None):
            properties = pika.BasicProperties(message_id=message_id, delivery_mode=2)
            channel.basic_publish("", queue, b"{}", properties, mandatory=True)

        ledger = metadata.tables["ledger"]

        def ledger_ids() -> list[str]:
            with engine.connect() as conn:
                return sorted(conn.execute(sa.select(ledger.c.message_id)).scalars())

        _wait(lambda: _messages(channel, f"{queue}.dead-letter") == 1, 30, "the dead letter")
        _wait(lambda: _messages(channel, queue) == 0, 30, "the queue to drain")
        assert ledger_ids() == ["pay-1", "pay-2"], "each payment applied once"
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
        assert process.returncode == 0, output
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        channel.queue_delete(queue)
        channel.queue_delete(f"{queue}.dead-letter")
        connection.close()
        metadata.drop_all(engine)
        engine.dispose()
