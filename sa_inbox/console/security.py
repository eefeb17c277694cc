"""The console's security: who the user is, CSRF tokens, replay rate limits, headers.

* **Credentials** (:class:`Credentials`): a bearer token and/or one basic-auth user with its
  password, from the environment or secret files (:meth:`Credentials.from_environment`),
  compared in constant time (:func:`hmac.compare_digest` over SHA-256 digests, so the
  lengths are not compared either). A browser logs in through the login form, which sets a
  session cookie signed with :mod:`itsdangerous` (``HttpOnly``, ``SameSite=Strict``, its age
  checked); scripts send ``Authorization: Bearer <token>`` or ``Basic``.
* **Host authentication**: an app that mounts the console passes ``auth=callable``
  (:data:`AuthHook`): it gets the Starlette request and returns the user's name (or None),
  e.g. from the host's own session or ``request.user``.
* **CSRF** (:class:`CsrfTokens`): a double-submit token. A random value in an ``HttpOnly``
  cookie; every form carries that value signed with the app's secret key; a POST is refused
  unless the form field (or the ``X-CSRF-Token`` header) holds a valid signature of the
  cookie's value (OWASP CSRF Prevention Cheat Sheet, "Signed Double-Submit Cookie"). A POST
  that authenticates with ``Authorization: Bearer`` is not a browser's ambient credential,
  so it needs no token.
* **Replays** are rate-limited per user (:class:`RateLimiter`) and logged with the user.
* **Headers** (:class:`SecurityHeaders`): a Content-Security-Policy without inline script
  (no script at all), ``X-Frame-Options: DENY``, ``Referrer-Policy: no-referrer``,
  ``X-Content-Type-Options: nosniff`` and ``Cache-Control: no-store`` on every response but
  the static files (the pages hold payloads).
* :func:`check_bind` refuses a non-loopback address without authentication.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..exc import InvalidArgument

__all__ = [
    "ENVIRONMENT",
    "AuthHook",
    "Credentials",
    "CsrfTokens",
    "RateLimiter",
    "SecurityHeaders",
    "Sessions",
    "check_bind",
    "is_loopback",
    "same_secret",
]

#: The host app's authentication: the request in, the user's name (or None) out; a plain
#: function or a coroutine function.
AuthHook = Callable[[Request], "Awaitable[str | None] | str | None"]

#: The environment variables :meth:`Credentials.from_environment` reads.
ENVIRONMENT = {
    "token": "SA_INBOX_CONSOLE_TOKEN",
    "token_file": "SA_INBOX_CONSOLE_TOKEN_FILE",
    "user": "SA_INBOX_CONSOLE_USER",
    "password": "SA_INBOX_CONSOLE_PASSWORD",
    "password_file": "SA_INBOX_CONSOLE_PASSWORD_FILE",
    "secret_key": "SA_INBOX_CONSOLE_SECRET_KEY",
}

#: The user name a bearer token authenticates as.
TOKEN_USER = "token"


def same_secret(given: str, expected: str) -> bool:
    """Whether ``given`` equals ``expected``, in time independent of both (SHA-256 digests
    compared with :func:`hmac.compare_digest`)."""
    a = hashlib.sha256(given.encode("utf-8", "surrogateescape")).digest()
    b = hashlib.sha256(expected.encode("utf-8", "surrogateescape")).digest()
    return hmac.compare_digest(a, b)


@dataclass(frozen=True)
class Credentials:
    """The console's own credentials: a bearer ``token``, and/or a basic-auth ``user`` with
    its ``password``.

    :raises InvalidArgument: if none is given, a password has no user (or a user no
        password), or one is empty.
    """

    token: str | None = None
    user: str | None = None
    password: str | None = None

    def __post_init__(self) -> None:
        for name in ("token", "user", "password"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidArgument(f"console {name} must be a non-empty string")
        if (self.user is None) != (self.password is None):
            raise InvalidArgument("console basic auth needs both a user and a password")
        if self.token is None and self.user is None:
            raise InvalidArgument("console credentials need a token or a user and password")
        if self.user is not None and ":" in self.user:
            raise InvalidArgument("a basic-auth user name cannot hold ':' (RFC 7617)")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Credentials | None:
        """The credentials of the environment (:data:`ENVIRONMENT`), or None if it has none.

        ``SA_INBOX_CONSOLE_TOKEN`` (or ``..._TOKEN_FILE``, a file holding it),
        ``SA_INBOX_CONSOLE_USER`` with ``SA_INBOX_CONSOLE_PASSWORD`` (or
        ``..._PASSWORD_FILE``); a file's trailing newline is not part of the secret.

        :raises InvalidArgument: as the class, or for a variable and its ``_FILE`` twin both
            set, or a file that cannot be read.
        """
        env = os.environ if environ is None else environ
        token = _secret(env, "token")
        user = env.get(ENVIRONMENT["user"]) or None
        password = _secret(env, "password")
        if token is None and user is None and password is None:
            return None
        return cls(token=token, user=user, password=password)

    def check_bearer(self, token: str) -> str | None:
        """:data:`TOKEN_USER` if ``token`` is the token, else None."""
        if self.token is not None and same_secret(token, self.token):
            return TOKEN_USER
        return None

    def check_password(self, user: str, password: str) -> str | None:
        """``user`` if the pair is the configured one, else None (both compared, always)."""
        if self.user is None or self.password is None:
            return None
        user_ok = same_secret(user, self.user)
        password_ok = same_secret(password, self.password)
        return self.user if user_ok and password_ok else None

    def check_login(self, user: str, secret: str) -> str | None:
        """The login form: ``user`` and its password, or the token (any user name)."""
        return self.check_password(user, secret) or self.check_bearer(secret)


def _secret(env: Mapping[str, str], name: str) -> str | None:
    """The variable ``name`` of :data:`ENVIRONMENT`, or the content of its ``_file`` twin."""
    value = env.get(ENVIRONMENT[name]) or None
    path = env.get(ENVIRONMENT[f"{name}_file"]) or None
    if value is not None and path is not None:
        raise InvalidArgument(f"set {ENVIRONMENT[name]} or {ENVIRONMENT[f'{name}_file']}, not both")
    if path is None:
        return value
    return read_secret_file(path)


def read_secret_file(path: str | os.PathLike[str]) -> str:
    """The secret held by the file at ``path``, its trailing newline stripped.

    :raises InvalidArgument: if it cannot be read or is empty.
    """
    try:
        text = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as exc:
        raise InvalidArgument(f"cannot read the secret file {str(path)!r}: {exc}") from exc
    if not text:
        raise InvalidArgument(f"the secret file {str(path)!r} is empty")
    return text


class Sessions:
    """The login session: a cookie holding the user's name, signed with the secret key
    (:class:`itsdangerous.URLSafeTimedSerializer`), valid for ``max_age`` seconds."""

    COOKIE = "sa_inbox_console_session"

    def __init__(self, secret_key: str | bytes, max_age: int) -> None:
        self.serializer = URLSafeTimedSerializer(secret_key, salt="sa-inbox-console-session")
        self.max_age = max_age

    def dump(self, user: str) -> str:
        return self.serializer.dumps({"user": user})

    def user(self, request: Request) -> str | None:
        """The user of the request's session cookie; None if absent, forged or expired."""
        cookie = request.cookies.get(self.COOKIE)
        if not cookie:
            return None
        try:
            data = self.serializer.loads(cookie, max_age=self.max_age)
        except BadSignature:
            return None
        user = data.get("user") if isinstance(data, dict) else None
        return user if isinstance(user, str) and user else None


