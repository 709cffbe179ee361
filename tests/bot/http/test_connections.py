"""What a connection may hold of the bot's HTTP server (`bot/http/connections.py`): the header,
idle and body timeouts, and the connection cap, through the real bot on real Redis, with raw
sockets where a client misbehaves. Waiting for a reviewer is never cut: hooks and long-polls
(parked inside aiohttp or detached from it) outlive every timeout and are never closed for
room."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from approvals._internal.service import Actor
from bot.core.app import Bot
from bot.http.connections import HttpLimits, connection_cap
from tests.support import eventually
from tests.support.credentials import API_TOKEN
from tests.support.e2e import BotFactory

TOKEN = API_TOKEN
SHORT = HttpLimits(header_timeout=0.3, idle_timeout=0.4, body_timeout=0.4)
REVIEWER = Actor("U0REVIEWER")
HOOK_EVENT = {
    "hook_event_name": "PreToolUse",
    "session_id": "6a1d0b3e-9f2c-4e7a-8b5d-1c3f0e2a7d94",
    "transcript_path": "/home/dev/.claude/projects/-home-dev-app/6a1d0b3e.jsonl",
    "cwd": "/home/dev/app",
    "permission_mode": "default",
    "tool_name": "Bash",
    "tool_input": {"command": "terraform apply", "description": "Apply the plan"},
    "tool_use_id": "toolu_01Conn",
}


class Raw:
    """One raw TCP connection to the bot."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def closed_by_bot(self, within: float = 10.0) -> bool:
        """Whether the bot closes the connection (EOF or reset) within `within` s."""
        try:
            async with asyncio.timeout(within):
                while await self.reader.read(65536):
                    pass
        except TimeoutError:
            return False
        except ConnectionResetError:
            pass
        return True

    async def request(self, head: str, body: bytes = b"") -> tuple[int, bytes]:
        """Send one request; its status and body (read by Content-Length)."""
        self.writer.write(head.encode() + body)
        await self.writer.drain()
        async with asyncio.timeout(10):
            status_line = await self.reader.readline()
            length = 0
            while (line := await self.reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            answer = await self.reader.readexactly(length)
        return int(status_line.split()[1]), answer

    def close(self) -> None:
        self.writer.close()


@asynccontextmanager
async def raw(bot: Bot) -> AsyncIterator[Raw]:
    reader, writer = await asyncio.open_connection("127.0.0.1", bot.port)
    connection = Raw(reader, writer)
    try:
        yield connection
    finally:
        connection.close()


async def open_raw(bot: Bot) -> Raw:
    reader, writer = await asyncio.open_connection("127.0.0.1", bot.port)
    return Raw(reader, writer)


def get(path: str, *, token: str | None = TOKEN, version: str = "1.1") -> str:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"GET {path} HTTP/{version}\r\nHost: bot\r\n{auth}\r\n"


def post(path: str, length: int, *, token: str | None = TOKEN) -> str:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: bot\r\n{auth}Content-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    )


def hook_url(bot: Bot) -> str:
    return f"http://127.0.0.1:{bot.port}/hooks/claude-code?timeout=60"


async def open_connections(bot: Bot) -> int:
    assert bot.guard is not None
    return bot.guard.connections


# -- aiohttp's internals the guard reads ---------------------------------------------------------


async def test_the_installed_aiohttp_has_what_the_guard_reads() -> None:
    slots = set(RequestHandler.__slots__)
    assert {"_request_count", "_request_in_progress", "_next_keepalive_close_time"} <= slots

    async def handler(request: web.BaseRequest) -> web.Response:
        return web.Response()

    assert isinstance(web.Server(handler)._connections, dict)


def test_the_cap_leaves_files_for_the_rest_of_the_bot() -> None:
    assert connection_cap(256) == 128
    assert connection_cap(1024) == 512
    assert connection_cap(65536) == 65536 - 512
    assert connection_cap(20) == 10


