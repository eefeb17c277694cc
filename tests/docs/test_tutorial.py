"""The tutorial (docs/tutorial.md), run as written: its install command resolves to this
project's extras, and docs/examples/tutorial/tutorial.sh (every other command of the page,
included from there) runs against the live PostgreSQL and RabbitMQ and ends with each
payment in the ledger once, duplicates published and a consumer SIGKILLed included."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from packaging.requirements import Requirement

from tests.conftest import backend_url, broker_url

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
EXAMPLE = ROOT / "docs" / "examples" / "tutorial"


def test_the_install_command_names_extras_this_project_declares() -> None:
    page = TUTORIAL.read_text()
    commands = re.findall(r"pip install '([^']+)'", page)
    assert commands, "the tutorial has no pip install command"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for command in commands:
        requirement = Requirement(command)
        assert requirement.name == "sa-inbox"
        assert requirement.extras <= set(extras), requirement.extras - set(extras)


def test_every_step_of_the_page_comes_from_the_script() -> None:
    page = TUTORIAL.read_text()
    script = (EXAMPLE / "tutorial.sh").read_text()
    steps = re.findall(r"# \[(step \d+)\]\n", script)
    assert steps and len(steps) == len(set(steps))
    for step in steps:
        assert f'"# [{step}]"' in page, f"{step} of tutorial.sh is not on the page"
    for name in ("payments.py", "consumer.py", "producer.py", "check.py"):
        assert f"examples/tutorial/{name}" in page, f"{name} is not shown on the page"


def _own_database(url: str) -> str:
    """A database of the tutorial's own on the server of ``url`` (made anew)."""
    name = f"sa_inbox_tutorial_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.exec_driver_sql(f"CREATE DATABASE {name}")
    engine.dispose()
    return sa.make_url(url).set(database=name).render_as_string(hide_password=False)


def _drop_database(url: str, own: str) -> None:
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.exec_driver_sql(
            f"DROP DATABASE IF EXISTS {sa.make_url(own).database} WITH (FORCE)"
        )
    engine.dispose()


def _delete_queues(amqp_url: str) -> None:
    import pika

    with pika.BlockingConnection(pika.URLParameters(amqp_url)) as connection:
        channel = connection.channel()
        for queue in ("payments", "payments.dead-letter"):
            channel.queue_delete(queue)


@pytest.mark.slow
def test_the_tutorial_runs_against_postgresql_and_rabbitmq(tmp_path: Path) -> None:
    server = backend_url("postgresql", tmp_path)
    amqp_url = broker_url("rabbitmq")
    database_url = _own_database(server)
    _delete_queues(amqp_url)
    work = tmp_path / "tutorial"
    shutil.copytree(EXAMPLE, work)
    script = (work / "tutorial.sh").read_text()
    for variable, url in (("DATABASE_URL", database_url), ("AMQP_URL", amqp_url)):
        script, replaced = re.subn(
            rf"^export {variable}=.*$", f"export {variable}='{url}'", script, flags=re.M
        )
        assert replaced == 1, f"step 1 sets {variable} once"
    (work / "tutorial.sh").write_text(script)
    bin_dir = str(Path(sys.executable).parent)  # python and sa-inbox of this environment
    environment = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    try:
        done = subprocess.run(
            ["bash", "tutorial.sh"],
            cwd=work,
            env=environment,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        log = (work / "consumer.log").read_text() if (work / "consumer.log").exists() else ""
        assert done.returncode == 0, done.stdout + done.stderr + log
        assert done.stdout.count("ledger rows: 100, distinct payments: 100") == 2, done.stdout
        engine = sa.create_engine(database_url)
        with engine.connect() as connection:
            claims = connection.scalar(
                sa.text(
                    "SELECT count(*) FROM inbox_processed_messages WHERE consumer_name = 'ledger'"
                )
            )
            doubled = connection.scalar(
                sa.text(
                    "SELECT count(*) FROM (SELECT payment_id FROM ledger GROUP BY payment_id "
                    "HAVING count(*) > 1) AS d"
                )
            )
        engine.dispose()
        assert (claims, doubled) == (100, 0)
        assert "ledger" in done.stdout  # the stats report names the consumer
    finally:
        _delete_queues(amqp_url)
        _drop_database(server, database_url)
