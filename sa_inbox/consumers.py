"""One consumer name, one handler: who owns each ``consumer_name``.

A claim is unique per ``(message_id, consumer_name)``, so two handlers that share a consumer
name share its claims: whichever claims an id first applies its change, and the other one
skips the id as a duplicate, acked and never run. The first handler to claim under a name
becomes its owner (a row of the consumers table, written in a short transaction of its own,
once per process and name); another handler claiming under that name is refused with
:class:`~sa_inbox.exc.ConsumerNameTaken` before anything is claimed. A name changes hands
only through :meth:`Consumers.hand_over`.

A handler is known by its qualified name (:func:`handler_name`: ``module.qualname``; a
module run as a script by the name it would be imported under): the same function in a new
release keeps its name; a ``functools.partial`` or :func:`functools.wraps` wrapper is known
by its function, a callable object by its class. A handler renamed in a new release takes
the name over with :meth:`Consumers.hand_over`.

**A name must tell one handler from another.** Every lambda of one scope is
``module.<lambda>``, however different their bodies: two lambdas under one consumer name
would share its claims unseen, and a lambda has no name to keep across releases. So a
lambda (a name holding ``<lambda>``, in a function or not) cannot own a consumer name by its
name: recording or checking it raises :class:`~sa_inbox.exc.AnonymousHandler` (a
configuration error, before anything is claimed). Define the handler as a function
(``functools.partial(apply_payment, message=message)`` gives it the message and keeps its
name), or name its owner yourself with :func:`owned_as` (``owned_as("billing.pay", lambda
session: ...)``): the name is then yours to keep unique and stable across releases.

A function defined inside another is known by its path (``outer.<locals>.inner``): two of
one scope have two names, and the path stays as long as the code does, so it owns a name as
a module-level function does. One case it cannot tell: a factory that makes several
handlers (``make_handler(kind)`` returning ``handler``) gives them all one name, whatever
they close over; give each its own with :func:`owned_as`. sa-inbox's own adapters name the
user's handler, never their wrappers (FastStream: the subscriber's function; Celery: the
task's name).
"""

from __future__ import annotations

import functools
import sys
import types
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast, overload

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError

from .checks import check_metadata, is_asyncio_object
from .dialects import classifier_for
from .exc import (
    AnonymousHandler,
    ConsumerNameTaken,
    InvalidArgument,
    InvalidBind,
    InvalidHandler,
    InvalidTable,
    MissingTable,
    SyncAsyncMismatch,
)
from .schema import DEFAULT_MESSAGE_ID_LENGTH, NOW, TIMESTAMP_TZ, key_type
from .validation import positive_int, shown, validate_key

__all__ = [
    "DEFAULT_CONSUMERS_TABLE",
    "TABLE_NAME_LENGTH",
    "Consumers",
    "consumer_name_length_for",
    "consumers_flag",
    "consumers_for",
    "consumers_table",
    "handler_name",
    "owned_as",
    "owner_name",
    "shared_consumers_table",
    "stands_for",
]

DEFAULT_CONSUMERS_TABLE = "inbox_consumers"
#: Length of the handler column: a module path and a qualified name.
HANDLER_LENGTH = 512
#: Length of the ``inbox_table`` column: any table name (identifiers hold at most 128
#: bytes on Oracle, 64 characters on MySQL/MariaDB, 63 bytes on PostgreSQL).
TABLE_NAME_LENGTH = 128
#: Inserts of the owner row tried while transient conflicts (a deadlock, a Galera
#: certification failure) leave no row (:meth:`Consumers._register`).
REGISTER_ATTEMPTS = 5
#: The mark's kind (``table.info["sa_inbox"]["kind"]``), read by the Alembic layer.
KIND = "consumers"


