"""The agent HTTP API: `/v1/approvals`, the Claude Code http hook, `/openapi.json`, HTTP errors.

    POST /v1/approvals                create (idempotent on call_id): 201, or 200 if it existed
    GET  /v1/approvals/{id}?wait=N    the approval object; long-polls up to N s (capped)
    POST /v1/approvals/{id}/cancel    withdraw a pending request (409 once decided)
    POST /v1/calls/cancel             withdraw the request the caller's call_id made, if any
    POST /hooks/claude-code           Claude Code `http` hook: hook JSON in, hook output out
    POST /hooks/codex                 the same for Codex (`approval-bot hook codex` forwards)
    GET  /openapi.json                OpenAPI 3.1, generated from the models (`bot.http.schemas`)

`/v1/*` need `Authorization: Bearer <token>` (one of `ctx.api_tokens` or
`ctx.admin_tokens`, see `bot.http.principals`); with no token configured they
answer 503 — never open by default. A token sees only its own principal's
requests (another's is a 404, like an unknown id); an admin token sees all.
`/hooks/claude-code` and `/hooks/codex` (`bot.http.agent_hooks`) check the same tokens but answer
every problem with a deny, HTTP 200. Every error is `{"error": {"code",
"message", "details"?}}`, mapped from the `approvals.errors` tree in one
place, `http_error` (`error_middleware` applies it to every route but the
long-poll, whose handler applies it itself: see `ApprovalsAPI.get`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web
from pydantic import ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from approvals._internal.store.waiting import CallerGone, Watch
from approvals.errors import (
    AlreadyDecided,
    ApprovalError,
    ApprovalTimeout,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    StoreUnavailable,
    http_status,
)
from approvals.integrations.coding_agents import (
    DIALECTS,
    MAX_JSON_DEPTH,
    error_details,
    json_depth,
)
from approvals.integrations.hook_input import loads
from approvals.models import ApprovalRequest
from bot.core.context import BotContext
from bot.core.shutdown import Drained, shutting_down_response
from bot.http.agent_hooks import AgentHook
from bot.http.connections import BodyTimeout, content_encoding, trust
from bot.http.parked import Answer, Parking
from bot.http.principals import AuthProblem, Principal, Principals
from bot.http.schemas import (
    CancelApproval,
    CancelCall,
    CreateApproval,
    approval_json,
    approval_object,
    openapi_document,
)
from bot.ops.metrics import METRICS, Metrics

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_CHUNK = 64 * 1024
#: Where `ApprovalsAPI.guard` keeps the caller's principal on the request.
PRINCIPAL = web.RequestKey("principal", Principal)
#: The app's detached long-polls (bot/http/parked.py), for the tests and the benches to count.
PARKING = web.AppKey("parking", Parking)


# -- errors ---------------------------------------------------------------------------------


class APIError(Exception):
    """An HTTP-only error (auth, JSON syntax, query syntax) with its status and code."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.details, self.headers = details, headers


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


def error_response(
    status: int, code: str, message: str, details: Any = None, headers: dict[str, str] | None = None
) -> web.Response:
    body: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        body["details"] = details
    text = json.dumps({"error": body}, ensure_ascii=False, default=str)
    return web.json_response(text=text, status=status, headers=headers)


def _approval_error(e: ApprovalError) -> web.Response:
    status = http_status(e)
    details = e.details
    if isinstance(e, AlreadyDecided) and isinstance(e.request, ApprovalRequest):
        d = e.request.decision
        details = {"status": e.request.status, "decided_by": d.decided_by if d else None}
    return error_response(status, e.code, e.message, details)


def http_error(request: web.Request, e: Exception) -> web.Response:
    """The one place errors become HTTP responses; nothing else builds an error body. An
    `HTTPException` below 400 (a redirect) is not an error: it is raised again."""
    return mapped_error(e, request.method, request.path, request.app.get(METRICS))


