"""Validation done before any SQL is sent: message ids and consumer names, counts, seconds.

A message id that the database would silently change (truncate, trim, coerce) could make two
different messages collide, or one message look new twice. So sa-inbox refuses such values
up front instead of trusting the database to reject them.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Callable, Iterable
from typing import Any

from .exc import InboxError, InvalidArgument, InvalidMessageId

__all__ = [
    "JSONSerializer",
    "bool_flag",
    "check_json_serializer",
    "first_line",
    "json_text",
    "non_negative_int",
    "positive_int",
    "positive_seconds",
    "shown",
    "validate_key",
    "validate_keys",
]


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s text (a driver's error without SQLAlchemy's statement,
    parameters and link), or its class name if it has none: for one log line."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def shown(value: object, width: int = 80) -> str:
    """``repr(value)`` for an error message, at most about ``width`` characters: a longer one
    keeps its start and its end, ``...`` between (:mod:`reprlib`)."""
    short = reprlib.Repr()
    short.maxstring = short.maxother = width
    return short.repr(value)


def bool_flag(value: object, name: str) -> bool:
    """``value`` if it is a bool (an on/off argument: ``1`` or ``"yes"`` are refused).

    :param name: the argument's name, for the message.
    :raises InvalidArgument: otherwise.
    """
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be True or False, not {value!r}")
    return value


def _int_from(value: object, least: int, rule: str, error: type[InboxError]) -> int:
    """``value`` if it is an int >= ``least`` (``bool`` is refused).

    :raises error: ``"<rule>, not <value>"`` otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise error(f"{rule}, not {value!r}")
    return value


def positive_int(value: object, name: str, error: type[InboxError]) -> int:
    """``value`` if it is an int > 0 (``bool`` is refused: ``True`` is not a count).

    :param name: the argument's name, for the message.
    :param error: the exception class the caller documents (such as
        :class:`~sa_inbox.exc.InvalidArgument`).
    :raises error: otherwise.
    """
    return _int_from(value, 1, f"{name} must be a positive int", error)


def non_negative_int(value: object, name: str, error: type[InboxError]) -> int:
    """``value`` if it is an int >= 0 (``bool`` is refused).

    :param name: the argument's name, for the message.
    :param error: the exception class the caller documents.
    :raises error: otherwise.
    """
    return _int_from(value, 0, f"{name} must be an int >= 0", error)


def positive_seconds(value: object, name: str, error: type[InboxError]) -> float:
    """``value`` as a float if it is an int or float > 0 (``bool`` and NaN are refused).

    :param name: the argument's name, for the message.
    :param error: the exception class the caller documents.
    :raises error: otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise error(f"{name} must be a positive number of seconds, not {value!r}")
    return float(value)


def validate_key(value: object, field: str, max_length: int | None) -> str:
    """Return ``value`` unchanged if it is a valid ``message_id`` or ``consumer_name``.

    :param value: the candidate; must be a ``str``.
    :param field: the name used in the error message (``"message_id"``, ``"consumer_name"``).
    :param max_length: the column length in characters; None where no column is known yet
        (the claim checks the length).
    :raises InvalidMessageId: if ``value`` is ``None``, not a ``str`` (ints and bytes are
        not coerced), empty, has leading or trailing whitespace, contains NUL (PostgreSQL
        rejects NUL in text), is not encodable as UTF-8 (a lone surrogate), or is longer
        than ``max_length`` characters (MySQL and MariaDB would truncate it under
        ``INSERT IGNORE``).
    """
    if value is None:
        raise InvalidMessageId(f"{field} must not be None")
    if not isinstance(value, str):
        raise InvalidMessageId(f"{field} must be str, not {type(value).__name__}")
    if not value:
        raise InvalidMessageId(f"{field} must not be empty")
    if value != value.strip():
        raise InvalidMessageId(f"{field} {value!r} has leading or trailing whitespace")
    if "\x00" in value:
        raise InvalidMessageId(f"{field} {value!r} contains NUL")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidMessageId(f"{field} {value!r} is not valid Unicode (lone surrogate)") from None
    if max_length is not None and len(value) > max_length:
        raise InvalidMessageId(
            f"{field} is {len(value)} characters long; the column holds {max_length}"
        )
    return value


def validate_keys(values: Iterable[object], field: str, max_length: int) -> list[str]:
    """Validate every value (see :func:`validate_key`) and return them de-duplicated, sorted.

    Sorting gives every batch the same lock order, so two batches with overlapping ids
    cannot deadlock on each other.

    :param values: any iterable of candidate ids; a bare ``str`` is refused, since it would
        be read as a sequence of one-character ids.
    :raises InvalidMessageId: on the first invalid value, or if ``values`` is a ``str`` or
        not iterable.
    """
    if isinstance(values, str | bytes):
        raise InvalidMessageId(f"{field}s must be an iterable of str, not a single string")
    try:
        candidates = list(values)
    except TypeError:
        raise InvalidMessageId(
            f"{field}s must be an iterable of str, not {type(values).__name__}"
        ) from None
    return sorted({validate_key(value, field, max_length) for value in candidates})


#: Turns a value into a JSON document, as ``create_engine(json_serializer=...)`` takes:
#: ``json.dumps``-like, returning text (or UTF-8 bytes, as ``orjson.dumps`` does).
JSONSerializer = Callable[[Any], str | bytes]


def check_json_serializer(serializer: object) -> JSONSerializer | None:
    """``serializer`` if it is ``None`` or callable.

    :raises InvalidArgument: otherwise, when the Inbox store or the outbox is made.
    """
    if serializer is not None and not callable(serializer):
        raise InvalidArgument(
            f"json_serializer must be a callable such as json.dumps, not {serializer!r}"
        )
    return serializer


def json_text(
    value: Any,
    serializer: JSONSerializer | None,
    error: type[InboxError],
    *,
    separators: tuple[str, str] | None = None,
) -> str:
    """``value`` as JSON text: ``serializer(value)`` where one is given (its bytes decoded
    as UTF-8), else ``json.dumps(value, allow_nan=False, separators=separators)`` (NaN and
    Infinity refused: RFC 8259 has no such numbers).

    :param serializer: the caller's ``json_serializer`` (e.g. one that writes ``Decimal``),
        trusted to return a JSON document.
    :param error: raised for a value the serialiser refuses (its :class:`TypeError` or
        :class:`ValueError`, chained) or a result that is not text.
    """
    try:
        if serializer is None:
            return json.dumps(value, allow_nan=False, separators=separators)
        text = serializer(value)
    except (TypeError, ValueError) as exc:
        raise error(f"payload is not JSON-serialisable: {exc}") from exc
    if isinstance(text, bytes):
        try:
            return text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"json_serializer returned bytes that are not UTF-8: {exc}") from exc
    if not isinstance(text, str):
        raise error(f"json_serializer returned {type(text).__name__}, not str or bytes")
    return text
