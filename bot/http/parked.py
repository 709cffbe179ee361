"""Parked long-polls outside aiohttp: a waiting connection held by a five-slot protocol.

`ApprovalsAPI.get` (bot/http/api.py) parks a pending `GET /v1/approvals/{id}?wait=N` with
`Parking.park`: the socket goes to `Parked`, aiohttp's handler returns, and when the `Watch`
(approvals/_internal/store/waiting.py) is done `Parked` writes what the handler would have
answered and hands the connection back to aiohttp. `park` detaches only what it knows how to
(`DETACHABLE_AIOHTTP`, an HTTP/1.1 GET without a body, nothing behind it); otherwise it returns
False and the handler parks inside aiohttp. How and why: docs/ARCHITECTURE.md, "Parked
long-polls".
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, Protocol

import aiohttp
from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE, HttpVersion11
from aiohttp.web_protocol import RequestHandler

from approvals._internal.store.waiting import Waiter, Watch
from bot.core.shutdown import shutting_down_response

log = logging.getLogger(__name__)

#: aiohttp (major, minor) versions whose `RequestHandler` internals `Parking.park` was written
#: against and tested with (tests/bot/http/test_parked.py checks the installed one is here).
#: Another version parks inside aiohttp, as before, until checked and added.
DETACHABLE_AIOHTTP = frozenset({(3, 14)})

#: Bytes a client may pipeline behind a parked long-poll (kept for aiohttp, which answers them
#: after it); past this the connection closes after the answer, the rest unanswered.
MAX_PIPELINED = 64 * 1024

#: What a parked long-poll answers once its watch is done: a response now, one later (a
#: re-read after the wait ended), or None (nobody to answer).
Answer = web.Response | Awaitable[web.Response] | None


class _Gauge(Protocol):
    def inc(self, amount: float = 1) -> None: ...
    def dec(self, amount: float = 1) -> None: ...


def _version(text: str) -> tuple[int, int] | None:
    try:
        major, minor = text.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


DETACHABLE = _version(aiohttp.__version__) in DETACHABLE_AIOHTTP


#: Attributes of aiohttp's `RequestHandler` that say something is buffered or in flight
#: beside this request (and a value meaning "nothing").
_IDLE = (
    ("_messages", False),  # parsed pipelined requests (a deque: empty is falsy)
    ("_message_tail", False),
    ("_upgraded", False),
    ("_payload_parser", False),
    ("_close", False),
    ("_force_close", False),
    ("_paused", False),  # writing paused: the transport's buffer is over its high-water mark
    ("_reading_paused", False),
    ("_buffer_paused", False),
)


def encode(response: web.Response, *, close: bool) -> bytes:
    """`response` as the bytes of a complete HTTP/1.1 response: the status, its headers
    (Content-Type, any others the response carries), then what aiohttp adds to each
    (Content-Length, Date, Server) and, if the connection closes after it, `Connection:
    close` (kept alive, HTTP/1.1 says nothing, as aiohttp)."""
    body = response.body
    if not isinstance(body, bytes):
        raise TypeError(f"a parked long-poll answers with a bytes body, not {type(body)!r}")
    reason = response.reason or HTTPStatus(response.status).phrase
    lines = [f"HTTP/1.1 {response.status} {reason}"]
    skip = {"content-length", "connection", "transfer-encoding"}
    for name, value in response.headers.items():
        if name.lower() not in skip:
            lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {len(body)}")
    if "Date" not in response.headers:
        lines.append(f"Date: {rfc822_formatted_time()}")
    if "Server" not in response.headers:
        lines.append(f"Server: {SERVER_SOFTWARE}")
    if close:
        lines.append("Connection: close")
    if any("\r" in line or "\n" in line for line in lines):
        raise ValueError("a header of a parked long-poll's answer holds a line break")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Parked(asyncio.Protocol):
    """One detached long-poll: its socket (`transport`), its `Watch` until the wait ends, the
    `Parking` that answers it, and aiohttp's `Server` to hand the connection back to after
    the answer (None: close it then), with the bytes the client sent meanwhile."""

    __slots__ = ("_parking", "_received", "_server", "_transport", "_watch")

    def __init__(
        self,
        parking: Parking,
        transport: asyncio.Transport,
        watch: Watch,
        server: web.Server | None,
    ) -> None:
        self._parking = parking
        self._transport: asyncio.Transport | None = transport
        self._watch: Watch | None = watch
        self._server = server
        self._received: bytearray | None = None

    # -- the socket's events (asyncio.Protocol) -------------------------------------------

    def data_received(self, data: bytes) -> None:
        """Pipelined requests (or garbage): kept for aiohttp, which gets them after the
        answer, as it would have; past `MAX_PIPELINED` bytes, dropped and the connection
        closes after the answer (what was pipelined is never answered)."""
        if self._server is None:
            return
        if self._received is None:
            self._received = bytearray()
        if len(self._received) + len(data) > MAX_PIPELINED:
            self._server = self._received = None
            return
        self._received += data

    def eof_received(self) -> bool | None:
        return None  # the client is done: close (as aiohttp does)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        watch = self._watch
        if watch is not None:  # gone while parked: nobody is left to answer
            self._watch = None
            self._parking.ended(watch)

    # -- the answer -------------------------------------------------------------------------

    def settled(self, watch: Watch) -> None:
        """The watch was just settled (its `on_settle`, called by the Waiter as the decision
        lands): answer now, in a context of its own (not the decider's). The done callback
        that follows finds nothing left to do."""
        contextvars.Context().run(self.woken, watch)

    def woken(self, watch: Watch) -> None:
        """The watch is done (its done callback, or `settled`)."""
        if self._watch is not watch:  # the connection went first, or answered already
            return
        self._watch = None
        watch.on_settle = None
        self._parking.ended(watch)
        self._parking.answer(self, watch)

    def send(self, response: web.Response | None, *, keep_alive: bool) -> None:
        """Write `response` (None: nothing), then hand the connection back to aiohttp (if
        `keep_alive` and it can be) or close it."""
        transport, self._transport = self._transport, None
        server = self._server if keep_alive and response is not None else None
        received, self._server, self._received = self._received, None, None
        if transport is None or transport.is_closing():
            return
        try:
            if response is not None:
                transport.write(encode(response, close=server is None))
            if server is not None:
                # Back to aiohttp as if it were a new connection: a new `RequestHandler`
                # (keep-alive timer, parser) reads the client's next request, and first the
                # ones it pipelined while parked.
                handler = server()
                transport.set_protocol(handler)
                handler.connection_made(transport)
                if received:
                    handler.data_received(bytes(received))
                return
        except Exception:
            log.exception("a detached long-poll's connection could not be answered or handed back")
        transport.close()  # after the write has been flushed


class Parking:
    """The detached long-polls of one API: `park` takes a connection from aiohttp; when its
    watch is done, `answer(watch)` (the API's) says what to write."""

    def __init__(
        self,
        waiter: Waiter,
        gauge: _Gauge,
        answer: Callable[[Watch], Answer],
        fail: Callable[[Exception, str], web.Response],
        keep_alive: Callable[[], bool],
    ) -> None:
        self._waiter = waiter
        self._gauge = gauge
        self._answer = answer
        self._fail = fail  # the API's error answer, if `answer` itself fails (request id)
        self._keep_alive = keep_alive  # False: close after answering (the bot is draining)
        self._later: set[asyncio.Task[None]] = set()  # answers waiting for a re-read
        self.parked = 0  # connections parked here now
        # The context the watches' done callbacks run in: an empty one, shared by this
        # parking's (one event loop's) callbacks; the default copies the handler's context
        # per callback, and would keep it while parked.
        self._context = contextvars.Context()

    def park(self, request: web.BaseRequest, watch: Watch) -> bool:
        """Take `request`'s connection from aiohttp and answer it here once `watch` is done;
        from then on this owns `watch` (unwatches it) and the gauge's count for it (the
        caller has counted it in). False: not possible here; nothing was changed."""
        handler = _detachable(request)
        if handler is None:
            return False
        transport = handler.transport
        assert transport is not None
        # Handed back for keep-alive after the answer, if the client wants it (HTTP/1.1 does
        # unless it says `Connection: close`) and the server is aiohttp's own.
        server = handler._manager if request.keep_alive else None
        parked = Parked(self, transport, watch, server if type(server) is web.Server else None)
        try:
            transport.set_protocol(parked)
        except Exception:  # e.g. a transport that cannot: stay with aiohttp
            log.debug("long-poll not detached: set_protocol failed", exc_info=True)
            return False
        # aiohttp forgets the connection: with no transport it can neither write (the
        # handler's response goes nowhere) nor close the socket; `connection_lost` takes it
        # out of the server's registry, cancels its keep-alive timer and drops its parser.
        handler.transport = None
        try:
            handler.connection_lost(None)
        except Exception:  # the socket is ours already; aiohttp's objects are left to the GC
            log.exception("aiohttp's protocol failed to let go of a detached long-poll")
        self.parked += 1
        watch.on_settle = parked.settled
        watch.add_done_callback(parked.woken, context=self._context)
        return True

    def ended(self, watch: Watch) -> None:
        """The wait of a parked connection is over (done, or its client gone)."""
        self.parked -= 1
        self._gauge.dec()
        self._waiter.unwatch(watch)

    def answer(self, parked: Parked, watch: Watch) -> None:
        if watch.cancelled():  # the Waiter stopped under it: the bot is going down
            parked.send(shutting_down_response(), keep_alive=False)
            return
        try:
            answer = self._answer(watch)
        except Exception as e:  # fail closed: the agent reads an error, never silence
            answer = self._fail(e, watch.request_id)
        if answer is None or isinstance(answer, web.Response):
            parked.send(answer, keep_alive=self._keep_alive())
            return
        task = asyncio.ensure_future(self._send_later(parked, answer, watch.request_id))
        self._later.add(task)
        task.add_done_callback(self._later.discard)

    async def _send_later(
        self, parked: Parked, answer: Awaitable[web.Response], request_id: str
    ) -> None:
        try:
            response = await answer
        except asyncio.CancelledError:  # the Waiter stopped under the read
            parked.send(shutting_down_response(), keep_alive=False)
            raise
        except Exception as e:
            response = self._fail(e, request_id)
        parked.send(response, keep_alive=self._keep_alive())


def _detachable(request: web.BaseRequest) -> RequestHandler | None:
    """aiohttp's protocol of `request`'s connection, if it can be detached now: a supported
    aiohttp, an HTTP/1.1 GET without a body on an open socket, nothing else buffered or in
    flight on the connection."""
    if not DETACHABLE:
        return None
    handler: Any = request.protocol
    if type(handler) is not RequestHandler:  # a subclass may do more than we undo
        return None
    transport = handler.transport
    if transport is None or transport.is_closing() or transport.get_protocol() is not handler:
        return None
    if request.version != HttpVersion11 or request.method != "GET" or request.can_read_body:
        return None
    try:
        if any(bool(getattr(handler, name)) != idle for name, idle in _IDLE):
            return None
    except AttributeError:  # not the aiohttp this was written for
        return None
    return handler
