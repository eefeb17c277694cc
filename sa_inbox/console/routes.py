"""The console's routes: each page and the JSON API route behind it, guarded by
:func:`endpoint` (authentication, CSRF on every POST, the replay permission and rate limit).

=================================  ======  =====================================  ========
page                               method  JSON API                               writes
=================================  ======  =====================================  ========
``/``                              GET     ``/api/overview``
``/lookup?message_id=``            GET     ``/api/lookup?message_id=``
``/dead-letters?source=...``       GET     ``/api/dead-letters?source=...``
``/dead-letters/{source}/{id}``    GET     ``/api/dead-letters/{source}/{id}``
``/replay``                        POST    ``/api/replay``                        yes
``/broker?queue=N``                GET     ``/api/broker?queue=N``
``/broker/replay``                 POST    ``/api/broker/replay``                 yes
``/login``, ``/logout``            POST
``/metrics``                       GET     (Prometheus' text format)
=================================  ======  =====================================  ========
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, QueryParams
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from ..brokers.delivery import DeadLetterReason
from ..exc import DeadLetterQueueUnavailable, InvalidArgument
from ..outage import is_unavailable
from ..stats import DeadLetterFilter
from ..store.schema import DEAD
from ..validation import first_line
from . import queries
from .security import RateLimiter
from .settings import Console

__all__ = ["endpoint", "routes"]

logger = logging.getLogger("sa_inbox.console")

Handler = Callable[[Request, "Visit"], Awaitable[Response]]


@dataclass
class Visit:
    """One request's console, user and CSRF token (for the forms it renders)."""

    console: Console
    user: str | None
    api: bool
    csrf_value: str
    csrf_new: bool

    @property
    def csrf_token(self) -> str:
        return self.console.csrf.token(self.csrf_value)


