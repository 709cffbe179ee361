"""Slack's limits on what the bot sends beyond posts: every chat.update on one workspace
budget (Tier 3) with queued updates of one request coalesced, and reminders paced with
their 429s waited out, a failure released for the next tick rather than lost.

Counts and states only: the emulator enforces the limits and answers 429 + Retry-After."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

from approvals._internal.policy_file import parse_policy
from approvals._internal.service import Actor
from approvals.models import ApprovalEvent
from bot.core.app import Bot
from bot.slack.delivery.dispatcher import DispatcherOptions
from tests.support import eventually
from tests.support.e2e import CHANNEL, BotFactory
from tests.support.slack_emulator import SlackEmulator

REVIEWERS = ["U0ALICE", "U0BOB", "U0CAROL"]


def policy(**route: Any) -> Any:
    base = {"channel": CHANNEL, "reviewers": REVIEWERS}
    return parse_policy({"routes": {"default": {**base, **route}}}, source="test")


def options(**kw: Any) -> DispatcherOptions:
    """Pacing on, posts fast (not what is measured here), no digests: one message each."""
    base: dict[str, Any] = {
        "pacing": True,
        "post_interval": 0.01,
        "burst": 50,
        "digests": False,
        "read_block_ms": 100,
        "backoff_base": 0.05,
        "backoff_max": 0.3,
    }
    return DispatcherOptions(**(base | kw))


async def submit(bot: Bot, n: int) -> list[str]:
    assert bot.ctx is not None
    created = await asyncio.gather(
        *(
            bot.ctx.service.submit(ApprovalEvent(tool_name=f"deploy{i}", arguments={"n": i}))
            for i in range(n)
        )
    )
    return [r.id for r in created]


async def all_posted(bot: Bot, rids: list[str]) -> None:
    assert bot.ctx is not None
    store = bot.ctx.store

    async def done() -> bool:
        return all(r.message is not None for r in (await store.get_many(rids)).values())

    await eventually(done, within=20, what="every request posted")


def message_of(slack: SlackEmulator, request_id: str) -> dict[str, Any]:
    (message,) = [m for m in slack.messages_in(CHANNEL) if request_id in json.dumps(m)]
    return message


def has_buttons(message: dict[str, Any]) -> bool:
    return any(b.get("type") == "actions" for b in message.get("blocks", []))


async def test_a_burst_of_decisions_on_own_messages_stays_within_the_update_limit(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """30 decisions at once, chat.update held to 20/s (burst 3) by the emulator (Slack's
    Tier 3, 24 times faster): the bot's workspace budget (one per 0.075 s, burst 3) keeps
    under it, so no update meets a 429, and every message ends showing its outcome, drawn
    once."""
    slack.enforce_method_rate("chat.update", per_minute=1200, burst=3)
    bot = await make_bot(policy(), dispatcher=options(update_interval=0.075, update_burst=3))
    assert bot.ctx is not None
    rids = await submit(bot, 30)
    await all_posted(bot, rids)
    alice = Actor("U0ALICE", via="slack")
    await asyncio.gather(*(bot.ctx.service.decide(r, "approve", alice) for r in rids))

    def drawn() -> bool:
        return not any(has_buttons(message_of(slack, r)) for r in rids)

    await eventually(drawn, within=20, what="every message shows its outcome")
    updates = slack.calls_to("chat.update")
    assert [c for c in updates if c.status == 429] == [], "the budget kept under Tier 3"
    assert len(slack.calls_to("chat.update", ok=True)) == len(rids), "each drawn once"
    for r in rids:
        assert "Approved" in json.dumps(message_of(slack, r)), r


async def test_without_the_budget_the_same_burst_meets_429s_and_still_draws_every_outcome(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """The same burst against a budget far above the limit: the emulator answers 429s
    (so the first test's zero is the budget's doing), every one waited out."""
    slack.enforce_method_rate("chat.update", per_minute=1200, burst=3)
    bot = await make_bot(policy(), dispatcher=options(update_interval=0.001, update_burst=100))
    assert bot.ctx is not None
    rids = await submit(bot, 12)
    await all_posted(bot, rids)
    alice = Actor("U0ALICE", via="slack")
    await asyncio.gather(*(bot.ctx.service.decide(r, "approve", alice) for r in rids))
    await eventually(
        lambda: not any(has_buttons(message_of(slack, r)) for r in rids),
        within=20,
        what="every message shows its outcome",
    )
    assert [c for c in slack.calls_to("chat.update") if c.status == 429]
    assert len(slack.calls_to("chat.update", ok=True)) == len(rids)


async def test_queued_updates_of_one_request_coalesce_and_the_last_state_is_drawn(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """Quorum 3 on 4 requests, every vote at once, updates slow (one per 0.3 s): the votes'
    outbox entries queue behind the budget, an entry with a later one of its request queued
    is not drawn, and each message still ends showing its outcome."""
    bot = await make_bot(policy(quorum=3), dispatcher=options(update_interval=0.3, update_burst=1))
    assert bot.ctx is not None
    rids = await submit(bot, 4)
    await all_posted(bot, rids)
    service = bot.ctx.service
    await asyncio.gather(
        *(service.decide(r, "approve", Actor(u, via="slack")) for r in rids for u in REVIEWERS)
    )
    for r in rids:
        assert (await bot.ctx.store.get(r)).status == "approved"
    await eventually(
        lambda: not any(has_buttons(message_of(slack, r)) for r in rids),
        within=20,
        what="every message shows its outcome",
    )
    entries = 3 * len(rids)  # one outbox `update` entry per vote
    coalesced = bot.ctx.metrics.slack_updates_coalesced._value.get()
    updates = len(slack.calls_to("chat.update", ok=True))
    assert coalesced >= 1
    assert updates <= entries - coalesced < entries
    for r in rids:
        assert "Approved" in json.dumps(message_of(slack, r)), r


def thread_replies(slack: SlackEmulator, ts: str) -> list[Any]:
    return [c for c in slack.calls_to("chat.postMessage", ok=True) if c.body.get("thread_ts") == ts]


async def asked(bot: Bot) -> Any:
    assert bot.ctx is not None
    (rid,) = await submit(bot, 1)
    await all_posted(bot, [rid])
    return await bot.ctx.store.get(rid)


async def test_a_reminder_that_meets_a_429_waits_it_out_and_is_delivered_once(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    bot = await make_bot(policy(remind_after=60, remind_via="thread"), dispatcher=options())
    assert bot.reminders is not None
    req = await asked(bot)
    slack.rate_limit_next("chat.postMessage", retry_after=1)
    due = req.created_at + timedelta(seconds=61)
    assert await bot.reminders.remind_due(due) == 1
    assert await bot.reminders.remind_due(due) == 0, "the round is sent once"
    (reply,) = thread_replies(slack, req.message.ts)
    assert "still waiting" in reply.body["text"]
    limited = [c for c in slack.calls_to("chat.postMessage") if c.status == 429]
    assert len(limited) == 1 and limited[0].body.get("thread_ts") == req.message.ts


async def test_a_reminder_slack_did_not_take_is_released_and_sent_on_the_next_tick(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """A 500 on the reply may or may not have posted (no blind retry of a post): the round
    is released, counted, and the next tick sends it."""
    bot = await make_bot(policy(remind_after=60, remind_via="thread"), dispatcher=options())
    assert bot.reminders is not None and bot.ctx is not None
    req = await asked(bot)
    slack.server_error_next("chat.postMessage", status=500)
    due = req.created_at + timedelta(seconds=61)
    assert await bot.reminders.remind_due(due) == 0
    failed = bot.ctx.metrics.reminders_failed.labels(outcome="retried")._value.get()
    assert failed == 1
    assert thread_replies(slack, req.message.ts) == []
    assert await bot.reminders.remind_due(due) == 1, "released: the next tick sends it"
    assert len(thread_replies(slack, req.message.ts)) == 1
    assert await bot.reminders.remind_due(due) == 0


async def test_a_reminder_dm_that_meets_a_429_reaches_each_reviewer_once(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    bot = await make_bot(policy(remind_after=60), dispatcher=options())
    assert bot.reminders is not None
    req = await asked(bot)
    slack.rate_limit_next("chat.postMessage", retry_after=1)
    slack.rate_limit_next("conversations.open", retry_after=1)
    due = req.created_at + timedelta(seconds=61)
    assert await bot.reminders.remind_due(due) == len(REVIEWERS)
    assert await bot.reminders.remind_due(due) == 0
    dms = [
        c
        for c in slack.calls_to("chat.postMessage", ok=True)
        if c.body["channel"] != CHANNEL and "Reminder" in c.body["text"]
    ]
    assert len(dms) == len(REVIEWERS)
    assert len({c.body["channel"] for c in dms}) == len(REVIEWERS)
