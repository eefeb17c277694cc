"""``sqs://`` URLs: the endpoint, region and credentials of an SQS client, in one string.

The scheme follows Celery's (kombu's) SQS transport, so a user who has one has the other::

    sqs://                                  AWS: the region and credentials boto3 finds
                                            (environment, ~/.aws, an instance role)
    sqs://?region=eu-west-1                 AWS, that region
    sqs://KEY:SECRET@                       AWS, these credentials
    sqs://KEY:SECRET@127.0.0.1:5000         an endpoint of your own over plain HTTP (moto,
                                            ElasticMQ, LocalStack): http://127.0.0.1:5000
    sqss://KEY:SECRET@sqs.example:443       the same over HTTPS

``?region=`` sets the region (default: boto3's, else ``us-east-1`` for an endpoint of your
own, which must have one to sign requests); a key or secret holding ``/``, ``@`` or ``:``
is percent-encoded. The queue is not part of the URL: each consumer and publisher names
its own.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ...exc import InvalidArgument

__all__ = ["SCHEMES", "client_options"]

#: URL scheme → whether the endpoint is HTTPS.
SCHEMES = {"sqs": False, "sqss": True}

#: The region an endpoint of your own gets when the URL names none (requests are signed
#: with a region; emulators accept any).
DEFAULT_EMULATOR_REGION = "us-east-1"


def client_options(url: str) -> dict[str, Any]:
    """The keyword arguments of ``boto3.client("sqs", ...)`` (and aiobotocore's
    ``create_client``) for ``url``: ``endpoint_url``, ``region_name``,
    ``aws_access_key_id`` / ``aws_secret_access_key``, each only when the URL sets it.

    :raises InvalidArgument: for a URL of another scheme, a query parameter other than
        ``region``, or a key without its secret.
    """
    if not isinstance(url, str) or "://" not in url:
        raise InvalidArgument(
            f"an SQS URL looks like sqs://[KEY:SECRET@][HOST[:PORT]], not {url!r}"
        )
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidArgument(f"an SQS URL starts with sqs:// or sqss://, not {scheme}://")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"region"})
    if unknown:
        raise InvalidArgument(f"unknown SQS URL parameter(s) {unknown}: only ?region= is read")
    options: dict[str, Any] = {}
    if query.get("region"):
        options["region_name"] = query["region"][-1]
    if parts.username is not None or parts.password is not None:
        if not parts.username or not parts.password:
            raise InvalidArgument("an SQS URL with credentials needs both: sqs://KEY:SECRET@...")
        options["aws_access_key_id"] = unquote(parts.username)
        options["aws_secret_access_key"] = unquote(parts.password)
    host = parts.hostname
    if host:
        http = "https" if SCHEMES[scheme] else "http"
        host = f"[{host}]" if ":" in host else host  # an IPv6 address
        port = f":{parts.port}" if parts.port else ""
        options["endpoint_url"] = f"{http}://{host}{port}"
        options.setdefault("region_name", DEFAULT_EMULATOR_REGION)
    return options