def consumers_table(
    metadata: sa.MetaData,
    *,
    table_name: str = DEFAULT_CONSUMERS_TABLE,
    schema: str | None = None,
    consumer_name_length: int = DEFAULT_MESSAGE_ID_LENGTH,
) -> sa.Table:
    """The consumers table on ``metadata``: ``(inbox_table, consumer_name)`` -> ``handler``.

    Defined once per MetaData and schema, and shared by every inbox and store table of it;
    a later call asking for a longer ``consumer_name`` widens the column of the table
    already defined. Alembic creates it with ``op.create_inbox_consumers_table()``.

    :param consumer_name_length: the length in characters of ``consumer_name``: at least
        the ``message_id_length`` of every table that shares it.
    :raises InvalidTable: if ``consumer_name_length`` is not a positive int, or the
        MetaData holds a table of that name that is not a consumers table.
    """
    check_metadata(metadata, entry="the consumers table")
    length = positive_int(consumer_name_length, "consumer_name_length", InvalidTable)
    key = table_name if schema is None else f"{schema}.{table_name}"
    existing = metadata.tables.get(key)
    if existing is not None:
        return _widened(existing, length)
    return sa.Table(
        table_name,
        metadata,
        sa.Column("inbox_table", key_type(TABLE_NAME_LENGTH), nullable=False),
        sa.Column("consumer_name", key_type(length), nullable=False),
        sa.Column("handler", sa.String(HANDLER_LENGTH), nullable=False),
        sa.Column("registered_at", TIMESTAMP_TZ, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("inbox_table", "consumer_name", name=f"pk_{table_name}"),
        schema=schema,
        comment="sa-inbox: the handler that owns each consumer name",
        info={"sa_inbox": {"kind": KIND, "options": {"consumer_name_length": length}}},
    )


def shared_consumers_table(table: sa.Table, message_id_length: int) -> sa.Table:
    """The consumers table serving ``table`` (an inbox or store table of
    ``message_id_length``): the one of its MetaData and schema, defined there if it is not
    yet. Its ``consumer_name`` holds at least
    :data:`~sa_inbox.schema.DEFAULT_MESSAGE_ID_LENGTH` characters, so that a
    ``message_id_length`` changed within that leaves the shared table as it is.

    :raises InvalidTable: as :func:`consumers_table`.
    """
    return consumers_table(
        table.metadata,
        schema=table.schema,
        consumer_name_length=consumer_name_length_for(message_id_length),
    )


def consumer_name_length_for(message_id_length: int) -> int:
    """The ``consumer_name`` length of the consumers table serving tables of
    ``message_id_length``: that, and at least
    :data:`~sa_inbox.schema.DEFAULT_MESSAGE_ID_LENGTH`. A value that is not a positive int
    is returned as it is, for :func:`consumers_table` to refuse."""
    valid = isinstance(message_id_length, int) and not isinstance(message_id_length, bool)
    if not valid or message_id_length <= 0:
        return message_id_length
    return max(DEFAULT_MESSAGE_ID_LENGTH, message_id_length)


def _widened(table: sa.Table, length: int) -> sa.Table:
    """``table`` (a consumers table), its ``consumer_name`` at least ``length`` long."""
    mark = table.info.get("sa_inbox")
    if not isinstance(mark, dict) or mark.get("kind") != KIND:
        raise InvalidTable(
            f"the MetaData already has a table {table.fullname!r} that is not sa-inbox's "
            "consumers table: pass consumers=False, or rename that table"
        )
    options = mark["options"]
    if options["consumer_name_length"] < length:
        table.c.consumer_name.type = key_type(length)
        options["consumer_name_length"] = length
    return table


def handler_name(handler: object) -> str:
    """The name a handler is known by: the name given by :func:`owned_as`, else
    ``module.qualname`` of the function, seen through ``functools.partial`` and
    :func:`functools.wraps` wrappers (``__wrapped__``), or of a callable object's class.

    A function defined in the module run as ``__main__`` is named after the module it
    would be imported as (``python -m pkg.mod`` and ``python pkg/mod.py``: ``pkg.mod``), so
    a handler keeps its name however its module is started. A module of a namespace package
    (no ``__init__.py``) run as a script is known by its file's stem only: run it with
    ``python -m``.
    """
    given = _given_owner(handler)
    if given is not None:
        return given
    target = _unwrapped(handler)
    if not hasattr(target, "__qualname__"):
        target = type(target)
    module = getattr(target, "__module__", None) or "?"
    if module == "__main__":
        module = _main_module_name()
    return f"{module}.{getattr(target, '__qualname__', type(target).__name__)}"


#: The part of a qualified name every lambda of one scope shares.
ANONYMOUS = "<lambda>"
#: The attribute holding the owner name :func:`owned_as` gave a handler.
OWNER_ATTRIBUTE = "__sa_inbox_owner__"


def owner_name(handler: object) -> str:
    """The name under which ``handler`` owns a consumer name: :func:`handler_name`, if it
    tells this handler from every other.

    :raises AnonymousHandler: for a lambda (its name holds ``<lambda>``) that
        :func:`owned_as` gave no name.
    """
    name = handler_name(handler)
    if _given_owner(handler) is None and ANONYMOUS in name:
        raise AnonymousHandler(name)
    return name


@overload
def owned_as(owner: str) -> Callable[[F], F]: ...


@overload
def owned_as(owner: str, handler: F) -> F: ...


def owned_as(owner: str, handler: F | None = None) -> F | Callable[[F], F]:
    """Name the owner ``handler`` is known by (:mod:`sa_inbox.consumers`), instead of its
    qualified name: for a lambda, each handler a factory makes, or a handler to keep its
    consumer names across a rename. The name is yours to keep unique (two handlers
    given one name share its claims) and the same in every release.

    ``owned_as("billing.pay", handler)`` returns ``handler`` itself, marked, if it is a
    plain function (a lambda is one), else a wrapper of it (an ``async def`` one for an
    asynchronous handler); ``@owned_as("billing.pay")`` decorates.

    :param owner: the name, a non-empty string of at most 512 characters.
    :raises InvalidArgument: for another ``owner``.
    :raises InvalidHandler: for a ``handler`` that is not callable.
    """
    owner = _owner_string(owner)
    if handler is None:
        return lambda decorated: owned_as(owner, decorated)
    _callable(handler)
    marked: Any = handler if isinstance(handler, types.FunctionType) else _wrapper(handler)
    setattr(marked, OWNER_ATTRIBUTE, owner)
    return cast(F, marked)


def _wrapper(handler: Callable[..., Any]) -> Callable[..., Any]:
    """A function calling ``handler``, of its kind (``async def`` for an asynchronous one)."""
    from .handlers import is_async_callable

    if is_async_callable(handler):

        @functools.wraps(handler)
        async def awaiting(*args: Any, **kwargs: Any) -> Any:
            return await handler(*args, **kwargs)

        return awaiting

    @functools.wraps(handler)
    def calling(*args: Any, **kwargs: Any) -> Any:
        return handler(*args, **kwargs)

    return calling


def _given_owner(handler: object) -> str | None:
    """The owner name :func:`owned_as` gave ``handler`` or a handler it wraps, if any."""
    for layer in _layers(handler):
        given = getattr(layer, OWNER_ATTRIBUTE, None)
        if isinstance(given, str):
            return given
    return None


#: How many wrappers :func:`_unwrapped` looks through (as :func:`inspect.unwrap` guards).
MAX_WRAPPERS = 100
#: The attribute of a wrapper that calls a handler with other arguments (so it cannot be a
#: :func:`functools.wraps` wrapper, whose signature would be the handler's): the handler it
#: stands for, by which :func:`handler_name` names it (see :func:`stands_for`).
HANDLER_ATTRIBUTE = "__sa_inbox_handler__"

F = TypeVar("F", bound=Callable[..., Any])


def stands_for(wrapper: F, handler: object) -> F:
    """``wrapper``, known by ``handler``'s name (:func:`handler_name`): for sa-inbox's own
    wrappers that call the user's handler with other arguments (a broker adapter's
    ``handler(session, delivery)`` behind ``handle()``'s ``handler(session)``)."""
    setattr(wrapper, HANDLER_ATTRIBUTE, handler)
    return wrapper


def _unwrapped(handler: object) -> object:
    """``handler`` without its ``functools.partial``, :func:`stands_for` and ``__wrapped__``
    layers: the sync wrapper :func:`sa_inbox.asyncio.handle` puts around an async handler,
    and a broker adapter's around a delivery handler, are known by it."""
    *_, innermost = _layers(handler)
    return innermost


def _layers(handler: object) -> Iterator[object]:
    """``handler``, then each handler its ``functools.partial``, :func:`stands_for` and
    ``__wrapped__`` layers wrap, outermost first."""
    yield handler
    for _ in range(MAX_WRAPPERS):
        if isinstance(handler, functools.partial):
            handler = handler.func
        else:
            wrapped = getattr(handler, HANDLER_ATTRIBUTE, None) or getattr(
                handler, "__wrapped__", None
            )
            if wrapped is None or wrapped is handler:
                return
            handler = wrapped
        yield handler


def _main_module_name() -> str:
    """The name the ``__main__`` module would have when imported: its spec's name
    (``python -m pkg.mod``), else the dotted path of its file through the packages that hold
    it (``python pkg/mod.py``: ``pkg.mod``, each directory up to the first without an
    ``__init__.py`` being a package; a lone script: its file's stem)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return str(spec.name)
    path = getattr(main, "__file__", None)
    if not path:
        return "__main__"
    file = Path(path).resolve()
    parts = [file.stem]
    package = file.parent
    while (package / "__init__.py").is_file() and package.name:
        parts.append(package.name)
        package = package.parent
    return ".".join(reversed(parts))


def consumers_for(table: sa.Table, message_id_length: int, enabled: object) -> Consumers | None:
    """The owners of ``table``'s consumer names (:meth:`Consumers.of`) if ``enabled`` is
    True; None if it is False (the ``consumers=`` argument of an Inbox or InboxStore).

    :raises InvalidTable: for an ``enabled`` that is not a bool, or as
        :func:`consumers_table`.
    """
    return Consumers.of(table, message_id_length) if consumers_flag(enabled) else None


def consumers_flag(enabled: object) -> bool:
    """``enabled`` (the ``consumers=`` argument), if it is a bool: checked before the Inbox
    or InboxStore defines any table.

    :raises InvalidTable: otherwise.
    """
    if not isinstance(enabled, bool):
        raise InvalidTable(f"consumers must be True or False, not {enabled!r}")
    return enabled


def _check_engine(
    engine: object,
    entry: str,
    instead: str = "await the AsyncInbox's or AsyncInboxStore's hand_over()",
) -> sa.Engine:
    """``engine``, if it is a synchronous :class:`~sqlalchemy.engine.Engine`.

    :raises SyncAsyncMismatch: for an ``AsyncEngine``.
    :raises InvalidBind: for anything else.
    """
    if isinstance(engine, sa.Engine):
        return engine
    if is_asyncio_object(engine):
        raise SyncAsyncMismatch(f"{entry} takes an Engine, not an AsyncEngine: {instead}")
    raise InvalidBind(f"{entry} takes an Engine, not {type(engine).__name__}")


class Consumers:
    """The owners of the consumer names of one inbox (or store) table.

    :param table: the consumers table (:func:`consumers_table`).
    :param inbox_table: the name of the table whose claims the names own.
    :param max_length: the longest consumer name the inbox accepts (its
        ``message_id_length``).
    """

    def __init__(self, table: sa.Table, inbox_table: str, max_length: int) -> None:
        self.table = table
        self.inbox_table = inbox_table
        self.max_length = max_length
        # Per engine: the owner of each name this process has read or written.
        self._owners: weakref.WeakKeyDictionary[sa.Engine, dict[str, str]] = (
            weakref.WeakKeyDictionary()
        )

    @classmethod
    def of(cls, table: sa.Table, message_id_length: int) -> Consumers:
        """The owners of ``table``'s consumer names, in :func:`shared_consumers_table`.

        :raises InvalidTable: as :func:`consumers_table`.
        """
        return cls(shared_consumers_table(table, message_id_length), table.name, message_id_length)

    def ensure(self, engine: sa.Engine, consumer_name: str, handler: object) -> None:
        """Make ``handler`` the owner of ``consumer_name`` if the name has none; else check
        that it is the owner. One short transaction of its own the first time per process
        and name; a dictionary lookup after that (a refused handler reads the owner again
        each time, so a hand-over made elsewhere reaches it).

        :raises ConsumerNameTaken: if another handler owns the name.
        :raises AnonymousHandler: for a lambda that :func:`owned_as` gave no name (see
            :func:`owner_name`), before any SQL.
        :raises MissingTable: if the consumers table does not exist.
        :raises SyncAsyncMismatch: for an AsyncEngine (the runners pass the Engine behind
            it), :class:`~sa_inbox.exc.InvalidBind` for anything else, before any SQL.
        """
        engine = _check_engine(engine, "ensure()", "pass its sync_engine")
        name = owner_name(handler)
        known = self._owners.setdefault(engine, {})
        if known.get(consumer_name) == name:
            return
        with self._translated(engine):
            owner = self._owner(engine, consumer_name) or self._register(
                engine, consumer_name, name
            )
        known[consumer_name] = owner
        if owner != name:
            raise ConsumerNameTaken(consumer_name, owner, name)

    def hand_over(self, engine: sa.Engine, consumer_name: str, handler: object) -> str | None:
        """Give ``consumer_name`` to ``handler`` (a new handler taking over a name, with its
        claims). Processes that checked the name before keep their own view until they
        restart: stop the old handler's consumers first.

        :param engine: the database of the consumers table (a synchronous Engine).
        :param handler: the new owner: a handler, or an owner name (``str``, as
            :func:`owned_as` gives).
        :returns: the previous owner's name, or None if the name had none.
        :raises InvalidMessageId: for a consumer name a claim would refuse, before SQL.
        :raises InvalidHandler: for a handler that is not callable, and
            :class:`~sa_inbox.exc.AnonymousHandler` for one whose name tells it from no
            other (:func:`owner_name`), before SQL.
        :raises SyncAsyncMismatch: for an AsyncEngine; :class:`~sa_inbox.exc.InvalidBind`
            for anything else that is not an Engine.
        :raises MissingTable: if the consumers table does not exist.
        """
        engine = _check_engine(engine, "hand_over()")
        consumer_name = validate_key(consumer_name, "consumer_name", self.max_length)
        name = (
            _owner_string(handler) if isinstance(handler, str) else owner_name(_callable(handler))
        )
        with self._translated(engine):
            previous = self._owner(engine, consumer_name)
            try:
                self._write(engine, consumer_name, name, previous)
            except IntegrityError:
                # Another process registered the name between the read and the insert.
                previous = self._owner(engine, consumer_name)
                if previous is None:
                    raise
                self._write(engine, consumer_name, name, previous)
        self._owners.setdefault(engine, {})[consumer_name] = name
        return previous

    def owner(self, engine: sa.Engine, consumer_name: str) -> str | None:
        """The handler that owns ``consumer_name``, or None (read from the database).

        :raises MissingTable: if the consumers table does not exist.
        """
        engine = _check_engine(engine, "owner()")
        with self._translated(engine):
            return self._owner(engine, consumer_name)

    # -- helpers ------------------------------------------------------------------------

    @contextmanager
    def _translated(self, engine: sa.Engine) -> Iterator[None]:
        """A missing consumers table as :class:`MissingTable`, saying how to create it."""
        try:
            with classifier_for(engine.dialect.name).translate_configuration_errors():
                yield
        except MissingTable as exc:
            raise MissingTable(
                f"the consumers table {self.table.fullname!r} does not exist ({exc}): create "
                "it (metadata.create_all, or op.create_inbox_consumers_table() in a "
                "migration), or build the inbox with consumers=False"
            ) from exc.__cause__

    def _key(self, consumer_name: str) -> tuple[sa.ColumnElement[bool], ...]:
        t = self.table
        return (t.c.inbox_table == self.inbox_table, t.c.consumer_name == consumer_name)

    def _row(self, consumer_name: str, name: str) -> dict[str, str]:
        return {"inbox_table": self.inbox_table, "consumer_name": consumer_name, "handler": name}

    def _owner(self, engine: sa.Engine, consumer_name: str) -> str | None:
        query = sa.select(self.table.c.handler).where(*self._key(consumer_name))
        with engine.begin() as conn:
            owner = conn.execute(query).scalar_one_or_none()
        return None if owner is None else str(owner)

    def _write(
        self, engine: sa.Engine, consumer_name: str, name: str, previous: str | None
    ) -> None:
        """Insert the owner row (no ``previous``) or point it at ``name``."""
        with engine.begin() as conn:
            if previous is None:
                conn.execute(self.table.insert().values(self._row(consumer_name, name)))
            else:
                update = self.table.update().where(*self._key(consumer_name))
                conn.execute(update.values(handler=name))

    def _register(self, engine: sa.Engine, consumer_name: str, name: str) -> str:
        """Insert the owner row; the winner's name if another process inserted first.

        Processes starting together race for the row: the loser gets a duplicate key, or
        a transient error the backend's classifier knows (a deadlock, a serialization
        failure; on a MariaDB Galera cluster, error 1213 when another node's write-set
        certified first: MariaDB KB, "MariaDB Galera Cluster - Known Limitations"). Either
        way the row is read again, and the insert tried again while it is not there, up to
        :data:`REGISTER_ATTEMPTS` times.
        """
        classifier = classifier_for(engine.dialect.name)
        for attempt in range(1, REGISTER_ATTEMPTS + 1):
            try:
                self._write(engine, consumer_name, name, None)
                return name
            except DBAPIError as exc:
                duplicate = isinstance(exc, IntegrityError)
                if not duplicate and not classifier.is_transient(exc):
                    raise
                owner = self._owner(engine, consumer_name)
                if owner is not None:
                    return owner
                if duplicate or attempt == REGISTER_ATTEMPTS:
                    raise  # not a duplicate key after all, or the conflicts go on
        raise AssertionError("unreachable")  # pragma: no cover


def _owner_string(owner: object) -> str:
    """``owner``, if it is an owner name as :func:`owned_as` takes it.

    :raises InvalidArgument: otherwise.
    """
    if not isinstance(owner, str) or not owner.strip() or len(owner) > HANDLER_LENGTH:
        raise InvalidArgument(
            f"an owner name is a non-empty string of at most {HANDLER_LENGTH} characters, "
            f"not {shown(owner)}"
        )
    return owner


def _callable(handler: object) -> object:
    """``handler``, if it is callable.

    :raises InvalidHandler: otherwise.
    """
    if not callable(handler):
        raise InvalidHandler(f"the handler must be callable, not {type(handler).__name__}")
    return handler
