"""The pytest plugin of sa-inbox: the ``exactly_once`` fixture.

A module of its own at the top level, outside the ``sa_inbox`` package (as
``_hypothesis_pytestplugin`` is outside ``hypothesis``): pytest loads it in every project
where sa-inbox is installed (the ``pytest11`` entry point ``sa_inbox``), and loading it
imports neither sa-inbox nor SQLAlchemy. It defines one fixture and nothing else (no hook
that collects, reorders, marks, skips or reports anything), and the fixture imports the
checks only when a test asks for it; a fixture of the same name in the project's own
``conftest.py`` takes precedence. Where plugins are not loaded automatically
(``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``), enable it with ``-p sa_inbox`` (the entry point's
name; ``-p sa_inbox.testing.plugin`` and ``pytest_plugins = ["sa_inbox.testing.plugin"]``
work too, importing sa-inbox as they load); ``-p no:sa_inbox`` turns it off.

Example::

    def test_billing_is_exactly_once(exactly_once):
        exactly_once(
            apply_payment,                     # handler(session, delivery), def or async def
            session_factory=Session, inbox=inbox, consumer_name="billing",
            message=lambda message_id: Message(message_id, b'{"account": 7, "cents": 500}'),
            state=lambda session, message: ledger_rows(session, message.message_id),
        )
"""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["exactly_once"]


@pytest.fixture
def exactly_once() -> Any:
    """:func:`sa_inbox.testing.check_exactly_once`: call it with your handler (or broker
    adapter, or ``consumer=``), a session factory on your test database, a message factory
    and a state function. The test fails with the report (each failure mode, the rule, the
    fix) when a check fails."""
    from sa_inbox.testing.kit import check_exactly_once

    return check_exactly_once
