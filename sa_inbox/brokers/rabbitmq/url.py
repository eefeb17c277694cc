"""``amqp://`` URLs, checked when a consumer or publisher is made, before it connects.

The forms are RabbitMQ's AMQP URI specification (https://www.rabbitmq.com/docs/uri-spec):
``amqp://user:password@host:port/vhost``, and ``amqps://`` over TLS.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pika

from ...exc import InvalidArgument

__all__ = ["SCHEMES", "amqp_url", "connection_parameters"]

#: The URL schemes of the AMQP URI specification.
SCHEMES = ("amqp", "amqps")


def amqp_url(url: object, entry: str) -> str:
    """``url`` if it is an ``amqp://`` or ``amqps://`` URL string.

    :param entry: the consumer or publisher, for the message (``"AsyncConsumer()"``).
    :raises InvalidArgument: otherwise (the message names the scheme, never the URL: it may
        hold a password).
    """
    if not isinstance(url, str):
        raise InvalidArgument(
            f"{entry}: the broker URL must be a string (amqp://...), not {type(url).__name__}"
        )
    scheme = urlsplit(url).scheme
    if scheme not in SCHEMES:
        raise InvalidArgument(
            f"{entry}: the broker URL must start with amqp:// or amqps://, not "
            f"{scheme + '://' if scheme else 'no scheme'}"
        )
    return url


def connection_parameters(parameters: object, entry: str) -> Any:
    """pika's connection parameters: parsed from an ``amqp://`` URL string, or
    ``parameters`` itself (``pika.ConnectionParameters``, as pika takes them).

    :raises InvalidArgument: for a URL :func:`amqp_url` or ``pika.URLParameters`` refuses.
    """
    if not isinstance(parameters, str):
        return parameters
    try:
        return pika.URLParameters(amqp_url(parameters, entry))
    except InvalidArgument:
        raise
    except ValueError as exc:
        raise InvalidArgument(f"{entry}: the broker URL is refused by pika: {exc}") from exc
