"""The shared count and seconds checks (sa_inbox.validation), used by the runner, the store,
the worker, retention and the table factories."""

from __future__ import annotations

import math

import pytest

from sa_inbox.exc import InvalidArgument
from sa_inbox.validation import positive_int, positive_seconds


@pytest.mark.parametrize("bad", [0, -1, True, 1.0, "3", None])
def test_positive_int_refuses(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="limit must be a positive int"):
        positive_int(bad, "limit", InvalidArgument)


@pytest.mark.parametrize("bad", [0, -0.5, True, math.nan, "1", None])
def test_positive_seconds_refuses(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="pause must be a positive number"):
        positive_seconds(bad, "pause", InvalidArgument)


def test_accepted_values_come_back() -> None:
    assert positive_int(7, "n", InvalidArgument) == 7
    assert positive_seconds(2, "s", InvalidArgument) == 2.0
    assert positive_seconds(0.25, "s", InvalidArgument) == 0.25
