"""Recording the calls a handler makes to outbound functions (HTTP clients, e-mail, a
publish), named by import path.

``"myapp.payments:charge"`` names the attribute ``charge`` of the module ``myapp.payments``
(a dotted path after the colon reaches into a class or object: ``"myapp.clients:stripe.
create"``). While :class:`Recorder` is active the attribute is replaced by a wrapper that
records each call made during a delivery (see :mod:`.observe`) and then calls the original;
calls made outside a delivery pass through unrecorded. Name the function where the handler
looks it up: a handler module that did ``from payments import charge`` holds its own name
``charge``, so its path is ``"myapp.billing:charge"``.

A call is **keyed** when one of its arguments (or a value of a mapping or sequence among
them, two levels down, such as a ``headers`` dict) is an idempotency key as
:func:`sa_inbox.idempotency_key` makes it: a UUIDv5 string.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..exc import InvalidArgument
from .observe import CURRENT, OutboundCall

__all__ = ["Recorder", "idempotency_keys", "resolve"]

_TEXT = 160


def resolve(path: str) -> tuple[Any, str, Any]:
    """``(owner, attribute, value)`` of an import path ``"module:attr[.attr...]"``.

    :raises InvalidArgument: for a path without ``:``, a module that does not import, or an
        attribute that is missing or not callable.
    """
    if not isinstance(path, str) or ":" not in path:
        raise InvalidArgument(
            f"outbound names functions as 'module:function' (e.g. 'myapp.payments:charge'), "
            f"not {path!r}"
        )
    module_name, _, attributes = path.partition(":")
    try:
        owner: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidArgument(
            f"outbound {path!r}: module {module_name!r} does not import: {exc}"
        ) from exc
    names = attributes.split(".")
    for name in names[:-1]:
        owner = getattr(owner, name, None)
    value = getattr(owner, names[-1], None)
    if owner is None or value is None or not callable(value):
        raise InvalidArgument(f"outbound {path!r}: no function {attributes!r} in {module_name}")
    return owner, names[-1], value


def idempotency_keys(args: Iterable[Any], depth: int = 2) -> tuple[str, ...]:
    """The UUIDv5 strings among ``args``, looking ``depth`` levels into mappings and
    sequences."""
    found: list[str] = []
    for value in args:
        if isinstance(value, str):
            if _is_uuid5(value):
                found.append(value)
        elif depth > 0 and isinstance(value, Mapping):
            found += idempotency_keys(value.values(), depth - 1)
        elif depth > 0 and isinstance(value, list | tuple | set | frozenset):
            found += idempotency_keys(value, depth - 1)
    return tuple(found)


def _is_uuid5(value: str) -> bool:
    if len(value) != 36:
        return False
    try:
        return uuid.UUID(value).version == 5
    except ValueError:
        return False


def _record(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    watch = CURRENT.get()
    if watch is None:
        return
    shown = ", ".join([*(repr(a) for a in args), *(f"{k}={v!r}" for k, v in kwargs.items())])
    text = f"{name.partition(':')[2]}({shown})"
    if len(text) > _TEXT:
        text = text[: _TEXT - 4] + "...)"
    keys = idempotency_keys([*args, *kwargs.values()])
    watch.outbound.append(OutboundCall(name, keys, text))


def _recording(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def recorded_async(*args: Any, **kwargs: Any) -> Any:
            _record(name, args, kwargs)
            return await function(*args, **kwargs)

        return recorded_async

    @functools.wraps(function)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        _record(name, args, kwargs)
        return function(*args, **kwargs)

    return recorded


class Recorder:
    """The outbound functions of one check, resolved at once (bad paths are refused before
    anything runs).

    :param paths: import paths (see the module's docstring).
    :raises InvalidArgument: see :func:`resolve`.
    """

    def __init__(self, paths: Iterable[str]) -> None:
        if isinstance(paths, str):
            raise InvalidArgument(
                f"outbound is a list of import paths, not the string {paths!r}: "
                f"outbound=[{paths!r}]"
            )
        self.paths = list(paths)
        self._targets = [(path, *resolve(path)) for path in self.paths]

    @contextmanager
    def active(self) -> Iterator[None]:
        """Record the calls while the block runs; the originals are put back after."""
        replaced = []
        try:
            for path, owner, attribute, original in self._targets:
                setattr(owner, attribute, _recording(path, original))
                replaced.append((owner, attribute, original))
            yield
        finally:
            for owner, attribute, original in reversed(replaced):
                setattr(owner, attribute, original)
