"""Reminders and decision notices end to end, on the store's clock passed in (no sleeping
for the schedule): DMs with the message's permalink to reviewers who have not acted, a
thread reply per route, nothing once the request ends, the requester's notice."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import aiohttp

from approvals._internal.policy_file import parse_policy
from approvals.models import ApprovalEvent
from bot.core import app
from bot.core.app import Bot
from bot.slack import action_ids as ids
from tests.support import eventually
from tests.support.credentials import API_TOKEN, OTHER_BOT_TOKEN
from tests.support.e2e import CHANNEL, BotFactory, Reviewer, fast_dispatcher, posted_message
from tests.support.slack_emulator import SlackEmulator

TOKEN = OTHER_BOT_TOKEN  # another workspace's bot token, in an argument


def policy(**route: Any) -> Any:
    base = {"channel": CHANNEL, "reviewers": ["U0ALICE", "U0BOB"], "remind_after": 60}
    return parse_policy({"routes": {"default": {**base, **route}}}, source="test")


async def asked(bot: Bot, slack: SlackEmulator) -> Any:
    assert bot.ctx is not None
    request = await bot.ctx.service.submit(
        ApprovalEvent(tool_name="deploy", arguments={"env": "prod", "token": TOKEN})
    )
    await eventually(lambda: bool(slack.calls_to("chat.postMessage")))
    return await eventually(lambda: posted(bot, request.id))


async def posted(bot: Bot, request_id: str) -> Any:
    """The request once its message is recorded, else None."""
    assert bot.ctx is not None
    request = await bot.ctx.store.get(request_id)
    return request if request.message is not None else None


def dms_to(slack: SlackEmulator) -> list[tuple[str, str]]:
    """(user, text) of each reminder DM, in order."""
    opened = {
        c.response["channel"]["id"]: c.body["users"]
        for c in slack.calls_to("conversations.open")
        if c.response
    }
    return [
        (opened[c.body["channel"]], c.body["text"])
        for c in slack.calls_to("chat.postMessage")
        if c.body["channel"] in opened
    ]


async def test_reviewers_who_have_not_acted_are_reminded_until_it_ends(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    for user in ("U0ALICE", "U0BOB"):
        slack.add_user(user)
    bot = await make_bot(policy(remind_every=120, quorum=2))
    assert bot.ctx is not None and bot.reminders is not None
    req = await asked(bot, slack)
    at = req.created_at
    assert await bot.reminders.remind_due(at + timedelta(seconds=30)) == 0, "not yet"
    assert await bot.reminders.remind_due(at + timedelta(seconds=61)) == 2
    assert await bot.reminders.remind_due(at + timedelta(seconds=90)) == 0, "each round once"
    sent = dms_to(slack)
    assert sorted(u for u, _ in sent) == ["U0ALICE", "U0BOB"]
    link = f"https://emulated.slack.com/archives/{CHANNEL}/p{req.message.ts.replace('.', '')}"
    assert all(link in text for _, text in sent)
    assert all(TOKEN not in json.dumps(c.body) for c in slack.calls)

    # Alice votes: the next round reminds only Bob.
    channel, message = posted_message(slack, req.id)
    alice: Reviewer = reviewer("U0ALICE")
    assert await alice.click(bot, message, channel, ids.APPROVE) == 200

    async def voted() -> bool:
        return len((await bot.ctx.store.get(req.id)).votes) == 1  # type: ignore[union-attr]

    await eventually(voted)
    assert await bot.reminders.remind_due(at + timedelta(seconds=185)) == 1
    assert [u for u, _ in dms_to(slack)][2:] == ["U0BOB"]

    # Bob decides: no reminder after the end.
    assert await reviewer("U0BOB").click(bot, message, channel, ids.APPROVE) == 200
    await bot.ctx.waiter.wait(req.id, timeout=10)
    assert await bot.reminders.remind_due(at + timedelta(seconds=1000)) == 0


async def test_a_thread_reply_per_route(make_bot: BotFactory, slack: SlackEmulator) -> None:
    bot = await make_bot(policy(remind_via="thread"))
    assert bot.reminders is not None
    req = await asked(bot, slack)
    assert await bot.reminders.remind_due(req.created_at + timedelta(seconds=61)) == 1
    (reply,) = [c for c in slack.calls_to("chat.postMessage") if c.body.get("thread_ts")]
    assert reply.body["channel"] == CHANNEL and reply.body["thread_ts"] == req.message.ts
    assert "<@U0ALICE>" in reply.body["text"] and "<@U0BOB>" in reply.body["text"]
    assert TOKEN not in reply.body["text"]
    assert not slack.calls_to("conversations.open")


async def test_the_requester_is_told_the_outcome(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any, http: aiohttp.ClientSession
) -> None:
    slack.add_user("U0REQ")
    bot = await make_bot(policy())
    assert bot.ctx is not None
    url = f"http://127.0.0.1:{bot.port}/v1/approvals"
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    body = {"tool_name": "deploy", "arguments": {"token": TOKEN}, "notify": "not a user id"}
    async with http.post(url, json=body, headers=headers) as resp:
        assert resp.status == 422, "a notify target is a Slack user id, nothing else"
    async with http.post(url, json={**body, "notify": "U0REQ"}, headers=headers) as resp:
        assert resp.status == 201, await resp.text()
        rid = (await resp.json())["id"]
    await eventually(lambda: posted(bot, rid))
    channel, message = posted_message(slack, rid)
    assert await reviewer("U0ALICE").click(bot, message, channel, ids.APPROVE) == 200
    await bot.ctx.waiter.wait(rid, timeout=10)
    await eventually(lambda: any(u == "U0REQ" for u, _ in dms_to(slack)))
    (notice,) = [t for u, t in dms_to(slack) if u == "U0REQ"]
    assert "Approved by <@U0ALICE>" in notice and TOKEN not in notice


async def test_a_notice_a_stopped_replica_still_owed_is_sent_by_the_next(
    make_bot: BotFactory,
    slack: SlackEmulator,
    reviewer: Any,
    http: aiohttp.ClientSession,
    monkeypatch: Any,
) -> None:
    """The requester's notice is owed until it is sent: a replica that stops without
    sending it (Slack slower to open the DM than the stop waits) leaves it to the replica
    that handles the decision's entry again, which sends it once. Before, the first try
    marked it sent, and nobody told the requester."""
    monkeypatch.setattr(app, "STOP_STEP_SECONDS", 0.5)  # a stop that gives up on the DM
    slack.add_user("U0REQ")
    first = await make_bot(policy(), dispatcher=fast_dispatcher())
    assert first.ctx is not None
    url = f"http://127.0.0.1:{first.port}/v1/approvals"
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    body = {"tool_name": "deploy", "arguments": {"env": "prod"}, "notify": "U0REQ"}
    async with http.post(url, json=body, headers=headers) as resp:
        assert resp.status == 201, await resp.text()
        rid = (await resp.json())["id"]
    await eventually(lambda: posted(first, rid))
    channel, message = posted_message(slack, rid)
    slack.slow_next("conversations.open", 3.0)
    assert await reviewer("U0ALICE").click(first, message, channel, ids.APPROVE) == 200
    await eventually(lambda: slack.arrived("conversations.open") == 1, what="the notice begun")
    await first.stop()
    assert not [u for u, _ in dms_to(slack) if u == "U0REQ"], "not sent by the first"
    await make_bot(policy(), dispatcher=fast_dispatcher())
    await eventually(lambda: [u for u, _ in dms_to(slack) if u == "U0REQ"], within=15)
    await asyncio.sleep(0.5)  # a second notice would come now
    notices = [t for u, t in dms_to(slack) if u == "U0REQ"]
    assert len(notices) == 1 and "Approved by <@U0ALICE>" in notices[0]


async def test_the_scan_reads_only_requests_old_enough_to_remind(
    make_bot: BotFactory, slack: SlackEmulator, monkeypatch: Any
) -> None:
    """The scan runs every second: with no reminding route it reads nothing, and with one it
    reads only requests created at least `remind_after` ago (a burst of fresh requests is
    not read and parsed every second)."""
    bot = await make_bot(policy())
    assert bot.ctx is not None and bot.reminders is not None
    req = await asked(bot, slack)
    read: list[list[str]] = []
    get_many = bot.ctx.store.get_many

    async def counting(ids: Any) -> Any:
        read.append([str(i) for i in ids])
        return await get_many(ids)

    monkeypatch.setattr(bot.ctx.store, "get_many", counting)
    assert await bot.reminders.remind_due(req.created_at + timedelta(seconds=30)) == 0
    assert read == [[]], "created 30 s ago, reminded after 60: not read"
    assert await bot.reminders.remind_due(req.created_at + timedelta(seconds=61)) == 2
    assert read[-1] == [req.id]

    quiet = {"routes": {"default": {"channel": CHANNEL}}}
    bot.ctx.service.policy = parse_policy(quiet, source="test")
    read.clear()
    assert await bot.reminders.remind_due(req.created_at + timedelta(seconds=500)) == 0
    assert read == [], "no route reminds: nothing read"