def mapped_error(e: Exception, method: str, path: str, metrics: Metrics | None) -> web.Response:
    """`http_error` for a request that is gone from aiohttp (a detached long-poll,
    bot/http/parked.py): its method and path, the metrics to count a store error in."""
    if isinstance(e, web.HTTPException):
        if e.status < 400:
            raise e
        code = _HTTP_CODES.get(e.status, "http_error")
        message = f"no route for {method} {path}" if e.status == 404 else e.reason
        kept = {k: v for k, v in e.headers.items() if k.lower() in ("allow", "retry-after")}
        return error_response(e.status, code, message, headers=kept or None)
    if isinstance(e, APIError):
        return error_response(e.status, e.code, e.message, e.details, e.headers)
    if isinstance(e, BodyTimeout):  # the connection closes after this answer
        return error_response(408, "body_timeout", str(e))
    if isinstance(e, ApprovalError):
        log.info("api refused method=%s path=%s code=%s", method, path, e.code)
        if isinstance(e, StoreUnavailable) and metrics is not None:
            metrics.redis_errors.labels(component="api").inc()
        return _approval_error(e)
    if isinstance(e, ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}"
            for err in e.errors()[:5]
        )
        return error_response(
            422, "invalid_request", f"invalid request: {problems}", error_details(e)
        )
    if isinstance(e, (RedisConnectionError, RedisTimeoutError)):
        log.warning("api store unavailable path=%s error=%r", path, e)
        if metrics is not None:
            metrics.redis_errors.labels(component="api").inc()
        return error_response(503, "store_unavailable", "Redis is unreachable; try again")
    log.error("api internal error method=%s path=%s", method, path, exc_info=e)
    return error_response(500, "internal", "internal server error")


#: A handler marked so (`maps_own_errors`) answers its errors through `http_error` itself.
_OWN_ERRORS = "_maps_own_errors"


def maps_own_errors(handler: Callable[..., Awaitable[web.StreamResponse]]) -> Any:
    """Mark a handler that catches its own errors and answers them with `http_error`:
    `error_middleware` passes it through without a coroutine frame of its own (a parked
    long-poll holds every frame on its await chain for as long as it waits)."""
    setattr(handler, _OWN_ERRORS, True)
    return handler


@web.middleware
def error_middleware(request: web.Request, handler: Handler) -> Awaitable[web.StreamResponse]:
    """`http_error` around every handler; a `maps_own_errors` handler's coroutine is returned
    as it is (this is a plain function, so it then adds no frame to the handler's await)."""
    if getattr(handler, _OWN_ERRORS, False):
        return handler(request)
    return _mapped(request, handler)


async def _mapped(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Exception as e:
        return http_error(request, e)


# -- request helpers ------------------------------------------------------------------------


async def read_json(
    request: web.Request,
    limit: int,
    *,
    required: bool = True,
    max_depth: int = MAX_JSON_DEPTH,
) -> Any:
    """The JSON body, read at most `limit` bytes: 413 past it, 400 if it is not JSON (or empty
    when `required`; an empty optional body is None), 422 if it nests deeper than
    `max_depth`, 415 if it is compressed (read plain only: `bot/http/connections.py`). Lone
    surrogates in strings are read as U+FFFD (`approvals.integrations.hook_input`)."""
    encoding = content_encoding(request)
    if encoding is not None:
        raise APIError(
            415,
            "unsupported_encoding",
            f"the request body is compressed (Content-Encoding: {encoding}); send it uncompressed",
        )
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit)
    body = bytearray()
    async for chunk in request.content.iter_chunked(_CHUNK):
        body.extend(chunk)
        if len(body) > limit:
            raise _too_large(limit)
    if not body.strip():
        if required:
            raise APIError(400, "invalid_json", "request body is empty; send a JSON object")
        return None
    try:
        data = loads(bytes(body))  # lone surrogates read as U+FFFD, as Node writes them
    except ValueError as e:
        raise APIError(400, "invalid_json", f"request body is not valid JSON: {e}") from e
    if json_depth(data) > max_depth:  # the store could not store it
        raise InvalidRequest(f"request body is nested deeper than {max_depth} levels")
    return data


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body is over the limit of {limit} bytes")


def _query_value(request: web.Request, name: str) -> str | None:
    """The first value of query parameter `name`, parsed from the raw request target each time:
    `request.query` would keep a parsed copy on the request (a parked long-poll keeps it)."""
    _, _, query = request.raw_path.partition("?")
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == name:
            return value
    return None


def _number(request: web.Request, name: str, default: float, low: float, high: float) -> float:
    raw = _query_value(request, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and low <= value <= high):
        message = f"query parameter {name!r} must be a number from {low:g} to {high:g}"
        raise APIError(
            422,
            "invalid_request",
            message,
            [{"loc": ["query", name], "msg": message, "type": "value_error"}],
        )
    return value


