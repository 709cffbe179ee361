"""Redis faults through the real app (a TCP proxy in front of the test's Redis cuts or freezes
it): a click that cannot be recorded says so and a later one wins; a frozen Redis gives a quick
503, a hook deny before its deadline, a /healthz that says why, and a clean shutdown."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from approvals._internal.store.keys import Keys
from approvals.models import ApprovalEvent
from bot.core.app import Bot
from bot.slack import action_ids as ids
from bot.slack.listeners import UNRECORDED
from tests.support.credentials import API_TOKEN
from tests.support.e2e import CHANNEL, Reviewer, bot_config, posted_message
from tests.support.redis_proxy import RedisProxy
from tests.support.slack_emulator import SlackEmulator

#: The bound on one Redis command in these tests (the default is DEFAULT_SOCKET_TIMEOUT).
TIMEOUT = 1.0
HEADERS = {"Authorization": f"Bearer {API_TOKEN}"}


@pytest.fixture
async def proxied(redis_url: str) -> AsyncIterator[tuple[RedisProxy, str]]:
    proxy = RedisProxy(redis_url)
    url = await proxy.__aenter__()
    yield proxy, url
    await proxy.__aexit__(None, None, None)


@pytest.fixture
async def bot(
    proxied: tuple[RedisProxy, str], keys: Keys, slack: SlackEmulator, redis: Any
) -> AsyncIterator[Bot]:
    _, url = proxied
    running = Bot(bot_config(url, keys, slack, redis_timeout=TIMEOUT))
    await running.start()
    yield running
    if running.ctx is not None:
        proxied[0].thaw()
        proxied[0].restore()
        await asyncio.wait_for(running.stop(), 10)


async def test_a_click_during_an_outage_is_not_lost_silently(
    bot: Bot, proxied: tuple[RedisProxy, str], slack: SlackEmulator, reviewer: Any, caplog: Any
) -> None:
    proxy, _ = proxied
    assert bot.ctx is not None
    request = await bot.ctx.service.submit(ApprovalEvent(tool_name="deploy", arguments={}), None)
    await slack.wait_for("chat.postMessage", 1)
    _, message = posted_message(slack, request.id)
    alice: Reviewer = reviewer("U0ALICE")
    proxy.cut()
    assert await alice.click(bot, message, CHANNEL, ids.APPROVE) == 200, "acked at once"
    (ephemeral,) = await slack.wait_for("chat.postEphemeral", 1, timeout=15)
    assert ephemeral.body["text"] == UNRECORDED and ephemeral.body["user"] == "U0ALICE"
    assert any("click not recorded" in r.getMessage() for r in caplog.records)
    assert not any("didn't call ack" in r.getMessage() for r in caplog.records)
    sample = bot.ctx.metrics.registry.get_sample_value
    assert sample("approvals_slack_clicks_unrecorded_total") == 1
    assert sample("approvals_redis_errors_total", {"component": "listeners"}) == 1
    proxy.restore()
    assert (await bot.ctx.store.get(request.id)).status == "pending", "nothing was decided"
    bob: Reviewer = reviewer("U0BOB")
    assert await bob.click(bot, message, CHANNEL, ids.DENY) == 200
    (opened,) = await slack.wait_for("views.open", 1)
    view = opened.body["view"]
    view = json.loads(view) if isinstance(view, str) else view
    await bob.submit(bot, view, {ids.REASON_BLOCK: {ids.REASON_ACTION: "later click wins"}})
    decided = await bot.ctx.waiter.wait(request.id, timeout=10)
    assert decided.status == "denied" and decided.decision is not None
    assert decided.decision.decided_by == "U0BOB"


@pytest.mark.slow(reason="waits out the command timeouts of a Redis that never answers")
async def test_a_frozen_redis_gives_quick_errors_and_a_clean_shutdown(
    bot: Bot, proxied: tuple[RedisProxy, str], http: aiohttp.ClientSession, redis_url: str
) -> None:
    proxy, _ = proxied
    base = f"http://127.0.0.1:{bot.port}"
    proxy.freeze()

    start = time.monotonic()
    body = {"tool_name": "deploy", "arguments": {"env": "prod"}}
    async with http.post(f"{base}/v1/approvals", json=body, headers=HEADERS) as resp:
        api_status, api_body = resp.status, await resp.text()
    api_time = time.monotonic() - start
    assert api_status == 503, api_body
    assert bot.ctx is not None
    errors = bot.ctx.metrics.registry.get_sample_value
    assert errors("approvals_redis_errors_total", {"component": "api"}) == 1
    assert api_time < 10 * TIMEOUT, f"the API answered after {api_time:.1f}s"

    hook_timeout = 8
    payload = {
        "session_id": "s1",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "rm -rf build"},
        "tool_use_id": "toolu_1",
        "cwd": "/tmp",
        "transcript_path": "/tmp/t",
        "permission_mode": "default",
    }
    start = time.monotonic()
    async with http.post(
        f"{base}/hooks/claude-code?timeout={hook_timeout}", json=payload, headers=HEADERS
    ) as resp:
        hook_status, hook_out = resp.status, await resp.json()
    hook_time = time.monotonic() - start
    assert hook_status == 200 and hook_time < hook_timeout
    decision = hook_out["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny"

    async with http.get(f"{base}/healthz") as resp:
        health_status, health = resp.status, await resp.json()
    assert health_status == 503 and health["redis"] is False
    assert "did not answer" in health["reason"]

    # What agents see names no Redis host, port or driver text.
    port = str(proxied[1].rsplit(":", 1)[1].split("/")[0])
    for shown in (api_body, json.dumps(hook_out)):
        assert port not in shown and "127.0.0.1" not in shown and "Timeout reading" not in shown

    start = time.monotonic()
    await asyncio.wait_for(bot.stop(), 15)
    assert time.monotonic() - start < 15
    bot.ctx = None  # stopped
