"""Optional dependencies: the extras of sa-inbox and the one place that imports them.

A module that needs an extra wraps its imports of it in :func:`optional_dependencies`::

    with optional_dependencies(__name__, "rabbitmq", "pika", "aio_pika"):
        import aio_pika
        import pika

Without the extra, importing the module raises :class:`~sa_inbox.exc.MissingExtra` (an
:class:`ImportError`) with one line naming it, ``sa_inbox.brokers.rabbitmq needs the
'rabbitmq' extra: pip install 'sa-inbox[rabbitmq]'``, the missing module in its ``name``
(the dependency's own ``ModuleNotFoundError`` is not chained: it would be the first error a
reader sees); ``sa-inbox`` prints that line and exits 2. The shape of pandas'
``import_optional_dependency`` (``pandas/compat/_optional.py``).

``greenlet`` is named wherever a module imports :mod:`sqlalchemy.ext.asyncio` at import
time: SQLAlchemy 2.1 no longer installs it, and :mod:`sqlalchemy.ext.asyncio` raises its
own ImportError only on the first import without it (later imports succeed, and the first
use fails), so the check must not rely on it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from .exc import MissingExtra

__all__ = ["EXTRAS", "import_optional_dependency", "optional_dependencies"]

#: extra -> the top-level modules it installs that sa-inbox imports (``pyproject.toml``'s
#: ``[project.optional-dependencies]``; the database drivers' extras are imported by
#: SQLAlchemy's dialects, see :data:`sa_inbox.cli._common.DRIVER_EXTRAS`).
EXTRAS: dict[str, tuple[str, ...]] = {
    "alembic": ("alembic",),
    "asyncio": ("greenlet",),
    "bench": ("matplotlib",),
    "celery": ("celery",),
    "console": ("starlette", "jinja2", "itsdangerous", "uvicorn"),
    "faststream": ("faststream", "greenlet"),
    "kafka": ("aiokafka", "confluent_kafka", "greenlet"),
    "nats": ("nats", "greenlet"),
    "opentelemetry": ("opentelemetry",),
    "prometheus": ("prometheus_client",),
    "rabbitmq": ("pika", "aio_pika", "greenlet"),
    "redis": ("redis", "greenlet"),
    "testing": ("pytest",),
    "sqs": ("boto3", "aiobotocore", "greenlet"),
}


def import_optional_dependency(name: str, *, extra: str, module: str) -> ModuleType:
    """Import the module ``name``, which ``extra`` installs, for the sa-inbox ``module``.

    :param name: a module of one of the extra's packages (``"pika"``,
        ``"opentelemetry.trace"``).
    :param extra: the extra (a key of :data:`EXTRAS`).
    :param module: the sa-inbox module that needs it, for the message (``__name__``).
    :raises MissingExtra: if ``name`` is not installed (the missing module as its ``name``).
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        # Only ``name`` (or a package it is in) missing; an error inside an installed
        # package (a dependency of its own missing, a bug) is raised as it is.
        if exc.name is None or not f"{name}.".startswith(f"{exc.name}."):
            raise
        raise MissingExtra(module, extra, exc.name) from None


@contextmanager
def optional_dependencies(module: str, extra: str, *names: str) -> Iterator[None]:
    """A ``with`` block for the imports that ``extra`` serves: the modules ``names`` are
    imported first (:func:`import_optional_dependency`), then the block runs.

    :param module: the sa-inbox module that needs them, for the message (``__name__``).
    :param extra: the extra that installs them (a key of :data:`EXTRAS`).
    :param names: its top-level modules that the block's imports need (``"greenlet"`` where
        they import :mod:`sqlalchemy.ext.asyncio`).
    :raises MissingExtra: if one of ``names`` is not installed.
    """
    for name in names:
        import_optional_dependency(name, extra=extra, module=module)
    yield