class CsrfTokens:
    """Signed double-submit CSRF tokens (see the module docstring)."""

    COOKIE = "sa_inbox_console_csrf"
    FIELD = "csrf_token"
    HEADER = "x-csrf-token"

    def __init__(self, secret_key: str | bytes, max_age: int) -> None:
        self.serializer = URLSafeTimedSerializer(secret_key, salt="sa-inbox-console-csrf")
        self.max_age = max_age

    @staticmethod
    def new_value() -> str:
        return secrets.token_urlsafe(32)

    def token(self, value: str) -> str:
        """The form token of the cookie's ``value``."""
        return self.serializer.dumps(value)

    def valid(self, cookie: str | None, token: str | None) -> bool:
        """Whether ``token`` is a valid, unexpired signature of ``cookie``."""
        if not cookie or not token:
            return False
        try:
            value = self.serializer.loads(token, max_age=self.max_age)
        except BadSignature:
            return False
        return isinstance(value, str) and same_secret(value, cookie)


class RateLimiter:
    """At most ``limit`` events per user in any ``window`` seconds (a sliding window);
    thread-safe.

    :raises InvalidArgument: for a limit that is not an int >= 1 or a window <= 0.
    """

    def __init__(self, limit: int, window: float) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidArgument(f"replay rate limit must be an int >= 1, not {limit!r}")
        if not isinstance(window, int | float) or not window > 0:
            raise InvalidArgument(f"replay rate window must be seconds > 0, not {window!r}")
        self.limit = limit
        self.window = float(window)
        self._events: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def allow(self, user: str, now: float | None = None) -> bool:
        """Record an event of ``user`` and say whether it is within the limit (a refused
        event is not recorded)."""
        moment = time.monotonic() if now is None else now
        with self._lock:
            events = self._events.setdefault(user, deque())
            while events and events[0] <= moment - self.window:
                events.popleft()
            if len(events) >= self.limit:
                return False
            events.append(moment)
            return True


#: The Content-Security-Policy of every response: nothing but the console's own styles,
#: images and form targets; no script at all, no framing.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)

HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


class SecurityHeaders:
    """ASGI middleware: the headers of the module docstring on every HTTP response, and
    ``Cache-Control: no-store`` on all but those of paths under ``static_prefix``."""

    def __init__(self, app: ASGIApp, static_prefix: str = "/static/") -> None:
        self.app = app
        self.static_prefix = static_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, root = str(scope["path"]), str(scope.get("root_path", ""))
        if root and path.startswith(root):  # mounted: the path below the mount point
            path = path[len(root) :]
        cached = path.startswith(self.static_prefix)
        replaced = {name for name, _ in HEADERS} | ({b"cache-control"} if not cached else set())

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in replaced]
                added = [] if cached else [(b"cache-control", b"no-store")]
                message = {**message, "headers": kept + HEADERS + added}
            await send(message)

        await self.app(scope, receive, sending)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is only reachable from this machine:
    ``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, *, authenticated: bool) -> None:
    """Refuse to serve the console on ``host`` unless it is loopback or authentication is
    configured.

    :raises InvalidArgument: for a non-loopback host without authentication.
    """
    if not authenticated and not is_loopback(host):
        raise InvalidArgument(
            f"refusing to serve the console on {host!r} without authentication: set "
            f"{ENVIRONMENT['token']} (or {ENVIRONMENT['user']} and {ENVIRONMENT['password']}), "
            "or bind a loopback address (127.0.0.1)"
        )


def new_secret_key() -> bytes:
    """A random key for one process (sessions and CSRF tokens end with it)."""
    return secrets.token_bytes(32)
