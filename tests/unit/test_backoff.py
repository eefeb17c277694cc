"""The exponential back-off: doubling from ``base`` up to ``maximum``, and only seconds
>= 0 taken when it is made (a negative wait is no wait a broker or a sleep can take)."""

from __future__ import annotations

import pytest

from sa_inbox import Backoff, ConfigurationError
from sa_inbox.exc import InvalidArgument


def test_each_wait_doubles_up_to_the_maximum() -> None:
    backoff = Backoff(base=0.5, maximum=3.0)
    assert [backoff.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert Backoff(base=0, maximum=0).delay(10) == 0.0


@pytest.mark.parametrize(
    ("base", "maximum", "named"),
    [
        (-1.0, 60.0, "base"),
        (1.0, -5.0, "maximum"),
        (float("nan"), 60.0, "base"),
        (True, 60.0, "base"),
        ("1", 60.0, "base"),
    ],
)
def test_a_wait_that_is_no_number_of_seconds_is_refused(
    base: object, maximum: object, named: str
) -> None:
    with pytest.raises(InvalidArgument, match=rf"Backoff\(\): {named} must be") as info:
        Backoff(base=base, maximum=maximum)  # type: ignore[arg-type]
    assert isinstance(info.value, ConfigurationError)
