"""check_handler() reads a handler's signature once: a runner checks it at every delivery."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from sa_inbox.exc import AsyncHandlerError, InvalidHandler
from sa_inbox.handlers import check_handler


class Handlers:
    def handle(self, session: object) -> None:
        return None

    def two(self, session: object, message: object) -> None:
        return None


def handler(session: object) -> None:
    return None


def test_an_accepted_handler_is_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[object] = []
    real = inspect.signature

    def counted(target: Any, *args: Any, **kwargs: Any) -> inspect.Signature:
        reads.append(target)
        return real(target, *args, **kwargs)

    monkeypatch.setattr(inspect, "signature", counted)
    first, second = Handlers(), Handlers()
    for _ in range(3):
        check_handler(handler, ("session",))
        check_handler(first.handle, ("session",))
        check_handler(second.handle, ("session",))  # the same function, bound elsewhere
    assert len(reads) == 2  # the function once, its bound methods once


def test_the_key_is_the_arguments_and_the_mode() -> None:
    check_handler(handler, ("session",))
    with pytest.raises(InvalidHandler):
        check_handler(handler, ("session", "message"))
    with pytest.raises(InvalidHandler):  # the plain function takes `self` first
        check_handler(Handlers.two, ("session", "message"))
    check_handler(Handlers().two, ("session", "message"))

    async def coroutine(session: object) -> None:
        return None

    check_handler(coroutine, ("session",), asynchronous=True)
    with pytest.raises(AsyncHandlerError):
        check_handler(coroutine, ("session",))


def test_a_refused_handler_is_refused_every_time() -> None:
    def generator(session: object) -> Any:
        yield session

    for _ in range(3):
        with pytest.raises(InvalidHandler):
            check_handler(generator, ("session",))
