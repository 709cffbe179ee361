"""The approvals MCP server: `permission_prompt`, `request_approval` and `ask_human`.

One server definition, two transports: stdio (`approval-bot mcp`, reaching the
bot through `ApprovalClient`: `APPROVALS_URL` + `APPROVALS_TOKEN`, or Redis)
and Streamable HTTP at `/mcp` inside `serve` (`bot/mcp/http.py`). Every call
becomes an approval request on the same store, policy and Slack flow as the
other entries, so an `allow`/`deny` rule answers at once.

- `permission_prompt` is the tool for Claude Code's `--permission-prompt-tool`
  (headless `claude -p`). Input `{tool_name, input, tool_use_id}`; its text
  result is the JSON Claude Code parses: `{"behavior": "allow", "updatedInput":
  {...}}` (the reviewer's edited arguments when they edited, else the arguments
  the reviewer saw) or `{"behavior": "deny", "message": "..."}`. Every failure
  (bad input, the service down, a timeout) is that deny: Claude Code reads it.
  A deny's message names the risks the call was found to carry (the allow is only
  Claude Code's two fields: nothing else is known to be read there).
- `request_approval` asks about a named action (kind approval / choice / input,
  options, sensitivity, deadline) and returns the decision as JSON, with the risks found
  (`risks: [{code, text}]`, as reviewers were shown them).
- `ask_human` asks the route's reviewers a free-text question; returns the answer.

While a call waits, progress notifications go out every `progress_interval`
seconds; a cancelled call withdraws its request (`bot/mcp/reviewer_wait.py`).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from approvals.approval import Approval
from approvals.client import ApprovalClient
from approvals.errors import ApprovalError
from approvals.integrations.coding_agents import decision_text, event_from_claude
from approvals.models import (
    MAX_DEADLINE_SECONDS,
    MAX_REASON,
    MAX_TEXT,
    ApprovalConfig,
    ApprovalEvent,
    CallContext,
    Kind,
    Sensitivity,
)
from approvals.webhooks import Callback
from bot.mcp.reviewer_wait import WaitOptions, await_decision, submit_or_withdraw

log = logging.getLogger(__name__)

SERVER_NAME = "approvals"
PERMISSION_PROMPT = "permission_prompt"
REQUEST_APPROVAL = "request_approval"
ASK_HUMAN = "ask_human"

#: Returns the `ApprovalClient` a call works with (stdio: one; HTTP: the caller's principal's).
ClientFor = Callable[[ServerRequestContext[Any, Any]], ApprovalClient]


@dataclass(frozen=True)
class ServerOptions:
    """What every call of this server carries: who asks, and how it waits."""

    agent: str = "mcp"
    session_id: str | None = None
    #: The policy route to ask on when the call names none (rules still win).
    route: str | None = None
    wait: WaitOptions = field(default_factory=WaitOptions)


# -- tool inputs ----------------------------------------------------------------------------


class PermissionPromptInput(BaseModel):
    """Claude Code's `--permission-prompt-tool` input."""

    model_config = ConfigDict(extra="ignore")

    tool_name: str = Field(min_length=1, max_length=200)
    input: dict[str, Any]
    tool_use_id: str | None = Field(default=None, max_length=200)


class RequestApprovalInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)
    kind: Kind = "approval"
    options: list[str] | None = None
    sensitivity: Sensitivity = "low"
    deadline_seconds: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_SECONDS)
    prompt: str | None = Field(default=None, min_length=1, max_length=MAX_TEXT)
    call_id: str | None = Field(default=None, min_length=1, max_length=200)
    route: str | None = Field(default=None, min_length=1, max_length=100)
    #: A signed webhook once decided (`{url, events?, metadata?}`; the policy must allow the host).
    callback: Callback | None = None
    #: Why you want to take the action, in your own words: shown to the reviewer.
    reason: str | None = Field(default=None, max_length=MAX_REASON)


class AskHumanInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=MAX_TEXT)
    options: list[str] | None = None
    deadline_seconds: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_SECONDS)
    call_id: str | None = Field(default=None, min_length=1, max_length=200)
    route: str | None = Field(default=None, min_length=1, max_length=100)


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return schema


