"""The approvals MCP server over Streamable HTTP at `/mcp`, inside `serve`'s aiohttp app.

`McpEndpoint` runs the SDK's `StreamableHTTPSessionManager` (an ASGI app) one aiohttp request
at a time through `asgi_call`, after the HTTP API's bearer-token check
(`ApprovalsAPI.authorize`); tool calls work on the bot's own service and waiter
(`BotTransport`) as the token's principal, which also owns the session. Sessions live in the
replica that created them. How and why (not `aiohttp-asgi`): docs/ARCHITECTURE.md, "MCP".
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
from aiohttp import web
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from approvals._internal.transports import ServiceTransport
from approvals.client import ApprovalClient
from bot.core.context import BotContext
from bot.http.api import APIError
from bot.http.connections import BodyTimeout, content_encoding
from bot.mcp.reviewer_wait import WaitOptions
from bot.mcp.server import ApprovalsServer, ServerOptions
from bot.mcp.stdio import repair_line

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
#: How often a waiting response checks that its client is still connected, in seconds.
DISCONNECT_POLL = 0.5

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]


class BotTransport(ServiceTransport):
    """A `Transport` on the bot's own service and waiter (no extra Redis connections)."""

    def __init__(self, ctx: BotContext, principal: str | None = None) -> None:
        super().__init__(ctx.service, ctx.waiter, via="mcp", canceller=principal or "mcp client")
        self.ctx = ctx
        self.principal = principal


def _scope(request: web.Request, principal: str | None = None) -> Scope:
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode(),
        "root_path": "",
        "query_string": request.query_string.encode(),
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": (request.remote or "", 0),
        "server": (request.host, None),
    }
    if principal is not None:
        # Who the SDK binds a new session to, and checks every later use of it against.
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=principal, scopes=[]))
    return scope


async def asgi_call(
    app: ASGIApp, request: web.Request, principal: str | None = None
) -> web.StreamResponse:
    """Run `request` (made by `principal`, if known) through the ASGI `app`; the streamed
    aiohttp response it produced."""
    response: web.StreamResponse | None = None
    body_done = False

    async def receive() -> Message:
        nonlocal body_done
        if not body_done:
            # One piece (the SDK caps its size): lone surrogates repaired as on stdio.
            body_done = True
            try:
                body = await request.read()
            except BodyTimeout:  # too slow to send it: drop the connection
                if request.transport is not None:
                    request.transport.close()
                return {"type": "http.disconnect"}
            if body:
                body = repair_line(body.decode("utf-8", "replace")).encode()
            return {"type": "http.request", "body": body, "more_body": False}
        # Past the body, ASGI's next message is the disconnect: wait for it (aiohttp has no
        # event for a client that went away while the handler runs, so look now and then).
        while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
            await asyncio.sleep(DISCONNECT_POLL)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=message["status"])
            for name, value in message.get("headers", ()):
                response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            if "Content-Length" not in response.headers:
                response.enable_chunked_encoding()
            await response.prepare(request)
        elif message["type"] == "http.response.body":
            if response is None:
                raise RuntimeError("ASGI app sent a body before starting the response")
            body = message.get("body", b"")
            try:
                if message.get("more_body", False):
                    if body:
                        await response.write(body)
                else:
                    await response.write_eof(body)
            except ConnectionResetError as e:  # the client left: ASGI says OSError
                raise OSError("client disconnected") from e

    await app(_scope(request, principal), receive, send)
    if response is None:
        if request.transport is None or request.transport.is_closing():
            return web.Response(status=204)  # the client left; nobody reads this
        raise RuntimeError("the MCP app answered nothing")
    return response