# -- timeouts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("sent", [b"", b"POST /hooks/claude-code HTTP/1.1\r\nHost: bot\r\n"])
async def test_a_connection_that_sends_no_whole_request_head_is_closed(
    make_bot: BotFactory, sent: bytes
) -> None:
    bot = await make_bot(with_slack=False, http=SHORT)
    async with raw(bot) as conn:
        conn.writer.write(sent)
        assert await conn.closed_by_bot(), "still open long past the header timeout"


async def test_an_idle_kept_alive_connection_is_closed_after_the_idle_timeout(
    make_bot: BotFactory,
) -> None:
    bot = await make_bot(with_slack=False, http=SHORT)
    async with raw(bot) as conn:
        status, _ = await conn.request(get("/healthz", token=None))
        assert status == 200
        assert await conn.closed_by_bot()


async def test_a_hook_body_that_does_not_arrive_in_time_is_a_deny(make_bot: BotFactory) -> None:
    bot = await make_bot(with_slack=False, http=SHORT)
    body = json.dumps(HOOK_EVENT).encode()
    async with raw(bot) as conn:
        conn.writer.write(post("/hooks/claude-code", len(body)).encode() + body[:40])
        await conn.writer.drain()
        status_line = await asyncio.wait_for(conn.reader.readline(), 10)
        rest = await asyncio.wait_for(conn.reader.read(), 10)  # then the bot closes it
    assert status_line.startswith(b"HTTP/1.1 200")
    output = json.loads(rest.partition(b"\r\n\r\n")[2])
    specific = output["hookSpecificOutput"]
    assert specific["permissionDecision"] == "deny"
    assert "did not arrive in time" in specific["permissionDecisionReason"]
    assert b"connection: close" in rest.partition(b"\r\n\r\n")[0].lower()


async def test_an_api_body_that_does_not_arrive_in_time_is_408(make_bot: BotFactory) -> None:
    bot = await make_bot(with_slack=False, http=SHORT)
    async with raw(bot) as conn:
        conn.writer.write(post("/v1/approvals", 300).encode() + b'{"tool_name": "deploy", ')
        await conn.writer.drain()
        answer = await asyncio.wait_for(conn.reader.read(), 10)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head.lower()
    assert json.loads(body)["error"]["code"] == "body_timeout"
    assert bot.ctx is not None and await bot.ctx.store.list_pending() == []


