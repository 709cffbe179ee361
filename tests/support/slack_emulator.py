"""Local Slack Web API + Socket Mode emulator (aiohttp) that bot tests and benchmarks use.

Its tokens are checked as Slack checks them (`SlackEmulator._refusal`), each call against the
exact token it was given: the bot token (`token`) for every Web API method, the app-level
token (`app_token`) for `apps.connections.open` only. A token is read from an
`Authorization: Bearer` header, or from a form body's `token` field (URL-encoded or
multipart); never from a JSON body (Slack reads JSON only with the header) nor from the
query string (refused for apps made since February 2021). An app-level token is read from
the header only (Slack's `apps.connections.open` page: "passing it as a POST parameter will
result in an error"). Answers: no token `not_authed`; a token it does not know, or an
app-level token in a form, `invalid_auth`; a revoked one (`revoke`) `token_revoked`; the
other kind of token `not_allowed_token_type`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any, Self

from aiohttp import WSCloseCode, WSMsgType, web
from multidict import CIMultiDict, CIMultiDictProxy

from tests.support.credentials import APP_TOKEN, BOT_TOKEN

JSON_FIELDS = frozenset({"blocks", "attachments", "view", "metadata"})
MAX_MESSAGE_BLOCKS = 50
MAX_VIEW_BLOCKS = 100
MAX_TEXT = 40_000
RESPONSE_PAYLOAD_TYPES = frozenset({"view_submission", "block_suggestion"})
SERVER_ERROR_PAGE = "<html><body><h1>Service Unavailable</h1></body></html>"
#: The scopes a token has when the test does not name them (`x-oauth-scopes`): the
#: manifest's, plus those `approval-bot doctor` uses to read channels.
ALL_SCOPES = frozenset(
    {
        "channels:history",
        "chat:write",
        "commands",
        "groups:history",
        "im:write",
        "usergroups:read",
        "channels:read",
        "groups:read",
        "users:read",
    }
)


@dataclass
class Call:
    """One Web API request as the emulator received and answered it."""

    method: str
    body: dict[str, Any]
    headers: Mapping[str, str]
    at: float  # time.monotonic() on arrival
    status: int = 200
    response: dict[str, Any] | None = None
    #: The token the call presented, as it came, and where: "header" (`Authorization:
    #: Bearer`), "form" (a form body's `token`); None: it presented none Slack reads.
    token: str | None = None
    token_from: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and bool(self.response and self.response.get("ok"))


@dataclass
class Posted:
    """One POST to a response_url on the emulator."""

    name: str
    body: dict[str, Any]
    at: float


@dataclass
class _Fault:
    # "error" | "ratelimit" | "server" | "late" (do the work, answer after `value` s)
    # | "slow" (wait `value` s, then do the work and answer)
    kind: str
    value: Any
    times: int
    #: Only calls whose body has these values (e.g. one message's `ts`); None: every call.
    when: Mapping[str, Any] | None = None


class _SlackError(Exception):
    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra


class SlackEmulator:
    """Slack Web API emulator on 127.0.0.1 with an ephemeral port, started in the test's loop."""

    TEAM_ID = "T0EMULATED"
    BOT_USER_ID = "U0BOTUSER"
    BOT_ID = "B0BOTID"
    APP_ID = "A0APPID"

    def __init__(
        self,
        *,
        token: str = BOT_TOKEN,
        app_token: str = APP_TOKEN,
        channels: Iterable[str] | None = None,
        not_in_channels: Iterable[str] = (),
        users: Mapping[str, Mapping[str, Any]] | None = None,
        usergroups: Mapping[str, Iterable[str]] | None = None,
        latency: float = 0.0,
        scopes: Iterable[str] | None = None,
        app_scopes: Iterable[str] = ("connections:write",),
        channel_names: Mapping[str, str] | None = None,
        clock_offset: float = 0.0,
        host: str = "127.0.0.1",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.token = token
        #: The rate limiter's clock; a test that checks refill timing passes its own.
        self.clock = clock
        self.app_token = app_token
        #: Tokens revoked (`revoke`): Slack answers `token_revoked`.
        self.revoked: set[str] = set()
        self.channels: set[str] | None = None if channels is None else set(channels)
        self.not_in_channels = set(not_in_channels)
        self.users: dict[str, dict[str, Any]] | None = None
        if users is not None:
            self.users = {}
            for uid, info in users.items():
                self.add_user(uid, **info)
        self.usergroups = {g: list(u) for g, u in (usergroups or {}).items()}
        self.latency = latency
        self.latency_by_method: dict[str, float] = {}
        #: The bot token's scopes; None grants all. Methods that need one they lack answer
        #: `missing_scope` (conversations.history and conversations.info check, per channel type).
        self.scopes: set[str] | None = None if scopes is None else set(scopes)
        #: The app-level token's scopes: `apps.connections.open` needs connections:write.
        self.app_scopes = set(app_scopes)
        #: Channel names for conversations.info (default: the id, lower-cased).
        self.channel_names = dict(channel_names or {})
        #: Seconds Slack's clock is ahead of ours: the `Date` header of every answer.
        self.clock_offset = clock_offset
        self.host = host
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._sockets: list[web.WebSocketResponse] = []
        self._tickets: set[str] = set()
        self._acks: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._round_robin = itertools.count()
        self._changed = asyncio.Event()
        self._last_ts = 0
        self._rate: tuple[float, float] | None = None
        self.reset()

    # ----- lifecycle

    async def start(self) -> Self:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._handle_api)
        app.router.add_post("/response/{name}", self._handle_response_url)
        app.router.add_get("/socket/link/", self._handle_socket)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        for ws in list(self._sockets):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"emulator stopped")
        for fut in self._acks.values():
            fut.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def api_url(self) -> str:
        """Give this to AsyncWebClient(base_url=...); ends with '/' as slack_sdk expects."""
        return f"{self.base_url}/api/"

    def response_url(self, name: str, *, channel: str | None = None, ts: str | None = None) -> str:
        """A response_url here; bound to (channel, ts) it honours replace/delete_original."""
        if channel is not None and ts is not None:
            self._response_targets[name] = (channel, ts)
        return f"{self.base_url}/response/{name}"

    # ----- state and configuration

    def reset(self) -> None:
        """Forget calls, responses, messages, views, faults, rate limits; users/channels stay."""
        self.calls: list[Call] = []
        #: (method, body, time.monotonic()) of every request as it arrived, before any
        #: latency: a call here and not yet in `calls` is in flight.
        self.arrivals: list[tuple[str, dict[str, Any], float]] = []
        self._outage: int | None = None
        self._by_method: dict[str, list[Call]] = {}
        self.responses: list[Posted] = []
        self.socket_acks: list[dict[str, Any]] = []
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        self.views: dict[str, dict[str, Any]] = {}
        #: Each user's published App Home view (views.publish).
        self.home_views: dict[str, dict[str, Any]] = {}
        self._dms: dict[tuple[str, ...], str] = {}
        self._faults: dict[str, deque[_Fault]] = {}
        self._buckets: dict[str, tuple[float, float]] = {}
        self._response_targets: dict[str, tuple[str, str]] = {}
        self._rate = None
        self._method_rates: dict[str, tuple[float, float]] = {}
        self._notify()

    def add_user(
        self,
        user_id: str,
        name: str | None = None,
        real_name: str | None = None,
        display_name: str | None = None,
        **extra: Any,
    ) -> None:
        if self.users is None:
            self.users = {}
        self.users[user_id] = _user(user_id, name, real_name, display_name, self.TEAM_ID) | extra

    def add_usergroup(self, group_id: str, users: Iterable[str]) -> None:
        self.usergroups[group_id] = list(users)

    def revoke(self, token: str) -> None:
        """Revoke `token` (the bot's or the app's), as uninstalling the app or `auth.revoke`
        does: every call with it answers `token_revoked` from now on."""
        self.revoked.add(token)

    def set_latency(self, seconds: float, method: str | None = None) -> None:
        if method is None:
            self.latency = seconds
        else:
            self.latency_by_method[method] = seconds

    def fail_next(self, method: str, error: str = "channel_not_found", times: int = 1) -> None:
        self._faults.setdefault(method, deque()).append(_Fault("error", error, times))

    def rate_limit_next(self, method: str, retry_after: int = 1, times: int = 1) -> None:
        self._faults.setdefault(method, deque()).append(_Fault("ratelimit", retry_after, times))

    def server_error_next(
        self, method: str, status: int = 500, times: int = 1, when: Mapping[str, Any] | None = None
    ) -> None:
        """The next `times` calls of `method` (those whose body has the values in `when`, if
        given) answer HTTP `status` with an HTML page, doing nothing."""
        self._faults.setdefault(method, deque()).append(_Fault("server", status, times, when))

    def slow_next(self, method: str, seconds: float, times: int = 1) -> None:
        """Take `seconds` before doing the work and answering (a client that gives up
        sooner sees a timeout, and the work is done all the same, later)."""
        self._faults.setdefault(method, deque()).append(_Fault("slow", seconds, times))

    def answer_late_next(self, method: str, seconds: float, times: int = 1) -> None:
        """Do the work at once, then answer only after `seconds` (a client that gave up by
        then never learns that its call succeeded)."""
        self._faults.setdefault(method, deque()).append(_Fault("late", seconds, times))

    def start_outage(self, status: int = 503) -> None:
        """Every Web API call answers HTTP `status` (an HTML page) until `end_outage`."""
        self._outage = status

    def end_outage(self) -> None:
        self._outage = None

    def arrived(self, method: str) -> int:
        """How many `method` requests have arrived (answered or still in flight)."""
        return sum(1 for m, _, _ in self.arrivals if m == method)

    def enforce_rate(self, per_channel_per_second: float = 1.0, burst: int = 1) -> None:
        """Token bucket per channel for chat.postMessage; over the limit → 429 + Retry-After."""
        self._rate = (per_channel_per_second, float(burst))
        self._buckets.clear()

    def enforce_method_rate(self, method: str, per_minute: float, burst: int) -> None:
        """Token bucket for `method` across the workspace (Slack's method tiers: chat.update
        is Tier 3, about 50 a minute with bursts tolerated); over it → 429 + Retry-After."""
        self._method_rates[method] = (per_minute / 60.0, float(burst))
        self._buckets.pop(f"method:{method}", None)

    def calls_to(self, method: str, *, ok: bool | None = None) -> list[Call]:
        calls = self._by_method.get(method, [])
        return list(calls) if ok is None else [c for c in calls if c.ok == ok]

    def messages_in(self, channel: str) -> list[dict[str, Any]]:
        return [m for (ch, ts), m in sorted(self.messages.items()) if ch == channel]

    # ----- waiting (event based)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_until(
        self,
        predicate: Callable[[], bool],
        timeout: float = 15.0,  # noqa: ASYNC109 - generous: a loaded machine is slow
        what: str = "condition",
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                seen = sorted({c.method for c in self.calls})
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; saw {seen}")
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass

    async def wait_for(
        self,
        method: str,
        count: int = 1,
        timeout: float = 15.0,  # noqa: ASYNC109 - generous: a loaded machine is slow
        *,
        ok: bool | None = None,
    ) -> list[Call]:
        def enough() -> bool:
            calls = self._by_method.get(method, [])
            return len(calls) >= count and (
                ok is None or len(self.calls_to(method, ok=ok)) >= count
            )

        await self.wait_until(enough, timeout, f"{count} x {method}")
        return self.calls_to(method, ok=ok)

    async def wait_for_response(
        self,
        name: str | None = None,
        count: int = 1,
        timeout: float = 15.0,  # noqa: ASYNC109 - generous: a loaded machine is slow
    ) -> list[Posted]:
        def matching() -> list[Posted]:
            return [r for r in self.responses if name is None or r.name == name]

        await self.wait_until(lambda: len(matching()) >= count, timeout, f"response_url {name}")
        return matching()

    # ----- HTTP handlers

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        method = request.match_info["method"]
        body, form = await _read_parts(request)
        token, token_from = _presented(request.headers, form)
        self.arrivals.append((method, body, arrived))
        self._notify()
        delay = self.latency_by_method.get(method, self.latency)
        queue = self._faults.get(method)
        if queue and queue[0].kind == "slow":
            delay += float(self._take_fault(method).value)  # type: ignore[union-attr]
        if delay > 0:
            await asyncio.sleep(delay)  # slow: the work is done after the delay
        late = 0.0
        if self._outage is not None:
            status, payload, headers = self._outage, None, {}
        else:
            status, payload, headers, late = self._dispatch(method, body, token, token_from)
        snapshot = CIMultiDictProxy(CIMultiDict(request.headers))
        call = Call(method, body, snapshot, arrived, status, payload, token, token_from)
        self.calls.append(call)
        self._by_method.setdefault(method, []).append(call)
        self._notify()
        if late > 0:
            await asyncio.sleep(late)  # done already; the answer comes late
        if payload is None:
            return web.Response(status=status, text=SERVER_ERROR_PAGE, content_type="text/html")
        headers = {**headers, "Date": formatdate(time.time() + self.clock_offset, usegmt=True)}
        if token == self.token and token not in self.revoked:
            # Slack lists the token's scopes on every Web API answer.
            headers["x-oauth-scopes"] = ",".join(sorted(self.granted_scopes))
        return web.json_response(payload, status=status, headers=headers)

    @property
    def granted_scopes(self) -> set[str]:
        """The bot token's scopes as `x-oauth-scopes` lists them (None grants ALL_SCOPES)."""
        return set(ALL_SCOPES) if self.scopes is None else set(self.scopes)

    def _refusal(self, method: str, token: str | None, token_from: str | None) -> str | None:
        """Slack's error for a call to `method` that presented `token` (from `token_from`),
        or None when the token may call it."""
        if not token:
            return "not_authed"
        if token not in (self.token, self.app_token):
            return "invalid_auth"  # a token Slack does not know (a masked one too)
        if token in self.revoked:
            return "token_revoked"
        if token == self.app_token and token_from != "header":
            return "invalid_auth"  # app-level tokens are read from the header only
        if (token == self.app_token) != (method == "apps.connections.open"):
            return "not_allowed_token_type"
        return None

    def _dispatch(
        self, method: str, body: dict[str, Any], token: str | None, token_from: str | None
    ) -> tuple[int, dict[str, Any] | None, dict[str, str], float]:
        """(status, JSON body or None for an HTML error page, headers, seconds to hold the
        answer back after the work is done)."""
        handler = self._methods().get(method)
        if handler is None:
            return 200, {"ok": False, "error": "unknown_method"}, {}, 0.0
        refused = self._refusal(method, token, token_from)
        if refused is not None:
            return 200, {"ok": False, "error": refused}, {}, 0.0
        fault = self._take_fault(method, body)
        late = float(fault.value) if fault is not None and fault.kind == "late" else 0.0
        if fault is not None and fault.kind == "server":
            return int(fault.value), None, {}, 0.0
        if fault is not None and fault.kind == "ratelimit":
            limited = {"ok": False, "error": "ratelimited"}
            return 429, limited, {"Retry-After": str(fault.value)}, 0.0
        if fault is not None and fault.kind == "error":
            return 200, {"ok": False, "error": str(fault.value)}, {}, 0.0
        wait = 0.0
        if method in self._method_rates:
            wait = self._take_token(f"method:{method}", self._method_rates[method])
        if method == "chat.postMessage" and self._rate is not None and wait <= 0:
            wait = self._take_token(str(body.get("channel", "")), self._rate)
        if wait > 0:
            retry_after = str(max(1, math.ceil(wait)))
            limited = {"ok": False, "error": "ratelimited"}
            return 429, limited, {"Retry-After": retry_after}, 0.0
        try:
            return 200, {"ok": True, **handler(body)}, {}, late
        except _SlackError as e:
            return 200, {"ok": False, "error": e.error, **e.extra}, {}, late

    def _take_fault(self, method: str, body: Mapping[str, Any] | None = None) -> _Fault | None:
        """The first fault queued for `method` that applies to a call with `body`, counted."""
        queue = self._faults.get(method)
        if not queue:
            return None
        for fault in queue:
            if fault.when is None or all((body or {}).get(k) == v for k, v in fault.when.items()):
                break
        else:
            return None
        fault.times -= 1
        if fault.times <= 0:
            queue.remove(fault)
        return fault

    def _take_token(self, bucket: str, limit: tuple[float, float]) -> float:
        """Consume one token of `bucket` (a channel, or `method:<name>`) under `limit`
        (tokens per second, burst); return seconds to wait if none is available."""
        rate, burst = limit
        now = self.clock()
        tokens, updated = self._buckets.get(bucket, (burst, now))
        tokens = min(burst, tokens + (now - updated) * rate)
        if tokens >= 1:
            self._buckets[bucket] = (tokens - 1, now)
            return 0.0
        self._buckets[bucket] = (tokens, now)
        return (1 - tokens) / rate

    async def _handle_response_url(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        body = await _read_body(request)
        self.responses.append(Posted(name, body, time.monotonic()))
        target = self._response_targets.get(name)
        if target is not None and target in self.messages:
            if _truthy(body.get("delete_original")):
                del self.messages[target]
            elif _truthy(body.get("replace_original")):
                self._replace(target, body)
        self._notify()
        return web.Response(text="ok")

    # ----- Socket Mode

    async def _handle_socket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid ticket")
        self._tickets.discard(ticket)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        hello = {
            "type": "hello",
            "num_connections": len(self._sockets) + 1,
            "debug_info": {"host": "applink-emulator", "approximate_connection_time": 18060},
            "connection_info": {"app_id": self.APP_ID},
        }
        await ws.send_json(hello)
        self._sockets.append(ws)
        self._notify()
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                self.socket_acks.append(frame)
                fut = self._acks.get(str(frame.get("envelope_id")))
                if fut is not None and not fut.done():
                    fut.set_result(frame)
                self._notify()
        finally:
            self._sockets.remove(ws)
            self._notify()
        return ws

    @property
    def socket_connections(self) -> int:
        return len(self._sockets)

    async def socket_send(
        self,
        envelope_type: str,
        payload: dict[str, Any],
        *,
        accepts_response_payload: bool = False,
        timeout: float = 15.0,  # noqa: ASYNC109 - generous: a loaded machine is slow
    ) -> dict[str, Any]:
        """Send an envelope over a live socket (round robin) and return the client's ack frame."""
        await self.wait_until(lambda: bool(self._sockets), timeout, "a Socket Mode connection")
        envelope_id = str(uuid.uuid4())
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._acks[envelope_id] = fut
        ws = self._sockets[next(self._round_robin) % len(self._sockets)]
        envelope = {
            "envelope_id": envelope_id,
            "type": envelope_type,
            "accepts_response_payload": accepts_response_payload,
            "payload": payload,
        }
        try:
            await ws.send_json(envelope)
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._acks.pop(envelope_id, None)

    async def socket_send_interactive(
        self,
        payload: dict[str, Any],
        *,
        accepts_response_payload: bool | None = None,
        timeout: float = 15.0,  # noqa: ASYNC109 - generous: a loaded machine is slow
    ) -> dict[str, Any]:
        """Like Slack: view_submission / block_suggestion envelopes accept a response payload."""
        if accepts_response_payload is None:
            accepts_response_payload = payload.get("type") in RESPONSE_PAYLOAD_TYPES
        accepts = accepts_response_payload
        return await self.socket_send(
            "interactive", payload, accepts_response_payload=accepts, timeout=timeout
        )

    async def socket_disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask every connected client to reconnect, as Slack does before rotating a socket."""
        for ws in list(self._sockets):
            await ws.send_json(
                {"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-emulator"}}
            )

    # ----- Web API methods

    def _methods(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        return {
            "auth.test": self._auth_test,
            "apps.connections.open": self._connections_open,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.postEphemeral": self._post_ephemeral,
            "views.open": self._views_open,
            "views.push": self._views_push,
            "views.update": self._views_update,
            "views.publish": self._views_publish,
            "chat.getPermalink": self._get_permalink,
            "usergroups.users.list": self._usergroup_users,
            "users.info": self._users_info,
            "conversations.open": self._conversations_open,
            "conversations.history": self._conversations_history,
            "conversations.replies": self._conversations_replies,
            "conversations.info": self._conversations_info,
        }

    def _auth_test(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": "https://emulated.slack.com/",
            "team": "Emulated Workspace",
            "user": "approval-bot",
            "team_id": self.TEAM_ID,
            "user_id": self.BOT_USER_ID,
            "bot_id": self.BOT_ID,
            "is_enterprise_install": False,
        }

    def _connections_open(self, body: dict[str, Any]) -> dict[str, Any]:
        if "connections:write" not in self.app_scopes:
            provided = ",".join(sorted(self.app_scopes))
            raise _SlackError("missing_scope", needed="connections:write", provided=provided)
        ticket = uuid.uuid4().hex
        self._tickets.add(ticket)
        host = self.host
        return {"url": f"ws://{host}:{self.port}/socket/link/?ticket={ticket}&app_id={self.APP_ID}"}

    def _channel(self, body: dict[str, Any]) -> str:
        channel = str(body.get("channel") or "")
        if channel[:1] in {"U", "W"} and self._user(channel):
            channel = self._dm((channel,))
        elif not channel or (self.channels is not None and channel not in self.channels):
            raise _SlackError("channel_not_found")
        if channel in self.not_in_channels:
            raise _SlackError("not_in_channel")
        return channel

    def _check_content(self, body: dict[str, Any]) -> None:
        text, blocks = body.get("text"), body.get("blocks")
        if not (text or blocks or body.get("attachments") or body.get("markdown_text")):
            raise _SlackError("no_text")
        if isinstance(text, str) and len(text) > MAX_TEXT:
            raise _SlackError("msg_too_long")
        if isinstance(blocks, str):
            raise _SlackError("invalid_blocks_format")
        if blocks is not None:
            errors = _block_errors(blocks, MAX_MESSAGE_BLOCKS)
            if errors:
                raise _SlackError(
                    "invalid_blocks", errors=errors, response_metadata={"messages": errors}
                )

    def _next_ts(self) -> str:
        self._last_ts = max(int(time.time() * 1_000_000), self._last_ts + 1)
        return f"{self._last_ts // 1_000_000}.{self._last_ts % 1_000_000:06d}"

    def _post_message(self, body: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(body)
        self._check_content(body)
        _check_metadata(body)
        ts = self._next_ts()
        message: dict[str, Any] = {
            "type": "message",
            "user": self.BOT_USER_ID,
            "bot_id": self.BOT_ID,
            "app_id": self.APP_ID,
            "team": self.TEAM_ID,
            "text": body.get("text") or "",
            "ts": ts,
        }
        for key in ("blocks", "attachments", "markdown_text", "thread_ts", "metadata"):
            if body.get(key) is not None:
                message[key] = body[key]
        self.messages[(channel, ts)] = message
        return {"channel": channel, "ts": ts, "message": message}

    def _replace(self, key: tuple[str, str], body: dict[str, Any]) -> dict[str, Any]:
        message = dict(self.messages[key])
        if "text" in body:
            message["text"] = body["text"] or ""
        if body.get("metadata") is not None:  # absent keeps the message's metadata
            message["metadata"] = body["metadata"]
        for field in ("blocks", "attachments"):
            if field in body:  # absent keeps the old value, an empty list removes it (like Slack)
                if body[field]:
                    message[field] = body[field]
                else:
                    message.pop(field, None)
        message["edited"] = {"user": self.BOT_USER_ID, "ts": self._next_ts()}
        self.messages[key] = message
        return message

    def _update(self, body: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(body)
        key = (channel, str(body.get("ts") or ""))
        if key not in self.messages:
            raise _SlackError("message_not_found")
        self._check_content(body)
        _check_metadata(body)
        message = self._replace(key, body)
        return {"channel": channel, "ts": key[1], "text": message["text"], "message": message}

    def _post_ephemeral(self, body: dict[str, Any]) -> dict[str, Any]:
        self._channel(body)
        user = str(body.get("user") or "")
        if not self._user(user):
            raise _SlackError("user_not_in_channel")
        self._check_content(body)
        return {"message_ts": self._next_ts()}

    def _views_open(self, body: dict[str, Any]) -> dict[str, Any]:
        if not body.get("trigger_id") and not body.get("interactivity_pointer"):
            raise _SlackError("invalid_trigger_id")
        view_id = f"V{uuid.uuid4().hex[:10].upper()}"
        view = self._view(view_id, body.get("view"))
        view["root_view_id"] = view_id
        self.views[view_id] = view
        return {"view": view}

    def _views_push(self, body: dict[str, Any]) -> dict[str, Any]:
        """As Slack: a modal on top of the one a click came from (a trigger is needed)."""
        if not body.get("trigger_id") and not body.get("interactivity_pointer"):
            raise _SlackError("invalid_trigger_id")
        view_id = f"V{uuid.uuid4().hex[:10].upper()}"
        view = self._view(view_id, body.get("view"))
        view["root_view_id"] = view_id
        self.views[view_id] = view
        return {"view": view}

    def _views_update(self, body: dict[str, Any]) -> dict[str, Any]:
        view_id = body.get("view_id")
        if not view_id and body.get("external_id"):
            found = [v for v in self.views.values() if v["external_id"] == body["external_id"]]
            view_id = found[0]["id"] if found else None
        old = self.views.get(str(view_id))
        if old is None:
            raise _SlackError("not_found")
        if body.get("hash") and body["hash"] != old["hash"]:
            raise _SlackError("hash_conflict")
        view = self._view(old["id"], body.get("view"))
        view["root_view_id"] = old["root_view_id"]
        self.views[old["id"]] = view
        return {"view": view}

    def _get_permalink(self, body: dict[str, Any]) -> dict[str, Any]:
        """As Slack: the message's link, `message_not_found` for one that is not there."""
        channel = self._channel(body)
        ts = str(body.get("message_ts") or "")
        if (channel, ts) not in self.messages:
            raise _SlackError("message_not_found")
        link = f"https://emulated.slack.com/archives/{channel}/p{ts.replace('.', '')}"
        return {"channel": channel, "permalink": link}

    def _views_publish(self, body: dict[str, Any]) -> dict[str, Any]:
        """As Slack: a `home` view for `user_id` (who must exist when users are known), the
        same block checks as any view, `hash_conflict` for a stale `hash`."""
        user = str(body.get("user_id") or "")
        if not user:
            raise _SlackError("invalid_arguments", response_metadata={"messages": ["user_id"]})
        if self.users is not None and user not in self.users:
            raise _SlackError("user_not_found")
        spec = body.get("view")
        if isinstance(spec, str):
            try:
                spec = json.loads(spec)
            except ValueError:
                raise _SlackError("invalid_arguments") from None
        if not isinstance(spec, dict) or spec.get("type") != "home":
            raise _SlackError("invalid_arguments", response_metadata={"messages": ["not home"]})
        old = self.home_views.get(user)
        if body.get("hash") and old is not None and body["hash"] != old["hash"]:
            raise _SlackError("hash_conflict")
        view_id = old["id"] if old else f"V{uuid.uuid4().hex[:10].upper()}"
        view = self._view(view_id, spec)
        view["root_view_id"] = view_id
        self.home_views[user] = view
        return {"view": view}

    def _view(self, view_id: str, spec: Any) -> dict[str, Any]:
        if not isinstance(spec, dict) or spec.get("type") not in {"modal", "home"}:
            raise _SlackError("invalid_arguments", response_metadata={"messages": ["bad view"]})
        errors = _block_errors(spec.get("blocks", []), MAX_VIEW_BLOCKS)
        for field in ("title", "submit", "close"):
            if field in spec or (field == "title" and spec["type"] == "modal"):
                _text(errors, spec.get(field), 24, f"/view/{field}")
        if len(str(spec.get("private_metadata", ""))) > 3000:
            errors.append("must be less than 3001 characters [json-pointer:/view/private_metadata]")
        if errors:
            messages = [f"[ERROR] {e}" for e in errors]
            raise _SlackError("invalid_arguments", response_metadata={"messages": messages})
        view = {k: spec.get(k) for k in ("type", "title", "submit", "close")}
        view |= {k: spec.get(k, "") for k in ("private_metadata", "callback_id", "external_id")}
        view |= {k: bool(spec.get(k)) for k in ("clear_on_close", "notify_on_close")}
        hash_ = f"{int(time.time())}.{uuid.uuid4().hex[:8]}"
        ids = {"id": view_id, "team_id": self.TEAM_ID, "app_id": self.APP_ID, "bot_id": self.BOT_ID}
        return (
            view | ids | {"blocks": spec.get("blocks", []), "state": {"values": {}}, "hash": hash_}
        )

    def _usergroup_users(self, body: dict[str, Any]) -> dict[str, Any]:
        group = str(body.get("usergroup") or "")
        if group not in self.usergroups:
            raise _SlackError("no_such_subteam")
        return {"users": list(self.usergroups[group])}

    def _user(self, user_id: str) -> dict[str, Any] | None:
        if self.users is not None:
            return self.users.get(user_id)
        if len(user_id) > 1 and user_id[0] in "UW" and user_id.isalnum() and user_id.isupper():
            return _user(user_id, None, None, None, self.TEAM_ID)
        return None

    def _users_info(self, body: dict[str, Any]) -> dict[str, Any]:
        user = self._user(str(body.get("user") or ""))
        if user is None:
            raise _SlackError("user_not_found")
        return {"user": user}

    def _dm(self, users: tuple[str, ...]) -> str:
        key = tuple(sorted(users))
        if key not in self._dms:
            self._dms[key] = f"D{len(self._dms) + 1:08d}"
            if self.channels is not None:
                self.channels.add(self._dms[key])
        return self._dms[key]

    def _conversations_open(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("channel"):
            return {"channel": {"id": self._channel(body)}}
        users = tuple(u for u in str(body.get("users") or "").split(",") if u)
        if not users:
            raise _SlackError("users_list_not_supplied")
        if any(self._user(u) is None for u in users):
            raise _SlackError("user_not_found")
        channel: dict[str, Any] = {"id": self._dm(users)}
        if _truthy(body.get("return_im")):
            channel |= {"is_im": len(users) == 1, "user": users[0], "created": int(time.time())}
        return {"channel": channel}

    def _conversations_info(self, body: dict[str, Any]) -> dict[str, Any]:
        """A channel's info as Slack gives it to a bot: `is_member` false for a channel the
        bot was not invited to; `missing_scope` without channels:read / groups:read."""
        channel = str(body.get("channel") or "")
        if not channel or (self.channels is not None and channel not in self.channels):
            raise _SlackError("channel_not_found")
        private = channel.startswith("G")
        needed = "groups:read" if private else "channels:read"
        if needed not in self.granted_scopes:
            raise _SlackError("missing_scope", needed=needed, provided=",".join(self.scopes or ()))
        return {
            "channel": {
                "id": channel,
                "name": self.channel_names.get(channel, channel.lower()),
                "is_channel": not private,
                "is_private": private,
                "is_archived": False,
                "is_member": channel not in self.not_in_channels,
            }
        }

    def _conversations_history(self, body: dict[str, Any]) -> dict[str, Any]:
        """Top-level messages, newest first, between `oldest` and `latest` (exclusive unless
        `inclusive`), `limit` a page (default 100, at most 999), cursor paging; `metadata`
        only with `include_all_metadata`. Needs the *:history scope of the channel's type."""
        channel = self._channel(body)
        needed = {"C": "channels:history", "G": "groups:history", "D": "im:history"}.get(
            channel[:1], "channels:history"
        )
        if self.scopes is not None and needed not in self.scopes:
            provided = ",".join(sorted(self.scopes))
            raise _SlackError("missing_scope", needed=needed, provided=provided)
        inclusive = _truthy(body.get("inclusive"))
        oldest = float(body.get("oldest") or 0)
        latest = float(body.get("latest") or time.time() + 1)
        try:
            limit = min(999, max(1, int(body.get("limit") or 100)))
            offset = int(str(body.get("cursor") or "0").removeprefix("next_ts:") or 0)
        except ValueError:
            raise _SlackError("invalid_cursor") from None

        def within(ts: float) -> bool:
            low = ts >= oldest if inclusive else ts > oldest
            high = ts <= latest if inclusive else ts < latest
            return low and high

        found = [
            m
            for (ch, ts), m in sorted(self.messages.items(), key=lambda kv: -float(kv[0][1]))
            if ch == channel and within(float(ts)) and not m.get("thread_ts")
        ]
        page = found[offset : offset + limit]
        keep_metadata = _truthy(body.get("include_all_metadata"))
        messages = [{k: v for k, v in m.items() if keep_metadata or k != "metadata"} for m in page]
        more = offset + limit < len(found)
        answer: dict[str, Any] = {"messages": messages, "has_more": more, "pin_count": 0}
        if more:
            answer["response_metadata"] = {"next_cursor": f"next_ts:{offset + limit}"}
        return answer

    def _conversations_replies(self, body: dict[str, Any]) -> dict[str, Any]:
        """A thread as Slack gives it: the parent message `ts` and its replies, oldest first,
        between `oldest` and `latest` (exclusive unless `inclusive`), `limit` a page, cursor
        paging; `metadata` only with `include_all_metadata`; `thread_not_found` for a `ts`
        that is no message of the channel. Needs the *:history scope of the channel's type."""
        channel = self._channel(body)
        needed = {"C": "channels:history", "G": "groups:history", "D": "im:history"}.get(
            channel[:1], "channels:history"
        )
        if self.scopes is not None and needed not in self.scopes:
            provided = ",".join(sorted(self.scopes))
            raise _SlackError("missing_scope", needed=needed, provided=provided)
        root = str(body.get("ts") or "")
        if (channel, root) not in self.messages:
            raise _SlackError("thread_not_found")
        inclusive = _truthy(body.get("inclusive"))
        oldest = float(body.get("oldest") or 0)
        latest = float(body.get("latest") or time.time() + 1)
        try:
            limit = min(1000, max(1, int(body.get("limit") or 1000)))
            offset = int(str(body.get("cursor") or "0").removeprefix("next_ts:") or 0)
        except ValueError:
            raise _SlackError("invalid_cursor") from None

        def within(ts: float) -> bool:
            low = ts >= oldest if inclusive else ts > oldest
            high = ts <= latest if inclusive else ts < latest
            return low and high

        found = [
            m
            for (ch, ts), m in sorted(self.messages.items(), key=lambda kv: float(kv[0][1]))
            if ch == channel
            and (ts == root or m.get("thread_ts") == root)
            and (ts == root or within(float(ts)))
        ]
        page = found[offset : offset + limit]
        keep_metadata = _truthy(body.get("include_all_metadata"))
        messages = [{k: v for k, v in m.items() if keep_metadata or k != "metadata"} for m in page]
        more = offset + limit < len(found)
        answer: dict[str, Any] = {"messages": messages, "has_more": more}
        if more:
            answer["response_metadata"] = {"next_cursor": f"next_ts:{offset + limit}"}
        return answer


# ----- request parsing and Block Kit limits


def _check_metadata(body: dict[str, Any]) -> None:
    """Slack's message metadata: an object with a string `event_type` and an object
    `event_payload`."""
    meta = body.get("metadata")
    if meta is None:
        return
    if not isinstance(meta, dict):
        raise _SlackError("invalid_metadata_format")
    if not isinstance(meta.get("event_type"), str) or not isinstance(
        meta.get("event_payload"), dict
    ):
        raise _SlackError("invalid_metadata_schema")


async def _read_body(request: web.Request) -> dict[str, Any]:
    """Query string + form or JSON body, with JSON-valued form fields (blocks, view...) decoded."""
    return (await _read_parts(request))[0]


def _presented(
    headers: Mapping[str, str], form: Mapping[str, str]
) -> tuple[str | None, str | None]:
    """The token a Web API call presents as Slack reads it, and where it was: an
    `Authorization: Bearer` header first, else a form body's `token` (never a JSON body's,
    never the query string's)."""
    scheme, _, value = headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip(), "header"
    token = form.get("token")
    return (token, "form") if token else (None, None)


async def _read_parts(request: web.Request) -> tuple[dict[str, Any], dict[str, str]]:
    """(the call's arguments: the query string + the form or JSON body, JSON-valued form
    fields (blocks, view...) decoded; the form body's own fields, as sent)."""
    body: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        raw = await request.text()
        if raw.strip():
            parsed = json.loads(raw)
            body |= parsed if isinstance(parsed, dict) else {"_json": parsed}
        return body, {}
    form = await request.post()
    fields = {k: v if isinstance(v, str) else str(v) for k, v in form.items()}
    body |= fields
    for key in JSON_FIELDS & body.keys():
        if isinstance(body[key], str) and body[key][:1] in {"[", "{"}:
            try:
                body[key] = json.loads(body[key])
            except ValueError:
                pass
    return body, fields


def _truthy(value: Any) -> bool:
    return value in (True, 1, "1", "true", "True")


def _user(
    user_id: str, name: str | None, real_name: str | None, display: str | None, team: str
) -> dict[str, Any]:
    """A users.info user object (the fields a bot reads)."""
    name = name or user_id.lower()
    real = real_name or name.title()
    display = display if display is not None else name
    profile = {"real_name": real, "display_name": display, "team": team}
    profile |= {"real_name_normalized": real, "display_name_normalized": display}
    user = {"id": user_id, "team_id": team, "name": name, "real_name": real, "profile": profile}
    return user | {"deleted": False, "is_bot": False, "is_admin": False, "tz": "Europe/London"}


def _text(errors: list[str], obj: Any, limit: int, path: str) -> None:
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        errors.append(f"must provide an object [json-pointer:{path}]")
    elif not obj["text"]:
        errors.append(f"must be more than 0 characters [json-pointer:{path}/text]")
    elif len(obj["text"]) > limit:
        errors.append(f"must be less than {limit + 1} characters [json-pointer:{path}/text]")


def _max_len(errors: list[str], value: Any, limit: int, path: str) -> None:
    if value is not None and len(str(value)) > limit:
        errors.append(f"must be less than {limit + 1} characters [json-pointer:{path}]")


def _element(errors: list[str], el: Any, path: str) -> None:
    if not isinstance(el, dict) or "type" not in el:
        errors.append(f"must provide an object with a type [json-pointer:{path}]")
        return
    _max_len(errors, el.get("action_id"), 255, f"{path}/action_id")
    if el["type"] == "button":
        _text(errors, el.get("text"), 75, f"{path}/text")
        _max_len(errors, el.get("value"), 2000, f"{path}/value")
        _max_len(errors, el.get("url"), 3000, f"{path}/url")
    options: list[Any] = el["options"] if isinstance(el.get("options"), list) else []
    if len(options) > 100:
        errors.append(f"no more than 100 items allowed [json-pointer:{path}/options]")
    for j, option in enumerate(o if isinstance(o, dict) else {} for o in options):
        _text(errors, option.get("text"), 75, f"{path}/options/{j}/text")
        _max_len(errors, option.get("value"), 150, f"{path}/options/{j}/value")


def _block_errors(blocks: Any, limit: int) -> list[str]:
    """Slack's Block Kit limits that a renderer can break, as Slack words its errors."""
    if not isinstance(blocks, list):
        return ["must be an array [json-pointer:/blocks]"]
    errors: list[str] = []
    if len(blocks) > limit:
        errors.append(f"no more than {limit} items allowed [json-pointer:/blocks]")
    block_ids: set[str] = set()
    for i, block in enumerate(blocks):
        path = f"/blocks/{i}"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            errors.append(f"must provide an object with a type [json-pointer:{path}]")
            continue
        if "block_id" in block:
            if block["block_id"] in block_ids:
                errors.append(f"duplicate block_id [json-pointer:{path}/block_id]")
            block_ids.add(block["block_id"])
            _max_len(errors, block["block_id"], 255, f"{path}/block_id")
        kind, elements = block["type"], block.get("elements")
        if kind == "section":
            if "text" in block or "fields" not in block:
                _text(errors, block.get("text"), 3000, f"{path}/text")
            for j, fld in enumerate(block.get("fields") or []):
                _text(errors, fld, 2000, f"{path}/fields/{j}")
            if len(block.get("fields") or []) > 10:
                errors.append(f"no more than 10 items allowed [json-pointer:{path}/fields]")
            if "accessory" in block:
                _element(errors, block["accessory"], f"{path}/accessory")
        elif kind == "header":
            _text(errors, block.get("text"), 150, f"{path}/text")
        elif kind in {"actions", "context"}:
            most = 25 if kind == "actions" else 10
            if not isinstance(elements, list) or not 1 <= len(elements) <= most:
                errors.append(f"must have 1 to {most} items [json-pointer:{path}/elements]")
            elif kind == "actions":
                for j, el in enumerate(elements):
                    _element(errors, el, f"{path}/elements/{j}")
        elif kind == "input":
            _text(errors, block.get("label"), 2000, f"{path}/label")
            _element(errors, block.get("element"), f"{path}/element")
    return errors
