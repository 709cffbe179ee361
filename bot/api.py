"""The agent HTTP API: `/v1/approvals`, the Claude Code http hook, `/openapi.json`, HTTP errors.

    POST /v1/approvals                create (idempotent on call_id): 201, or 200 if it existed
    GET  /v1/approvals/{id}?wait=N    the approval object; long-polls up to N s (capped)
    POST /v1/approvals/{id}/cancel    withdraw a pending request (409 once decided)
    POST /hooks/claude-code           Claude Code `http` hook: hook JSON in, hook output out
    GET  /openapi.json                OpenAPI 3.1, generated from the models (`bot.schemas`)

`/v1/*` and `/hooks/*` need `Authorization: Bearer <token>` (one of
`ctx.api_tokens`); with no token configured they answer 503 — never open by
default. Every error is `{"error": {"code", "message", "details"?}}`, mapped
from the `approvals.errors` tree in one place, `error_middleware`.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from approvals.errors import (
    AlreadyDecided,
    ApprovalError,
    ApprovalTimeout,
    InvalidRequest,
    PayloadTooLarge,
    http_status,
)
from approvals.integrations.coding_agents import (
    DEFAULT_HOOK_TIMEOUT,
    ON_TIMEOUT,
    HookEvent,
    OnTimeout,
    answer_hook,
    error_details,
    hook_metadata,
    output_for_failure,
    parse_hook_input,
    time_budget,
)
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest
from bot.context import BotContext
from bot.schemas import (
    MAX_HOOK_TIMEOUT,
    CancelApproval,
    CreateApproval,
    approval_object,
    openapi_document,
)

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_CHUNK = 64 * 1024
#: Deepest nesting of objects and arrays a body may have (Redis records are serialised JSON).
MAX_JSON_DEPTH = 64
_HOOK_EVENT = re.compile(rb'"hook_event_name"\s*:\s*"(PreToolUse|PermissionRequest)"')


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


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The one place errors become HTTP responses; nothing else builds an error body."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = _HTTP_CODES.get(e.status, "http_error")
        message = f"no route for {request.method} {request.path}" if e.status == 404 else e.reason
        kept = {k: v for k, v in e.headers.items() if k.lower() in ("allow", "retry-after")}
        return error_response(e.status, code, message, headers=kept or None)
    except APIError as e:
        return error_response(e.status, e.code, e.message, e.details, e.headers)
    except ApprovalError as e:
        log.info("api refused method=%s path=%s code=%s", request.method, request.path, e.code)
        return _approval_error(e)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}"
            for err in e.errors()[:5]
        )
        return error_response(
            422, "invalid_request", f"invalid request: {problems}", error_details(e)
        )
    except (RedisConnectionError, RedisTimeoutError) as e:
        log.warning("api store unavailable path=%s error=%r", request.path, e)
        return error_response(503, "store_unavailable", "Redis is unreachable; try again")
    except Exception:
        log.exception("api internal error method=%s path=%s", request.method, request.path)
        return error_response(500, "internal", "internal server error")


# -- request helpers ------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class BodyTooLarge(PayloadTooLarge):
    """A body over the size limit; `head`: its first bytes, when asked for (a hook's event)."""

    def __init__(self, limit: int, head: bytes = b"") -> None:
        super().__init__(f"request body is over the limit of {limit} bytes")
        self.head = head


def json_depth(value: Any) -> int:
    """How deeply objects and arrays nest in `value` (a scalar is 0)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth + 1)
            stack.extend(
                (v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


async def read_json(
    request: web.Request,
    limit: int,
    *,
    required: bool = True,
    keep_head: bool = False,
    max_depth: int | None = MAX_JSON_DEPTH,
) -> Any:
    """The JSON body, read at most `limit` bytes: 413 past it (`keep_head`: with its first
    bytes), 400 if it is not JSON (or empty when `required`; an empty optional body is None),
    422 if it nests deeper than `max_depth`."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge(limit, await request.content.read(_CHUNK) if keep_head else b"")
    body = bytearray()
    async for chunk in request.content.iter_chunked(_CHUNK):
        body.extend(chunk)
        if len(body) > limit:
            raise BodyTooLarge(limit, bytes(body[:_CHUNK]) if keep_head else b"")
    if not body.strip():
        if required:
            raise APIError(400, "invalid_json", "request body is empty; send a JSON object")
        return None
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
        json.dumps(data, ensure_ascii=False).encode("utf-8")  # lone surrogates cannot be stored
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeError are ValueErrors
        raise APIError(400, "invalid_json", f"request body is not valid JSON: {e}") from e
    if max_depth is not None and json_depth(data) > max_depth:  # the store could not store it
        raise InvalidRequest(f"request body is nested deeper than {max_depth} levels")
    return data


def _number(request: web.Request, name: str, default: float, low: float, high: float) -> float:
    raw = request.query.get(name)
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
        self.document = openapi_document()

    def guard(self, handler: Handler) -> Handler:
        """Bearer-token check in front of `handler` (401 none, 403 wrong, 503 none configured)."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            self.authorize(request)
            return await handler(request)

        return guarded

    def authorize(self, request: web.Request) -> None:
        tokens = self.ctx.api_tokens
        if not tokens:
            raise APIError(
                503,
                "api_disabled",
                "the HTTP API is disabled: set "
                "APPROVALS_API_TOKENS to one or more comma-separated bearer tokens",
            )
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.strip().partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            raise APIError(
                401,
                "unauthorized",
                "send 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": 'Bearer realm="approval-bot"'},
            )
        presented = given.encode("utf-8", "replace")
        matched = False
        for token in tokens:  # every token compared, in constant time
            matched |= hmac.compare_digest(presented, token.encode("utf-8", "replace"))
        if not matched:
            raise APIError(403, "forbidden", "the bearer token is not valid for this API")

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(self.document)

    async def create(self, request: web.Request) -> web.Response:
        body = CreateApproval.model_validate(await read_json(request, self.ctx.max_body_bytes))
        result = await self.ctx.service.create(
            body.event(),
            body.config(),
            requester=body.requester,
            channel=body.channel,
            metadata=body.metadata,
            callback=body.callback,
        )
        created, is_new = result.request, result.created
        self.ctx.count("api_created" if is_new else "api_reused")
        return web.json_response(
            approval_object(created),
            status=201 if is_new else 200,
            headers={"Location": f"/v1/approvals/{created.id}"},
        )

    async def get(self, request: web.Request) -> web.Response:
        request_id = request.match_info["id"]
        wait = _number(request, "wait", 0.0, 0.0, 24 * 3600.0)
        wait = min(wait, self.ctx.max_wait_seconds)
        if wait > 0:
            try:
                found = await self.ctx.waiter.wait(request_id, wait)
            except ApprovalTimeout:
                found = await self.ctx.store.get(request_id)
        else:
            found = await self.ctx.store.get(request_id)
        return web.json_response(approval_object(found))

    async def cancel(self, request: web.Request) -> web.Response:
        request_id = request.match_info["id"]
        body = CancelApproval.model_validate(
            await read_json(request, self.ctx.max_body_bytes, required=False) or {}
        )
        result = await self.ctx.service.cancel(
            request_id, by=body.by, reason=body.reason, via="api"
        )
        if result.status != "decided":
            raise AlreadyDecided(
                f"request {request_id} is already {result.request.status}", request=result.request
            )
        return web.json_response(approval_object(result.request))

    async def claude_code_hook(self, request: web.Request) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        started = loop.time()
        hook_timeout = _number(request, "timeout", DEFAULT_HOOK_TIMEOUT, 1.0, MAX_HOOK_TIMEOUT)
        on_timeout = request.query.get("on_timeout", "deny")
        if on_timeout not in ON_TIMEOUT:
            message = "query parameter 'on_timeout' must be 'deny', 'ask' or 'defer'"
            raise APIError(
                422,
                "invalid_request",
                message,
                [{"loc": ["query", "on_timeout"], "msg": message, "type": "enum"}],
            )
        try:
            # Too deep for the store: `answer_hook` denies it like any call it cannot submit.
            payload = await read_json(
                request, self.ctx.max_body_bytes, keep_head=True, max_depth=None
            )
        except BodyTooLarge as e:
            # Claude Code runs the tool when an http hook answers non-2xx: deny it instead,
            # shaped for the event the body names.
            found = _HOOK_EVENT.search(e.head)
            event: HookEvent = (
                "PermissionRequest" if found and found[1] == b"PermissionRequest" else "PreToolUse"
            )
            log.warning("hook input too large limit=%d event=%s", self.ctx.max_body_bytes, event)
            return web.json_response(output_for_failure(event, f"too large to review: {e.message}"))
        parse_hook_input(payload)  # a bad payload is a 422 before anything is stored
        metadata = hook_metadata(payload)
        # The request's deadline is when the hook stops waiting, so reviewers see the real one;
        # with defer the agent comes back for the answer later: the route's deadline.
        deferring = on_timeout == "defer"
        config = ApprovalConfig() if deferring else ApprovalConfig(deadline_seconds=hook_timeout)

        async def submit(event: ApprovalEvent) -> ApprovalRequest:
            return await self.ctx.service.submit(event, config, metadata=metadata)

        async def cancel(request_id: str, reason: str) -> ApprovalRequest:
            result = await self.ctx.service.cancel(
                request_id, by="claude-code hook", reason=reason, via="hook"
            )
            return result.request

        budget = time_budget(hook_timeout) - (loop.time() - started)
        mode: OnTimeout = next(m for m in ON_TIMEOUT if m == on_timeout)
        output = await answer_hook(
            "claude-code",
            payload,
            submit,
            self.ctx.waiter.wait,
            timeout=budget,
            on_timeout=mode,
            cancel=cancel,
        )
        self.ctx.count("hook_calls")
        if output is None:
            return web.Response(status=204)  # "2xx with an empty body": no decision
        return web.json_response(output)


def add_routes(app: web.Application, ctx: BotContext) -> ApprovalsAPI:
    """Register the agent API on `app` (which should carry `error_middleware`)."""
    api = ApprovalsAPI(ctx)
    app.router.add_get("/openapi.json", api.openapi)
    app.router.add_post("/v1/approvals", api.guard(api.create))
    app.router.add_get("/v1/approvals/{id}", api.guard(api.get))
    app.router.add_post("/v1/approvals/{id}/cancel", api.guard(api.cancel))
    app.router.add_post("/hooks/claude-code", api.guard(api.claude_code_hook))
    return api