async def test_waits_for_a_reviewer_outlive_every_timeout(
    make_bot: BotFactory, http: aiohttp.ClientSession
) -> None:
    """A hook call and long-polls (detached from aiohttp, and parked inside it: HTTP/1.0)
    wait far longer than the header, idle and body timeouts and get the decision."""
    bot = await make_bot(with_slack=False, http=SHORT)
    assert bot.ctx is not None
    hook = asyncio.create_task(
        http.post(hook_url(bot), json=HOOK_EVENT, headers={"Authorization": f"Bearer {TOKEN}"})
    )
    pending = await eventually(bot.ctx.store.list_pending, what="the hook's request")
    request_id = pending[0].id
    detached = asyncio.create_task(
        http.get(
            f"http://127.0.0.1:{bot.port}/v1/approvals/{request_id}?wait=30",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    )
    inside = await open_raw(bot)
    inside.writer.write(get(f"/v1/approvals/{request_id}?wait=30", version="1.0").encode())
    await eventually(lambda: bot.ctx is not None and bot.ctx.waiter.waiting >= 3, what="3 waits")
    await asyncio.sleep(4 * SHORT.idle_timeout)  # every timeout passes while they wait
    await bot.ctx.service.decide(request_id, "approve", REVIEWER)
    hook_resp = await asyncio.wait_for(hook, 10)
    assert (await hook_resp.json())["hookSpecificOutput"]["permissionDecision"] == "allow"
    long_poll = await asyncio.wait_for(detached, 10)
    assert long_poll.status == 200 and (await long_poll.json())["status"] == "approved"
    answer = await asyncio.wait_for(inside.reader.read(), 10)
    inside.close()
    assert answer.startswith(b"HTTP/1.0 200") and b'"approved"' in answer


# -- the cap -------------------------------------------------------------------------------------


async def test_at_the_cap_the_oldest_idle_strangers_make_room_first(
    make_bot: BotFactory, http: aiohttp.ClientSession
) -> None:
    bot = await make_bot(with_slack=False, http=HttpLimits(max_connections=6))
    agent = await open_raw(bot)  # an agent's kept-alive connection: authenticated, idle
    status, _ = await agent.request(get("/v1/approvals/apr_nonexistent00000000"))
    assert status == 404
    strangers = []
    for _ in range(10):  # idle, no request, no token
        strangers.append(await open_raw(bot))
        await eventually(lambda: open_connections(bot), what="the connection taken")
        await asyncio.sleep(0.02)
    async with http.post(
        hook_url(bot), json={**HOOK_EVENT, "hook_event_name": "PostToolUse"}
    ) as resp:
        assert (resp.status, await resp.json()) == (200, {})
    assert await strangers[0].closed_by_bot(), "the oldest stranger was kept"
    status, _ = await agent.request(get("/v1/approvals/apr_nonexistent00000000"))
    assert status == 404, "the authenticated connection was closed for a stranger"
    assert await open_connections(bot) <= 6
    assert bot.guard is not None and bot.guard.closed["idle, never authenticated"] >= 5
    for conn in (agent, *strangers):
        conn.close()


async def test_authenticated_waits_are_never_closed_for_room(
    make_bot: BotFactory, http: aiohttp.ClientSession
) -> None:
    """At a cap of 3 with a hook call and a detached long-poll waiting: a flood of strangers
    is turned away, the waits get their decision; with all 3 places authenticated and busy a
    newcomer is closed at once, and once they end, calls go through again."""
    bot = await make_bot(with_slack=False, http=HttpLimits(max_connections=3))
    assert bot.ctx is not None
    auth = {"Authorization": f"Bearer {TOKEN}"}
    hook = asyncio.create_task(http.post(hook_url(bot), json=HOOK_EVENT, headers=auth))
    pending = await eventually(bot.ctx.store.list_pending, what="the hook's request")
    request_id = pending[0].id
    waits = [
        asyncio.create_task(
            http.get(f"http://127.0.0.1:{bot.port}/v1/approvals/{request_id}?wait=30", headers=auth)
        )
        for _ in range(2)
    ]
    await eventually(lambda: bot.ctx is not None and bot.ctx.waiter.waiting >= 3, what="3 waits")
    strangers = [await open_raw(bot) for _ in range(20)]
    for stranger in strangers:
        assert await stranger.closed_by_bot()
    await bot.ctx.service.decide(request_id, "deny", REVIEWER, reason="not now")
    out = await (await asyncio.wait_for(hook, 10)).json()
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
    for wait in waits:
        resp = await asyncio.wait_for(wait, 10)
        assert (await resp.json())["status"] == "denied"
    assert bot.guard is not None and bot.guard.closed["refused at the cap"] >= 1
    for stranger in strangers:
        stranger.close()
    async with http.post(hook_url(bot), json={**HOOK_EVENT, "hook_event_name": "Stop"}) as resp:
        assert (resp.status, await resp.json()) == (200, {})


async def test_a_slow_unauthenticated_body_makes_room_before_an_idle_agent(
    make_bot: BotFactory,
) -> None:
    bot = await make_bot(with_slack=False, http=HttpLimits(max_connections=2))
    agent = await open_raw(bot)
    status, _ = await agent.request(get("/v1/approvals/apr_nonexistent00000000"))
    assert status == 404
    slow = await open_raw(bot)  # a Slack-style POST whose body never comes
    slow.writer.write(post("/slack/events", 4000, token=None).encode() + b"payload=")
    await slow.writer.drain()
    await asyncio.sleep(0.1)
    newcomer = await open_raw(bot)
    status, _ = await newcomer.request(get("/healthz", token=None))
    assert status in (200, 503)
    assert await slow.closed_by_bot()
    status, _ = await agent.request(get("/v1/approvals/apr_nonexistent00000000"))
    assert status == 404
    for conn in (agent, slow, newcomer):
        conn.close()