class ApprovalsAPI:
    """The handlers, bound to one `BotContext`."""

    def __init__(self, ctx: BotContext) -> None:
        self.ctx = ctx
        self._tokens: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        self._principals = Principals(())
        self.document = openapi_document()
        # Long-polls parked outside aiohttp (bot/http/parked.py), answered by `_answer`.
        self.parking = Parking(
            ctx.waiter,
            ctx.metrics.long_polls.labels(via="api"),
            self._answer,
            self._error,
            keep_alive=lambda: not ctx.draining.is_set(),
        )

    @property
    def principals(self) -> Principals:
        """The principals of the tokens `ctx` holds now (rebuilt when they change)."""
        tokens = (self.ctx.api_tokens, self.ctx.admin_tokens)
        if tokens != self._tokens:
            self._principals, self._tokens = Principals(*tokens), tokens
        return self._principals

    def guard(self, handler: Handler) -> Handler:
        """Bearer-token check in front of `handler` (401 none, 403 wrong, 503 none configured)."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            self.authorize(request)
            with self.ctx.api_calls:  # the dispatcher's Slack calls wait for these
                return await handler(request)

        return guarded

    def authorize(self, request: web.Request) -> Principal:
        """The caller's principal, from its bearer token (also kept on the request)."""
        principal = self.authenticate(request)
        request[PRINCIPAL] = principal
        return principal

    def authenticate(self, request: web.Request) -> Principal:
        """The caller's principal, from its bearer token (401 none, 403 wrong, 503 none
        configured)."""
        try:
            principal = self.principals.authenticate(request.headers.get("Authorization"))
        except AuthProblem as e:
            headers = (
                {"WWW-Authenticate": 'Bearer realm="approval-bot"'} if e.status == 401 else None
            )
            raise APIError(e.status, e.code, e.message, headers=headers) from None
        trust(request)  # the last connection to close for room (bot/http/connections.py)
        return principal

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(self.document)

    async def _own(self, request: web.Request, request_id: str) -> ApprovalRequest:
        """The request, if the caller may see it; another principal's is `NotFound` (404),
        exactly like an unknown id, so ids of others' requests reveal nothing."""
        found = await self.ctx.store.get(request_id)
        return _visible(request[PRINCIPAL], request_id, found)

    async def create(self, request: web.Request) -> web.Response:
        principal: Principal = request[PRINCIPAL]
        if self.ctx.draining.is_set():
            return shutting_down_response()
        body = CreateApproval.model_validate(await read_json(request, self.ctx.max_body_bytes))
        result = await self.ctx.service.create(
            body.event(),
            body.config(),
            principal=principal.name,
            route=body.route,
            metadata=body.metadata,
            callback=body.callback,
            notify=body.notify,
        )
        created, is_new = result.request, result.created
        m = self.ctx.metrics
        m.api_requests.labels(
            outcome="created" if is_new else "reused",
            route=m.route(created.route),
            principal=m.principal(principal.name),
        ).inc()
        return _approval_response(
            created,
            status=201 if is_new else 200,
            headers={"Location": f"/v1/approvals/{created.id}"},
        )

    @maps_own_errors
    async def get(self, request: web.Request) -> web.StreamResponse:
        """`GET /v1/approvals/{id}[?wait=N]`. The bearer token is checked here (not by `guard`)
        and errors answered here (`http_error`, not through `error_middleware`): one coroutine
        frame on a long-poll's await chain instead of three while it reads."""
        try:
            principal = self.authenticate(request)
            request_id = request.match_info["id"]
            wait = _number(request, "wait", 0.0, 0.0, 24 * 3600.0)
            wait = min(wait, self.ctx.max_wait_seconds)
            waiter = self.ctx.waiter
            if wait <= 0:
                found = _visible(principal, request_id, await self.ctx.store.get(request_id))
                return _approval_response(found)
            if self.ctx.draining.is_set():
                return shutting_down_response()
            if not waiter.started:
                await waiter.start()
            # Watch first, then read: a decision published from now on wakes the watch, one
            # made before is in this read (which also checks the caller may see the request).
            # `Bot.drain` fails the watch with `Drained`; the client closing its connection
            # ends it (`CallerGone`, or `Parked.connection_lost`).
            try:
                watch = waiter.watch(request_id, wait, interruptible=True)
            except Drained:
                return shutting_down_response()
            parked_here = True
            try:
                # Read through the Waiter (batched on its own connection), not the shared pool:
                # a burst of long-polls arriving at once keeps Redis connections constant.
                found = _visible(principal, request_id, await waiter.read(request_id))
                if not found.is_pending:
                    return _approval_response(found)
                del found
                gauge = self.ctx.metrics.long_polls.labels(via="api")
                gauge.inc()
                # Parked, a long-poll is its socket held by a small protocol (bot/http/parked.py)
                # and its `Watch` in the Waiter: aiohttp forgets the connection, this handler
                # returns (its response is never written) and `_answer` says what the
                # connection is answered once the watch is done.
                if self.parking.park(request, watch):
                    parked_here = False
                    return web.Response(status=204)  # to aiohttp, which has no socket for it
                # Not detachable (bot/http/parked.py says when): parked here, inside aiohttp.
                waiter.follow(watch, request.transport)
                try:
                    await watch
                except Exception:  # `_answer` reads the outcome from the watch
                    pass
                finally:
                    gauge.dec()
            finally:
                if parked_here:
                    waiter.unwatch(watch)
            answer = self._answer(watch)
            if answer is None:  # nobody reads this
                return web.Response(status=204)
            return answer if isinstance(answer, web.Response) else await answer
        except Exception as e:
            return http_error(request, e)

    def _answer(self, watch: Watch) -> Answer:
        """What a parked long-poll answers once its watch is done (not cancelled), parked in
        aiohttp or detached (`Parking`): the request as decided; after the wait, as it is then
        (read again); 503 `shutting_down` on a drain; the API's error for anything else; None
        once the client is gone."""
        try:
            decided = watch.result()
        except ApprovalTimeout:  # long-polls parked together time out together: batched
            return self._after_wait(watch.request_id)
        except Drained:
            return shutting_down_response()
        except CallerGone:
            return None
        except Exception as e:
            return self._error(e, watch.request_id)
        try:
            self.ctx.metrics.resumed(decided, "api")
            return _approval_response(decided)
        except Exception as e:
            return self._error(e, watch.request_id)

    async def _after_wait(self, request_id: str) -> web.Response:
        try:
            return _approval_response(await self.ctx.waiter.read(request_id))
        except Exception as e:
            return self._error(e, request_id)

    def _error(self, e: Exception, request_id: str) -> web.Response:
        return mapped_error(e, "GET", f"/v1/approvals/{request_id}", self.ctx.metrics)

    async def cancel(self, request: web.Request) -> web.Response:
        """Withdraw a pending request, attributed to the caller's principal (never to a name
        the caller writes)."""
        principal: Principal = request[PRINCIPAL]
        request_id = request.match_info["id"]
        body = CancelApproval.model_validate(
            await read_json(request, self.ctx.max_body_bytes, required=False) or {}
        )
        # Only the caller's own request (an admin's: any): another's is a 404 like an unknown
        # id, checked inside the compare-and-set, so no read comes first.
        result = await self.ctx.service.cancel(
            request_id,
            by=principal.name,
            reason=body.reason,
            via="api",
            owner=None if principal.admin else principal.name,
        )
        if result.status != "decided":
            raise AlreadyDecided(
                f"request {request_id} is already {result.request.status}", request=result.request
            )
        return _approval_response(result.request)

    async def cancel_call(self, request: web.Request) -> web.Response:
        """Withdraw the request the caller's `call_id` made, if any (a create cut off in
        flight): `{"approval": …}` as it stands afterwards, or `{"approval": null}`. The
        call id is looked up under the caller's own principal only."""
        principal: Principal = request[PRINCIPAL]
        body = CancelCall.model_validate(await read_json(request, self.ctx.max_body_bytes))
        result = await self.ctx.service.cancel_call(
            body.call_id, principal=principal.name, by=principal.name, reason=body.reason
        )
        found = None if result is None else approval_object(result.request)
        return web.json_response({"approval": found})


