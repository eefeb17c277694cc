"""Which dead-letter queue / stream: a broker URL and a name, checked before connecting.

A target is written two ways:

* ``(url, queue)``: the broker's URL as its client takes it and the dead-letter queue's name
  (``replay(url, queue)``, ``sa-inbox dead-letters ... --broker URL --queue Q``);
* one URL whose **last path segment** is the name (``sa-inbox stats --dead-letters``), the
  rest being the broker's URL::

      amqp://user:pw@host:5672/%2F/payments.dead-letter   vhost "/", queue payments.dead-letter
      amqp://host/payments.dead-letter                    the default vhost
      redis://host:6379/0/payments:dead                   database 0, stream payments:dead
      nats://host:4222/PAYMENTS_DEAD                      JetStream stream PAYMENTS_DEAD

  A name holding ``/`` is percent-encoded (``%2F``); a query string stays with the broker's
  URL.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from ...exc import InvalidArgument, UnsupportedBroker
from ..schemes import BROKERS

__all__ = ["SCHEMES", "DeadLetterTarget"]

#: URL scheme → the broker (and the module of this package that reads its dead letters):
#: the brokers whose dead letters are read here.
SCHEMES = {scheme: b for scheme, b in BROKERS.items() if b in ("rabbitmq", "redis", "nats")}

#: Characters a JetStream stream name cannot hold ("JetStream Model Deep Dive", "Naming").
_NATS_FORBIDDEN = set(" \t\r\n.*>/\\")
#: AMQP 0-9-1 queue names are short strings: at most 255 bytes (AMQP 0-9-1, 4.2.5.3).
_AMQP_NAME_BYTES = 255


@dataclass(frozen=True)
class DeadLetterTarget:
    """A dead-letter queue (RabbitMQ) or stream (Redis, NATS JetStream) on a broker.

    :param broker: ``"rabbitmq"``, ``"redis"`` or ``"nats"``.
    :param url: the broker's URL, as its client takes it (credentials included).
    :param queue: the dead-letter queue's or stream's name.
    """

    broker: str
    url: str
    queue: str

    @classmethod
    def of(cls, url: object, queue: object) -> DeadLetterTarget:
        """The target of a broker URL and a queue / stream name.

        :raises UnsupportedBroker: for a scheme other than ``amqp(s)``, ``redis(s)``,
            ``nats`` / ``tls``.
        :raises InvalidArgument: if ``url`` is not a URL string, or ``queue`` is
            not a name the broker can hold (empty, surrounding spaces, an AMQP name over 255
            bytes, a JetStream stream name with ``.``, ``*``, ``>``, ``/`` or whitespace).
        """
        if not isinstance(url, str) or "://" not in url:
            raise InvalidArgument(f"the broker URL must be a URL string, not {url!r}")
        scheme = url.split("://", 1)[0].lower()
        if scheme not in SCHEMES:
            raise UnsupportedBroker(
                f"no dead-letter reader for {scheme!r} URLs; expected one of {sorted(SCHEMES)}"
            )
        broker = SCHEMES[scheme]
        return cls(broker, url, _checked_name(broker, queue))

    @classmethod
    def parse(cls, spec: object) -> DeadLetterTarget:
        """The target of one URL ending in ``/<queue>`` (see the module's docstring).

        :raises UnsupportedBroker: as :meth:`of`.
        :raises InvalidArgument: as :meth:`of`, or if the URL has no last path
            segment to name the queue.
        """
        if not isinstance(spec, str) or "://" not in spec:
            raise InvalidArgument(
                f"a dead-letter target must be a URL ending in /<queue>, not {spec!r}"
            )
        parts = urlsplit(spec)
        head, _, last = parts.path.rpartition("/")
        if not last:
            raise InvalidArgument(
                f"{_redacted(spec)} names no dead-letter queue / stream: end it with /<name>"
            )
        url = urlunsplit((parts.scheme, parts.netloc, head, parts.query, parts.fragment))
        return cls.of(url, unquote(last))

    @property
    def display(self) -> str:
        """``<broker URL>/<queue>`` with the password hidden, for reports and errors."""
        return f"{_redacted(self.url).rstrip('/')}/{quote(self.queue, safe=':')}"


def _checked_name(broker: str, queue: object) -> str:
    if not isinstance(queue, str) or not queue or queue != queue.strip():
        raise InvalidArgument(
            f"a dead-letter queue / stream name must be a non-empty string without "
            f"surrounding spaces, not {queue!r}"
        )
    if broker == "rabbitmq" and len(queue.encode()) > _AMQP_NAME_BYTES:
        raise InvalidArgument(
            f"an AMQP queue name is at most {_AMQP_NAME_BYTES} bytes: {queue[:40]!r}..."
        )
    if broker == "nats" and _NATS_FORBIDDEN & set(queue):
        raise InvalidArgument(
            f"a JetStream stream name cannot hold '.', '*', '>', '/' or spaces: {queue!r}"
        )
    return queue


def _redacted(url: str) -> str:
    """``url`` with its password replaced by ``***`` (and a NATS token: a user without a
    password, "Connecting: Token Authentication")."""
    parts = urlsplit(url)
    if parts.password is not None:
        user = f"{parts.username or ''}:***"
    elif parts.username and SCHEMES.get(parts.scheme.lower()) == "nats":
        user = "***"
    else:
        return url
    netloc = f"{user}@{parts.netloc.rpartition('@')[2]}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
