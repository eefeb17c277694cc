"""The failover run's held-back publishes: some published before the freeze and not yet
settled when it comes, some published only after it, whatever the numbers."""

from __future__ import annotations

import pytest

from benchmarks.failover import held_back


@pytest.mark.parametrize(("publishes", "at"), [(600, 180), (600, 240), (10, 8), (2, 1), (3, 1)])
def test_some_publishes_are_in_flight_and_some_wait_for_the_freeze(publishes: int, at: int) -> None:
    held = held_back(publishes, at)
    assert 1 <= held <= publishes - at
    # the ones published at once but not needed to start the failover: in flight at the freeze
    assert publishes - at - held >= (publishes - at) // 2 >= 0


def test_nothing_is_held_when_the_failover_waits_for_every_publish() -> None:
    assert held_back(5, 5) == 0
