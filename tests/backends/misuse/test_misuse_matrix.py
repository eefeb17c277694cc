"""Every public entry point given every plausible wrong object, three deliveries of one id
each: refused every time with a configuration error that is also a TypeError, nothing
committed, or (where the intent is unambiguous) applied exactly once; and no coroutine left
un-awaited."""

from __future__ import annotations

import asyncio
import gc
import inspect
import warnings

import pytest

from sa_inbox import ConfigurationError

from .cases import CASES, Case
from .env import Env

DELIVERIES = 3


def _deliver(case: Case, env: Env, message_id: str) -> BaseException | None:
    """One delivery; the exception it raised, if any."""
    try:
        if inspect.iscoroutinefunction(case.deliver):
            asyncio.run(case.deliver(env, message_id))  # type: ignore[arg-type]
        else:
            case.deliver(env, message_id)
    except Exception as exc:
        return exc
    return None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_misuse_is_refused_or_applied_once(env: Env, case: Case) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        errors = [_deliver(case, env, "msg-1") for _ in range(DELIVERIES)]
        gc.collect()
    unawaited = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert not unawaited, unawaited
    if case.expect == "refused":
        for error in errors:
            assert isinstance(error, ConfigurationError) and isinstance(error, case.kind), (
                f"{case.id} was not refused with a configuration error: {error!r}"
            )
        assert case.state(env) == (0, 0), f"{case.id} committed something"
        assert env.settled == [], f"{case.id} was refused, yet settled: {env.settled}"
        if case.left is not None:
            left = case.left(env)
            assert left == DELIVERIES, f"{case.id} left {left} of {DELIVERIES} on the broker"
    else:
        assert errors == [None] * DELIVERIES, errors
        assert case.state(env) == (1, 1), f"{case.id} was not applied exactly once"
        assert "nack" not in env.settled, f"{case.id} nacked a delivery: {env.settled}"
