"""What a connection may hold of `serve`'s HTTP server: read timeouts, a cap, plain bodies.

`GuardedSite` opens the listening socket and `ConnectionGuard.accept` makes each connection's
protocol: a header timeout, an idle timeout and a cap on connections (`HttpLimits`,
`connection_cap`), making room by closing the least trusted first; `body_deadline` bounds a
body's arrival, and `content_encoding` names a body's encoding for its reader to refuse.
Nothing is timed while a handler runs. The rules and why: docs/ARCHITECTURE.md,
"Connections".
"""

from __future__ import annotations

import asyncio
import collections
import fcntl
import logging
import re
import resource
import struct
import termios
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger(__name__)

#: Seconds a new connection has to send its first request's head.
HEADER_TIMEOUT = 10.0
#: Seconds a kept-alive connection may stay idle between requests (aiohttp's keepalive_timeout).
IDLE_TIMEOUT = 75.0
#: Seconds a request's body may take to arrive, counted from its head.
BODY_TIMEOUT = 30.0
#: Files kept for everything but the HTTP server's connections (Redis pools, the Slack and
#: webhook clients, logs), when the limit is large enough; else half the limit.
RESERVED_FILES = 512
#: At most one log line this often (seconds) about connections closed for room or timeouts.
LOG_EVERY = 60.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class HttpLimits:
    """The HTTP server's timeouts and connection cap (None: `connection_cap()`)."""

    header_timeout: float = HEADER_TIMEOUT
    idle_timeout: float = IDLE_TIMEOUT
    body_timeout: float = BODY_TIMEOUT
    max_connections: int | None = None

    def server_options(self) -> dict[str, Any]:
        """Keyword arguments for `web.AppRunner` (aiohttp's server and request handlers)."""
        return {
            "access_log": None,
            "keepalive_timeout": self.idle_timeout,
            "auto_decompress": False,
        }


