"""A bot on a real 3-master Redis Cluster: the full approve flow and the waiter."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from approvals._internal.store.keys import Keys
from approvals.client import ApprovalClient
from approvals.models import ApprovalEvent
from bot.core.app import Bot
from bot.http.principals import derived_name
from bot.slack import action_ids as ids
from tests.support.credentials import API_TOKEN
from tests.support.e2e import bot_config, posted_message
from tests.support.redis_deployments import Cluster
from tests.support.slack_emulator import SlackEmulator


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    started = Cluster().start()
    try:
        yield started
    finally:
        started.stop()


async def test_the_approve_flow_and_the_waiter_on_a_cluster(
    cluster: Cluster, slack: SlackEmulator, reviewer: Any
) -> None:
    keys = Keys(f"{{c-{uuid.uuid4().hex[:6]}}}")
    bot = Bot(bot_config(cluster.url, keys, slack))
    await bot.start()
    try:
        assert bot.ctx is not None
        request = await bot.ctx.service.submit(
            ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}),
            principal=derived_name(API_TOKEN),
        )
        waiting = asyncio.create_task(bot.ctx.waiter.wait(request.id, 30))
        agent = ApprovalClient.from_env(
            {"APPROVALS_URL": f"http://127.0.0.1:{bot.port}", "APPROVALS_TOKEN": API_TOKEN}
        )
        polling = asyncio.create_task(agent.wait(request.id, timeout=30))
        await slack.wait_for("chat.postMessage", 1)
        channel, message = posted_message(slack, request.id)
        assert await reviewer("U0ALICE").click(bot, message, channel, ids.APPROVE) == 200
        decided = await asyncio.wait_for(waiting, 30)
        assert decided.status == "approved" and decided.decision is not None
        assert decided.decision.decided_by == "U0ALICE"
        assert (await asyncio.wait_for(polling, 30)).status == "approved"
        await slack.wait_for("chat.update", 1)
        await agent.aclose()
        # Every key of this deployment is on one node (one slot): the scripts stay legal.
        holding = []
        for port in cluster.ports:
            node = redis.Redis(port=port)
            try:
                if node.keys(f"{keys.prefix}*"):
                    holding.append(port)
            finally:
                node.close()
        assert len(holding) == 1, "every key of the deployment is on one node"
    finally:
        await asyncio.wait_for(bot.stop(), 30)
