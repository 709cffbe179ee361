"""Each request has exactly one live Slack message: slow posts, racing replicas, redelivered
entries, decisions landing mid-post, Slack outages, and answers that come after the client
gave up. Through the real bot against the emulator."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from approvals._internal.service import Actor
from approvals._internal.store.keys import Keys
from approvals.errors import StoreUnavailable
from approvals.models import ApprovalEvent
from bot.core.app import Bot
from bot.slack.delivery import dispatcher as dispatcher_module
from tests.support.e2e import CHANNEL, BotFactory, fast_dispatcher, has_actions
from tests.support.slack_emulator import SlackEmulator

OPS = Actor("cli:ops", via="cli")


async def submit(bot: Bot, tool: str = "deploy") -> str:
    assert bot.ctx is not None
    request = await bot.ctx.service.submit(ApprovalEvent(tool_name=tool, arguments={"n": tool}))
    return request.id


def copies_of(slack: SlackEmulator, request_id: str) -> list[dict[str, Any]]:
    """Every message in Slack showing `request_id` (the request's message and any copy)."""
    return [m for m in slack.messages.values() if request_id in json.dumps(m.get("blocks", []))]


async def drained(redis: Redis, keys: Keys) -> None:
    """Wait until every outbox entry has been read and acked."""
    for _ in range(200):
        groups = await redis.xinfo_groups(keys.outbox)
        last = await redis.xrevrange(keys.outbox, count=1)
        (group,) = [g for g in groups if g["name"] == "bot"]
        if last and group["last-delivered-id"] == last[0][0] and group["pending"] == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("outbox entries left unhandled")


async def metric(bot: Bot, name: str) -> float:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{bot.port}/metrics") as resp:
            text = await resp.text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"approvals_{name}":
                return float(sample.value)
    return 0.0


async def test_slow_post_with_two_replicas_is_posted_once(
    make_bot: BotFactory, slack: SlackEmulator, redis: Redis, keys: Keys
) -> None:
    # Replica A posts slowly; while its post is in flight, replica B is handed another post
    # entry for the same request (a redelivery). B must leave it to A: the post lock.
    slack.set_latency(1.5, "chat.postMessage")
    a = await make_bot(dispatcher=fast_dispatcher(max_in_flight=1))  # A reads nothing while busy
    rid = await submit(a)
    await slack.wait_until(lambda: slack.arrived("chat.postMessage") == 1, 5, "A's post")
    b = await make_bot(dispatcher=fast_dispatcher())
    assert b.dispatcher is not None
    await redis.xadd(keys.outbox, {"op": "post", "id": rid, "channel": CHANNEL})
    await slack.wait_for("chat.postMessage", 1, timeout=5)
    await drained(redis, keys)
    await asyncio.sleep(0.3)
    assert slack.arrived("chat.postMessage") == 1, "B posted the request a second time"
    assert len(copies_of(slack, rid)) == 1
    assert a.ctx is not None and (await a.ctx.store.get(rid)).message is not None


async def test_decision_while_post_is_in_flight_is_drawn_once(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    slack.set_latency(1.0, "chat.postMessage")
    bot = await make_bot(dispatcher=fast_dispatcher())
    assert bot.ctx is not None
    rid = await submit(bot)
    await slack.wait_until(lambda: slack.arrived("chat.postMessage") == 1, 5, "the post")
    # Decided while Slack is still working on the post: the decision's own update finds no
    # message yet; the post, once recorded, must draw the outcome.
    await bot.ctx.service.decide(rid, "approve", OPS)
    await slack.wait_for("chat.update", 1, timeout=5)
    await asyncio.sleep(0.5)
    assert len(slack.calls_to("chat.postMessage")) == 1
    assert len(slack.calls_to("chat.update")) == 1, "the outcome is drawn once"
    (message,) = copies_of(slack, rid)
    assert not has_actions(message), "live buttons on a decided request"


async def test_redelivered_post_entry_is_not_posted_again(
    make_bot: BotFactory, slack: SlackEmulator, redis: Redis, keys: Keys, monkeypatch: Any
) -> None:
    monkeypatch.setattr(dispatcher_module, "POST_LOCK_SECONDS", 1)
    bot = await make_bot(dispatcher=fast_dispatcher())
    rid = await submit(bot)
    await slack.wait_for("chat.postMessage", 1, timeout=5)
    await drained(redis, keys)
    await asyncio.sleep(1.2)  # any post lock has expired
    calls = len(slack.calls)
    await redis.xadd(keys.outbox, {"op": "post", "id": rid, "channel": CHANNEL})
    await drained(redis, keys)
    await asyncio.sleep(0.2)
    assert slack.arrived("chat.postMessage") == 1
    assert len(copies_of(slack, rid)) == 1
    # The recorded message is the guard: no Slack call at all, not even a history search.
    assert len(slack.calls) == calls, [c.method for c in slack.calls[calls:]]


async def test_slack_outage_longer_than_the_attempt_budget_keeps_the_post_owed(
    make_bot: BotFactory, slack: SlackEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.slack.delivery.dispatcher")
    slack.start_outage(503)
    bot = await make_bot(dispatcher=fast_dispatcher(max_attempts=2))
    assert bot.ctx is not None
    rid = await submit(bot)
    # Well past the old budget of 8 attempts (and of this bot's own 2 quick retries).
    await slack.wait_until(lambda: len(slack.arrivals) >= 12, 15, "a dozen attempts")
    assert await metric(bot, "slack_owed") == 1, "the owed post shows in /metrics"
    assert any("owed" in r.getMessage() and rid in r.getMessage() for r in caplog.records)
    assert (await bot.ctx.store.get(rid)).status == "pending"
    slack.end_outage()
    await slack.wait_for("chat.postMessage", 1, timeout=10, ok=True)
    await asyncio.sleep(0.5)
    assert len(slack.calls_to("chat.postMessage", ok=True)) == 1
    assert len(copies_of(slack, rid)) == 1
    request = await bot.ctx.store.get(rid)
    assert request.status == "pending" and request.message is not None
    assert await metric(bot, "slack_owed") == 0


async def test_an_entry_whose_handling_failed_is_retried(
    make_bot: BotFactory, slack: SlackEmulator, monkeypatch: Any
) -> None:
    bot = await make_bot(dispatcher=fast_dispatcher())
    assert bot.ctx is not None
    real = bot.ctx.store.get_with_row  # the dispatcher's read of the entry's request
    failures = []

    async def blip(request_id: Any) -> Any:
        if not failures:
            failures.append(1)
            raise StoreUnavailable("Redis is unreachable: injected")
        return await real(request_id)

    monkeypatch.setattr(bot.ctx.store, "get_with_row", blip)
    rid = await submit(bot)
    await slack.wait_for("chat.postMessage", 1, timeout=5, ok=True)
    assert failures == [1]
    assert len(copies_of(slack, rid)) == 1


async def test_a_post_slack_answers_after_the_client_timeout_is_adopted(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    # Slack posts at once but answers after the bot gave up (slack_timeout): the retry
    # finds the message in the channel's history and adopts it instead of posting again.
    slack.answer_late_next("chat.postMessage", 1.5)
    bot = await make_bot(dispatcher=fast_dispatcher(), slack_timeout=0.4)
    assert bot.ctx is not None
    rid = await submit(bot)

    async def recorded() -> Any:
        for _ in range(100):
            request = await bot.ctx.store.get(rid)  # type: ignore[union-attr]
            if request.message is not None:
                return request
            await asyncio.sleep(0.05)
        raise AssertionError("no message recorded")

    request = await recorded()
    assert slack.arrived("chat.postMessage") == 1, "posted again after the timeout"
    history = slack.calls_to("conversations.history")
    assert history and history[0].body.get("include_all_metadata") in ("1", "true", True)
    (message,) = copies_of(slack, rid)
    assert message["ts"] == request.message.ts
    assert message["metadata"]["event_payload"]["request_id"] == rid
    await bot.ctx.service.decide(rid, "deny", OPS, reason="no")
    await slack.wait_for("chat.update", 1, timeout=5)
    assert not has_actions(copies_of(slack, rid)[0])


async def test_a_duplicate_that_lands_late_is_drawn_when_the_request_ends(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    # The first post is slow at Slack: the bot gives up, finds nothing in history, posts
    # again; then Slack finishes the first one too. Two copies: both must lose their buttons.
    slack.slow_next("chat.postMessage", 1.5)
    bot = await make_bot(dispatcher=fast_dispatcher(), slack_timeout=0.4)
    assert bot.ctx is not None
    rid = await submit(bot)
    await slack.wait_until(lambda: len(copies_of(slack, rid)) == 2, 10, "both copies")
    assert all(has_actions(m) for m in copies_of(slack, rid))
    await bot.ctx.service.decide(rid, "approve", OPS)
    await slack.wait_for("chat.update", 2, timeout=10)
    await asyncio.sleep(0.3)
    assert not any(has_actions(m) for m in copies_of(slack, rid)), "a copy kept its buttons"
    assert len(slack.calls_to("chat.update")) == 2


async def test_without_the_history_scope_a_lost_post_is_sent_again_with_a_warning(
    make_bot: BotFactory, slack: SlackEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    # An app installed before channels:history was added: the bot cannot look for the
    # earlier copy. It must still post (an agent is waiting) and say what to fix.
    slack.scopes = {"chat:write", "im:write", "usergroups:read"}
    slack.answer_late_next("chat.postMessage", 1.0)
    bot = await make_bot(dispatcher=fast_dispatcher(), slack_timeout=0.4)
    assert bot.ctx is not None
    rid = await submit(bot)
    await slack.wait_for("chat.postMessage", 2, timeout=10)
    assert [
        c.response and c.response.get("error") for c in slack.calls_to("conversations.history")
    ] == ["missing_scope"]
    assert any("channels:history" in r.getMessage() for r in caplog.records)
    for _ in range(100):
        if (await bot.ctx.store.get(rid)).message is not None:
            break
        await asyncio.sleep(0.05)
    assert (await bot.ctx.store.get(rid)).message is not None


async def test_a_replica_holds_at_most_max_in_flight_entries(
    make_bot: BotFactory, slack: SlackEmulator, redis: Redis, keys: Keys
) -> None:
    slack.set_latency(0.2, "chat.postMessage")
    creator = await make_bot(with_slack=False)
    rids = [await submit(creator, f"tool{i}") for i in range(12)]
    bot = await make_bot(dispatcher=fast_dispatcher(max_in_flight=4))
    assert bot.dispatcher is not None
    held = []
    while len(slack.calls_to("chat.postMessage", ok=True)) < len(rids):
        consumers = await redis.xinfo_consumers(keys.outbox, "bot")
        held += [int(c["pending"]) for c in consumers if c["name"] == bot.config.consumer]
        held.append(len(bot.dispatcher._in_flight))
        await asyncio.sleep(0.03)
    assert max(held) <= 4, f"held {max(held)} entries at once"
    assert all(len(copies_of(slack, rid)) == 1 for rid in rids)


async def test_details_clicks_decide_nothing_and_touch_no_message(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    """Details (the reason and the diffs) at once with itself and with two Approve clicks:
    modals open, nothing is recorded by them, the request is decided once and its one
    message updated once, still with its Why."""
    from approvals.models import CallContext
    from bot.slack import action_ids as ids
    from tests.support.e2e import posted_message

    bot = await make_bot()
    assert bot.ctx is not None
    event = ApprovalEvent(
        tool_name="Edit",
        arguments={"file_path": "/srv/a.py", "old_string": "x = 1", "new_string": "x = 2"},
        cwd="/srv",
        context=CallContext(reason="x must be 2 for the migration"),
    )
    rid = (await bot.ctx.service.submit(event)).id
    await slack.wait_for("chat.postMessage", 1, timeout=5)
    _, message = posted_message(slack, rid)
    alice, bob = reviewer("U0ALICE"), reviewer("U0BOB")
    clicks = [alice.click(bot, message, CHANNEL, ids.DETAILS) for _ in range(3)]
    assert await asyncio.gather(*clicks) == [200, 200, 200]
    await slack.wait_for("views.open", 3, timeout=5)
    assert (await bot.ctx.store.get(rid)).is_pending
    assert slack.arrived("chat.update") == 0
    both = await asyncio.gather(
        alice.click(bot, message, CHANNEL, ids.APPROVE),
        bob.click(bot, message, CHANNEL, ids.DETAILS),
        bob.click(bot, message, CHANNEL, ids.APPROVE),
    )
    assert both == [200, 200, 200]
    decided = await bot.ctx.waiter.wait(rid, timeout=5)
    assert decided.status == "approved"
    await slack.wait_for("chat.update", 1, timeout=5)
    await asyncio.sleep(0.3)
    assert slack.arrived("chat.update") == 1 and slack.arrived("chat.postMessage") == 1
    (shown,) = copies_of(slack, rid)
    assert not has_actions(shown) and "*Why:* x must be 2" in json.dumps(shown, ensure_ascii=False)


# -- a retry answering a reviewer's question: a reply in the asked message's thread -----------


async def asked_request(bot: Bot) -> tuple[str, str]:
    """A request posted, then asked about by a reviewer: (its id, its message's ts)."""
    assert bot.ctx is not None
    service = bot.ctx.service
    first = ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}, session_id="s-1")
    asked = await service.submit(first, principal="ci-agent")
    for _ in range(200):
        posted = await bot.ctx.store.get(asked.id)
        if posted.message is not None:
            break
        await asyncio.sleep(0.02)
    assert posted.message is not None
    result = await service.ask(asked.id, Actor("U0ALICE"), "Which region?", version="")
    assert result.status == "decided"
    return asked.id, posted.message.ts


async def retried(bot: Bot, asked: str) -> str:
    """The caller's retry of the tool in the session (its answer as the reason): its id."""
    from approvals.models import CallContext

    assert bot.ctx is not None
    retry = ApprovalEvent(
        tool_name="deploy",
        arguments={"env": "prod", "region": "eu"},
        session_id="s-1",
        context=CallContext(reason="EU: the bug is only there."),
    )
    answer = await bot.ctx.service.submit(retry, principal="ci-agent")
    assert answer.answers is not None and answer.answers.request_id == asked
    return answer.id


def in_thread(slack: SlackEmulator, root: str, request_id: str) -> list[dict[str, Any]]:
    return [m for m in copies_of(slack, request_id) if m.get("thread_ts") == root]


def answered_shown(slack: SlackEmulator, asked: str) -> bool:
    return "answered in the thread" in json.dumps(copies_of(slack, asked), ensure_ascii=False)


async def test_a_reply_slack_answers_after_the_client_timeout_is_adopted_from_the_thread(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """The retry's post lands but its answer comes after the bot gave up: the next attempt
    looks in the thread (history lists no replies) and adopts it; one reply, one redraw of
    the asked message ("answered in the thread")."""
    bot = await make_bot(dispatcher=fast_dispatcher(), slack_timeout=0.4)
    assert bot.ctx is not None
    asked, root = await asked_request(bot)
    await slack.wait_for("chat.update", 1, timeout=5)  # the asked message, drawn
    slack.answer_late_next("chat.postMessage", 1.5)
    rid = await retried(bot, asked)
    await slack.wait_until(lambda: answered_shown(slack, asked), 10, "answered")
    replies = slack.calls_to("conversations.replies")
    assert replies and replies[0].body.get("ts") == root
    assert replies[0].body.get("include_all_metadata") in ("1", "true", True)
    await asyncio.sleep(0.3)
    assert slack.arrived("chat.postMessage") == 2, "the reply was posted again"
    (reply,) = in_thread(slack, root, rid)
    assert (await bot.ctx.store.get(rid)).message.ts == reply["ts"]  # type: ignore[union-attr]
    updates = [c for c in slack.calls_to("chat.update") if c.body.get("ts") == root]
    assert len(updates) == 2, "drawn once asked, once answered"


async def test_a_crash_between_the_reply_and_the_mark_still_marks_it_once(
    make_bot: BotFactory, slack: SlackEmulator, monkeypatch: Any
) -> None:
    """The reply is recorded, then marking the asked request fails (the replica dies, Redis
    blips): the entry stays owed, is taken again (the message already recorded: nothing is
    posted) and marks it; the asked message is redrawn once."""
    from approvals._internal.store.posting import Posting

    bot = await make_bot(dispatcher=fast_dispatcher())
    assert bot.ctx is not None
    asked, root = await asked_request(bot)
    await slack.wait_for("chat.update", 1, timeout=5)
    failures: list[str] = []
    real = Posting.answered

    async def fail_once(self: Posting, asked_id: str, answer: Any) -> bool:
        if not failures:
            failures.append(asked_id)
            raise StoreUnavailable("the approval store (Redis) is unavailable; try again")
        return await real(self, asked_id, answer)

    monkeypatch.setattr(Posting, "answered", fail_once)
    rid = await retried(bot, asked)
    await slack.wait_until(lambda: answered_shown(slack, asked), 10, "answered")
    await asyncio.sleep(0.3)
    assert failures == [asked]
    assert len(in_thread(slack, root, rid)) == 1 and slack.arrived("chat.postMessage") == 2
    updates = [c for c in slack.calls_to("chat.update") if c.body.get("ts") == root]
    assert len(updates) == 2
    stored = await bot.ctx.store.get(asked)
    assert stored.answered is not None and stored.answered.request_id == rid


async def test_an_answered_redraw_taken_twice_is_drawn_once(
    make_bot: BotFactory, slack: SlackEmulator, redis: Redis, keys: Keys
) -> None:
    bot = await make_bot(dispatcher=fast_dispatcher())
    assert bot.ctx is not None
    asked, root = await asked_request(bot)
    await retried(bot, asked)
    await slack.wait_until(lambda: answered_shown(slack, asked), 10, "answered")
    await drained(redis, keys)
    await redis.xadd(keys.outbox, {"op": "answered", "id": asked, "channel": CHANNEL})
    await drained(redis, keys)
    await asyncio.sleep(0.2)
    updates = [c for c in slack.calls_to("chat.update") if c.body.get("ts") == root]
    assert len(updates) == 2
    # Counted as one decision: the redraw is not a decision.
    assert await metric(bot, "decisions_total") == 1.0


async def test_a_duplicate_reply_that_lands_late_is_drawn_when_the_retry_ends(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """The reply is slow at Slack: the bot gives up, finds nothing in the thread, posts
    again; then Slack finishes the first too. Both copies in the thread lose their buttons
    when the retry is decided (found in the thread, not the history)."""
    bot = await make_bot(dispatcher=fast_dispatcher(), slack_timeout=0.4)
    assert bot.ctx is not None
    asked, root = await asked_request(bot)
    await slack.wait_for("chat.update", 1, timeout=5)
    slack.slow_next("chat.postMessage", 1.5)
    rid = await retried(bot, asked)
    await slack.wait_until(lambda: len(in_thread(slack, root, rid)) == 2, 10, "both copies")
    assert all(has_actions(m) for m in in_thread(slack, root, rid))
    await bot.ctx.service.decide(rid, "approve", OPS)
    await slack.wait_until(
        lambda: not any(has_actions(m) for m in in_thread(slack, root, rid)), 10, "drawn"
    )
    assert len(in_thread(slack, root, rid)) == 2
