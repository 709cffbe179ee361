"""Approval storms end to end: many requests for one channel at once are listed in
digest messages, within the pacing the emulator enforces (429 + Retry-After), each with
exactly one live set of buttons across the channel; a digest row is decided in its review
modal through the same checks as the message buttons; the digest follows every decision;
a restart mid-storm neither doubles a digest nor loses a row. Fast pacing constants, so the
scenario takes about a second; counts and states are asserted, never timings."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from approvals._internal.policy_file import parse_policy
from approvals._internal.service import Actor
from approvals._internal.store.keys import Keys
from approvals.models import ApprovalConfig, ApprovalEvent, SlackMessage
from bot.core.app import Bot
from bot.slack import action_ids as ids
from bot.slack.delivery.copies import DIGEST_EVENT_TYPE
from bot.slack.delivery.dispatcher import DispatcherOptions
from bot.slack.render import digest_message as digest_blocks
from bot.slack.render import modals
from tests.support import eventually
from tests.support.e2e import CHANNEL, BotFactory, Reviewer, fast_dispatcher
from tests.support.slack_emulator import SlackEmulator

STORM = 30
ROWS = 10  # rows per digest, so a storm of 30 needs several digests


def storm_options(**kw: Any) -> DispatcherOptions:
    """Slack's pacing, 5 times faster: 5 posts/s per channel after a burst of 3."""
    options: dict[str, Any] = {
        "pacing": True,
        "post_interval": 0.2,
        "burst": 3,
        "digest_after": 0.6,
        "digest_rows": ROWS,
        "digest_interval": 0.1,
        "update_interval": 0.05,
        "digest_poll": 0.5,
    }
    return fast_dispatcher(**(options | kw))


def policy(**route: Any) -> Any:
    base = {"channel": CHANNEL, "reviewers": ["U0ALICE", "U0BOB", "U0CAROL"]}
    return parse_policy({"routes": {"default": {**base, **route}}}, source="test")


async def storm(bot: Bot, n: int = STORM, **config: Any) -> list[str]:
    assert bot.ctx is not None
    service = bot.ctx.service
    created = await asyncio.gather(
        *(
            service.submit(
                ApprovalEvent(tool_name=f"deploy{i}", arguments={"n": i}),
                ApprovalConfig(**config) if config else None,
            )
            for i in range(n)
        )
    )
    return [r.id for r in created]


def live_buttons(slack: SlackEmulator) -> Counter[str]:
    """Request id → live sets of buttons for it across every message of the channel: the
    buttons of its own message, or its digest row's Review button."""
    live: Counter[str] = Counter()
    for message in slack.messages_in(CHANNEL):
        for block in message.get("blocks", []):
            if block.get("type") == "actions":
                values = {str(e.get("value", "")).split("@")[0] for e in block["elements"]}
                live.update(v for v in values if v)
            accessory = block.get("accessory") or {}
            if accessory.get("action_id") == ids.REVIEW:
                live[ids.read_review_value(str(accessory["value"]))[0]] += 1
    return live


def _where(slack: SlackEmulator, rids: list[str]) -> str:
    """Each message of the channel: its ts, what it is, and the requests it has live buttons
    for (a failure's evidence)."""
    lines = []
    for message in slack.messages_in(CHANNEL):
        meta = message.get("metadata") or {}
        one: Counter[str] = Counter()
        for block in message.get("blocks", []):
            if block.get("type") == "actions":
                one.update({str(e.get("value", "")).split("@")[0] for e in block["elements"]})
            accessory = block.get("accessory") or {}
            if accessory.get("action_id") == ids.REVIEW:
                one[ids.read_review_value(str(accessory["value"]))[0]] += 1
        lines.append(
            f"{message['ts']} {meta.get('event_type')} {meta.get('event_payload')} "
            f"edited={'edited' in message} live={sorted(r for r in one if r in rids)}"
        )
    return "\n".join(lines)


def digests_in(slack: SlackEmulator) -> list[dict[str, Any]]:
    return [
        m
        for m in slack.messages_in(CHANNEL)
        if (m.get("metadata") or {}).get("event_type") == DIGEST_EVENT_TYPE
    ]


def copies_of(slack: SlackEmulator, digest_id: str) -> list[dict[str, Any]]:
    return [
        m for m in digests_in(slack) if m["metadata"]["event_payload"]["digest_id"] == digest_id
    ]


def digest_of(slack: SlackEmulator, request_id: str) -> dict[str, Any]:
    for message in digests_in(slack):
        if request_id in json.dumps(message["blocks"]):
            return message
    raise AssertionError(f"{request_id} is in no digest")


def row_of(message: dict[str, Any], request_id: str) -> dict[str, Any]:
    (row,) = [
        b
        for b in message["blocks"]
        if b.get("block_id", "").startswith("digest_row:") and request_id in json.dumps(b)
    ]
    return row


