"""The Alembic plugin ``sa_inbox.autogenerate`` (entry point group ``alembic.plugins``).

Alembic (1.18+) imports this module when it starts and calls :func:`setup`; the plugin is
opt-in by name in ``env.py``::

    context.configure(
        ...,
        autogenerate_plugins=["alembic.autogenerate.*", "sa_inbox.*"],
    )

It adds the comparator of :mod:`sa_inbox.alembic.autogenerate`, so sa-inbox tables render
as ``op.create_inbox_table(...)`` even if ``env.py`` never imports ``sa_inbox.alembic``.
This module is outside the ``sa_inbox.alembic`` package on purpose: it runs while Alembic
itself is still being imported, so it imports nothing from Alembic until it is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alembic.runtime.plugins import Plugin
    from alembic.util import PriorityDispatchResult

__all__ = ["PLUGIN_NAME", "setup"]

#: The plugin's name, as declared by the entry point in pyproject.toml.
PLUGIN_NAME = "sa_inbox.autogenerate"


def rewrite_inbox_tables(*args: Any, **kw: Any) -> PriorityDispatchResult:
    """Import :mod:`sa_inbox.alembic` (operations, renderers) and run its comparator."""
    from sa_inbox.alembic.autogenerate import rewrite_inbox_tables as rewrite

    return rewrite(*args, **kw)


def setup(plugin: Plugin) -> None:
    """Register the sa-inbox ``"schema"`` comparator on ``plugin``, after Alembic's own."""
    from alembic.util import DispatchPriority

    plugin.add_autogenerate_comparator(
        rewrite_inbox_tables, "schema", "sa_inbox", priority=DispatchPriority.LAST
    )
