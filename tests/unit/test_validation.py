"""Validation of ids happens before SQL; properties checked with hypothesis."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.orm import sessionmaker

from sa_inbox import handle
from sa_inbox.exc import InvalidMessageId, InvalidObject
from sa_inbox.validation import shown, validate_key, validate_keys


@given(st.text(min_size=1, max_size=255))
def test_valid_or_rejected_never_altered(value: str) -> None:
    try:
        assert validate_key(value, "message_id", 255) is value
    except InvalidMessageId:
        assert value != value.strip() or "\x00" in value


@given(st.text(min_size=256, max_size=400))
def test_over_length_always_rejected(value: str) -> None:
    with pytest.raises(InvalidMessageId):
        validate_key(value, "message_id", 255)


@given(st.lists(st.text(alphabet="abcdef0123456789", min_size=1, max_size=8), max_size=50))
def test_batches_are_deduplicated_and_sorted(values: list[str]) -> None:
    assert validate_keys(values, "message_id", 255) == sorted(set(values))


@pytest.mark.parametrize("bad", [None, 1, 1.5, b"id", "", "\t", "a\n", "a\x00b"])
def test_rejected(bad: object) -> None:
    with pytest.raises(InvalidMessageId) as info:
        validate_key(bad, "message_id", 255)
    assert isinstance(info.value, ValueError)


def test_rejects_a_string_as_a_batch() -> None:
    with pytest.raises(InvalidMessageId, match="single string"):
        validate_keys("abc", "message_id", 255)


def test_rejects_lone_surrogates_before_the_driver_would() -> None:
    with pytest.raises(InvalidMessageId, match="surrogate"):
        validate_key("pay-\ud800", "message_id", 255)


@pytest.mark.parametrize("bad", [None, 5, 1.5])
def test_rejects_a_non_iterable_batch(bad: object) -> None:
    with pytest.raises(InvalidMessageId, match="iterable"):
        validate_keys(bad, "message_id", 255)  # type: ignore[arg-type]


@given(st.text(min_size=0, max_size=400))
def test_shown_keeps_a_short_repr_whole_and_the_ends_of_a_long_one(value: str) -> None:
    text = shown(value, 60)
    if len(repr(value)) <= 60:
        assert text == repr(value)
    else:
        assert "..." in text and len(text) <= 62
        assert text[0] == repr(value)[0] and text[-1] == repr(value)[-1]


def test_an_object_in_an_error_is_shown_with_its_end() -> None:
    """Arguments swapped: the sessionmaker where the Inbox belongs is shown cut in its
    middle, its closing bracket kept."""
    factory = sessionmaker(sa.create_engine("sqlite://"))
    with pytest.raises(InvalidObject) as info:
        handle(factory, factory, "m1", "billing", print, ack=print, nack=print)  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith("sa_inbox.handle() takes an Inbox as inbox, not sessionmaker (")
    assert "..." in message and message.endswith("expire_on_commit=True))"), message