class McpEndpoint:
    """`/mcp`: bearer auth, then the SDK's Streamable HTTP session manager."""

    def __init__(
        self,
        ctx: BotContext,
        authorize: Callable[[web.Request], Any],
        principal_of: Callable[[str | None], Any],
        wait: WaitOptions | None = None,
    ) -> None:
        self.ctx = ctx
        self.authorize = authorize
        #: `Authorization` header → the caller's principal (`.name`); raises when invalid.
        self.principal_of = principal_of
        options = ServerOptions(agent="mcp", wait=wait or WaitOptions())
        self.approvals = ApprovalsServer(self.client_for, options)
        self.manager = StreamableHTTPSessionManager(app=self.approvals.server)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def client_for(self, call: ServerRequestContext[Any, Any]) -> ApprovalClient:
        """A client asking as the principal of the HTTP request that carries this call (each
        POST is authenticated again: a session id is no credential). Raises — and the tool
        denies — when there is no valid token."""
        headers = getattr(call.request, "headers", None)
        header = headers.get("authorization") if headers is not None else None
        principal = self.principal_of(header)
        return ApprovalClient(BotTransport(self.ctx, principal=principal.name))

    async def handle(self, request: web.Request) -> web.StreamResponse:
        principal = self.authorize(request)
        encoding = content_encoding(request)
        if encoding is not None:
            raise APIError(
                415,
                "unsupported_encoding",
                f"the request body is compressed (Content-Encoding: {encoding}); "
                "send it uncompressed",
            )
        if self._task is None or self._task.done():
            raise web.HTTPServiceUnavailable(reason="the MCP endpoint is not running")
        return await asgi_call(self.manager.handle_request, request, principal.name)

    async def start(self) -> None:
        """Run the session manager in a task of its own (its task group must enter and exit
        in one task, which aiohttp's startup/cleanup hooks do not guarantee)."""
        started = asyncio.Event()

        async def run() -> None:
            async with self.manager.run():
                started.set()
                await self._stop.wait()

        self._task = asyncio.create_task(run(), name="mcp-session-manager")
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set():
            waiter.cancel()
            self._task.result()  # raises what stopped it

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 10)


#: Where `add_routes` keeps the endpoint on the app (tests tune its wait options through it).
MCP_ENDPOINT: web.AppKey[McpEndpoint] = web.AppKey("mcp_endpoint", McpEndpoint)


def add_routes(
    app: web.Application,
    ctx: BotContext,
    authorize: Callable[[web.Request], Any],
    principal_of: Callable[[str | None], Any],
) -> McpEndpoint:
    """Serve the approvals MCP server at `/mcp` on `app`, started and stopped with it.
    `authorize` is the HTTP API's check of a request; `principal_of` its check of a header."""
    endpoint = McpEndpoint(ctx, authorize, principal_of)
    app[MCP_ENDPOINT] = endpoint
    app.router.add_route("*", MCP_PATH, endpoint.handle)
    app.router.add_route("*", MCP_PATH + "/", endpoint.handle)

    async def on_startup(_: web.Application) -> None:
        await endpoint.start()

    async def on_shutdown(_: web.Application) -> None:
        # Before aiohttp waits for open connections: ending the sessions ends their streams.
        await endpoint.stop()

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    return endpoint


def bearer_matches(header: str | None, token: str) -> bool:
    """Whether `Authorization: Bearer …` carries `token` (compared in constant time)."""
    scheme, _, given = (header or "").strip().partition(" ")
    presented = given.strip().encode("utf-8", "replace")
    return scheme.lower() == "bearer" and hmac.compare_digest(presented, token.encode())


async def serve_streamable_http(
    server: Any, host: str, port: int, token: str, until: anyio.Event
) -> None:
    """Serve the SDK `server` at http://host:port/mcp for `Bearer <token>` callers only,
    until `until` is set (or this is cancelled)."""
    manager = StreamableHTTPSessionManager(app=server)

    async def handle(request: web.Request) -> web.StreamResponse:
        if not bearer_matches(request.headers.get("Authorization"), token):
            return web.json_response(
                {"error": {"code": "unauthorized", "message": "send the proxy's bearer token"}},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="approval-bot mcp-proxy"'},
            )
        return await asgi_call(manager.handle_request, request)

    app = web.Application()
    app.router.add_route("*", MCP_PATH, handle)
    async with manager.run():
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
            log.warning("mcp-proxy listening on http://%s:%d%s", host, port, MCP_PATH)
            await until.wait()
        finally:
            await runner.cleanup()