async def everyone_placed(slack: SlackEmulator, rids: list[str]) -> Counter[str]:
    live = await eventually(
        lambda: (lambda c: c if all(c[r] for r in rids) else None)(live_buttons(slack)),
        within=20,
        what="every request in Slack",
    )
    assert isinstance(live, Counter)
    return live


async def placed_storm(
    make_bot: BotFactory, slack: SlackEmulator, route_policy: Any, n: int, **options: Any
) -> tuple[Bot, list[str]]:
    """A bot with `route_policy` and `storm_options(**options)` under Slack's per-channel rate
    (5 times faster), `n` requests at once, every one placed and every digest settled."""
    slack.enforce_rate(per_channel_per_second=5.0, burst=3)
    bot = await make_bot(route_policy, dispatcher=storm_options(**options))
    rids = await storm(bot, n)
    await everyone_placed(slack, rids)
    await settled(bot)
    return bot, rids


def first_in_a_digest(slack: SlackEmulator, rids: list[str]) -> str:
    return next(r for r in rids if any(r in json.dumps(m["blocks"]) for m in digests_in(slack)))


async def settled(bot: Bot) -> None:
    """Until no digest is dirty (its message shows its latest content). A digest scheduled
    only for its later look for late copies (`DispatcherOptions.digest_recheck`, a minute by
    default) does not count."""
    assert bot.ctx is not None
    ctx = bot.ctx

    async def clean() -> bool:
        # Every outbox entry read and acked (a decision's entry touches its digest), and
        # then no digest dirty.
        groups = await ctx.redis.xinfo_groups(ctx.keys.outbox)
        last = await ctx.redis.xrevrange(ctx.keys.outbox, count=1)
        (group,) = [g for g in groups if g["name"] == "bot"]
        if last and (group["last-delivered-id"] != last[0][0] or group["pending"]):
            return False
        return not await ctx.redis.zcount(ctx.keys.digest_dirty, "-inf", time.time() + 5)

    await eventually(clean, within=20, what="every digest drawn")


async def review(
    who: Reviewer, bot: Bot, slack: SlackEmulator, request_id: str, decision: str, text: str = ""
) -> dict[str, Any]:
    """Click the request's Review… in its digest, then submit the modal with `decision`."""
    opened = len(slack.calls_to("views.open"))
    assert await _click(who, bot, request_id, digest_of(slack, request_id)) == 200
    await slack.wait_for("views.open", opened + 1)
    view = slack.calls_to("views.open")[-1].body["view"]
    view = json.loads(view) if isinstance(view, str) else view
    values: dict[str, Any] = {
        ids.REVIEW_DECISION_BLOCK: {
            ids.REVIEW_DECISION_ACTION: {
                "type": "static_select",
                "selected_option": {"value": decision},
            }
        },
        ids.REVIEW_TEXT_BLOCK: {
            ids.REVIEW_TEXT_ACTION: {"type": "plain_text_input", "value": text}
        },
    }
    submit = who.submit_payload(view, {})
    submit["view"]["state"] = {"values": values}
    assert await who.send(bot, submit) == 200
    return view