TOOLS: tuple[types.Tool, ...] = (
    types.Tool(
        name=PERMISSION_PROMPT,
        title="Ask a reviewer in Slack for permission",
        description=(
            "Claude Code --permission-prompt-tool: asks a reviewer in Slack whether "
            "`tool_name` may run with `input`. Returns JSON text: "
            '{"behavior": "allow", "updatedInput": {...}} or '
            '{"behavior": "deny", "message": "..."}.'
        ),
        input_schema=_schema(PermissionPromptInput),
    ),
    types.Tool(
        name=REQUEST_APPROVAL,
        title="Request approval in Slack",
        description=(
            "Ask a human reviewer in Slack to approve an action before you take it. Waits for "
            "the decision. kind: approval (yes/no), choice (pick one of `options`), input "
            "(free text). Give `reason`: why you want to take it (the reviewer reads it). "
            "Returns JSON: approved, status, reason, input, selection, "
            "edited_arguments, question, summary. Do not take the action unless approved is "
            "true. With status `asked`, a reviewer asked `question` instead of deciding: "
            "answer it in `reason` and call this tool again with the same action."
        ),
        input_schema=_schema(RequestApprovalInput),
    ),
    types.Tool(
        name=ASK_HUMAN,
        title="Ask a human in Slack",
        description=(
            "Ask the reviewers in Slack a question and wait for their answer (free text, or "
            "one of `options`). Returns JSON: answered, answer, reason."
        ),
        input_schema=_schema(AskHumanInput),
    ),
)


# -- results --------------------------------------------------------------------------------


def text_result(payload: Mapping[str, Any], *, is_error: bool = False) -> types.CallToolResult:
    text = json.dumps(payload, ensure_ascii=False, default=str)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], is_error=is_error
    )


def _edited(approval: Approval) -> dict[str, Any] | None:
    """The reviewer's edited arguments, when the approval object carries them."""
    edited = getattr(approval, "edited_arguments", None)
    return edited if isinstance(edited, dict) else None


def describe(approval: Approval | None) -> str:
    """How the request ended, in one line (the hooks' wording); None: it timed out."""
    if approval is None:
        return "No approval decision in time (approval timeout); denied by default."
    return decision_text(approval.to_request())


def permission_allow(updated_input: dict[str, Any]) -> types.CallToolResult:
    return text_result({"behavior": "allow", "updatedInput": updated_input})


def permission_deny(message: str) -> types.CallToolResult:
    return text_result({"behavior": "deny", "message": message})


def decision_payload(approval: Approval | None) -> dict[str, Any]:
    """`request_approval`'s answer."""
    if approval is None:
        return {"approved": False, "status": "expired", "reason": describe(None)}
    payload: dict[str, Any] = {
        "approved": approval.approved,
        "status": approval.status,
        "id": approval.id,
        "reason": approval.reason if not approval.approved else None,
        "input": approval.input,
        "selection": approval.selection,
        "edited_arguments": _edited(approval),
        "decided_by": approval.decided_by,
        # Status `asked`: the reviewer's question; the summary says how to answer it.
        "question": approval.question,
        "summary": describe(approval),
        # What the call was found to risk, as its reviewers were shown it.
        "risks": [risk.model_dump() for risk in approval.risks],
    }
    return {k: v for k, v in payload.items() if v is not None}


def risks_note(approval: Approval | None) -> str:
    """A line for a deny's message: `Risks found: code: text; …` (empty without any)."""
    if approval is None or not approval.risks:
        return ""
    return "\nRisks found: " + "; ".join(f"{r.code}: {r.text}" for r in approval.risks)


def failure_payload(message: str) -> dict[str, Any]:
    return {"approved": False, "status": "error", "reason": f"Approval service error: {message}"}


def _problems(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
        for err in error.errors()[:5]
    )


def _message(error: Exception) -> str:
    if isinstance(error, ApprovalError):
        return error.message
    if isinstance(error, ValidationError):
        return f"invalid arguments: {_problems(error)}"
    return type(error).__name__


# -- the server -----------------------------------------------------------------------------


