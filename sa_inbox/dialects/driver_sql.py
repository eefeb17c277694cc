"""A single-row statement compiled once per SQLAlchemy dialect and sent as driver SQL.

:class:`DriverSQL` compiles a statement once with SQLAlchemy's compiler API
(``ClauseElement.compile(dialect=..., column_keys=...)``) and sends its text with
:meth:`~sqlalchemy.engine.Connection.exec_driver_sql` (the ``Connection``'s events,
transaction and error wrapping kept; bind values through each type's bind processor), so
the store's one-row receive skips the compiled-statement path at every call. Not for a
``schema_translate_map`` or post-compile parameters: :meth:`DriverSQL.build` returns
``None`` for those and :meth:`DriverSQL.runs_on` is False on such a connection.

.. seealso:: ``docs/discussions/store-claim.md``, "Driver SQL for the receive".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection, CursorResult, Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import Executable

__all__ = ["DriverSQL"]

#: How one parameter is made from a row: the row's key and the type's bind processor (or
#: None); or, for a constant of the statement, None and its processed value.
_Param = tuple[str | None, Any]


class DriverSQL:
    """One single-row statement as the text and parameter order of one dialect.

    :param sql: the statement's text in the dialect's paramstyle.
    :param params: per parameter, in the order the paramstyle needs (or per name), where its
        value comes from.
    :param names: the bind names, for a named paramstyle; ``None`` for a positional one.

    Built by :meth:`build`; run by :meth:`execute` (or, sent with ``BEGIN``, by
    :attr:`with_begin`).
    """

    __slots__ = ("names", "params", "sql", "with_begin")

    def __init__(self, sql: str, params: Sequence[_Param], names: Sequence[str] | None) -> None:
        self.sql = sql
        self.params = tuple(params)
        self.names = None if names is None else tuple(names)
        #: The same statement sent with the transaction's ``BEGIN``, where the claim
        #: dialect has such a form for this driver
        #: (:class:`~sa_inbox.dialects.with_begin.WithBegin`); set by its builder.
        self.with_begin: Any = None

    @classmethod
    def build(
        cls, statement: Executable, dialect: Dialect, keys: Sequence[str]
    ) -> DriverSQL | None:
        """``statement`` compiled for ``dialect`` with a row of ``keys``; ``None`` if it must
        keep SQLAlchemy's compiled path (parameters rendered at execution, a bind name the
        named paramstyles would escape, a parameter that is neither a row key nor a
        constant).

        :param statement: an insert whose values are bound by row key (``column_keys``).
        :param dialect: the connection's SQLAlchemy dialect (``conn.dialect``).
        :param keys: the keys of every row :meth:`execute` will be given.
        """
        compiled = statement.compile(dialect=dialect, column_keys=list(keys))  # type: ignore[attr-defined]
        if not isinstance(compiled, SQLCompiler) or _renders_at_execution(compiled):
            return None
        if compiled.positional:
            names: list[str] = list(compiled.positiontup or ())
        else:
            names = list(compiled.binds)
            if not all(name.isidentifier() for name in names):
                return None
        params: list[_Param] = []
        for name in names:
            bind = compiled.binds[name]
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if bind.key in keys:
                params.append((bind.key, process))
            elif bind.value is not None and not callable(bind.value):
                params.append((None, bind.value if process is None else process(bind.value)))
            else:
                return None
        return cls(compiled.string, params, None if compiled.positional else names)

    @staticmethod
    def runs_on(conn: Connection) -> bool:
        """Whether the text is what SQLAlchemy would send on ``conn``: not with a
        ``schema_translate_map`` execution option."""
        return not conn.get_execution_options().get("schema_translate_map")

    def values(self, row: Mapping[str, Any]) -> list[Any]:
        """The parameters for ``row``, in :attr:`params` order, each through its type's
        bind processor.

        :param row: a value for every key given to :meth:`build`.
        """
        return [
            extra if key is None else (row[key] if extra is None else extra(row[key]))
            for key, extra in self.params
        ]

    def execute(
        self, conn: Connection, row: Mapping[str, Any], options: Mapping[str, Any]
    ) -> CursorResult[Any]:
        """Send the text with ``row``'s values, through ``conn.exec_driver_sql``.

        :param row: a value for every key given to :meth:`build`.
        :param options: the execution options (``preserve_rowcount``).
        :raises sqlalchemy.exc.DBAPIError: as ``Connection.execute()`` would.
        """
        values = self.values(row)
        if self.names is None:
            return conn.exec_driver_sql(self.sql, tuple(values), execution_options=options)
        return conn.exec_driver_sql(
            self.sql, dict(zip(self.names, values, strict=True)), execution_options=options
        )


def _renders_at_execution(compiled: SQLCompiler) -> bool:
    """Whether SQLAlchemy changes the text or its parameters at execution."""
    if compiled.literal_execute_params or compiled.post_compile_params:
        return True
    return any(bind.expanding for bind in compiled.binds.values())