def _approval_response(
    request: ApprovalRequest, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """The approval object of `request`, answered as JSON."""
    return web.json_response(text=approval_json(request), status=status, headers=headers)


def _visible(principal: Principal, request_id: str, found: ApprovalRequest) -> ApprovalRequest:
    """`found`, if `principal` may see it; another principal's is `NotFound` (404), exactly
    like an unknown id, so ids of others' requests reveal nothing."""
    if not principal.may_see(found.principal):
        raise NotFound(f"no approval request with id {request_id!r}")
    return found


def add_routes(app: web.Application, ctx: BotContext) -> ApprovalsAPI:
    """Register the agent API on `app` (which should carry `error_middleware`)."""
    api = ApprovalsAPI(ctx)
    app[PARKING] = api.parking
    app.router.add_get("/openapi.json", api.openapi)
    app.router.add_post("/v1/approvals", api.guard(api.create))
    app.router.add_get("/v1/approvals/{id}", api.get)  # checks the token, maps its errors
    app.router.add_post("/v1/approvals/{id}/cancel", api.guard(api.cancel))
    app.router.add_post("/v1/calls/cancel", api.guard(api.cancel_call))
    # Not guarded: the hook answers bad credentials with a deny Claude Code reads (HTTP 200).
    for dialect in DIALECTS:  # /hooks/claude-code (Claude Code's http hook), /hooks/codex
        hook = AgentHook(ctx, lambda: api.principals, dialect)
        app.router.add_post(f"/hooks/{dialect}", hook.handle)
    return api