class ApprovalsServer:
    """The three tools over an `ApprovalClient`; `server` is the SDK's lowlevel `Server`."""

    def __init__(self, client_for: ClientFor, options: ServerOptions | None = None) -> None:
        self.client_for = client_for
        self.options = options or ServerOptions()
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version="1",
            instructions=(
                "Ask people in Slack before doing something risky: request_approval for an "
                "action, ask_human for a question. permission_prompt is for Claude Code's "
                "--permission-prompt-tool."
            ),
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(TOOLS))

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        handlers: dict[str, Callable[..., Awaitable[types.CallToolResult]]] = {
            PERMISSION_PROMPT: self.permission_prompt,
            REQUEST_APPROVAL: self.request_approval,
            ASK_HUMAN: self.ask_human,
        }
        handler = handlers.get(params.name)
        if handler is None:
            known = ", ".join(handlers)
            return text_result(
                failure_payload(f"unknown tool {params.name!r}; this server has {known}"),
                is_error=True,
            )
        return await handler(ctx, dict(params.arguments or {}))

    async def _ask(
        self,
        ctx: ServerRequestContext[Any, Any],
        event: ApprovalEvent,
        config: ApprovalConfig,
        tool: str,
        route: str | None = None,
        callback: Callback | None = None,
    ) -> Approval | None:
        """Submit, then wait with progress; None when no decision came in time."""
        client = self.client_for(ctx)
        if event.call_id is None:  # one to find the request by if the submit is cut off
            event = event.model_copy(update={"call_id": f"mcp:{uuid.uuid4().hex}"})
        asked = event
        approval = await submit_or_withdraw(
            client,
            asked,
            lambda: client.submit(
                asked,
                config,
                route=route or self.options.route,
                metadata={"via": "mcp", "mcp_tool": tool},
                callback=callback,
            ),
        )
        log.info("mcp %s id=%s status=%s", tool, approval.id, approval.status)

        async def progress(done: float, message: str) -> None:
            await ctx.session.report_progress(done, None, message)

        return await await_decision(client, approval, progress, self.options.wait)

    async def permission_prompt(
        self, ctx: ServerRequestContext[Any, Any], arguments: dict[str, Any]
    ) -> types.CallToolResult:
        try:
            args = PermissionPromptInput.model_validate(arguments)
            hook = {
                "hook_event_name": "PermissionRequest",
                "tool_name": args.tool_name,
                "tool_input": args.input,
                "tool_use_id": args.tool_use_id,
                "session_id": self.options.session_id,
            }
            event = event_from_claude(hook)
            approval = await self._ask(ctx, event, ApprovalConfig(), PERMISSION_PROMPT)
        except Exception as e:  # fail closed: Claude Code reads a deny
            log.warning("permission_prompt failed error=%r", e)
            return permission_deny(f"Approval service error: {_message(e)}")
        if approval is not None and approval.approved:
            # What the reviewer saw (or edited), never arguments nobody approved.
            return permission_allow(_edited(approval) or approval.arguments)
        return permission_deny(describe(approval) + risks_note(approval))

    async def request_approval(
        self, ctx: ServerRequestContext[Any, Any], arguments: dict[str, Any]
    ) -> types.CallToolResult:
        try:
            args = RequestApprovalInput.model_validate(arguments)
            config = ApprovalConfig(
                kind=args.kind,
                sensitivity=args.sensitivity,
                options=tuple(args.options) if args.options else None,
                deadline_seconds=args.deadline_seconds,
                prompt=args.prompt,
            )
            event = self._event(args.action, args.arguments, args.call_id)
            reason = (args.reason or "").strip()
            if reason:
                event = event.model_copy(update={"context": CallContext(reason=reason)})
            approval = await self._ask(
                ctx, event, config, REQUEST_APPROVAL, args.route, args.callback
            )
        except Exception as e:
            log.warning("request_approval failed error=%r", e)
            return text_result(failure_payload(_message(e)), is_error=True)
        return text_result(decision_payload(approval))

    async def ask_human(
        self, ctx: ServerRequestContext[Any, Any], arguments: dict[str, Any]
    ) -> types.CallToolResult:
        try:
            args = AskHumanInput.model_validate(arguments)
            kind: Literal["choice", "input"] = "choice" if args.options else "input"
            config = ApprovalConfig(
                kind=kind,
                options=tuple(args.options) if args.options else None,
                deadline_seconds=args.deadline_seconds,
                prompt=args.question,
            )
            event = self._event(ASK_HUMAN, {"question": args.question}, args.call_id)
            approval = await self._ask(ctx, event, config, ASK_HUMAN, args.route)
        except Exception as e:
            log.warning("ask_human failed error=%r", e)
            return text_result({"answered": False, **failure_payload(_message(e))}, is_error=True)
        if approval is not None and approval.approved:
            answer = approval.selection if kind == "choice" else approval.input
            return text_result(
                {"answered": True, "answer": answer, "answered_by": approval.decided_by}
            )
        return text_result({"answered": False, "reason": describe(approval)})

    def _event(self, tool: str, arguments: dict[str, Any], call_id: str | None) -> ApprovalEvent:
        return ApprovalEvent(
            tool_name=tool,
            arguments=arguments,
            call_id=call_id,
            session_id=self.options.session_id,
            agent=self.options.agent,
        )


async def run_stdio(client: ApprovalClient, options: ServerOptions | None = None) -> None:
    """`approval-bot mcp`: serve the tools on stdin/stdout until the client closes them."""
    from bot.mcp.stdio import repaired_stdio_server

    approvals = ApprovalsServer(lambda ctx: client, options)
    async with repaired_stdio_server() as (read, write):
        await approvals.server.run(read, write, approvals.server.create_initialization_options())
