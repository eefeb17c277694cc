"""The settings one console app runs with: :class:`Console`, kept as
``app.state.sa_inbox_console`` by :func:`~sa_inbox.console.app.create_app` and read by the
routes."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from starlette.templating import Jinja2Templates

from .queries import Tables
from .security import AuthHook, Credentials, CsrfTokens, RateLimiter, Sessions

__all__ = ["Console"]


@dataclass
class Console:
    """The settings and helpers one console app runs with (``app.state.sa_inbox_console``)."""

    engine: sa.Engine
    tables: Tables
    allow_replay: bool
    credentials: Credentials | None
    auth_hook: AuthHook | None
    sessions: Sessions
    csrf: CsrfTokens
    limiter: RateLimiter
    login_limiter: RateLimiter
    templates: Jinja2Templates
    dead_letter_queues: list[Any]
    broker_timeout: float
    retention: datetime.timedelta | None
    pending_threshold: datetime.timedelta
    metrics: Any | None

    @property
    def authenticated(self) -> bool:
        """Whether users authenticate (own credentials or the host's hook)."""
        return self.credentials is not None or self.auth_hook is not None
