"""An MCP call cut off while its submit is in flight (the client cancelled, or the answer was
lost): the request may exist though its id never came back; it is withdrawn by its call id."""

from __future__ import annotations

import asyncio

import pytest

from approvals._internal.transports import RedisTransport
from approvals.approval import Approval
from approvals.client import ApprovalClient
from approvals.errors import StoreUnavailable
from approvals.models import ApprovalEvent
from bot.core.context import BotContext
from bot.mcp.reviewer_wait import submit_or_withdraw


def redis_client(ctx: BotContext) -> ApprovalClient:
    return ApprovalClient(
        RedisTransport(ctx.redis, ctx.keys, policy=ctx.service.policy, owns_redis=False)
    )


async def test_a_cancelled_submit_that_landed_is_withdrawn(ctx: BotContext) -> None:
    client = redis_client(ctx)
    event = ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}, call_id="mcp:cut-1")
    in_flight = asyncio.Event()

    async def lands_then_stalls() -> Approval:
        await client.submit(event)
        in_flight.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    call = asyncio.create_task(submit_or_withdraw(client, event, lands_then_stalls))
    await in_flight.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await ctx.store.list_pending() == []
    created = [e.request_id for e in await ctx.store.audit_entries() if e.event == "created"]
    assert len(created) == 1
    assert (await ctx.store.get(created[0])).status == "cancelled"
    await client.aclose()


async def test_a_lost_answer_withdraws_and_still_fails(ctx: BotContext) -> None:
    client = redis_client(ctx)
    event = ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}, call_id="mcp:cut-2")

    async def lands_then_fails() -> Approval:
        await client.submit(event)
        raise StoreUnavailable("the answer was lost")

    with pytest.raises(StoreUnavailable):
        await submit_or_withdraw(client, event, lands_then_fails)
    created = [e.request_id for e in await ctx.store.audit_entries() if e.event == "created"]
    assert [(await ctx.store.get(i)).status for i in created] == ["cancelled"]
    await client.aclose()
