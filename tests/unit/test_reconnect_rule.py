"""The rule of a consumer's run() loop after an error ended one pass
(:class:`sa_inbox.brokers.reconnect.Reconnecting`): raise it, or wait and go on."""

from __future__ import annotations

import threading

import pytest

from sa_inbox.brokers.reconnect import Reconnecting, Reconnects
from sa_inbox.exc import DatabaseUnavailable


class Lost(Exception):
    """A lost connection, for :class:`Loop`."""


class Loop(Reconnecting):
    def __init__(self, *, connected: bool = True, stopped: bool = False) -> None:
        self._stop = threading.Event()
        if stopped:
            self._stop.set()
        self.reconnects = Reconnects("test consumer")
        self.reconnects.ever_connected = connected
        self.forgot = 0

    def _connection_lost(self, exc: BaseException) -> bool:
        return isinstance(exc, Lost)

    def _lost(self, exc: BaseException) -> float:
        self.forgot += 1
        return self.reconnects.failed(exc)


def test_a_lost_connection_is_waited_out_with_back_off() -> None:
    loop = Loop()
    seconds = loop._wait_after(Lost("reset"))
    assert seconds is not None and 0.0 <= seconds <= 0.5
    assert (loop.forgot, loop.reconnects.lost) == (1, True)


@pytest.mark.parametrize(
    ("error", "connected", "stopped"),
    [
        (ValueError("not a lost connection"), True, False),
        (Lost("never connected: a wrong URL"), False, False),
        (Lost("lost while stopping"), True, True),
        (DatabaseUnavailable("outage, not stopping"), True, False),
    ],
)
def test_what_no_reconnect_mends_is_raised(
    error: Exception, connected: bool, stopped: bool
) -> None:
    loop = Loop(connected=connected, stopped=stopped)
    assert loop._wait_after(error) is None
    assert loop.forgot == 0


def test_a_database_outage_of_a_stopping_consumer_ends_the_loop_at_once() -> None:
    loop = Loop(stopped=True)
    assert loop._wait_after(DatabaseUnavailable("stopped during an outage")) == 0.0
    assert loop.forgot == 0
