"""Several replicas on one Redis, Slack rate limits and pacing, and Socket Mode."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest

from approvals._internal.service import Actor
from approvals._internal.store.outbox import Outbox
from approvals.models import ApprovalEvent
from bot.core.app import Bot
from bot.slack import action_ids as ids
from bot.slack.delivery.dispatcher import DispatcherOptions
from tests.support import eventually
from tests.support.credentials import APP_TOKEN
from tests.support.e2e import CHANNEL, BotFactory, Reviewer, has_actions, posted_message
from tests.support.slack_emulator import SlackEmulator


async def submit(bot: Bot, tool: str = "deploy") -> str:
    assert bot.ctx is not None
    request = await bot.ctx.service.submit(ApprovalEvent(tool_name=tool, arguments={"n": tool}))
    return request.id


async def wait_posted(slack: SlackEmulator, request_id: str) -> tuple[str, dict[str, Any]]:
    await slack.wait_until(
        lambda: any(request_id in json.dumps(m.get("blocks", [])) for m in slack.messages.values()),
        5,
        f"post of {request_id}",
    )
    return posted_message(slack, request_id)


async def test_agent_on_replica_a_resumed_by_click_on_replica_b(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    a = await make_bot()
    b = await make_bot()
    assert a.ctx is not None and b.ctx is not None
    rid = await submit(a)
    waiting = asyncio.create_task(a.ctx.waiter.wait(rid, timeout=15))
    channel, message = await wait_posted(slack, rid)
    alice: Reviewer = reviewer("U0ALICE")
    assert await alice.click(b, message, channel, ids.APPROVE) == 200
    req = await waiting
    assert req.status == "approved" and req.decision is not None
    assert req.decision.decided_by == "U0ALICE"
    await slack.wait_for("chat.update", 1)
    await asyncio.sleep(0.3)
    assert len(slack.calls_to("chat.postMessage")) == 1, "posted once across replicas"
    assert len(slack.calls_to("chat.update")) == 1, "updated once across replicas"


async def test_replica_dying_after_reading_outbox_is_covered_by_another(
    make_bot: BotFactory, slack: SlackEmulator, redis: Any, keys: Any
) -> None:
    # A replica with Slack off creates the request; a "dead" consumer reads the outbox
    # entry and never acks it (it died between reading and posting).
    creator = await make_bot(with_slack=False)
    rid = await submit(creator)
    dead = Outbox(redis, keys, "dead-replica")
    await dead.ensure_group()
    taken = await dead.read(count=10, block_ms=100)
    assert [e.request_id for e in taken] == [rid]
    assert await dead.pending_count() == 1
    # A live replica claims the idle entry and posts it exactly once.
    live = await make_bot(
        dispatcher=DispatcherOptions(
            pacing=False,
            read_block_ms=100,
            backoff_base=0.05,
            heartbeat_interval=0.1,
            heartbeat_ttl=0.3,
            reap_interval=0.1,
        )
    )
    assert live.ctx is not None
    await wait_posted(slack, rid)
    await asyncio.sleep(1.0)  # several more claim cycles: still one post
    assert len(slack.calls_to("chat.postMessage")) == 1
    req = await live.ctx.store.get(rid)
    assert req.message is not None and req.message.channel == CHANNEL
    assert await live.ctx.store.get(rid) is not None
    assert await Outbox(redis, keys, "x").pending_count() == 0, "entry acked once handled"
    consumers = {c["name"] for c in await redis.xinfo_consumers(keys.outbox, "bot")}
    assert "dead-replica" not in consumers, "a gone consumer is removed from the group"


@pytest.mark.slow(reason="30 posts against a per-channel rate limit, 1 s Retry-After waits")
async def test_thirty_requests_under_rate_limits_are_all_posted_once_and_paced(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    interval = 0.05
    slack.enforce_rate(per_channel_per_second=1 / (interval * 2), burst=3)
    slack.rate_limit_next("chat.postMessage", retry_after=1, times=1)
    slack.server_error_next("chat.postMessage", status=503, times=2)
    bot = await make_bot(
        dispatcher=DispatcherOptions(
            pacing=True,
            post_interval=interval,
            burst=3,
            read_block_ms=100,
            backoff_base=0.05,
        )
    )
    assert bot.ctx is not None
    rids = [await submit(bot, f"tool{i}") for i in range(30)]
    await slack.wait_until(
        lambda: len(slack.calls_to("chat.postMessage", ok=True)) >= 30, 30, "30 posts"
    )
    await asyncio.sleep(0.3)
    ok = slack.calls_to("chat.postMessage", ok=True)
    assert len(ok) == 30, "none twice"
    texts = [json.dumps(c.body.get("blocks")) for c in ok]
    assert all(sum(rid in t for t in texts) == 1 for rid in rids), "each request posted once"
    assert slack.calls_to("chat.postMessage", ok=False), "Slack did push back"
    # Pacing: in any window of W seconds there are at most burst + W/interval attempts.
    attempts = sorted(c.at for c in slack.calls_to("chat.postMessage"))
    window = 0.5
    busiest = max(sum(1 for t in attempts if start <= t < start + window) for start in attempts)
    assert busiest <= 3 + window / interval + 1, f"{busiest} posts within {window}s"
    # After a 429 (the emulator says Retry-After: 1 or more) nothing is sent to that
    # channel until it has passed.
    calls = slack.calls_to("chat.postMessage")
    for limited, following in itertools.pairwise(calls):
        if limited.status == 429:
            assert following.at - limited.at >= 0.95
    # Every request got its ts recorded.
    store = bot.ctx.store

    async def all_recorded() -> bool:
        return all([(await store.get(rid)).message is not None for rid in rids])

    await eventually(all_recorded, what="every request's ts recorded")


async def test_retry_after_is_obeyed(make_bot: BotFactory, slack: SlackEmulator) -> None:
    slack.rate_limit_next("chat.postMessage", retry_after=1, times=1)
    bot = await make_bot()
    rid = await submit(bot)
    await wait_posted(slack, rid)
    first, second = slack.calls_to("chat.postMessage")[:2]
    assert first.status == 429
    assert second.at - first.at >= 0.95, "waited Retry-After before trying again"


async def test_socket_mode_click_decides(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot(slack_app_token=APP_TOKEN)
    assert bot.ctx is not None
    await slack.wait_until(lambda: slack.socket_connections > 0, 15, "socket connection")
    rid = await submit(bot)
    waiting = asyncio.create_task(bot.ctx.waiter.wait(rid, timeout=15))
    channel, message = await wait_posted(slack, rid)
    payload = reviewer("U0SOCK").click_payload(message, channel, ids.APPROVE)
    ack = await slack.socket_send_interactive(payload)
    assert "envelope_id" in ack
    req = await waiting
    assert req.status == "approved" and req.decision is not None
    assert req.decision.decided_by == "U0SOCK"
    await slack.wait_for("chat.update", 1)
    assert not has_actions(posted_message(slack, rid)[1])


async def test_socket_mode_refuses_interactions_over_http(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot(slack_app_token=APP_TOKEN)
    assert bot.ctx is not None
    rid = await submit(bot)
    channel, message = await wait_posted(slack, rid)
    mallory: Reviewer = reviewer("U0MALLORY")
    assert await mallory.click(bot, message, channel, ids.APPROVE) == 503
    assert "Socket Mode" in mallory.last_body
    assert (await bot.ctx.store.get(rid)).status == "pending"


async def test_decision_landing_as_the_post_is_recorded_updates_the_message_once(
    make_bot: BotFactory, slack: SlackEmulator, monkeypatch: Any
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None and bot.dispatcher is not None
    ctx = bot.ctx
    posting = bot.dispatcher.posting
    record = posting.record

    async def record_then_decide(
        request_id: str, escalations: int, message: Any, *more: Any
    ) -> Any:
        written = await record(request_id, escalations, message, *more)
        # A decision arrives right after the ts is recorded, before the dispatcher re-reads.
        await ctx.service.decide(request_id, "approve", Actor("cli:ops", via="cli"))
        await asyncio.sleep(0.3)  # the decision's own update entry is handled meanwhile
        return written

    monkeypatch.setattr(posting, "record", record_then_decide)
    rid = await submit(bot)
    req = await ctx.waiter.wait(rid, timeout=15)
    assert req.status == "approved"
    await slack.wait_for("chat.update", 1)
    await asyncio.sleep(0.5)
    assert len(slack.calls_to("chat.postMessage")) == 1
    assert len(slack.calls_to("chat.update")) == 1, "the outcome is drawn once"
    assert not has_actions(posted_message(slack, rid)[1])


async def test_a_request_decided_or_cancelled_before_its_post_is_never_posted(
    make_bot: BotFactory, slack: SlackEmulator, redis: Any, keys: Any
) -> None:
    creator = await make_bot(with_slack=False)
    assert creator.ctx is not None
    cancelled, decided = await submit(creator, "tool_a"), await submit(creator, "tool_b")
    await creator.ctx.service.cancel(cancelled, by="agent", reason="gave up")
    await creator.ctx.service.decide(decided, "deny", Actor("cli:ops", via="cli"), reason="no")
    last = (await redis.xrevrange(keys.outbox, count=1))[0][0]
    live = await make_bot()
    assert live.ctx is not None

    async def drained() -> bool:
        (group,) = [g for g in await redis.xinfo_groups(keys.outbox) if g["name"] == "bot"]
        return bool(group["last-delivered-id"] == last and group["pending"] == 0)

    for _ in range(100):
        if await drained():
            break
        await asyncio.sleep(0.05)
    assert await drained(), "the live replica handled every outbox entry"
    assert slack.calls_to("chat.postMessage") == []
    assert slack.calls_to("chat.update") == []


async def test_transient_slack_errors_are_retried_not_fatal(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    slack.fail_next("chat.postMessage", "internal_error", times=2)
    bot = await make_bot()
    assert bot.ctx is not None
    rid = await submit(bot)
    await wait_posted(slack, rid)
    attempts = slack.calls_to("chat.postMessage")
    assert [c.ok for c in attempts] == [False, False, True]
    store = bot.ctx.store

    async def recorded() -> bool:  # the ts is written just after Slack answers
        return (await store.get(rid)).message is not None

    await eventually(recorded, what="the message's ts recorded")
    assert (await store.get(rid)).status == "pending"
