"""A renamed consumer keeps its claims: ``op.rename_inbox_consumer`` on SQLite, PostgreSQL
and MariaDB, in a project made from the sa_inbox template.

Claims under ``billing``; a revision ``op.rename_inbox_consumer(table, 'billing',
'billing-v2')`` (downgrade: the reverse) → upgrade → every id claimed under the old name is
a duplicate under the new one (the copies keep ``received_at``, so they leave with the
purge when the originals would), an id the new name already had is not copied twice, other
consumers' claims are untouched, and the old name keeps its own → a claim made under the
new name after the upgrade → downgrade copies it back under the old name.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from tests.support.alembic.inspection import TABLE
from tests.support.alembic.project import Project

pytestmark = pytest.mark.backend

OLD, NEW = "billing", "billing-v2"


def _write_revision(project: Project, upgrade: str, downgrade: str) -> None:
    """A hand-written revision: an empty one with ``upgrade`` / ``downgrade`` as bodies."""
    script = command.revision(project.config(), message="rename consumer")
    assert script is not None and not isinstance(script, list)
    path = Path(script.path)
    head, tail = path.read_text().split("def downgrade()")
    head = head.replace(
        "from alembic import op\n", "from alembic import op\nimport sa_inbox.alembic\n"
    )
    path.write_text(
        head.replace("    pass\n", f"    {upgrade}\n")
        + "def downgrade()"
        + tail.replace("    pass\n", f"    {downgrade}\n")
    )


def _claims(engine: sa.Engine) -> dict[tuple[str, str], object]:
    """``(message_id, consumer_name) -> received_at`` of every row."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(f"SELECT message_id, consumer_name, received_at FROM {TABLE}")
        ).all()
    return {(row[0], row[1]): row[2] for row in rows}


def test_renamed_consumer_keeps_its_claims_both_ways(project: Project) -> None:
    project.init()
    project.write_models("inbox = Inbox(metadata)\n")
    project.autogenerate("inbox")
    command.upgrade(project.config(), "head")
    inbox = project.import_models().inbox
    engine = project.engine()
    try:
        with engine.begin() as conn:
            for message_id in ("m-1", "m-2", "Pay-1"):
                assert inbox.claim(conn, message_id, OLD) is True
            assert inbox.claim(conn, "m-2", NEW) is True  # the new name already had it
            assert inbox.claim(conn, "m-3", "shipping") is True
        before = _claims(engine)

        _write_revision(
            project,
            f"op.rename_inbox_consumer({TABLE!r}, {OLD!r}, {NEW!r})",
            f"op.rename_inbox_consumer({TABLE!r}, {NEW!r}, {OLD!r})",
        )
        command.upgrade(project.config(), "head")

        after = _claims(engine)
        assert set(after) == set(before) | {("m-1", NEW), ("Pay-1", NEW)}
        assert after[("m-1", NEW)] == before[("m-1", OLD)]  # received_at copied
        assert after[("m-2", NEW)] == before[("m-2", NEW)]  # not copied over
        with engine.begin() as conn:
            for message_id in ("m-1", "m-2", "Pay-1"):
                assert inbox.claim(conn, message_id, NEW) is False  # duplicates
            assert inbox.claim(conn, "pay-1", NEW) is True  # byte-for-byte keys
            assert inbox.claim(conn, "m-3", NEW) is True  # another consumer's claim
            assert inbox.claim(conn, "m-4", NEW) is True  # claimed after the rename
        command.check(project.config())

        command.downgrade(project.config(), "-1")
        with engine.begin() as conn:
            for message_id in ("m-1", "m-2", "Pay-1", "pay-1", "m-3", "m-4"):
                assert inbox.claim(conn, message_id, OLD) is False
        assert len(_claims(engine)) == 2 * 6 + 1  # both names hold all six; shipping's one
    finally:
        engine.dispose()
