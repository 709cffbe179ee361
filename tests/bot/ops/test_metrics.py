"""/metrics: a real bot's scrape, parsed with prometheus_client's own parser."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from approvals.models import ApprovalEvent
from bot.core.app import Bot
from bot.ops.metrics import OTHER, LabelCap, Metrics
from bot.slack import action_ids as ids
from tests.support.credentials import API_TOKEN
from tests.support.e2e import BotFactory, posted_message
from tests.support.slack_emulator import SlackEmulator

API = {"Authorization": f"Bearer {API_TOKEN}"}


async def scrape(bot: Bot) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """{sample name: {sorted labels: value}} of one scrape of the bot's /metrics."""
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{bot.port}/metrics") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain; version=")
            text = await resp.text()
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            found.setdefault(sample.name, {})[labels] = sample.value
    return found


def total(found: dict[str, Any], name: str, **labels: str) -> float:
    return sum(
        value
        for key, value in found.get(name, {}).items()
        if all((k, v) in key for k, v in labels.items())
    )


async def test_a_scrape_after_one_approval_through_the_api_and_slack(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any, http: aiohttp.ClientSession
) -> None:
    bot = await make_bot()
    base = f"http://127.0.0.1:{bot.port}"
    before = await scrape(bot)
    assert total(before, "approvals_pending") == 0
    slack.set_latency(0.02, "chat.postMessage")
    async with http.post(
        f"{base}/v1/approvals", json={"tool_name": "deploy", "arguments": {}}, headers=API
    ) as resp:
        assert resp.status == 201
        rid = (await resp.json())["id"]
    poll = asyncio.create_task(http.get(f"{base}/v1/approvals/{rid}?wait=15", headers=API))
    await slack.wait_until(
        lambda: any(rid in str(m.get("blocks")) for m in slack.messages.values()), 5, "the post"
    )
    parked = await scrape(bot)
    for _ in range(50):
        if total(parked, "approvals_long_polls_parked", via="api") == 1:
            break
        await asyncio.sleep(0.05)
        parked = await scrape(bot)
    assert total(parked, "approvals_long_polls_parked", via="api") == 1
    assert total(parked, "approvals_waiters") == 1
    assert total(parked, "approvals_pending") == 1

    channel, message = posted_message(slack, rid)
    assert await reviewer("U0ALICE").click(bot, message, channel, ids.APPROVE) == 200
    resp = await poll
    assert (await resp.json())["status"] == "approved"
    resp.release()
    await slack.wait_for("chat.update", 1)

    after: dict[str, Any] = {}
    for _ in range(100):
        after = await scrape(bot)
        if total(after, "approvals_decisions_total") == 1:
            break
        await asyncio.sleep(0.05)
    assert total(after, "approvals_api_requests_total", outcome="created", route="default") == 1
    assert total(after, "approvals_decisions_total", outcome="approved", route="default") == 1
    assert total(after, "approvals_slack_clicks_total", result="decided") == 1
    assert total(after, "approvals_slack_posts_total", how="posted") == 1
    assert total(after, "approvals_slack_updates_total") >= 1
    assert total(after, "approvals_time_to_decision_seconds_count", route="default") == 1
    assert total(after, "approvals_create_to_posted_seconds_count", route="default") == 1
    assert total(after, "approvals_create_to_posted_seconds_sum") >= 0.02
    assert total(after, "approvals_click_to_resumed_seconds_count", via="api") == 1
    calls = total(after, "approvals_slack_api_call_seconds_count", method="chat.postMessage")
    assert calls == 1
    assert total(after, "approvals_slack_api_call_seconds_sum", method="chat.postMessage") >= 0.02
    assert total(after, "approvals_long_polls_parked") == 0
    assert total(after, "approvals_pending") == 0
    assert total(after, "approvals_outbox_pending_entries") == 0
    assert total(after, "approvals_outbox_oldest_unhandled_age_seconds") == 0
    assert total(after, "approvals_slack_api_errors_total") == 0


async def test_slack_errors_and_429s_are_counted_by_method_and_code(
    make_bot: BotFactory, slack: SlackEmulator, http: aiohttp.ClientSession
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    slack.rate_limit_next("chat.postMessage", retry_after=0)
    slack.fail_next("chat.postMessage", "channel_not_found")
    await bot.ctx.service.submit(ApprovalEvent(tool_name="deploy"))
    found: dict[str, Any] = {}
    for _ in range(100):
        found = await scrape(bot)
        if total(found, "approvals_slack_api_errors_total", error="channel_not_found"):
            break
        await asyncio.sleep(0.05)
    labels = {"method": "chat.postMessage"}
    assert total(found, "approvals_slack_rate_limited_total", **labels) == 1
    assert total(found, "approvals_slack_api_errors_total", error="ratelimited", **labels) == 1
    assert total(found, "approvals_slack_api_errors_total", error="channel_not_found") == 1


async def test_outbox_lag_shows_the_oldest_unhandled_entry(
    make_bot: BotFactory, redis: Any
) -> None:
    bot = await make_bot(with_slack=False)  # no dispatcher: nothing takes the outbox
    assert bot.ctx is not None
    await bot.ctx.service.submit(ApprovalEvent(tool_name="deploy"))
    await asyncio.sleep(1.1)
    await bot.ctx.service.submit(ApprovalEvent(tool_name="deploy"))
    found = await scrape(bot)
    assert total(found, "approvals_outbox_pending_entries") == 2
    assert total(found, "approvals_outbox_oldest_unhandled_age_seconds") >= 1.0
    # Read by a consumer but not acked: still unhandled, still the oldest.
    keys = bot.ctx.keys
    await redis.xgroup_create(keys.outbox, "bot", id="0", mkstream=True)
    await redis.xreadgroup("bot", "someone", {keys.outbox: ">"}, count=1)
    found = await scrape(bot)
    assert total(found, "approvals_outbox_pending_entries") == 2
    assert total(found, "approvals_outbox_oldest_unhandled_age_seconds") >= 1.0


async def test_two_bots_in_one_process_keep_their_own_registries(
    make_bot: BotFactory, http: aiohttp.ClientSession
) -> None:
    one, two = await make_bot(), await make_bot()
    async with http.post(
        f"http://127.0.0.1:{one.port}/v1/approvals",
        json={"tool_name": "x", "arguments": {}},
        headers=API,
    ) as resp:
        assert resp.status == 201
    assert total(await scrape(one), "approvals_api_requests_total") == 1
    assert total(await scrape(two), "approvals_api_requests_total") == 0


def test_label_values_are_bounded() -> None:
    cap = LabelCap(known={"prod"}, cap=3)
    seen = [cap(v) for v in ("a", "b", "c", "d", "prod", "a")]
    assert seen == ["a", "b", "c", OTHER, "prod", "a"]
    metrics = Metrics()
    metrics.configure(routes=["prod"], principals=["ci"])
    for n in range(500):
        metrics.api_requests.labels(
            outcome="created",
            route=metrics.route(f"route-{n}"),
            principal=metrics.principal(f"p-{n}"),
        ).inc()
    series = {
        tuple(sorted(s.labels.items()))
        for family in metrics.registry.collect()
        if family.name == "approvals_api_requests"
        for s in family.samples
        if s.name.endswith("_total")
    }
    assert len(series) <= 51, "at most LABEL_CAP series plus `other`"
    assert metrics.route("prod") == "prod" and metrics.principal("ci") == "ci"
