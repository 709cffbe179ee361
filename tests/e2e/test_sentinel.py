"""A bot on a real Redis Sentinel group (1 master, 1 replica, 3 sentinels) through a failover."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from approvals._internal.store.keys import Keys
from approvals.client import ApprovalClient
from approvals.models import ApprovalEvent
from bot.core.app import Bot
from bot.http.principals import derived_name
from bot.slack import action_ids as ids
from tests.support.credentials import API_TOKEN
from tests.support.e2e import bot_config, posted_message
from tests.support.redis_deployments import SentinelGroup
from tests.support.slack_emulator import SlackEmulator

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


@pytest.fixture(scope="module")
def sentinels() -> Iterator[SentinelGroup]:
    group = SentinelGroup().start()
    try:
        yield group
    finally:
        group.stop()


@pytest.mark.slow(reason="starts a master, a replica and 3 sentinels, then fails over")
async def test_pending_requests_survive_a_failover_and_decisions_after_it_reach_agents(
    sentinels: SentinelGroup, slack: SlackEmulator, reviewer: Any, http: aiohttp.ClientSession
) -> None:
    keys = Keys(f"{{ha-{uuid.uuid4().hex[:6]}}}")
    bot = Bot(bot_config(sentinels.url, keys, slack))
    await bot.start()
    try:
        assert bot.ctx is not None
        first = await bot.ctx.service.submit(
            ApprovalEvent(tool_name="deploy", arguments={}), principal=derived_name(API_TOKEN)
        )
        await slack.wait_for("chat.postMessage", 1)
        channel, message = posted_message(slack, first.id)
        # Replication is asynchronous: WAIT makes this test's writes reach the replica
        # before the failover (docs/operating/redis.md says what WAIT changes).
        assert await bot.ctx.redis.execute_command("WAIT", 1, 5000) == 1
        waiting = asyncio.create_task(bot.ctx.waiter.wait(first.id, 60))
        base = f"http://127.0.0.1:{bot.port}"
        agent = ApprovalClient.from_env({"APPROVALS_URL": base, "APPROVALS_TOKEN": API_TOKEN})
        poll = asyncio.create_task(agent.wait(first.id, timeout=60))
        old = sentinels.master()

        new = await asyncio.to_thread(sentinels.failover)
        assert new != old

        for _ in range(100):  # a click in the switch may be refused ("not recorded"); again
            await reviewer("U0ALICE").click(bot, message, channel, ids.APPROVE)
            try:
                if (await bot.ctx.store.get(first.id)).status == "approved":
                    break
            except Exception:
                pass
            await asyncio.sleep(0.2)
        decided = await asyncio.wait_for(waiting, 30)
        assert decided.status == "approved", "the waiter resumed and got the decision"
        polled = await asyncio.wait_for(poll, 30)
        assert polled.status == "approved", "the agent long-polling over HTTP got it too"

        second = await bot.ctx.service.submit(ApprovalEvent(tool_name="migrate", arguments={}))
        await slack.wait_until(
            lambda: len(slack.calls_to("chat.postMessage", ok=True)) >= 2, 20, "second post"
        )
        await asyncio.sleep(1.0)  # any duplicate would be on its way by now
        posts = slack.calls_to("chat.postMessage", ok=True)
        ids_posted = [r for p in posts for r in (first.id, second.id) if r in str(p.body)]
        assert sorted(ids_posted) == sorted([first.id, second.id]), "nothing posted twice"
        await agent.aclose()
    finally:
        await asyncio.wait_for(bot.stop(), 30)