async def test_a_storm_gives_every_request_one_live_place_within_the_pacing(
    make_bot: BotFactory, slack: SlackEmulator, keys: Keys
) -> None:
    slack.enforce_rate(per_channel_per_second=5.0, burst=3)
    slack.enforce_method_rate("chat.update", per_minute=50 * 5, burst=5)
    bot = await make_bot(dispatcher=storm_options())
    rids = await storm(bot)
    live = await everyone_placed(slack, rids)
    await settled(bot)
    live = live_buttons(slack)
    assert {r: live[r] for r in rids} == dict.fromkeys(rids, 1), "one live set of buttons each"
    digests = digests_in(slack)
    own = [m for m in slack.messages_in(CHANNEL) if m not in digests]
    rows = sum(len(digest_blocks.waiting_rows(m)) for m in digests)
    assert len(own) + rows == STORM
    assert len(own) < STORM // 2, "most of the storm went to digests"
    # Digests of at most ROWS rows, each posted once (its metadata names it once).
    ids_posted = [m["metadata"]["event_payload"]["digest_id"] for m in digests]
    assert len(ids_posted) == len(set(ids_posted)) == -(-rows // ROWS)
    assert all(len(m["blocks"]) <= 50 for m in digests)
    # Within Slack's limits: nothing refused for a reason other than a rate limit, and every
    # 429 waited out (every post that was refused came back and landed).
    refused = [c for c in slack.calls if not c.ok and c.status != 429]
    assert not refused, [(c.method, c.response) for c in refused]
    posts = slack.calls_to("chat.postMessage", ok=True)
    assert len(posts) == len(own) + len(digests)


async def test_a_digest_row_is_decided_in_its_review_modal_and_the_row_follows(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot, rids = await placed_storm(make_bot, slack, policy(), 12)
    target = first_in_a_digest(slack, rids)
    as_first_seen = json.loads(json.dumps(digest_of(slack, target)))
    alice: Reviewer = reviewer("U0ALICE")
    view = await review(alice, bot, slack, target, ids.REVIEW_APPROVE)
    # The modal showed the request in full (its arguments), bound to the version shown.
    assert '\\"n\\"' in json.dumps(view["blocks"]) or '"n"' in json.dumps(view["blocks"])
    assert bot.ctx is not None
    request = await eventually(lambda: _decided(bot, target), what="the decision from the modal")
    assert request.status == "approved" and request.decision.decided_by == "U0ALICE"
    await settled(bot)
    row = row_of(digest_of(slack, target), target)
    assert "accessory" not in row and "Approved" in row["text"]["text"]
    assert live_buttons(slack)[target] == 0
    # A stale click on the old row (the message as Bob still sees it) is answered, not decided.
    bob: Reviewer = reviewer("U0BOB")
    before = len(slack.calls_to("chat.postEphemeral"))
    stale = await _click(bob, bot, target, as_first_seen)
    assert stale == 200
    await slack.wait_for("chat.postEphemeral", before + 1)
    assert "Already approved" in slack.calls_to("chat.postEphemeral")[-1].body["text"]
    after = await bot.ctx.store.get(target)
    assert after.decision is not None and after.decision.decided_by == "U0ALICE"


async def test_every_row_decided_says_so_and_a_burst_of_decisions_is_drawn_coalesced(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot, rids = await placed_storm(
        make_bot, slack, policy(), 12, digest_rows=45, digest_interval=1.0
    )
    (digest,) = digests_in(slack)
    listed = [r for r in rids if r in json.dumps(digest["blocks"])]
    assert len(listed) >= 5
    await review(reviewer("U0ALICE"), bot, slack, listed[0], ids.REVIEW_DENY, "not on a Friday")
    denied = await eventually(lambda: _decided(bot, listed[0]))
    assert denied.status == "denied" and denied.decision.reason == "not on a Friday"
    await settled(bot)
    drawn_before = len(slack.calls_to("chat.update"))
    assert bot.ctx is not None
    service = bot.ctx.service
    rest = listed[1:]
    await asyncio.gather(*(service.decide(r, "approve", Actor("U0BOB", via="slack")) for r in rest))
    await settled(bot)
    (digest,) = digests_in(slack)
    assert digest["blocks"][0]["text"]["text"].startswith("✅ All")
    assert not digest_blocks.waiting_rows(digest)
    assert all("Approved" in row_of(digest, r)["text"]["text"] for r in rest)
    # A burst of decisions is drawn in fewer updates of the digest than decisions.
    digest_updates = [
        c for c in slack.calls_to("chat.update")[drawn_before:] if c.body.get("ts") == digest["ts"]
    ]
    assert 1 <= len(digest_updates) < len(rest)


async def test_quorum_from_a_digest_needs_two_reviewers_and_the_row_shows_progress(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot, rids = await placed_storm(make_bot, slack, policy(quorum=2), 10)
    target = first_in_a_digest(slack, rids)
    await review(reviewer("U0ALICE"), bot, slack, target, ids.REVIEW_APPROVE)
    assert bot.ctx is not None
    await eventually(lambda: _votes(bot, target))
    await settled(bot)
    row = row_of(digest_of(slack, target), target)
    assert "1 of 2 approvals" in row["text"]["text"] and "accessory" in row
    # The same reviewer again changes nothing; a second reviewer decides.
    await review(reviewer("U0ALICE"), bot, slack, target, ids.REVIEW_APPROVE)
    await slack.wait_for("chat.postEphemeral", 1)
    assert "already voted" in slack.calls_to("chat.postEphemeral")[-1].body["text"]
    assert (await bot.ctx.store.get(target)).is_pending
    await review(reviewer("U0BOB"), bot, slack, target, ids.REVIEW_APPROVE)
    request = await eventually(lambda: _decided(bot, target))
    assert request.status == "approved"
    await settled(bot)
    assert "accessory" not in row_of(digest_of(slack, target), target)


async def test_a_row_refuses_who_may_not_decide_and_a_stale_version(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot, rids = await placed_storm(make_bot, slack, policy(), 10)
    target = first_in_a_digest(slack, rids)
    # Not a reviewer: refused at the Review click, no modal.
    mallory: Reviewer = reviewer("U0MALLORY")
    assert await _click(mallory, bot, target, digest_of(slack, target)) == 200
    await slack.wait_for("chat.postEphemeral", 1)
    assert "not one of the reviewers" in slack.calls_to("chat.postEphemeral")[-1].body["text"]
    assert not slack.calls_to("views.open")
    # A modal opened, then the arguments edited by another reviewer: the submit is turned away.
    alice: Reviewer = reviewer("U0ALICE")
    message = digest_of(slack, target)
    assert await _click(alice, bot, target, message) == 200
    await slack.wait_for("views.open", 1)
    view = slack.calls_to("views.open")[-1].body["view"]
    view = json.loads(view) if isinstance(view, str) else view
    assert bot.ctx is not None
    await bot.ctx.service.edit(target, Actor("U0BOB", via="slack"), {"n": 999})
    request = await bot.ctx.store.get(target)
    if request.is_pending:  # quorum 1: Bob's edit approved it; else it is a proposal
        submit = alice.submit_payload(view, {})
        submit["view"]["state"] = {
            "values": {
                ids.REVIEW_DECISION_BLOCK: {
                    ids.REVIEW_DECISION_ACTION: {"selected_option": {"value": ids.REVIEW_APPROVE}}
                }
            }
        }
        assert await alice.send(bot, submit) == 200
        await slack.wait_for("chat.postEphemeral", 2)
        assert (await bot.ctx.store.get(target)).is_pending
    else:
        assert request.decision is not None and request.decision.decided_by == "U0BOB"


async def test_a_restart_mid_storm_neither_doubles_a_digest_nor_loses_a_row(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    slack.enforce_rate(per_channel_per_second=5.0, burst=3)
    # Slack takes a while to post (and finishes even when the client has gone): 2 s, longer
    # than stopping a replica takes on a loaded machine, so the stop lands mid-post (~6 s).
    slack.set_latency(2.0, "chat.postMessage")
    first = await make_bot(dispatcher=storm_options())
    rids = await storm(first, STORM)
    await slack.wait_until(
        lambda: any(
            (body.get("metadata") or {}).get("event_type") == DIGEST_EVENT_TYPE
            for method, body, _ in slack.arrivals
            if method == "chat.postMessage"
        ),
        20,
        "a digest post in flight",
    )
    await first.stop()  # mid-storm: the digest post's answer is never seen by this replica
    in_flight = [c for c in slack.arrivals if c[0] == "chat.postMessage"]
    assert len(slack.calls_to("chat.postMessage")) < len(in_flight), "stopped mid-post"
    # Slack finishes what was in flight (a replica that is gone holds its locks until its
    # heartbeat expires, longer than that).
    await slack.wait_until(lambda: len(slack.calls) == len(slack.arrivals), 10, "Slack done")
    slack.set_latency(0.0, "chat.postMessage")
    second = await make_bot(dispatcher=storm_options())
    live = await everyone_placed(slack, rids)
    await settled(second)
    await asyncio.sleep(0.3)
    live = live_buttons(slack)
    assert {r: live[r] for r in rids} == dict.fromkeys(rids, 1), _where(slack, rids)
    ids_posted = [m["metadata"]["event_payload"]["digest_id"] for m in digests_in(slack)]
    assert len(ids_posted) == len(set(ids_posted)), "no digest posted twice"
    assert slack.calls_to("conversations.history"), "the second looked before posting again"
    assert second.ctx is not None
    found = await second.ctx.store.get_many(rids)
    assert all(r.is_pending for r in found.values())


async def storm_with_a_digest(
    make_bot: BotFactory, slack: SlackEmulator, **options: Any
) -> tuple[Bot, list[str], dict[str, Any], str]:
    """A bot (`storm_options(**options)`) after a storm of 15, settled: the bot, the requests,
    the first digest message and its digest id."""
    bot = await make_bot(dispatcher=storm_options(**options))
    rids = await storm(bot, 15)
    await everyone_placed(slack, rids)
    await settled(bot)
    first = digests_in(slack)[0]
    return bot, rids, first, str(first["metadata"]["event_payload"]["digest_id"])


async def unseen_earlier_attempt(bot: Bot, digest_id: str, attempts: int) -> None:
    """Redis as a crash leaves it: `attempts` posts of the digest counted, none recorded (nobody
    saw an answer)."""
    assert bot.ctx is not None and bot.dispatcher is not None
    redis, keys = bot.ctx.redis, bot.ctx.keys
    await redis.hdel(keys.digest(digest_id), "ts", "posted_at")
    await redis.hset(
        keys.digest(digest_id), "posting", json.dumps({"first": time.time() - 60, "n": attempts})
    )


async def redraw(bot: Bot, digest_id: str) -> None:
    assert bot.dispatcher is not None
    await bot.dispatcher.digests.touch([digest_id], time.time())
    bot.dispatcher.drawer.wake()


def second_copy(slack: SlackEmulator, kept: dict[str, Any]) -> str:
    """A second copy of the digest message `kept` lands in the channel; its ts."""
    stray_ts = slack._next_ts()
    slack.messages[(CHANNEL, stray_ts)] = {k: v for k, v in kept.items() if k != "edited"} | {
        "ts": stray_ts
    }
    return stray_ts


async def retired(slack: SlackEmulator, ts: str, what: str) -> None:
    """Until the digest copy `ts` is no digest any more (retired: a pointer, no buttons)."""
    await eventually(
        lambda: (
            slack.messages[(CHANNEL, ts)].get("metadata", {}).get("event_type") != DIGEST_EVENT_TYPE
        ),
        within=10,
        what=what,
    )


async def test_a_digest_that_landed_twice_unseen_keeps_one_live_copy(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """The soak's failure, made deterministic: two attempts to post one digest both landed
    and nobody saw either answer (a replica stopped mid-post and retried, or Slack finished a
    gone replica's post). The replica that takes the digest over adopts the oldest copy and
    retires every other one; a second copy left as it was showed a second live Review button
    for each of its rows."""
    bot, rids, kept, digest_id = await storm_with_a_digest(make_bot, slack)
    assert bot.ctx is not None and bot.dispatcher is not None
    # The second, unseen copy lands after the first; Redis knows of neither answer.
    stray_ts = second_copy(slack, kept)
    await unseen_earlier_attempt(bot, digest_id, 2)
    assert live_buttons(slack)[row_rids(kept)[0]] == 2  # the state the soak left
    await redraw(bot, digest_id)
    await settled(bot)
    await retired(slack, stray_ts, "the second copy retired")
    live = live_buttons(slack)
    assert {r: live[r] for r in rids} == dict.fromkeys(rids, 1), _where(slack, rids)
    assert await bot.dispatcher.digests.message(digest_id) == SlackMessage(
        channel=CHANNEL, ts=kept["ts"]
    ), "the oldest copy is the digest's message"
    assert "posted twice" in slack.messages[(CHANNEL, stray_ts)]["text"]


async def test_a_second_copy_slack_would_not_retire_at_once_is_retired_later(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """As above, but Slack fails every quick try of the retiring update (5xx): the copy is
    recorded with the digest and retired by a later draw. Before, a retire that failed was
    not tried again, and the copy kept a live Review button for every row."""
    bot, rids, kept, digest_id = await storm_with_a_digest(make_bot, slack)
    assert bot.ctx is not None and bot.dispatcher is not None
    stray_ts = second_copy(slack, kept)
    await unseen_earlier_attempt(bot, digest_id, 2)
    tries = bot.dispatcher.options.max_attempts
    slack.server_error_next("chat.update", times=tries, when={"ts": stray_ts})
    await redraw(bot, digest_id)
    await retired(slack, stray_ts, "the second copy retired")
    failed = [c for c in slack.calls_to("chat.update") if c.body.get("ts") == stray_ts]
    assert [c.status for c in failed] == [500] * tries + [200], "retired on a later draw"
    await settled(bot)
    redis, keys = bot.ctx.redis, bot.ctx.keys
    assert await redis.hget(keys.digest(digest_id), "strays") is None, "none left to retire"
    live = live_buttons(slack)
    assert {r: live[r] for r in rids} == dict.fromkeys(rids, 1), _where(slack, rids)
    assert "posted twice" in slack.messages[(CHANNEL, stray_ts)]["text"]


async def test_a_copy_that_lands_after_the_digest_was_posted_again_is_retired(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """A replica's digest post whose answer nobody saw, still under way in Slack when the
    digest is taken over: the channel's history shows no copy, so it is posted again; then
    the first attempt lands. The drawer reads the history once more `digest_recheck` later
    and retires the late copy: one live Review button per row."""
    bot, rids, first, digest_id = await storm_with_a_digest(make_bot, slack, digest_recheck=0.5)
    assert bot.ctx is not None and bot.dispatcher is not None
    # The first attempt has not landed yet: Slack's history does not show it.
    late = slack.messages.pop((CHANNEL, first["ts"]))
    await unseen_earlier_attempt(bot, digest_id, 1)
    await redraw(bot, digest_id)
    again = await eventually(
        lambda: next((m for m in copies_of(slack, digest_id) if m["ts"] != first["ts"]), None),
        within=10,
        what="the digest posted again",
    )
    slack.messages[(CHANNEL, first["ts"])] = late  # the first attempt lands now
    assert live_buttons(slack)[row_rids(again)[0]] == 2
    await retired(slack, first["ts"], "the late copy retired")
    live = live_buttons(slack)
    assert {r: live[r] for r in rids} == dict.fromkeys(rids, 1), _where(slack, rids)
    assert await bot.dispatcher.digests.message(digest_id) == SlackMessage(
        channel=CHANNEL, ts=again["ts"]
    ), "the message posted again stays the digest's"
    await settled(bot)
    redis, keys = bot.ctx.redis, bot.ctx.keys
    assert await redis.hget(keys.digest(digest_id), "recheck") is None, "looked once, done"


def row_rids(message: dict[str, Any]) -> list[str]:
    return [
        ids.read_review_value(str(b["accessory"]["value"]))[0]
        for b in message["blocks"]
        if (b.get("accessory") or {}).get("action_id") == ids.REVIEW
    ]


async def test_every_key_a_storm_writes_has_a_ttl(
    make_bot: BotFactory, slack: SlackEmulator, keys: Keys
) -> None:
    bot = await make_bot(dispatcher=storm_options())
    rids = await storm(bot, 15)
    await everyone_placed(slack, rids)
    await settled(bot)
    assert bot.ctx is not None
    redis = bot.ctx.redis
    digest_keys = [k async for k in redis.scan_iter(match=f"{keys.prefix}:digest*")]
    assert digest_keys
    for key in digest_keys:
        assert await redis.ttl(key) > 0, key


async def _decided(bot: Bot, request_id: str) -> Any:
    assert bot.ctx is not None
    request = await bot.ctx.store.get(request_id)
    return None if request.is_pending else request


async def _votes(bot: Bot, request_id: str) -> Any:
    assert bot.ctx is not None
    return (await bot.ctx.store.get(request_id)).votes


async def _click(who: Reviewer, bot: Bot, request_id: str, message: dict[str, Any]) -> int:
    """A Review… click on the request's row as `message` shows it."""
    row = row_of(message, request_id)
    click = {
        "type": "block_actions",
        "user": {"id": who.user, "username": who.user.lower(), "team_id": "T0EMULATED"},
        "api_app_id": "A0APPID",
        "team": {"id": "T0EMULATED", "domain": "emulated"},
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": CHANNEL},
        "trigger_id": "1234.5678",
        "channel": {"id": CHANNEL, "name": "approvals"},
        "message": message,
        "actions": [
            {
                "action_id": ids.REVIEW,
                "block_id": row["block_id"],
                "type": "button",
                "value": row["accessory"]["value"],
                "action_ts": "1.0",
            }
        ],
    }
    return await who.send(bot, click)


async def test_two_replicas_in_one_storm_post_each_digest_once(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    slack.enforce_rate(per_channel_per_second=5.0, burst=3)
    first = await make_bot(dispatcher=storm_options())
    await make_bot(dispatcher=storm_options())
    rids = await storm(first, STORM)
    await everyone_placed(slack, rids)
    await settled(first)
    live = live_buttons(slack)
    assert {r: live[r] for r in rids} == dict.fromkeys(rids, 1), _where(slack, rids)
    ids_posted = [m["metadata"]["event_payload"]["digest_id"] for m in digests_in(slack)]
    assert ids_posted and len(ids_posted) == len(set(ids_posted)), "each digest posted once"


ESCALATING: dict[str, Any] = {
    "routes": {
        "default": {"channel": CHANNEL},
        "a": {
            "channel": CHANNEL, "reviewers": ["U0ALICE"], "deadline_seconds": 600,
            "on_timeout": "escalate", "escalate_to": "b",
        },
        "b": {"channel": "C0OPS", "reviewers": ["U0BOB"]},
    },
    "rules": [{"name": "all", "action": "ask", "route": "a", "match": {"tool": "*"}}],
}  # fmt: skip


async def test_an_escalated_row_says_where_it_went_and_takes_no_more_decisions(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot, rids = await placed_storm(make_bot, slack, parse_policy(ESCALATING, source="test"), 10)
    target = first_in_a_digest(slack, rids)
    as_listed = json.loads(json.dumps(digest_of(slack, target)))
    assert bot.ctx is not None
    request = await bot.ctx.store.get(target)
    assert request.deadline_at is not None
    await bot.ctx.service.expire_due(now=request.deadline_at + timedelta(seconds=1))
    moved = await bot.ctx.store.get(target)
    assert moved.escalations == 1 and moved.channel == "C0OPS"
    await slack.wait_until(
        lambda: any(target in json.dumps(m.get("blocks", [])) for m in slack.messages_in("C0OPS")),
        10,
        "the request in its new channel",
    )
    await settled(bot)
    row = row_of(digest_of(slack, target), target)
    assert "Escalated to <#C0OPS>" in row["text"]["text"] and "accessory" not in row
    assert live_buttons(slack)[target] == 0  # in CHANNEL; its live place is in C0OPS now
    # A click on the row as it was before: refused, nothing decided.
    assert await _click(reviewer("U0ALICE"), bot, target, as_listed) == 200
    (told,) = await slack.wait_for("chat.postEphemeral", 1)
    assert "escalated to <#C0OPS>" in told.body["text"]
    assert (await bot.ctx.store.get(target)).is_pending


async def test_reminders_of_listed_requests_are_one_reply_in_the_digest_thread(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    bot, rids = await placed_storm(
        make_bot, slack, policy(remind_after=60, remind_via="thread"), 10
    )
    assert bot.ctx is not None and bot.reminders is not None
    found = await bot.ctx.store.get_many(rids)
    listed = [r for r in found.values() if r.message is None]  # their place is a digest row
    assert len(listed) >= 2
    digests = {m["ts"] for m in digests_in(slack)}
    latest = max(r.created_at for r in found.values())
    # (Reminders post unpaced, as before storms: lift the channel's limit for this part.)
    slack.enforce_rate(per_channel_per_second=1000.0, burst=1000)
    sent = await bot.reminders.remind_due(latest + timedelta(seconds=61))
    replies = [c for c in slack.calls_to("chat.postMessage") if c.body.get("thread_ts")]
    in_digests = [c for c in replies if c.body["thread_ts"] in digests]
    # One reply per digest (not one per listed request), one per request message.
    assert len(in_digests) == len(digests)
    assert len(replies) == len(digests) + (len(rids) - len(listed)) == sent
    assert sum(int(c.body["text"].split(": ")[1].split()[0]) for c in in_digests) == len(listed)
    assert all("<@U0ALICE>" in c.body["text"] for c in in_digests)
    assert await bot.reminders.remind_due(latest + timedelta(seconds=62)) == 0, "once a round"


async def test_reminder_dms_of_listed_requests_are_one_per_reviewer_and_digest(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    for user in ("U0ALICE", "U0BOB", "U0CAROL"):
        slack.add_user(user)
    bot, rids = await placed_storm(make_bot, slack, policy(remind_after=60), 10)
    assert bot.ctx is not None and bot.reminders is not None
    found = await bot.ctx.store.get_many(rids)
    own = len([r for r in found.values() if r.message is not None])
    listed = len(rids) - own
    digests = len(digests_in(slack))
    latest = max(r.created_at for r in found.values())
    before = len(slack.calls_to("chat.postMessage"))
    await bot.reminders.remind_due(latest + timedelta(seconds=61))
    dms = [c for c in slack.calls_to("chat.postMessage")[before:] if c.body["channel"] != CHANNEL]
    assert len(dms) == 3 * (own + digests), "per reviewer: one per message, one per digest"
    grouped = [c for c in dms if "requests still need your review" in c.body["text"]]
    assert sum(int(c.body["text"].split()[2]) for c in grouped) == 3 * listed


async def test_reviewers_are_told_once_per_digest_not_once_per_request(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    for user in ("U0ALICE", "U0BOB", "U0CAROL"):
        slack.add_user(user)
    slack.enforce_rate(per_channel_per_second=5.0, burst=3)
    bot = await make_bot(policy(dm_reviewers=True), dispatcher=storm_options(digest_rows=45))
    rids = await storm(bot, 15)
    await everyone_placed(slack, rids)
    await settled(bot)
    own = [m for m in slack.messages_in(CHANNEL) if m not in digests_in(slack)]
    (digest,) = digests_in(slack)
    dms = [c for c in slack.calls_to("chat.postMessage", ok=True) if c.body["channel"] != CHANNEL]
    # Each reviewer: one DM per request message, one for the digest.
    assert len(dms) == 3 * (len(own) + 1)
    told = [c for c in dms if "listed in one message there" in c.body["text"]]
    assert len(told) == 3 and all(f"<#{CHANNEL}>" in c.body["text"] for c in told)
    assert digest_blocks.waiting_rows(digest)


async def test_digest_dms_a_stopped_replica_still_owed_are_sent_by_the_next(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """The digest's reviewers are recorded as owed a DM with its message and told by the next
    draw; a replica that stops first (Slack slow to open each DM) leaves them to the replica
    that takes the digest over: each reviewer is told once. Before, they were told after the
    draw, and a replica stopping then told nobody."""
    for user in ("U0ALICE", "U0BOB", "U0CAROL"):
        slack.add_user(user)
    slack.enforce_rate(per_channel_per_second=5.0, burst=3)
    slack.set_latency(1.0, "conversations.open")
    first = await make_bot(policy(dm_reviewers=True), dispatcher=storm_options(digest_rows=45))
    rids = await storm(first, 15)
    await eventually(lambda: digests_in(slack), within=20, what="the digest posted")
    await first.stop()
    slack.set_latency(0.0, "conversations.open")

    def told() -> list[Any]:
        return [
            c
            for c in slack.calls_to("chat.postMessage", ok=True)
            if c.body["channel"] != CHANNEL and "listed in one message there" in c.body["text"]
        ]

    second = await make_bot(policy(dm_reviewers=True), dispatcher=storm_options(digest_rows=45))
    await eventually(lambda: len(told()) >= 3, within=20, what="every reviewer told")
    await settled(second)
    await asyncio.sleep(0.3)
    assert len(told()) == 3, "each reviewer told once"
    opened = {
        str(c.response["channel"]["id"]): c.body["users"]
        for c in slack.calls_to("conversations.open", ok=True)
        if c.response
    }
    assert sorted(opened[c.body["channel"]] for c in told()) == ["U0ALICE", "U0BOB", "U0CAROL"]
    assert second.ctx is not None
    (digest,) = digests_in(slack)
    key = second.ctx.keys.digest(digest["metadata"]["event_payload"]["digest_id"])
    assert not [f for f in await second.ctx.redis.hkeys(key) if str(f).startswith("dm:")]
    assert rids


async def test_a_directory_that_fails_costs_a_digest_its_dms_not_its_post(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """The digest's reviewers are listed before it is posted; when that fails (a user
    group's lookup cut off), the digest is posted all the same, without DMs."""
    slack.enforce_rate(per_channel_per_second=5.0, burst=3)
    route = policy(dm_reviewers=True, reviewers=["S0ONCALL"])
    bot = await make_bot(route, dispatcher=storm_options(digest_rows=45))
    assert bot.ctx is not None

    async def cut_off(group: str) -> frozenset[str]:
        raise ConnectionError(f"lookup of {group} cut off")

    bot.ctx.service.membership = cut_off
    rids = await storm(bot, 15)
    await everyone_placed(slack, rids)
    await settled(bot)
    assert len(digests_in(slack)) == 1
    assert not slack.calls_to("conversations.open")


async def test_a_digest_slack_refuses_ends_its_requests_as_errors(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    slack.enforce_rate(per_channel_per_second=5.0, burst=3)
    slack.not_in_channels.add(CHANNEL)
    bot = await make_bot(dispatcher=storm_options())
    rids = await storm(bot, 12)
    assert bot.ctx is not None
    ctx = bot.ctx

    async def all_ended() -> bool:
        found = await ctx.store.get_many(rids)
        return all(not r.is_pending for r in found.values())

    await eventually(all_ended, within=20, what="every request ended")
    found = await ctx.store.get_many(rids)
    assert {r.status for r in found.values()} == {"error"}
    assert all("not_in_channel" in (r.decision.reason or "") for r in found.values() if r.decision)
    assert any(
        (c.body.get("metadata") or {}).get("event_type") == DIGEST_EVENT_TYPE
        for c in slack.calls_to("chat.postMessage")
    ), "a digest was tried"


OFFERED = {"deny", "choose:0", "choose:1"}


@pytest.fixture
async def review_bot(make_bot: BotFactory) -> Bot:
    """One bot for every example of a property (a function-scoped fixture, shared)."""
    return await make_bot(policy())


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(decision=st.text(max_size=20).filter(lambda d: d not in OFFERED))
@example(decision="approve")  # not offered for a choice
@example(decision="respond")
@example(decision="choose:00")
@example(decision="choose:2")
@example(decision="choose:-1")
@example(decision="choose:\u0661")
@example(decision="deny ")
async def test_property_a_review_modal_decides_only_what_it_offers(
    review_bot: Bot, slack: SlackEmulator, reviewer: Any, decision: str
) -> None:
    bot = review_bot
    assert bot.ctx is not None
    request = await bot.ctx.service.submit(
        ApprovalEvent(tool_name="paint", arguments={}),
        ApprovalConfig(kind="choice", options=("blue", "green")),
    )
    view = modals.review_modal(request, channel=CHANNEL, ts="1.0")
    alice: Reviewer = reviewer("U0ALICE")
    told = len(slack.calls_to("chat.postEphemeral"))
    submit = alice.submit_payload(view, {})
    chosen = {"type": "static_select", "selected_option": {"value": decision}}
    submit["view"]["state"] = {
        "values": {ids.REVIEW_DECISION_BLOCK: {ids.REVIEW_DECISION_ACTION: chosen}}
    }
    assert await alice.send(bot, submit) == 200
    if "response_action" not in alice.last_body:  # else answered in the modal itself
        await slack.wait_for("chat.postEphemeral", told + 1)
    else:
        assert "errors" in alice.last_body
    assert (await bot.ctx.store.get(request.id)).is_pending, decision


async def test_a_review_modal_answers_a_choice_and_an_input(
    review_bot: Bot, slack: SlackEmulator, reviewer: Any
) -> None:
    assert review_bot.ctx is not None
    service = review_bot.ctx.service
    choice = await service.submit(
        ApprovalEvent(tool_name="paint", arguments={}),
        ApprovalConfig(kind="choice", options=("blue", "green")),
    )
    asked = await service.submit(
        ApprovalEvent(tool_name="name", arguments={}), ApprovalConfig(kind="input")
    )
    alice: Reviewer = reviewer("U0ALICE")
    for request, decision, text in ((choice, "choose:1", ""), (asked, "respond", "Ada")):
        submit = alice.submit_payload(modals.review_modal(request, channel=CHANNEL), {})
        submit["view"]["state"] = {
            "values": {
                ids.REVIEW_DECISION_BLOCK: {
                    ids.REVIEW_DECISION_ACTION: {"selected_option": {"value": decision}}
                },
                ids.REVIEW_TEXT_BLOCK: {ids.REVIEW_TEXT_ACTION: {"value": text}},
            }
        }
        assert await alice.send(review_bot, submit) == 200
    chose = await eventually(lambda: _decided(review_bot, choice.id))
    answered = await eventually(lambda: _decided(review_bot, asked.id))
    assert chose.status == "approved" and chose.decision.selection == "green"
    assert answered.status == "approved" and answered.decision.input == "Ada"
