"""`POST /hooks/claude-code`, Claude Code's `http` hook: always HTTP 200 with a decision it reads.

`POST /hooks/codex` is the same for Codex's hook JSON and output; the command hooks pass their
JSON on to these (`bot/agents/command_hook.py`). Any problem (credentials, a body that cannot
be read, a store outage, a timeout, a bug) is a deny with a reason that names it and no
internals; events the bot does not gate get `{}`. Query: `timeout` (the hook's, seconds;
default 600, clamped) and `on_timeout` (`deny`, `ask` or `defer`; anything else is `deny`).
Why: docs/ARCHITECTURE.md, "Hooks answer every call".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from approvals._internal.store.waiting import CallerGone
from approvals.integrations.coding_agents import (
    DEFAULT_HOOK_TIMEOUT,
    ON_TIMEOUT,
    Dialect,
    OnTimeout,
    answer_hook,
    for_dialect,
    hook_metadata,
    time_budget,
)
from approvals.integrations.hook_input import (
    MAX_HOOK_BODY_BYTES,
    HookBody,
    clamp_timeout,
    deny,
    read_hook_body,
    too_large,
)
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest
from bot.core.context import BotContext
from bot.core.shutdown import HOOK_DENY, Drained, unless_draining
from bot.http.connections import BodyTimeout, content_encoding, trust
from bot.http.principals import AuthProblem, Principal, Principals

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024


async def read_body(request: web.Request, limit: int = MAX_HOOK_BODY_BYTES) -> HookBody:
    """Read at most `limit` bytes of the body; never raises for what the client sent: a
    compressed body (the server reads bodies plain: `bot/http/connections.py`) or one that
    does not arrive in time is a `problem`, as one too large or not JSON."""
    encoding = content_encoding(request)
    if encoding is not None:
        return HookBody(
            None,
            None,
            f"the hook input is compressed (Content-Encoding: {encoding}); "
            "the bot reads it uncompressed only",
        )
    try:
        if request.content_length is not None and request.content_length > limit:
            return too_large(await request.content.read(_CHUNK), request.content_length, limit)
        body = bytearray()
        async for chunk in request.content.iter_chunked(_CHUNK):
            body.extend(chunk)
            if len(body) > limit:
                return too_large(bytes(body[:_CHUNK]), None, limit)
    except BodyTimeout as e:
        return HookBody(None, None, f"the hook input did not arrive in time ({e})")
    return read_hook_body(bytes(body), limit)


class AgentHook:
    """The handler for one agent's hook JSON (`dialect`), bound to one `BotContext` and the
    API's principals."""

    def __init__(
        self,
        ctx: BotContext,
        principals: Callable[[], Principals],
        dialect: Dialect = "claude-code",
    ) -> None:
        self.ctx = ctx
        self.principals = principals
        self.dialect: Dialect = dialect

    async def handle(self, request: web.Request) -> web.Response:
        shape: Any = "PreToolUse"
        problems: list[str] = []  # each in one plain line, for `PROBLEM_HEADER`
        try:
            # The token first: an authenticated connection is the last closed for room while
            # its body arrives and its call waits (bot/http/connections.py).
            caller = self.authenticate(request)
            body = await read_body(request)
            shape = body.shape
            output = await unless_draining(
                self.ctx.draining, self.answer(request, body, caller, problems.append)
            )
        except Drained:
            output = deny(shape, HOOK_DENY)  # fail closed: the agent reads why
            problems.append("the approval bot is restarting; denied")
        except asyncio.CancelledError:
            raise  # the client went away: nobody to answer
        except Exception:
            log.exception("hook endpoint failed")
            output = deny(shape, "Approval service error: internal error (see the bot's log)")
            problems.append("internal error in the approval bot (see its log); denied")
        output = for_dialect(self.dialect, output) or {}
        self.ctx.metrics.hook_calls.labels(decision=_decision(output)).inc()
        response = web.json_response(output)
        if problems:
            response.headers[PROBLEM_HEADER] = header_text("; ".join(problems))
        return response

    def authenticate(self, request: web.Request) -> Principal | AuthProblem:
        """The caller's principal (its connection trusted), or why it has none."""
        try:
            principal = self.principals().authenticate(request.headers.get("Authorization"))
        except AuthProblem as e:
            return e
        trust(request)
        return principal

    async def answer(
        self,
        request: web.Request,
        body: HookBody,
        caller: Principal | AuthProblem,
        report: Callable[[str], None],
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        if body.ungated:
            return {}  # not ours to decide: no decision
        if body.problem is not None or body.payload is None:
            log.info("hook input refused problem=%s", body.problem)
            report(f"{body.problem}; denied")
            return deny(body.shape, f"Approval service error: {body.problem}")
        if isinstance(caller, AuthProblem):
            log.info("hook refused code=%s", caller.code)
            report(f"{caller.message}; denied")
            return deny(body.shape, f"Approval service refused the hook: {caller.message}")
        principal = caller
        hook_timeout = clamp_timeout(request.query.get("timeout"), default=DEFAULT_HOOK_TIMEOUT)
        asked = request.query.get("on_timeout")
        on_timeout: OnTimeout = next((m for m in ON_TIMEOUT if m == asked), "deny")
        payload = body.payload
        try:
            metadata = hook_metadata(payload)
        except Exception:
            metadata = {}  # answer_hook denies input that does not validate
        deferring = on_timeout == "defer"
        budget = time_budget(hook_timeout) - (loop.time() - started)
        end = loop.time() + budget

        async def submit(event: ApprovalEvent) -> ApprovalRequest:
            # The request's deadline is when the hook stops waiting, so reviewers see the real
            # one and a request a failed withdrawal leaves behind expires as the hook gives up;
            # with defer the agent comes back for the answer later: the route's deadline.
            left = max(end - loop.time(), 0.05)
            config = ApprovalConfig() if deferring else ApprovalConfig(deadline_seconds=left)
            return await self.ctx.service.submit(
                event, config, principal=principal.name, metadata=metadata
            )

        async def cancel(request_id: str, reason: str) -> ApprovalRequest:
            result = await self.ctx.service.cancel(
                request_id, by=principal.name, reason=reason, via="hook"
            )
            return result.request

        async def cancel_call(call_id: str, reason: str) -> ApprovalRequest | None:
            result = await self.ctx.service.cancel_call(
                call_id, principal=principal.name, by=principal.name, reason=reason, via="hook"
            )
            return None if result is None else result.request

        async def wait(request_id: str, seconds: float) -> ApprovalRequest:
            try:
                decided = await self.ctx.waiter.wait(
                    request_id, seconds, transport=request.transport
                )
            except CallerGone:
                # The hook's connection closed (the agent gave up or was stopped): nobody
                # will read an answer. As a cancelled hook: `answer_hook` withdraws the
                # request, so no reviewer approves a call nobody waits for any more.
                log.info("hook caller went away id=%s", request_id)
                raise asyncio.CancelledError from None
            self.ctx.metrics.resumed(decided, "hook")
            return decided

        with self.ctx.metrics.parked("hook"):
            output = await answer_hook(
                self.dialect,
                payload,
                submit,
                wait,
                timeout=max(budget, 0.05),
                on_timeout=on_timeout,
                cancel=cancel,
                cancel_call=cancel_call,
                report=report,
            )
        return output or {}


#: Response header naming what went wrong, in one plain line (`approval-bot hook` prints it on
#: stderr; Claude Code ignores it): a refused token, bad input, no decision in time, ….
PROBLEM_HEADER = "X-Approval-Problem"


def header_text(text: str, limit: int = 1000) -> str:
    """`text` as a safe header value: one line, ASCII (others escaped), at most `limit`."""
    one_line = " ".join(text.split())
    return one_line.encode("ascii", "backslashreplace").decode("ascii")[:limit]


def _decision(output: dict[str, Any]) -> str:
    """allow / deny / ask / none: what a hook answer decided (a bounded metric label)."""
    specific = output.get("hookSpecificOutput") or {}
    found = specific.get("permissionDecision") or (specific.get("decision") or {}).get("behavior")
    found = found or output.get("decision")
    return found if found in ("allow", "deny", "ask", "block", "approve") else "none"
