"""The name a handler owns a consumer name by (:func:`sa_inbox.consumers.handler_name`):
one per function, however it is wrapped, and another for another function."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from sa_inbox import ConfigurationError
from sa_inbox.consumers import handler_name, owned_as, owner_name, stands_for
from sa_inbox.exc import AnonymousHandler, InvalidArgument
from sa_inbox.handlers import is_async_callable

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


# -- names that do not tell one handler from another -----------------------------------------

#: Two lambdas of one scope: different bodies, one name.
create_by_lambda = lambda session: create_order(session)  # noqa: E731
invoice_by_lambda = lambda session: send_invoice(session)  # noqa: E731


def make_handler(kind: str) -> Any:
    """A handler factory: every handler it makes has one name, whatever ``kind``."""

    def handler(session: Any) -> None:
        pass

    return handler


def test_two_lambdas_of_one_scope_share_a_name_and_cannot_own_a_consumer_name() -> None:
    assert handler_name(create_by_lambda) == handler_name(invoice_by_lambda)
    for handler in (create_by_lambda, invoice_by_lambda, functools.partial(create_by_lambda)):
        with pytest.raises(AnonymousHandler, match=r"is a lambda.*owned_as") as info:
            owner_name(handler)
        assert isinstance(info.value, ConfigurationError) and isinstance(info.value, TypeError)
        assert info.value.handler_name == f"{MODULE}.<lambda>"


def test_a_function_defined_inside_another_owns_by_its_path() -> None:
    def create(session: Any) -> None:
        pass

    def invoice(session: Any) -> None:
        pass

    scope = f"{MODULE}.test_a_function_defined_inside_another_owns_by_its_path.<locals>"
    assert (owner_name(create), owner_name(invoice)) == (f"{scope}.create", f"{scope}.invoice")


def test_the_handlers_of_a_factory_share_a_name_unless_owned_as_names_them() -> None:
    """The one case a path cannot tell (documented): owned_as names each."""
    orders, invoices = make_handler("orders"), make_handler("invoices")
    shared = f"{MODULE}.make_handler.<locals>.handler"
    assert owner_name(orders) == owner_name(invoices) == shared
    named = (
        owned_as("orders.handler", make_handler("orders")),
        owned_as("invoices.handler", make_handler("invoices")),
    )
    assert [owner_name(h) for h in named] == ["orders.handler", "invoices.handler"]


def test_a_module_level_function_owns_by_its_name_through_partial() -> None:
    assert owner_name(functools.partial(create_order, session=None)) == f"{MODULE}.create_order"


def test_owned_as_names_the_owner_of_any_handler() -> None:
    lambda_ = lambda session: None  # noqa: E731
    assert owned_as("billing.pay", lambda_) is lambda_  # a function is marked, not wrapped
    assert owner_name(lambda_) == handler_name(lambda_) == "billing.pay"
    # wrapped (a partial, an object, a method), the wrapper keeps the handler's kind
    for handler in (functools.partial(create_order), Fulfil(), Fulfil().handle):
        named = owned_as("orders.fulfil", handler)
        assert owner_name(named) == "orders.fulfil" and not is_async_callable(named)
    async_named = owned_as("orders.async", functools.partial(create_order_async))
    assert is_async_callable(async_named) and owner_name(async_named) == "orders.async"
    # as a decorator, and seen through sa-inbox's own wrappers

    @owned_as("orders.local")
    def local(session: Any) -> None:
        pass

    assert owner_name(_as_async_runner_wraps(stands_for(lambda s: None, local))) == "orders.local"


@pytest.mark.parametrize("owner", ["", "   ", 42, None, "x" * 513])
def test_owned_as_refuses_a_name_that_is_no_name(owner: Any) -> None:
    with pytest.raises(InvalidArgument, match="owner name"):
        owned_as(owner, create_order)
