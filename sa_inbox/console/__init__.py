"""The operator's console: the inbox, the store and the outbox in a browser (extra
``sa-inbox[console]``).

A server-rendered ASGI app (Starlette, Jinja2; no script), served by ``sa-inbox console
--url DB`` (uvicorn) or mounted in the user's own FastAPI / Starlette app with
:func:`create_app`:

* the overview: consumers, the store's backlog by status and age, dead letters, the outbox
  by destination, growth per day and the verdicts of ``sa-inbox stats --check``
  (:mod:`sa_inbox.stats`);
* "was message X processed?": one message id across the processed-messages table, the store
  and the outbox;
* dead letters of the store, the outbox and the brokers' dead-letter queues: filtered lists,
  detail, and replay (one, selected, or by filter) with a dry-run count and a confirmation,
  by the CLI's rules (:func:`sa_inbox.store.replay.guarded_replay`,
  :func:`sa_inbox.brokers.dead_letters.replay`);
* a JSON API behind every page, ``/metrics`` for Prometheus.

Its security rules are in :mod:`sa_inbox.console.security`: read-only unless
``allow_replay``; a replay needs an authenticated user (:class:`Credentials` or the host's
hook), a CSRF token on every POST, and stays under a per-user rate limit.
"""

from __future__ import annotations

from .._optional import optional_dependencies

with optional_dependencies(__name__, "console", "starlette", "jinja2", "itsdangerous"):
    from .app import Console, create_app
    from .security import Credentials, check_bind, is_loopback

__all__ = ["Console", "Credentials", "check_bind", "create_app", "is_loopback"]
