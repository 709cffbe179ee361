"""`GatingProxy` forwards a call only when it was approved: a request that ends any other way
(denied, expired, withdrawn, in error: Slack refusing the channel, say) or gets no decision in
the wait budget answers the deny text, and the upstream is never called. In process: the SDK's
in-memory client on the test upstream (`tests/support/mcp_upstream.py`), the proxy on the
bot's own service and waiter, real Redis."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from approvals._internal.service import Actor
from approvals.client import ApprovalClient
from approvals.models import Decision
from bot.core.context import BotContext
from bot.mcp.http import BotTransport
from bot.mcp.proxy import GatingProxy, ProxyOptions
from bot.mcp.reviewer_wait import WaitOptions
from tests.support.mcp import pending_for
from tests.support.mcp_upstream import server as upstream_server

TOOL = "mcp__files__delete_file"


async def expire(ctx: BotContext, request_id: str) -> None:
    # What the sweeper writes when a route's deadline passes with no decision.
    await ctx.store.resolve(
        request_id, Decision.deny("approval timeout", by="timeout", via="timeout"), status="expired"
    )


async def withdraw(ctx: BotContext, request_id: str) -> None:
    await ctx.service.cancel(request_id, by="agent-a", reason="the agent stopped", via="api")


async def fail(ctx: BotContext, request_id: str) -> None:
    # What the dispatcher writes when Slack refuses the post for good.
    await ctx.store.resolve(request_id, Decision.error("channel_not_found", by="slack"))


async def deny(ctx: BotContext, request_id: str) -> None:
    await ctx.service.decide(request_id, "deny", Actor("U0REVIEWER"), reason="not today")


async def approve(ctx: BotContext, request_id: str) -> None:
    await ctx.service.decide(request_id, "approve", Actor("U0REVIEWER"))


Ending = Callable[[BotContext, str], Awaitable[None]]


@pytest.fixture
def upstream_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "upstream-calls.jsonl"
    monkeypatch.setenv("UPSTREAM_LOG", str(log))
    return log


def upstream_calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def call_through_proxy(
    ctx: BotContext, end: Ending | None, wait: WaitOptions
) -> tuple[bool, str]:
    """Call `delete_file` through the proxy; `end` ends its request once it is pending."""
    approvals = ApprovalClient(BotTransport(ctx, principal="agent-a"))
    async with Client(upstream_server, cache=None, mode="legacy") as upstream:
        proxy = GatingProxy(upstream, approvals, ProxyOptions(name="files", wait=wait))
        async with Client(proxy.server, mode="legacy") as client:
            call = asyncio.create_task(client.call_tool("delete_file", {"path": "/srv/db"}))
            if end is not None:
                await end(ctx, (await pending_for(ctx.store, TOOL)).id)
            result = await asyncio.wait_for(call, 15)
    text = "".join(getattr(c, "text", "") for c in result.content)
    return bool(result.is_error), text


@pytest.mark.parametrize(
    ("end", "says"),
    [
        (deny, "not today"),
        (expire, "approval timeout"),
        (withdraw, "the agent stopped"),
        (fail, "channel_not_found"),
    ],
    ids=["denied", "expired", "cancelled", "error"],
)
async def test_a_call_that_ends_unapproved_never_reaches_the_upstream(
    ctx: BotContext, upstream_log: Path, end: Ending, says: str
) -> None:
    is_error, text = await call_through_proxy(ctx, end, WaitOptions(progress_interval=0.05))
    assert is_error and text.startswith("Not called: "), text
    assert says in text
    assert upstream_calls(upstream_log) == []


async def test_no_decision_in_the_wait_budget_is_the_deny_text(
    ctx: BotContext, upstream_log: Path
) -> None:
    wait = WaitOptions(progress_interval=0.05, max_wait=0.2)
    is_error, text = await call_through_proxy(ctx, None, wait)
    assert is_error
    assert text == "Not called: No approval decision in time (approval timeout); denied by default."
    assert upstream_calls(upstream_log) == []
    assert await ctx.store.list_pending() == [], "the request was withdrawn"


async def test_an_approved_call_reaches_the_upstream_once(
    ctx: BotContext, upstream_log: Path
) -> None:
    is_error, text = await call_through_proxy(ctx, approve, WaitOptions(progress_interval=0.05))
    assert (is_error, text) == (False, "deleted /srv/db")
    assert upstream_calls(upstream_log) == [
        {"tool": "delete_file", "arguments": {"path": "/srv/db"}}
    ]
