"""`approval-bot mcp-proxy`: serve an upstream MCP server's tools, resources and prompts over
stdio (or Streamable HTTP with `--listen`), with every `tools/call` gated by the approvals
policy and Slack.

    client ──stdio or HTTP──> proxy ──stdio (a child process) or Streamable HTTP──> upstream

- `tools/call` becomes an approval request for `mcp__<server>__<tool>` (Claude
  Code's naming, so one policy serves both). A policy `allow`/`deny` answers at
  once; `ask` posts to Slack and waits, with progress notifications.
  Approved → the upstream is called once, with the reviewer's edited arguments
  if they edited (else the arguments the reviewer saw), and its result is
  returned unchanged. Denied, expired, cancelled, failed → a tool result with
  `isError: true` and the reason; the upstream is never called.
- `tools/list` is the upstream's, descriptions marked when `--mark-gated`.
- Resources, prompts and completions pass through as they are.
- Upstream notifications are relayed to the client; upstream progress for a
  forwarded call is relayed (offset so it keeps increasing); a cancelled call
  withdraws its request or, once forwarded, cancels the upstream call.
- The upstream (`bot/mcp/upstream.py`) gets a scrubbed environment (PATH, HOME, the
  locale, and what `--pass-env` names; never the approval, Slack or Redis settings), and
  this process is made non-dumpable first. When it exits, calls answer with an error
  naming that, and the proxy exits (status 1).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError

from approvals._internal.policy import Policy
from approvals.approval import Approval
from approvals.client import ApprovalClient
from approvals.errors import ApprovalError
from approvals.integrations.coding_agents import decision_text
from approvals.models import ApprovalConfig, ApprovalEvent
from bot.mcp.reviewer_wait import WaitOptions, await_decision
from bot.mcp.stdio import repaired_stdio_server
from bot.mcp.upstream import Upstream, UpstreamGone

log = logging.getLogger(__name__)

GATED_NOTE = "[approval-bot: calls need approval in Slack]"
DENIED_NOTE = "[approval-bot: calls are denied by policy]"
MAYBE_NOTE = "[approval-bot: calls may need approval in Slack]"
#: How long the proxy keeps serving after the upstream went away (answers in flight).
LINGER_SECONDS = 0.5

T = TypeVar("T")


@dataclass(frozen=True)
class Listen:
    """`--listen HOST:PORT`: serve the client over Streamable HTTP at /mcp, for callers with
    `Bearer <token>` only."""

    host: str
    port: int
    token: str = field(repr=False)


@dataclass(frozen=True)
class ProxyOptions:
    name: str
    route: str | None = None
    agent: str | None = None
    mark_gated: bool = False
    wait: WaitOptions = field(default_factory=WaitOptions)


def tool_name(server: str, tool: str) -> str:
    """The name policies and reviewers see: `mcp__<server>__<tool>`, as Claude Code names it."""
    return f"mcp__{server}__{tool}"


def error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


class GatingProxy:
    """One upstream connection served to one client, gating `tools/call`."""

    def __init__(self, upstream: Client, approvals: ApprovalClient, options: ProxyOptions) -> None:
        self.upstream = upstream
        self.approvals = approvals
        self.options = options
        #: Why the upstream cannot be used any more (it exited), once it cannot.
        self.gone: str | None = None
        self.lost = anyio.Event()
        self._downstream: ServerSession | None = None
        #: Each upstream tool's `inputSchema` as last listed: a reviewer's edit must pass it.
        self._schemas: dict[str, dict[str, Any]] = {}
        self.server = self._build_server()

    # -- the server ----------------------------------------------------------------------

    def _build_server(self) -> Server[Any]:
        caps = self.upstream.server_capabilities
        info = self.upstream.server_info
        handlers: dict[str, Any] = {}
        if caps.tools is not None:
            handlers.update(on_list_tools=self.list_tools, on_call_tool=self.call_tool)
        if caps.resources is not None:
            handlers.update(
                on_list_resources=self.list_resources,
                on_list_resource_templates=self.list_resource_templates,
                on_read_resource=self.read_resource,
            )
            if caps.resources.subscribe:
                handlers.update(
                    on_subscribe_resource=self.subscribe_resource,
                    on_unsubscribe_resource=self.unsubscribe_resource,
                )
        if caps.prompts is not None:
            handlers.update(on_list_prompts=self.list_prompts, on_get_prompt=self.get_prompt)
        if caps.completions is not None:
            handlers.update(on_completion=self.complete)
        return Server(
            self.options.name,
            version=(info.version if info else "") or "",
            title=f"{(info.title or info.name) if info else self.options.name} (gated)",
            instructions=self.upstream.instructions,
            **handlers,
        )

    def _seen(self, ctx: ServerRequestContext[Any, Any]) -> None:
        self._downstream = ctx.session

    def _check(self) -> None:
        if self.gone is not None:
            raise MCPError(code=types.INTERNAL_ERROR, message=self.gone)

    async def _up(self, call: Awaitable[T]) -> T:
        """Await a forwarded request; a closed upstream connection becomes an error naming it."""
        self._check()
        try:
            return await call
        except MCPError as e:
            if e.code != types.CONNECTION_CLOSED:
                raise
            self._lost(
                f"the upstream MCP server {self.options.name!r} exited or closed its connection"
            )
            raise MCPError(code=types.INTERNAL_ERROR, message=self.gone or e.message) from e

    # -- tools ---------------------------------------------------------------------------

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self._seen(ctx)
        listed = await self._up(self.upstream.list_tools(cursor=params.cursor if params else None))
        for tool in listed.tools:
            if isinstance(tool.input_schema, dict):
                self._schemas[tool.name] = dict(tool.input_schema)
        if not self.options.mark_gated:
            return listed
        tools = [self._marked(tool) for tool in listed.tools]
        return listed.model_copy(update={"tools": tools})

    def _marked(self, tool: types.Tool) -> types.Tool:
        note = self._note(tool.name)
        if note is None:
            return tool
        description = f"{tool.description}\n\n{note}" if tool.description else note
        return tool.model_copy(update={"description": description})

    def _note(self, tool: str) -> str | None:
        """What the policy says about calls to `tool` (argument-specific rules aside); None
        when a rule allows them."""
        policy = _local_policy(self.approvals)
        if policy is None:  # the policy lives in the bot (HTTP transport)
            return MAYBE_NOTE
        event = ApprovalEvent(tool_name=tool_name(self.options.name, tool), arguments={})
        action = policy.evaluate(event, ApprovalConfig(), requested_route=self.options.route).action
        if action == "allow":
            return None
        return DENIED_NOTE if action == "deny" else GATED_NOTE

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        self._seen(ctx)
        if self.gone is not None:
            return error_result(f"Not called: {self.gone}")
        arguments = dict(params.arguments or {})
        full_name = tool_name(self.options.name, params.name)
        progressed = 0.0

        async def progress(done: float, message: str) -> None:
            nonlocal progressed
            progressed = max(progressed, done)
            await ctx.session.report_progress(progressed, None, message)

        try:
            event = ApprovalEvent(
                tool_name=full_name,
                arguments=arguments,
                agent=self.options.agent or f"mcp-proxy:{self.options.name}",
                arguments_schema=self._schemas.get(params.name),
            )
            approval = await self.approvals.submit(
                event,
                ApprovalConfig(),
                route=self.options.route,
                metadata={"via": "mcp-proxy", "mcp_server": self.options.name},
            )
            log.info("gated call tool=%s id=%s status=%s", full_name, approval.id, approval.status)
            decided = await await_decision(self.approvals, approval, progress, self.options.wait)
        except Exception as e:  # fail closed: the upstream is not called
            message = e.message if isinstance(e, ApprovalError) else type(e).__name__
            log.warning("gate failed tool=%s error=%r", full_name, e)
            return error_result(f"Not called: approval service error: {message}")
        if decided is None or not decided.approved:
            text = (
                decision_text(decided.to_request())
                if decided is not None
                else "No approval decision in time (approval timeout); denied by default."
            )
            return error_result(f"Not called: {text}")
        return await self._forward(ctx, params, decided, progressed)

    async def _forward(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: types.CallToolRequestParams,
        approval: Approval,
        base: float,
    ) -> types.CallToolResult:
        edited = getattr(approval, "edited_arguments", None)
        # What the reviewer saw (or edited): never arguments nobody approved.
        arguments = edited if isinstance(edited, dict) else approval.arguments

        async def relay(progress: float, total: float | None, message: str | None) -> None:
            # Keep increasing past the waiting notifications (the spec requires it).
            await ctx.session.report_progress(
                base + progress, base + total if total is not None else None, message
            )

        try:
            return await self._up(
                self.upstream.call_tool(params.name, arguments, progress_callback=relay)
            )
        except MCPError as e:
            if self.gone is None:
                raise  # the upstream's own protocol error, passed on as it is
            return error_result(f"Approved, but the call failed: {e.message}")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as e:
            self._lost(
                f"the upstream MCP server {self.options.name!r} is gone ({type(e).__name__})"
            )
            return error_result(f"Approved, but the call failed: {self.gone}")

    # -- resources, prompts, completions: as they are ------------------------------------

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        self._seen(ctx)
        return await self._up(
            self.upstream.list_resources(cursor=params.cursor if params else None)
        )

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        self._seen(ctx)
        return await self._up(
            self.upstream.list_resource_templates(cursor=params.cursor if params else None)
        )

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        self._seen(ctx)
        return await self._up(self.upstream.read_resource(str(params.uri)))

    async def subscribe_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        self._seen(ctx)
        return await self._up(self.upstream.subscribe_resource(str(params.uri)))

    async def unsubscribe_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        self._seen(ctx)
        return await self._up(self.upstream.unsubscribe_resource(str(params.uri)))

    async def list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        self._seen(ctx)
        return await self._up(self.upstream.list_prompts(cursor=params.cursor if params else None))

    async def get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        self._seen(ctx)
        return await self._up(self.upstream.get_prompt(params.name, params.arguments))

    async def complete(
        self, ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        self._seen(ctx)
        self._check()
        argument = {"name": params.argument.name, "value": params.argument.value}
        context = params.context.arguments if params.context else None
        return await self._up(self.upstream.complete(params.ref, argument, context))

    # -- upstream notifications ----------------------------------------------------------

    async def on_upstream_message(self, message: IncomingMessage) -> None:
        """Relay upstream notifications to the client; note a broken upstream connection."""
        if isinstance(message, Exception):
            log.warning("upstream error: %r", message)
            return
        if isinstance(message, types.ProgressNotification):
            return  # progress for a forwarded call goes through its own callback
        if self._downstream is None:
            log.debug("no client yet; dropped upstream %s", type(message).__name__)
            return
        with contextlib.suppress(Exception):
            await self._downstream.send_notification(message)

    def _lost(self, why: str) -> None:
        if self.gone is None:
            self.gone = why
            self.lost.set()
            log.error("%s", why)


def _local_policy(client: ApprovalClient) -> Policy | None:
    service = getattr(client.transport, "service", None)
    policy = getattr(service, "policy", None)
    return policy if isinstance(policy, Policy) else None


class _Relay:
    """Breaks the cycle between the upstream client (needs a handler) and the proxy."""

    def __init__(self) -> None:
        self.proxy: GatingProxy | None = None

    async def __call__(self, message: IncomingMessage) -> None:
        if self.proxy is not None:
            await self.proxy.on_upstream_message(message)


async def run_proxy(
    upstream: Upstream,
    approvals: ApprovalClient,
    options: ProxyOptions,
    listen: Listen | None = None,
) -> int:
    """Connect to the upstream, then serve the client on stdio (or, with `listen`, over
    Streamable HTTP) until it (or the upstream) leaves. Returns the exit status: 0 when the
    client closed, 1 when the upstream went away."""
    relay = _Relay()
    try:
        async with upstream.connect(relay) as connected:
            proxy = GatingProxy(connected, approvals, options)
            relay.proxy = proxy
            if listen is not None:
                from bot.mcp.http import serve_streamable_http

                await serve_streamable_http(
                    proxy.server, listen.host, listen.port, listen.token, proxy.lost
                )
                await anyio.sleep(LINGER_SECONDS)
                return 1
            async with repaired_stdio_server() as (read, write), anyio.create_task_group() as tg:

                async def serve() -> None:
                    await proxy.server.run(
                        read, write, proxy.server.create_initialization_options()
                    )
                    tg.cancel_scope.cancel()  # the client closed stdin

                tg.start_soon(serve)
                await proxy.lost.wait()
                await anyio.sleep(LINGER_SECONDS)  # let in-flight answers reach the client
                tg.cancel_scope.cancel()
    except (OSError, MCPError, UpstreamGone, httpx2.HTTPError) as e:
        print(f"approval-bot mcp-proxy: the upstream MCP server failed: {e}", file=sys.stderr)
        return 1
    except ExceptionGroup as group:
        first = group.exceptions[0]
        print(f"approval-bot mcp-proxy: the upstream MCP server failed: {first!r}", file=sys.stderr)
        return 1
    return 1 if relay.proxy is not None and relay.proxy.gone else 0
