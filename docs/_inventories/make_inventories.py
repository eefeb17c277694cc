"""Write ``sqlalchemy.inv`` and ``alembic.inv``: the intersphinx inventories of the objects
these docs link to, with their pages on docs.sqlalchemy.org and alembic.sqlalchemy.org.

The build reads no network, so the inventories are files of the repository; this script
makes them from the table below (``python docs/_inventories/make_inventories.py``), with
sphobjinv. Each page and anchor was read from the ``.. autoclass::`` / ``.. module::``
directives of the documentation sources shipped in the projects' sdists (SQLAlchemy 2.0:
``doc/build/``, Alembic: ``docs/build/``). ``python.inv`` is the whole inventory of
Python 3.11's documentation, copied from Debian's ``python3.11-doc`` package
(``/usr/share/doc/python3.11/html/objects.inv``). ``tests/docs/test_inventories.py``
checks that the files match this table.

A reference to a SQLAlchemy or Alembic object the table lacks fails the docs build
(nitpicky): add the object here with its page, run this script, commit both.
"""

from __future__ import annotations

import sys
from pathlib import Path

import sphobjinv as soi

HERE = Path(__file__).parent

#: project -> (version, [(name, role, page), ...]); the anchor is the name (``#$``) unless
#: the page names one, a module's is the page itself.
INVENTORIES: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "SQLAlchemy": (
        "2.0",
        [
            ("sqlalchemy.schema.MetaData", "class", "core/metadata.html"),
            ("sqlalchemy.schema.Table", "class", "core/metadata.html"),
            ("sqlalchemy.schema.Column", "class", "core/metadata.html"),
            ("sqlalchemy.engine.Connection", "class", "core/connections.html"),
            ("sqlalchemy.engine.Engine", "class", "core/connections.html"),
            ("sqlalchemy.create_engine", "function", "core/engines.html"),
            ("sqlalchemy.engine.URL", "class", "core/engines.html"),
            # documented under its public name (the page's anchor), defined in engine.url
            ("sqlalchemy.engine.url.URL", "class", "core/engines.html#sqlalchemy.engine.URL"),
            ("sqlalchemy.exc.DBAPIError", "exception", "core/exceptions.html"),
            ("sqlalchemy.exc.IntegrityError", "exception", "core/exceptions.html"),
            ("sqlalchemy.exc.OperationalError", "exception", "core/exceptions.html"),
            ("sqlalchemy.ext.asyncio", "module", "orm/extensions/asyncio.html"),
            ("sqlalchemy.ext.asyncio.AsyncEngine", "class", "orm/extensions/asyncio.html"),
            ("sqlalchemy.ext.asyncio.AsyncConnection", "class", "orm/extensions/asyncio.html"),
            ("sqlalchemy.ext.asyncio.AsyncSession", "class", "orm/extensions/asyncio.html"),
            ("sqlalchemy.ext.asyncio.async_sessionmaker", "class", "orm/extensions/asyncio.html"),
            (
                "sqlalchemy.ext.asyncio.async_scoped_session",
                "class",
                "orm/extensions/asyncio.html",
            ),
            ("sqlalchemy.orm.Session", "class", "orm/session_api.html"),
            ("sqlalchemy.orm.sessionmaker", "class", "orm/session_api.html"),
            ("sqlalchemy.orm.scoped_session", "class", "orm/contextual.html"),
            ("sqlalchemy.orm.SessionEvents", "class", "orm/events.html"),
            ("sqlalchemy.events.PoolEvents", "class", "core/events.html"),
            ("sqlalchemy.sql.expression.ColumnElement", "class", "core/sqlelement.html"),
            ("sqlalchemy.sql.expression.TextClause", "class", "core/sqlelement.html"),
            ("sqlalchemy.sql.expression.FromClause", "class", "core/selectable.html"),
            ("sqlalchemy.sql.expression.Select", "class", "core/selectable.html"),
            ("sqlalchemy.sql.expression.Executable", "class", "core/selectable.html"),
            ("sqlalchemy.types.TypeDecorator", "class", "core/custom_types.html"),
        ],
    ),
    "Alembic": (
        "1.17",
        [
            ("alembic.operations.Operations", "class", "ops.html"),
            ("alembic.operations.ops.MigrateOperation", "class", "api/operations.html"),
            ("alembic.config.Config", "class", "api/config.html"),
            ("alembic.command", "module", "api/commands.html"),
            ("alembic.script.Script", "class", "api/script.html"),
            ("alembic.script.ScriptDirectory", "class", "api/script.html"),
            ("alembic.autogenerate.compare_metadata", "function", "api/autogenerate.html"),
        ],
    ),
}


def inventory(project: str) -> bytes:
    """The compressed ``objects.inv`` of ``project``'s entries in :data:`INVENTORIES`."""
    version, entries = INVENTORIES[project]
    inv = soi.Inventory()
    inv.project = project
    inv.version = version
    for name, role, page in entries:
        # a module links to the page that documents it, everything else to its own anchor
        # (unless the table names the anchor)
        uri = page if role == "module" or "#" in page else f"{page}#$"
        inv.objects.append(
            soi.DataObjStr(name=name, domain="py", role=role, priority="1", uri=uri, dispname="-")
        )
    return bytes(soi.compress(inv.data_file(contract=True)))


def main() -> int:
    for project in INVENTORIES:
        path = HERE / f"{project.lower()}.inv"
        path.write_bytes(inventory(project))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
