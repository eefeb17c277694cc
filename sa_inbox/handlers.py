"""Checks on the handlers the synchronous runner and worker call.

A synchronous runner cannot await a coroutine: calling an ``async def`` handler returns a
coroutine object whose body never runs, while the claim commits and the delivery is acked.
:func:`check_handler` refuses such a handler before anything is sent, and
:func:`call_handler` refuses any result that is awaitable (a plain function returning a
coroutine, a callable object with an ``async def __call__``) before the transaction commits.
"""

from __future__ import annotations

import functools
import inspect
import types
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from .exc import AsyncHandlerError, AsyncHandlerInSyncRunner, InvalidHandler, InvalidObject
from .validation import shown

__all__ = ["call_handler", "check_handler", "check_settlers", "is_async_callable"]


def is_async_callable(handler: object) -> bool:
    """Whether calling ``handler`` returns a coroutine: an ``async def`` function, a
    :func:`functools.partial` of one, or an object whose ``__call__`` is ``async def``."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(type(handler), "__call__", None)  # noqa: B004 (the method, not callable())
    return inspect.iscoroutinefunction(call)


def check_handler(
    handler: object,
    arguments: Sequence[str],
    name: str | None = None,
    *,
    asynchronous: bool = False,
) -> None:
    """Refuse a handler the synchronous runner cannot call as ``handler(*arguments)``.

    A handler that cannot bind them would fail on every message (and send every message to
    ``dead``, or nack it forever), so it is refused before anything is claimed.

    :param handler: the candidate.
    :param arguments: the names of the positional arguments it is called with, for the
        message: ``("session",)`` for :func:`sa_inbox.handle`, ``("session", "message")`` for
        the :class:`~sa_inbox.Worker`.
    :param name: how to name the handler in the message (default its ``__qualname__``); the
        CLI passes its ``--handler`` spec.
    :param asynchronous: True for the asyncio runner and worker, which await the handler:
        a coroutine function is then accepted.
    :raises InvalidHandler: if ``handler`` is not callable, or its signature cannot bind
        that many positional arguments (:func:`inspect.signature`; a callable whose
        signature cannot be read, as some built-ins and C extensions, is accepted).
    :raises AsyncHandlerInSyncRunner: (an AsyncHandlerError and a configuration error) if
        ``handler`` is a coroutine function (see :func:`is_async_callable`).
    :raises InvalidHandler: also for a generator or async generator function: calling it
        runs none of its body.
    """
    key = _accepted_key(handler)
    if key is not None and (tuple(arguments), asynchronous) in _accepted.get(key, ()):
        return
    _check(handler, arguments, name, asynchronous)
    if key is not None:
        _accepted.setdefault(key, set()).add((tuple(arguments), asynchronous))


#: The handlers :func:`check_handler` accepted, with the arguments and mode it accepted them
#: for: a runner checks its handler at every delivery, and reading a signature
#: (:func:`inspect.signature`) costs more than the claim's own Python.
_accepted: weakref.WeakKeyDictionary[Any, set[tuple[tuple[str, ...], bool]]] = (
    weakref.WeakKeyDictionary()
)


def check_settlers(entry: str, **settlers: object) -> None:
    """Refuse an ``ack`` or ``nack`` that is not callable: it would fail only after the
    commit (or the rollback), every time.

    :param entry: the public function, for the message (``"sa_inbox.handle()"``).
    :param settlers: ``ack=...``, ``nack=...``.
    :raises InvalidObject: for the first that is not callable.
    """
    for name, value in settlers.items():
        if not callable(value):
            raise InvalidObject(
                f"{entry}: {name} must be callable with no arguments, not "
                f"{type(value).__name__} {shown(value, 60)}"
            )


def _accepted_key(handler: object) -> Any:
    """What a check of ``handler`` depends on, kept as a weak key: a plain function; a
    bound method's function (its ``self`` is not part of the signature checked, so the
    function and the bound method are told apart by the key's kind); ``None`` for anything
    else (partials, callable objects), checked every time."""
    if type(handler) is types.FunctionType:
        return handler
    if type(handler) is types.MethodType and type(handler.__func__) is types.FunctionType:
        return _BoundKey.of(handler.__func__)
    return None


class _BoundKey:
    """The weak key of the methods bound from one function (one per function)."""

    __slots__ = ("__weakref__", "function")

    _keys: ClassVar[weakref.WeakKeyDictionary[Any, _BoundKey]] = weakref.WeakKeyDictionary()

    def __init__(self, function: Any) -> None:
        self.function = function

    @classmethod
    def of(cls, function: Any) -> _BoundKey:
        key = cls._keys.get(function)
        if key is None:
            key = cls._keys.setdefault(function, cls(function))
        return key


def _check(handler: object, arguments: Sequence[str], name: str | None, asynchronous: bool) -> None:
    """:func:`check_handler`'s checks, uncached."""
    shown = getattr(handler, "__qualname__", None) or getattr(handler, "__name__", None)
    label = name or repr(shown or handler)
    call = f"handler({', '.join(arguments)})"
    if not callable(handler):
        raise InvalidHandler(f"{label} is not callable; it must be callable as {call}")
    if _is_generator_callable(handler):
        raise InvalidHandler(
            f"{label} is a generator function: calling it returns a generator and runs none "
            "of its body, so the claim would commit without the change; do not yield in a "
            "handler"
        )
    if not asynchronous and is_async_callable(handler):
        raise AsyncHandlerInSyncRunner(
            f"{label} is a coroutine function: the synchronous runner cannot await it (its "
            "body would never run while the claim commits); use a synchronous handler"
        )
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*(None for _ in arguments))
    except TypeError as exc:
        raise InvalidHandler(
            f"{label} cannot be called as {call}: its signature is "
            f"{shown or type(handler).__name__}{signature} ({exc})"
        ) from exc


def _is_generator_callable(handler: object) -> bool:
    """Whether calling ``handler`` returns a generator or an async generator."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    targets = (handler, getattr(type(handler), "__call__", None))  # noqa: B004 (the method)
    return any(inspect.isgeneratorfunction(t) or inspect.isasyncgenfunction(t) for t in targets)


def call_handler(handler: Callable[..., object], *arguments: Any) -> object:
    """``handler(*arguments)``, refusing an awaitable result.

    :raises AsyncHandlerError: if the result is awaitable; a coroutine is closed first (so
        Python does not warn that it was never awaited) and never runs. The caller's
        transaction must then be rolled back.
    :raises InvalidHandler: if the result is a generator (its body never ran).
    """
    result = handler(*arguments)
    if inspect.isgenerator(result) or inspect.isasyncgen(result):
        _close(result)
        raise InvalidHandler(
            f"{_name(handler)} returned a generator ({type(result).__name__}): none of its "
            "body ran; nothing of this attempt is committed (do not yield in a handler)"
        )
    if inspect.isawaitable(result):
        _close(result)
        raise AsyncHandlerError(
            f"{_name(handler)} returned an awaitable ({type(result).__name__}) that nothing "
            "awaits: its work would never run; nothing of this attempt is committed (await "
            "it in the handler, or use sa_inbox.asyncio for an async def handler)"
        )
    return result


def _close(result: object) -> None:
    """Close a coroutine or generator that will never run (no "never awaited" warning)."""
    close = getattr(result, "close", None)
    if callable(close) and not inspect.isasyncgen(result):
        close()


def _name(handler: object) -> str:
    """How a message names the handler: its qualified name, or its repr."""
    return repr(getattr(handler, "__qualname__", None) or handler)
