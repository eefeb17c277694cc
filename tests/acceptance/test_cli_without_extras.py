"""``sa-inbox`` on a bare ``pip install sa-inbox``: every command answers ``--help``, and a
command that needs a missing extra exits 2 with one line naming it.

Real subprocesses with the optional packages hidden (scripts/import_matrix.py's
``sys.meta_path`` finder: every extra's and driver's modules, greenlet included).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "scripts" / "import_matrix.py"


def bare(*args: str) -> subprocess.CompletedProcess[str]:
    """scripts/import_matrix.py ARGS with the extras hidden (``run ARGS``: sa-inbox ARGS)."""
    return subprocess.run(
        [sys.executable, str(MATRIX), "--hide-extras", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def test_every_command_answers_help_without_the_extras() -> None:
    done = bare("cli")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert all(line.startswith("ok ") for line in lines), done.stdout
    helped = {line.split(None, 1)[1] for line in lines}
    for command in ("sa-inbox --help", "sa-inbox alembic init --help", "sa-inbox chaos --help",
                    "sa-inbox store replay --help", "sa-inbox outbox counts --help",
                    "sa-inbox demo --help", "sa-inbox worker --help"):  # fmt: skip
        assert command in helped, done.stdout
    assert len(lines) >= 21  # the entry point twice, the root, 18 commands and groups


@pytest.mark.parametrize(
    ("args", "module", "extra"),
    [
        (["alembic", "init", "{tmp}/migrations"], "sa_inbox.cli.alembic", "alembic"),
        (
            ["chaos", "--broker", "amqp://x", "--url", "sqlite:///{tmp}/c.db"],
            "sa_inbox.chaos.drivers.rabbitmq",
            "rabbitmq",
        ),
        (
            ["chaos", "--broker", "nats://x", "--url", "sqlite:///{tmp}/c.db"],
            "sa_inbox.chaos.drivers.nats",
            "nats",
        ),
        (
            ["relay", "--broker", "redis://x", "--url", "sqlite:///{tmp}/c.db"],
            "sa_inbox.brokers.redis",
            "redis",
        ),
        (
            ["bench", "outbox", "--broker", "amqp://x", "--url", "sqlite:///{tmp}/b.db"],
            "sa_inbox.bench.outbox",
            "rabbitmq",
        ),
        (
            ["dead-letters", "replay", "--broker", "amqp://x", "--queue", "q", "--dry-run"],
            "sa_inbox.brokers.dead_letters.rabbitmq",
            "rabbitmq",
        ),
        (["console", "--url", "sqlite:///{tmp}/c.db"], "sa_inbox.cli.console", "console"),
        (
            ["dead-letters", "count", "--broker", "nats://x", "--queue", "Q"],
            "sa_inbox.brokers.dead_letters.nats",
            "nats",
        ),
    ],
    ids=lambda value: value[0] if isinstance(value, list) else None,
)
def test_a_command_whose_extra_is_missing_exits_2_with_one_line(
    args: list[str], module: str, extra: str, tmp_path: Path
) -> None:
    done = bare("run", *(arg.format(tmp=tmp_path) for arg in args))
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr
        == f"Error: {module} needs the {extra!r} extra: pip install 'sa-inbox[{extra}]'\n"
    )
    assert list(tmp_path.iterdir()) == [], "nothing created"
    assert "Traceback" not in done.stdout


def test_stats_cannot_count_a_dead_letter_queue_without_its_extra(tmp_path: Path) -> None:
    """Never healthy: the queue's line says which extra is missing, and the exit is 21."""
    import sqlalchemy as sa

    from sa_inbox import Inbox

    url = f"sqlite:///{tmp_path}/inbox.db"
    engine = sa.create_engine(url)
    metadata = sa.MetaData()
    Inbox(metadata)
    metadata.create_all(engine)
    engine.dispose()
    done = bare("run", "stats", "--url", url, "--check", "--dead-letters", "redis://x/0/q")
    assert done.returncode == 21, done.stdout + done.stderr
    assert "needs the 'redis' extra" in " ".join(done.stdout.split())