def connection_cap(nofile: int | None = None) -> int:
    """How many HTTP connections to hold with `nofile` files (default: this process's soft
    `RLIMIT_NOFILE`): all but `RESERVED_FILES`, and never more than half when that is less.
    256 files → 128 connections; 1,024 → 512; 65,536 → 65,024."""
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if nofile == resource.RLIM_INFINITY:
            nofile = 1 << 20
    return max(8, max(nofile - RESERVED_FILES, nofile // 2))


class BodyTimeout(TimeoutError):
    """The request's body did not arrive within the body timeout (a `TimeoutError`, so
    aiohttp's lingering read after the answer stops at it and closes the connection)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the request body did not arrive within {seconds:g} s")
        self.seconds = seconds


#: A body's `Content-Encoding` as named in a refusal: letters, digits and `-_.,` only.
_SHOWN = re.compile(r"[^A-Za-z0-9_.,-]+")


def content_encoding(request: web.BaseRequest) -> str | None:
    """The encoding a request's body is in, when it is not plain (identity): what the bot
    refuses to read (the server does not decode it). Shown safely, at most 40 characters."""
    raw = request.headers.get("Content-Encoding")
    if raw is None:
        return None
    names = [name.strip().lower() for name in raw.split(",")]
    if all(name in ("", "identity") for name in names):
        return None
    return _SHOWN.sub(" ", raw.strip())[:40].strip() or "?"


def body_deadline(seconds: float) -> Any:
    """Middleware: a request whose body has not all arrived when its handler starts gets
    `seconds` for the rest; then its body stream raises `BodyTimeout` to its reader. A plain
    function when there is nothing to wait for (no coroutine frame of its own: a parked
    long-poll keeps every frame on its await chain)."""

    @web.middleware
    def middleware(request: web.Request, handler: Handler) -> Awaitable[web.StreamResponse]:
        if request.content.is_eof():
            return handler(request)
        return _within(request, handler, seconds)

    return middleware


async def _within(request: web.Request, handler: Handler, seconds: float) -> web.StreamResponse:
    content = request.content
    loop = asyncio.get_running_loop()

    def late() -> None:
        if not content.is_eof():
            content.set_exception(BodyTimeout(seconds))

    timer = loop.call_later(seconds, late)
    try:
        response = await handler(request)
    finally:
        timer.cancel()
    if not content.is_eof() and not response.prepared:
        response.force_close()  # the rest of the body is not read: say the connection ends
    return response


#: Where `build_web_app` keeps the guard on the app (`trust` finds it there).
CONNECTION_GUARD: web.AppKey[ConnectionGuard] = web.AppKey("connection_guard")


def trust(request: web.BaseRequest) -> None:
    """The request authenticated (a valid token, a verified Slack signature): its connection
    is the last to be closed for room. No-op on an app without a guard."""
    guard = request.app.get(CONNECTION_GUARD) if isinstance(request, web.Request) else None
    if guard is not None and request.transport is not None:
        guard.trusted.add(request.transport)


def _unread(transport: asyncio.BaseTransport) -> bool:
    """Whether the client sent bytes still waiting in the socket (FIONREAD)."""
    sock = transport.get_extra_info("socket")
    try:
        waiting = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (AttributeError, OSError, ValueError):
        return False
    return bool(struct.unpack("i", waiting)[0] > 0)


class _Refused(asyncio.Protocol):
    """A connection that arrived with no room for it: closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class ConnectionGuard:
    """The header timeout and the connection cap of one aiohttp server (`bind`), applied in
    `accept`, the protocol factory the listening socket uses (`GuardedSite`)."""

    def __init__(self, limits: HttpLimits, parked: Callable[[], int] = lambda: 0) -> None:
        self.limits = limits
        self.cap = limits.max_connections or connection_cap()
        #: Connections detached from aiohttp (parked long-polls): they hold files too.
        self._parked = parked
        #: Transports of connections that authenticated (`trust`).
        self.trusted: weakref.WeakSet[asyncio.BaseTransport] = weakref.WeakSet()
        self._server: web.Server | None = None
        self._unmade = 0
        self._timer: asyncio.TimerHandle | None = None
        self.closed: collections.Counter[str] = collections.Counter()
        self._logged_at = -LOG_EVERY

    def bind(self, server: web.Server) -> None:
        self._server = server

    @property
    def connections(self) -> int:
        """Connections holding a file: aiohttp's, those accepted whose `connection_made` has
        not run yet (the event loop accepts a burst before it runs any), and the detached
        long-polls."""
        registry = getattr(self._server, "_connections", None)
        return (len(registry) if registry is not None else 0) + self._unmade + self._parked()

    def accept(self) -> asyncio.BaseProtocol:
        """The protocol for a connection just accepted: aiohttp's, after making room for it
        (or `_Refused`, with no room)."""
        if self._server is None:
            raise RuntimeError("ConnectionGuard.accept before bind")
        loop = asyncio.get_running_loop()
        if self.connections >= self.cap and not self._make_room():
            self._count("refused at the cap")
            return _Refused()
        # Counted until its `connection_made` (scheduled after this, so run after `_made`)
        # puts it in aiohttp's registry.
        self._unmade += 1
        loop.call_soon(self._made)
        if self._timer is None:
            self._timer = loop.call_at(loop.time() + self.limits.header_timeout, self._heads_due)
        return self._server()

    def _made(self) -> None:
        self._unmade -= 1

    def _heads_due(self) -> None:
        """Close the connections whose first request head did not come in time; look again
        when the next one is due (at most once a second; none: no timer)."""
        self._timer = None
        registry: dict[RequestHandler, asyncio.Transport] | None = getattr(
            self._server, "_connections", None
        )
        if not registry:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        limits = self.limits
        next_due: float | None = None
        for handler, transport in list(registry.items()):
            # Only connections that sent no request yet (a detached long-poll's is not
            # aiohttp's any more; one handed back after its answer authenticated before).
            if getattr(handler, "_request_count", 1) != 0 or transport in self.trusted:
                continue
            if handler.transport is None or transport.is_closing():
                continue
            # aiohttp arms the keep-alive timer when the connection is made: it began then.
            began = getattr(handler, "_next_keepalive_close_time", now) - limits.idle_timeout
            due = began + limits.header_timeout
            if due <= now:
                handler.force_close()
                self._count("no request head in time")
            elif next_due is None or due < next_due:
                next_due = due
        if next_due is not None:
            self._timer = loop.call_at(max(next_due, now + 1.0), self._heads_due)

    def close(self) -> None:
        """Stop looking for late request heads (the server is closed)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _make_room(self) -> bool:
        """Close one connection to make room: the oldest idle one that never authenticated,
        else the oldest with an unauthenticated request in flight, else the oldest idle
        authenticated one. False when every connection is authenticated and busy."""
        registry: dict[RequestHandler, asyncio.Transport] | None = getattr(
            self._server, "_connections", None
        )
        if not registry:
            return False
        busy_stranger: RequestHandler | None = None
        idle_trusted: RequestHandler | None = None
        for handler, transport in registry.items():  # oldest first (insertion order)
            if handler.transport is None or transport.is_closing():
                continue  # going already
            # Bytes waiting in the socket: a request the loop has not read yet (a burst of
            # connections is accepted before any is read), as good as one in flight.
            busy = getattr(handler, "_request_in_progress", True) or _unread(transport)
            trusted = transport in self.trusted
            if not trusted and not busy:
                handler.force_close()
                self._count("idle, never authenticated")
                return True
            if not trusted and busy_stranger is None:
                busy_stranger = handler
            elif trusted and not busy and idle_trusted is None:
                idle_trusted = handler
        if busy_stranger is not None:
            busy_stranger.force_close()
            self._count("unauthenticated request in flight")
            return True
        if idle_trusted is not None:
            idle_trusted.force_close()
            self._count("idle, authenticated")
            return True
        return False

    def _count(self, why: str) -> None:
        self.closed[why] += 1
        now = asyncio.get_running_loop().time()
        if now - self._logged_at >= LOG_EVERY:
            self._logged_at = now
            counts = ", ".join(f"{why}: {n}" for why, n in sorted(self.closed.items()))
            log.warning(
                "http connections closed so far (cap %d, open %d): %s",
                self.cap,
                self.connections,
                counts,
            )


class GuardedSite(web.TCPSite):
    """`web.TCPSite` whose listening socket makes each connection's protocol through the
    guard (`ConnectionGuard.accept`) instead of aiohttp's server directly."""

    def __init__(
        self, runner: web.AppRunner, host: str, port: int, guard: ConnectionGuard, backlog: int
    ) -> None:
        super().__init__(runner, host, port, backlog=backlog)
        self.guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with the runner
        server = self._runner.server
        if server is None:
            raise RuntimeError("GuardedSite.start before the runner's setup")
        self.guard.bind(server)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self.guard.accept, self._host, self._port, backlog=self._backlog
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port
