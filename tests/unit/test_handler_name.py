"""The name a handler owns a consumer name by (:func:`sa_inbox.consumers.handler_name`):
one per function, however it is wrapped, and another for another function."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from sa_inbox.consumers import handler_name, stands_for

MODULE = __name__


def create_order(session: Any) -> None:
    """A handler."""


def send_invoice(session: Any) -> None:
    """Another handler."""


async def create_order_async(session: Any) -> None:
    """An async handler."""


class Fulfil:
    """A callable object: known by its class."""

    def __call__(self, session: Any) -> None:
        pass

    def handle(self, session: Any) -> None:
        pass


def logged(handler: Any) -> Any:
    """A decorator that keeps the handler's identity (functools.wraps)."""

    @functools.wraps(handler)
    def wrapper(session: Any) -> Any:
        return handler(session)

    return wrapper


def _as_async_runner_wraps(handler: Any) -> Any:
    """What sa_inbox.asyncio.handle makes of a handler: a sync wrapper with wraps()."""

    @functools.wraps(handler)
    def sync_handler(session: Any) -> Any:
        return handler(session)

    return sync_handler


@pytest.mark.parametrize(
    "form",
    [
        create_order,
        functools.partial(create_order),
        functools.partial(functools.partial(create_order)),
        logged(create_order),
        _as_async_runner_wraps(functools.partial(create_order)),
    ],
    ids=["function", "partial", "partial of partial", "wraps", "async runner over partial"],
)
def test_one_function_has_one_name_however_wrapped(form: Any) -> None:
    assert handler_name(form) == f"{MODULE}.create_order"


def test_different_functions_have_different_names_through_the_same_wrappers() -> None:
    names = {
        handler_name(_as_async_runner_wraps(functools.partial(handler)))
        for handler in (create_order, send_invoice, create_order_async)
    }
    assert names == {
        f"{MODULE}.create_order",
        f"{MODULE}.send_invoice",
        f"{MODULE}.create_order_async",
    }


def test_objects_and_methods() -> None:
    assert handler_name(Fulfil()) == f"{MODULE}.Fulfil"
    assert handler_name(Fulfil().handle) == f"{MODULE}.Fulfil.handle"
    assert handler_name(functools.partial(Fulfil())) == f"{MODULE}.Fulfil"


def test_a_wrapper_that_names_itself_is_not_followed_forever() -> None:
    def loop(session: Any) -> None:
        pass

    loop.__wrapped__ = loop  # type: ignore[attr-defined]
    assert handler_name(loop).endswith("loop")


def test_a_wrapper_that_calls_a_handler_with_other_arguments_stands_for_it() -> None:
    """A broker adapter's ``call(session)`` around ``handler(session, delivery)``."""

    def call(session: Any) -> None:
        pass

    assert handler_name(stands_for(call, create_order)) == f"{MODULE}.create_order"
    assert handler_name(logged(stands_for(call, send_invoice))) == f"{MODULE}.send_invoice"