def endpoint(*, api: bool, write: bool = False, public: bool = False) -> Callable[[Handler], Any]:
    """Guard a route: the user authenticated (unless ``public``: the login form), every
    POST's CSRF token checked, and for a ``write`` (a replay) the console's
    ``allow_replay``, an authenticated user and the per-user rate limit. A refusal is a
    JSON error (``api``) or an HTML page, with its status: 401 unauthenticated, 403
    forbidden (no CSRF token, read-only console), 429 over the rate limit."""

    def decorate(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        @functools.wraps(handler)
        async def guarded(request: Request) -> Response:
            console: Console = request.app.state.sa_inbox_console
            cookie = request.cookies.get(console.csrf.COOKIE)
            visit = Visit(console, None, api, cookie or console.csrf.new_value(), not cookie)
            try:
                visit.user, bearer = await _user(console, request)
                if not public and console.authenticated and visit.user is None:
                    raise HTTPException(401, "authentication required")
                if request.method == "POST" and not bearer:
                    await _check_csrf(console, request, cookie)
                if write:
                    _check_write(console, visit.user)
                response = await handler(request, visit)
            except HTTPException as exc:
                if exc.status_code == 401:
                    response = _unauthenticated(request, visit)
                else:
                    response = _error(request, visit, exc.status_code, str(exc.detail))
            except InvalidArgument as exc:
                response = _error(request, visit, 400, str(exc))
            except DeadLetterQueueUnavailable as exc:
                response = _error(request, visit, 502, str(exc))
            except sa.exc.SQLAlchemyError as exc:
                response = _database_error(request, visit, exc)
            if visit.csrf_new:
                _set_cookie(request, response, console.csrf.COOKIE, visit.csrf_value)
            return response

        guarded.sa_inbox_guard = {"api": api, "write": write, "public": public}  # type: ignore[attr-defined]
        return guarded

    return decorate


async def _user(console: Console, request: Request) -> tuple[str | None, bool]:
    """The request's user, and whether it came with a bearer token (no CSRF needed)."""
    if console.auth_hook is not None:
        found = console.auth_hook(request)
        if inspect.isawaitable(found):
            found = await found
        return (found if isinstance(found, str) and found else None), False
    if console.credentials is None:
        return None, False
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value:
        return console.credentials.check_bearer(value.strip()), True
    if scheme.lower() == "basic" and value:
        import base64
        import binascii

        try:
            user, _, password = (
                base64.b64decode(value.strip(), validate=True).decode().partition(":")
            )
        except (binascii.Error, UnicodeDecodeError):
            return None, False
        return console.credentials.check_password(user, password), False
    return console.sessions.user(request), False


async def _check_csrf(console: Console, request: Request, cookie: str | None) -> None:
    """Refuse (403) a POST without a valid CSRF token for its cookie, or from another
    origin (the ``Origin`` header, where the browser sends one)."""
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.url.netloc:
        # the host only: behind a TLS-terminating proxy the scheme the app sees may differ
        raise HTTPException(403, "cross-origin POST refused")
    token = request.headers.get(console.csrf.HEADER)
    if token is None and _is_form(request):
        token = _field(await request.form(), console.csrf.FIELD)
    if not console.csrf.valid(cookie, token):
        raise HTTPException(403, "missing or invalid CSRF token: reload the page and try again")


def _is_form(request: Request) -> bool:
    kind = request.headers.get("content-type", "")
    return kind.startswith(("application/x-www-form-urlencoded", "multipart/form-data"))


def _check_write(console: Console, user: str | None) -> None:
    if not console.allow_replay:
        raise HTTPException(403, "this console is read-only (start it with --allow-replay)")
    if user is None:
        raise HTTPException(401, "authentication required")
    _within_limit(console.limiter, user, "replay")


#: Per rate-limited action: the log record's name for who asked, the warning's format (``%s``
#: for who), the 429's detail.
_LIMITED = {
    "replay": ("user", "console replay refused: %s is over the rate limit", "replay requests"),
    "login": ("client", "console login refused: too many attempts from %s", "login attempts"),
}


def _within_limit(limiter: RateLimiter, who: str, action: str) -> None:
    """Count one ``action`` (a key of :data:`_LIMITED`) of ``who`` against ``limiter``.

    :raises HTTPException: 429, logged, when ``who`` is over the limit.
    """
    if limiter.allow(who):
        return
    field, log, what = _LIMITED[action]
    logger.warning(log, who, extra={"event": f"console.{action}.rate_limited", field: who})
    raise HTTPException(429, f"too many {what}: wait a minute")


def _unauthenticated(request: Request, visit: Visit) -> Response:
    console = visit.console
    if not visit.api and console.credentials is not None:
        target = request.url_for("login").include_query_params(next=request.url.path)
        return RedirectResponse(str(target), status_code=303)
    response = _error(request, visit, 401, "authentication required")
    if console.credentials is not None:
        schemes = []
        if console.credentials.user is not None:
            schemes.append('Basic realm="sa-inbox console", charset="UTF-8"')
        if console.credentials.token is not None:
            schemes.append('Bearer realm="sa-inbox console"')
        response.headers["www-authenticate"] = ", ".join(schemes)
    return response


def _database_error(request: Request, visit: Visit, exc: sa.exc.SQLAlchemyError) -> Response:
    """503 when the database cannot be reached (:func:`sa_inbox.outage.is_unavailable`),
    500 for any other database error; one line, the statement and parameters left out."""
    first = first_line(exc)
    if is_unavailable(exc):
        logger.warning("console: the database cannot be reached: %s", first)
        return _error(request, visit, 503, f"the database cannot be reached: {first}")
    logger.error("console: database error on %s", request.url.path, exc_info=exc)
    return _error(request, visit, 500, f"database error: {first}")


def _error(request: Request, visit: Visit, status: int, detail: str) -> Response:
    if visit.api:
        return JSONResponse({"error": detail, "status": status}, status_code=status)
    return _page(request, visit, "error.html", {"status": status, "detail": detail}, status)


def _page(
    request: Request, visit: Visit, template: str, context: dict[str, Any], status: int = 200
) -> Response:
    console = visit.console
    return console.templates.TemplateResponse(
        request,
        template,
        {
            **context,
            "user": visit.user,
            "csrf_token": visit.csrf_token,
            "allow_replay": console.allow_replay,
            "authenticated": console.authenticated,
            "own_login": console.credentials is not None,
            "broker_queues": [t.display for t in console.dead_letter_queues],
        },
        status_code=status,
    )


def _set_cookie(request: Request, response: Response, name: str, value: str, **kw: Any) -> None:
    response.set_cookie(
        name,
        value,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=_cookie_path(request),
        **kw,
    )


def _cookie_path(request: Request) -> str:
    root = str(request.scope.get("root_path", "")).rstrip("/")
    return f"{root}/" if root else "/"


def _json(data: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(json.loads(json.dumps(data, default=_default)), status_code=status)


def _default(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


async def _json_object(request: Request) -> dict[str, Any]:
    """The request's body, a JSON object.

    :raises InvalidArgument: if it is not one (not JSON, or another JSON value).
    """
    try:
        body = await request.json()
    except ValueError as exc:
        raise InvalidArgument("the body must be a JSON object") from exc
    if not isinstance(body, dict):
        raise InvalidArgument("the body must be a JSON object")
    return body


def _field(form: FormData | QueryParams, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None


# -- overview ----------------------------------------------------------------------------


async def _overview(visit: Visit) -> dict[str, Any]:
    console = visit.console
    stats, found = await run_in_threadpool(
        queries.overview,
        console.engine,
        console.tables,
        retention=console.retention,
        pending_threshold=console.pending_threshold,
        dead_letter_queues=console.dead_letter_queues,
        broker_timeout=console.broker_timeout,
    )
    document = stats.as_dict()
    document["warnings"] = [{"code": w.code, "kind": w.kind, "text": w.text} for w in found]
    document["exit_code"] = min((w.code for w in found), default=0)
    return document


@endpoint(api=False)
async def overview_page(request: Request, visit: Visit) -> Response:
    return _page(request, visit, "overview.html", {"stats": await _overview(visit)})


@endpoint(api=True)
async def overview_api(request: Request, visit: Visit) -> Response:
    return _json(await _overview(visit))


# -- lookup ------------------------------------------------------------------------------


async def _lookup(request: Request, visit: Visit) -> dict[str, Any] | None:
    message_id = request.query_params.get("message_id", "").strip()
    if not message_id:
        return None
    console = visit.console
    found = await run_in_threadpool(queries.lookup, console.engine, console.tables, message_id)
    return found.as_dict()


@endpoint(api=False)
async def lookup_page(request: Request, visit: Visit) -> Response:
    found = await _lookup(request, visit)
    message_id = request.query_params.get("message_id", "")
    return _page(request, visit, "lookup.html", {"found": found, "message_id": message_id})


@endpoint(api=True)
async def lookup_api(request: Request, visit: Visit) -> Response:
    found = await _lookup(request, visit)
    if found is None:
        raise InvalidArgument("give ?message_id=")
    return _json(found)


# -- dead letters ------------------------------------------------------------------------


def _when(value: str | None, name: str) -> datetime.datetime | None:
    """An ISO 8601 time of a filter, UTC when it names no zone (a browser's
    ``datetime-local`` field has none)."""
    if not value:
        return None
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError as exc:
        raise InvalidArgument(f"{name} is not an ISO 8601 time: {value!r}") from exc
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)


def _filters(params: FormData | QueryParams) -> tuple[str, DeadLetterFilter]:
    """The source and filters of a dead-letter list (or a replay by filter)."""
    source = _field(params, "source") or "store"
    if source not in queries.SOURCES:
        raise InvalidArgument(f"source must be one of {', '.join(queries.SOURCES)}: {source!r}")
    below = _field(params, "below_id")
    try:
        below_id = int(below) if below else None
    except ValueError as exc:
        raise InvalidArgument(f"below_id must be a row id: {below!r}") from exc
    return source, DeadLetterFilter(
        group=_field(params, "group") or None,
        error=_field(params, "error") or None,
        arrived_from=_when(_field(params, "from"), "from"),
        arrived_before=_when(_field(params, "before"), "before"),
        below_id=below_id,
    )


async def _dead_letters(request: Request, visit: Visit) -> dict[str, Any]:
    console = visit.console
    source, chosen = _filters(request.query_params)
    found = await run_in_threadpool(
        queries.list_dead_letters, console.engine, console.tables, source, chosen
    )
    return {
        "source": source,
        "filters": dataclasses.asdict(chosen),
        "dead_letters": [dataclasses.asdict(d) for d in found],
        "next_below_id": found[-1].id if found else None,
    }


@endpoint(api=False)
async def dead_letters_page(request: Request, visit: Visit) -> Response:
    data = json.loads(json.dumps(await _dead_letters(request, visit), default=_default))
    params = dict(request.query_params)
    return _page(request, visit, "dead_letters.html", {"data": data, "params": params})


@endpoint(api=True)
async def dead_letters_api(request: Request, visit: Visit) -> Response:
    return _json(await _dead_letters(request, visit))


async def _detail(request: Request, visit: Visit) -> dict[str, Any]:
    console = visit.console
    source = request.path_params["source"]
    row_id = request.path_params["id"]
    row = await run_in_threadpool(
        queries.dead_letter_detail, console.engine, console.tables, source, row_id
    )
    if row is None:
        raise HTTPException(404, f"no {source} row {row_id}")
    return row


@endpoint(api=False)
async def dead_letter_page(request: Request, visit: Visit) -> Response:
    return _page(request, visit, "dead_letter.html", {"row": await _detail(request, visit)})


@endpoint(api=True)
async def dead_letter_api(request: Request, visit: Visit) -> Response:
    return _json(await _detail(request, visit))


# -- replay ------------------------------------------------------------------------------


def _replay_request(params: FormData | QueryParams | dict[str, Any]) -> queries.ReplayRequest:
    """A replay's rows, from a form (``id`` repeated, ``scope`` selected / filter) or the
    API's JSON body (``ids`` a list).

    :raises InvalidArgument: for a body that names no rows (no ``ids``, ``status`` or
        filter), as the CLI's replay refuses one; or a field of the wrong type.
    """
    if isinstance(params, dict):
        source = params.get("source", "store")
        raw_ids = params.get("ids")
        if raw_ids is not None and (
            not isinstance(raw_ids, list)
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in raw_ids)
        ):
            raise InvalidArgument("ids must be a list of row ids (ints)")
        text = {k: params.get(k) for k in ("group", "error", "from", "before", "status")}
        if not all(v is None or isinstance(v, str) for v in text.values()):
            raise InvalidArgument("group, error, from, before and status are strings")
        if raw_ids is None and "status" not in params and not any(text.values()):
            raise InvalidArgument(
                "name the rows to replay: ids, a status, or a filter (group, error, from, before)"
            )
        ids = tuple(raw_ids) if raw_ids is not None else None
        status = text["status"] if "status" in params else DEAD
    else:
        source = _field(params, "source") or "store"
        text = {k: _field(params, k) for k in ("group", "error", "from", "before")}
        scope = _field(params, "scope") or "selected"
        ids = None
        if scope == "selected":
            try:
                ids = tuple(int(str(v)) for v in params.getlist("id"))
            except ValueError as exc:
                raise InvalidArgument("a selected row id is not an int") from exc
            if not ids:
                raise InvalidArgument("select at least one dead letter (or replay by filter)")
            text = {k: None for k in text}
        status_field = _field(params, "status")
        status = None if status_field == "any" else (status_field or DEAD)
    if not isinstance(source, str) or source not in queries.SOURCES:
        raise InvalidArgument(f"source must be one of {', '.join(queries.SOURCES)}: {source!r}")
    return queries.ReplayRequest(
        source=source,
        ids=ids,
        status=status,
        group=text["group"] or None,
        error=text["error"] or None,
        arrived_from=_when(text["from"], "from"),
        arrived_before=_when(text["before"], "before"),
    )


async def _run_replay(
    visit: Visit, chosen: queries.ReplayRequest, *, dry_run: bool, confirmed: bool
) -> Any:
    console = visit.console
    outcome = await run_in_threadpool(
        functools.partial(
            queries.replay,
            console.engine,
            console.tables,
            chosen,
            dry_run=dry_run,
            confirmed=confirmed,
        )
    )
    logger.info(
        "console replay by %s: %s %s -> chosen %d, finished %d, replayed %s",
        visit.user,
        "dry run" if dry_run else "replay",
        chosen.describe(),
        outcome.chosen,
        outcome.finished,
        outcome.replayed,
        extra={
            "event": "console.replay",
            "user": visit.user,
            "filters": chosen.describe(),
            "dry_run": dry_run,
            "replayed": outcome.replayed,
        },
    )
    return outcome


def _outcome(outcome: Any, dry_run: bool) -> dict[str, Any]:
    return {
        "dry_run": dry_run,
        "chosen": outcome.chosen,
        "finished": outcome.finished,
        "replayed": outcome.replayed,
        "needs_confirmation": outcome.needs_confirmation,
    }


@endpoint(api=False, write=True)
async def replay_page(request: Request, visit: Visit) -> Response:
    """Step ``preview`` (the default): the dry-run count and the confirmation form;
    step ``confirm`` with ``expected`` (the count shown): the replay, unless the count
    changed meanwhile (then the confirmation again, with the new count)."""
    form = await request.form()
    chosen = _replay_request(form)
    step = _field(form, "step") or "preview"
    confirmed = _field(form, "again") == "yes"
    preview = await _run_replay(visit, chosen, dry_run=True, confirmed=confirmed)
    expected = _field(form, "expected")
    context: dict[str, Any] = {"chosen": chosen.describe(), "form": _echo(form), "preview": preview}
    if step != "confirm" or expected != str(preview.chosen) or (preview.finished and not confirmed):
        changed = step == "confirm" and expected != str(preview.chosen)
        context["changed"] = changed
        context["refused_again"] = step == "confirm" and preview.finished > 0 and not confirmed
        return _page(request, visit, "confirm.html", context)
    outcome = await _run_replay(visit, chosen, dry_run=False, confirmed=confirmed)
    return _page(request, visit, "replayed.html", {**context, "outcome": outcome})


def _echo(form: FormData) -> list[tuple[str, str]]:
    """The form's fields that choose rows, for the confirmation form to send again."""
    kept = ("source", "scope", "id", "group", "error", "from", "before", "status")
    return [(k, v) for k, v in form.multi_items() if k in kept and isinstance(v, str)]


@endpoint(api=True, write=True)
async def replay_api(request: Request, visit: Visit) -> Response:
    """JSON body: ``source``, ``ids`` or filters (``group``, ``error``, ``from``,
    ``before``), ``status`` (default ``dead``; null: any replayable), ``dry_run``, ``yes``
    (confirm finished rows), ``expected`` (refuse with 409 unless the count is this)."""
    body = await _json_object(request)
    chosen = _replay_request(body)
    dry_run = body.get("dry_run", False) is True
    confirmed = body.get("yes", False) is True
    expected = body.get("expected")
    if expected is not None and not dry_run:
        preview = await _run_replay(visit, chosen, dry_run=True, confirmed=confirmed)
        if preview.chosen != expected:
            return _json({**_outcome(preview, True), "error": "the count changed"}, 409)
    outcome = await _run_replay(visit, chosen, dry_run=dry_run, confirmed=confirmed)
    status = 409 if outcome.needs_confirmation and not dry_run else 200
    return _json(_outcome(outcome, dry_run), status)


# -- broker dead letters -----------------------------------------------------------------


def _queue(visit: Visit, params: FormData | QueryParams) -> Any:
    queues = visit.console.dead_letter_queues
    if not queues:
        raise HTTPException(404, "no broker dead-letter queue is configured")
    raw = _field(params, "queue") or "0"
    if not raw.isdigit() or int(raw) >= len(queues):
        raise InvalidArgument(f"queue must be 0 to {len(queues) - 1}: {raw!r}")
    return queues[int(raw)]


def _broker_choice(params: FormData | QueryParams) -> tuple[str | None, int]:
    reason = _field(params, "reason") or None
    if reason is not None and reason not in {r.value for r in DeadLetterReason}:
        raise InvalidArgument(f"unknown reason {reason!r}")
    raw = _field(params, "limit") or "50"
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise InvalidArgument("limit must be 1 to 1000")
    return reason, int(raw)


async def _broker(request: Request, visit: Visit) -> dict[str, Any]:
    from ..brokers.dead_letters import peek

    target = _queue(visit, request.query_params)
    reason, limit = _broker_choice(request.query_params)
    found = await run_in_threadpool(
        functools.partial(
            peek,
            target.url,
            target.queue,
            reason=reason,
            limit=limit,
            timeout=visit.console.broker_timeout,
        )
    )
    letters = []
    for letter in found:
        shown = letter.as_dict()
        shown["body_text"] = letter.body[:4096].decode("utf-8", "replace")
        letters.append(shown)
    return {"queue": target.display, "reason": reason, "limit": limit, "dead_letters": letters}


@endpoint(api=False)
async def broker_page(request: Request, visit: Visit) -> Response:
    data = await _broker(request, visit)
    params = dict(request.query_params)
    reasons = [r.value for r in DeadLetterReason]
    return _page(
        request, visit, "broker.html", {"data": data, "params": params, "reasons": reasons}
    )


@endpoint(api=True)
async def broker_api(request: Request, visit: Visit) -> Response:
    return _json(await _broker(request, visit))


async def _broker_replay(
    visit: Visit, params: FormData | QueryParams, dry_run: bool
) -> dict[str, Any]:
    from ..brokers.dead_letters import replay

    target = _queue(visit, params)
    reason, limit = _broker_choice(params)
    result = await run_in_threadpool(
        functools.partial(
            replay,
            target.url,
            target.queue,
            dry_run=dry_run,
            reason=reason,
            limit=limit,
            timeout=visit.console.broker_timeout,
        )
    )
    logger.info(
        "console broker replay by %s: %s reason=%s limit=%s -> %s",
        visit.user,
        target.display,
        reason,
        limit,
        result.as_dict(),
        extra={"event": "console.broker_replay", "user": visit.user, "dry_run": dry_run},
    )
    return result.as_dict()


@endpoint(api=False, write=True)
async def broker_replay_page(request: Request, visit: Visit) -> Response:
    form = await request.form()
    step = _field(form, "step") or "preview"
    dry_run = step != "confirm"
    result = await _broker_replay(visit, form, dry_run)
    context = {
        "result": result,
        "form": [
            (k, v)
            for k, v in form.multi_items()
            if k in ("queue", "reason", "limit") and isinstance(v, str)
        ],
    }
    return _page(request, visit, "broker_replay.html", {**context, "dry_run": dry_run})


@endpoint(api=True, write=True)
async def broker_replay_api(request: Request, visit: Visit) -> Response:
    body = await _json_object(request)
    params = QueryParams(
        {k: str(v) for k, v in body.items() if k in ("queue", "reason", "limit") and v is not None}
    )
    return _json(await _broker_replay(visit, params, body.get("dry_run", False) is True))


# -- login, metrics ----------------------------------------------------------------------


@endpoint(api=False, public=True)
async def login(request: Request, visit: Visit) -> Response:
    console = visit.console
    if console.credentials is None:
        raise HTTPException(404, "this console has no login of its own")
    target = request.query_params.get("next", "")
    if not target.startswith("/") or target.startswith("//"):
        target = str(request.url_for("overview").path)
    if request.method == "GET":
        return _page(request, visit, "login.html", {"failed": False, "next": target})
    client = request.client.host if request.client is not None else "unknown"
    _within_limit(console.login_limiter, client, "login")
    form = await request.form()
    user = console.credentials.check_login(
        _field(form, "user") or "", _field(form, "password") or ""
    )
    if user is None:
        logger.warning("console login failed", extra={"event": "console.login.failed"})
        return _page(request, visit, "login.html", {"failed": True, "next": target}, 401)
    response = RedirectResponse(target, status_code=303)
    _set_cookie(
        request,
        response,
        console.sessions.COOKIE,
        console.sessions.dump(user),
        max_age=int(console.sessions.max_age),
    )
    logger.info("console login: %s", user, extra={"event": "console.login", "user": user})
    return response


@endpoint(api=False)
async def logout(request: Request, visit: Visit) -> Response:
    response = RedirectResponse(str(request.url_for("overview")), status_code=303)
    response.delete_cookie(visit.console.sessions.COOKIE, path=_cookie_path(request))
    return response


@endpoint(api=True)
async def metrics(request: Request, visit: Visit) -> Response:
    registry = visit.console.metrics
    if registry is None:
        raise HTTPException(404, "no /metrics: pip install 'sa-inbox[prometheus]'")
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    body = await run_in_threadpool(generate_latest, registry)
    return PlainTextResponse(body, media_type=CONTENT_TYPE_LATEST)


def routes() -> list[Route]:
    """The console's routes (the static files are mounted by :func:`~.app.create_app`)."""
    return [
        Route("/", overview_page, name="overview"),
        Route("/api/overview", overview_api, name="api_overview"),
        Route("/lookup", lookup_page, name="lookup"),
        Route("/api/lookup", lookup_api, name="api_lookup"),
        Route("/dead-letters", dead_letters_page, name="dead_letters"),
        Route("/api/dead-letters", dead_letters_api, name="api_dead_letters"),
        Route("/dead-letters/{source}/{id:int}", dead_letter_page, name="dead_letter"),
        Route("/api/dead-letters/{source}/{id:int}", dead_letter_api, name="api_dead_letter"),
        Route("/replay", replay_page, methods=["POST"], name="replay"),
        Route("/api/replay", replay_api, methods=["POST"], name="api_replay"),
        Route("/broker", broker_page, name="broker"),
        Route("/api/broker", broker_api, name="api_broker"),
        Route("/broker/replay", broker_replay_page, methods=["POST"], name="broker_replay"),
        Route("/api/broker/replay", broker_replay_api, methods=["POST"], name="api_broker_replay"),
        Route("/login", login, methods=["GET", "POST"], name="login"),
        Route("/logout", logout, methods=["POST"], name="logout"),
        Route("/metrics", metrics, name="metrics"),
    ]
