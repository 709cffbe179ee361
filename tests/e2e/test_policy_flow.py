"""Team policy end to end: quorum, escalation, timeouts, grants, sensitivity, DMs, reload."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import yaml

from approvals._internal.policy import Policy
from approvals._internal.policy_file import parse_policy
from approvals._internal.store.store import ApprovalStore
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest
from bot.core.app import Bot
from bot.slack import action_ids as ids
from tests.support.e2e import (
    CHANNEL,
    BotFactory,
    Reviewer,
    fast_dispatcher,
    has_actions,
    opened_view,
    sweeper_held,
)
from tests.support.slack_emulator import SlackEmulator

OPS = "C0OPS"
SECURITY = "C0SECURITY"


def policy(data: dict[str, Any]) -> Policy:
    return parse_policy(copy.deepcopy(data), source="test-policy.yaml")


async def submit(
    bot: Bot, tool: str = "deploy", config: ApprovalConfig | None = None, **event: Any
) -> ApprovalRequest:
    assert bot.ctx is not None
    args = event.pop("arguments", {"env": "prod", "version": "1.2.3"})
    requester = event.pop("requester", None)
    return await bot.ctx.service.submit(
        ApprovalEvent(tool_name=tool, arguments=args, agent="agent-7", **event),
        config,
        requester=requester,
    )


def text_of(message: dict[str, Any]) -> str:
    return json.dumps(message.get("blocks", []), ensure_ascii=False)


def message_in(slack: SlackEmulator, channel: str, request_id: str) -> dict[str, Any] | None:
    for message in slack.messages_in(channel):
        if request_id in text_of(message):
            return message
    return None


async def posted_in(slack: SlackEmulator, channel: str, request_id: str) -> dict[str, Any]:
    """The message for `request_id` in `channel`, once the bot has posted it."""
    await slack.wait_until(
        lambda: message_in(slack, channel, request_id) is not None, 5, f"a post in {channel}"
    )
    message = message_in(slack, channel, request_id)
    assert message is not None
    return message


def posts_for(slack: SlackEmulator, request_id: str) -> list[str]:
    """Channels `request_id` was posted to, in order."""
    return [
        str(c.response["channel"])
        for c in slack.calls_to("chat.postMessage", ok=True)
        if c.response and request_id in json.dumps(c.body.get("blocks", []))
    ]


def updates_of(slack: SlackEmulator, message: dict[str, Any]) -> list[dict[str, Any]]:
    return [c.body for c in slack.calls_to("chat.update") if c.body.get("ts") == message["ts"]]


# -- quorum ------------------------------------------------------------------------------

QUORUM = {
    "routes": {
        "default": {
            "channel": CHANNEL,
            "reviewers": ["U0ALICE", "U0BOB", "U0CAROL"],
            "quorum": 2,
        }
    }
}


async def test_quorum_progress_then_concurrent_votes_decide_once(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot(policy(QUORUM))
    assert bot.ctx is not None
    rid = (await submit(bot)).id
    waiting = asyncio.create_task(bot.ctx.waiter.wait(rid, timeout=15))
    message = await posted_in(slack, CHANNEL, rid)
    assert "0 of 2 approvals" in text_of(message)
    alice: Reviewer = reviewer("U0ALICE")
    assert await alice.click(bot, message, CHANNEL, ids.APPROVE) == 200
    await slack.wait_until(lambda: len(updates_of(slack, message)) >= 1, 15, "progress update")
    (progress,) = updates_of(slack, message)
    assert "1 of 2 approvals: <@U0ALICE>" in text_of(progress)
    assert has_actions(progress), "still open for the second vote"
    assert not waiting.done(), "one approval of two decides nothing"

    # Alice again: ignored and told so.
    assert await alice.click(bot, message, CHANNEL, ids.APPROVE) == 200
    (told,) = await slack.wait_for("chat.postEphemeral", 1)
    assert told.body["user"] == "U0ALICE" and "already voted" in told.body["text"]
    assert "1 of 2 approvals" in told.body["text"]

    # Bob and Carol at once: one of them reaches the quorum, the other is late.
    bob, carol = reviewer("U0BOB"), reviewer("U0CAROL")
    statuses = await asyncio.gather(
        bob.click(bot, message, CHANNEL, ids.APPROVE),
        carol.click(bot, message, CHANNEL, ids.APPROVE),
    )
    assert list(statuses) == [200, 200]
    req = await waiting
    assert req.status == "approved" and req.decision is not None
    assert req.decision.decided_by in ("U0BOB", "U0CAROL")
    voters = {v.user for v in req.votes}
    assert "U0ALICE" in voters and len(voters) == 2
    audit = await bot.ctx.store.audit_entries(request_id=rid)
    assert [e.event for e in audit].count("approved") == 1
    assert [e.by for e in audit if e.event == "vote"].count("U0ALICE") == 1
    loser = ({"U0BOB", "U0CAROL"} - {req.decision.decided_by}).pop()
    await slack.wait_until(
        lambda: any(c.body["user"] == loser for c in slack.calls_to("chat.postEphemeral")),
        3,
        "the late voter told",
    )
    await slack.wait_until(
        lambda: "Approved" in text_of(slack.messages[(CHANNEL, message["ts"])]), 3, "outcome"
    )
    final = slack.messages[(CHANNEL, message["ts"])]
    assert not has_actions(final) and "2 of 2 approvals" in text_of(final)


async def test_two_reviewers_clicking_at_once_reach_the_quorum_once(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot(policy(QUORUM))
    assert bot.ctx is not None
    rid = (await submit(bot)).id
    message = await posted_in(slack, CHANNEL, rid)
    alice, bob = reviewer("U0ALICE"), reviewer("U0BOB")
    statuses = await asyncio.gather(
        alice.click(bot, message, CHANNEL, ids.APPROVE),
        bob.click(bot, message, CHANNEL, ids.APPROVE),
        alice.click(bot, message, CHANNEL, ids.APPROVE),
    )
    assert list(statuses) == [200] * 3
    req = await bot.ctx.waiter.wait(rid, timeout=15)
    assert req.status == "approved" and {v.user for v in req.votes} == {"U0ALICE", "U0BOB"}
    (told,) = await slack.wait_for("chat.postEphemeral", 1)
    assert told.body["user"] == "U0ALICE"
    assert "already voted" in told.body["text"] or "Already approved" in told.body["text"]
    audit = await bot.ctx.store.audit_entries(request_id=rid)
    assert [e.event for e in audit].count("approved") == 1
    assert sorted(e.by for e in audit if e.event == "vote") == ["U0ALICE", "U0BOB"]
    await asyncio.sleep(0.2)
    assert len(slack.calls_to("chat.postEphemeral")) == 1


async def test_a_deny_beats_approvals(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot(policy(QUORUM))
    assert bot.ctx is not None
    rid = (await submit(bot)).id
    message = await posted_in(slack, CHANNEL, rid)
    assert await reviewer("U0ALICE").click(bot, message, CHANNEL, ids.APPROVE) == 200
    bob: Reviewer = reviewer("U0BOB")
    assert await bob.click(bot, message, CHANNEL, ids.DENY) == 200
    view = await opened_view(slack)
    await bob.submit(bot, view, {ids.REASON_BLOCK: {ids.REASON_ACTION: "freeze week"}})
    req = await bot.ctx.waiter.wait(rid, timeout=15)
    assert req.status == "denied" and req.decision is not None
    assert (req.decision.decided_by, req.decision.reason) == ("U0BOB", "freeze week")
    assert await reviewer("U0CAROL").click(bot, message, CHANNEL, ids.APPROVE) == 200
    (told,) = await slack.wait_for("chat.postEphemeral", 1)
    assert "Already denied by <@U0BOB>" in told.body["text"]
    assert (await bot.ctx.store.get(rid)).status == "denied"


# -- escalation and timeouts -----------------------------------------------------------------

#: Route b's deadline: the tests click on b's message before it passes, which on a loaded
#: machine can take well over 0.5 s.
B_DEADLINE = 3.0
CHAIN: dict[str, Any] = {
    "routes": {
        "default": {"channel": CHANNEL},
        "a": {
            "channel": CHANNEL, "reviewers": ["U0ALICE"], "deadline_seconds": 0.5,
            "on_timeout": "escalate", "escalate_to": "b",
        },
        "b": {
            "channel": OPS, "reviewers": ["U0BOB"], "deadline_seconds": B_DEADLINE,
            "on_timeout": "escalate", "escalate_to": "c",
        },
        "c": {"channel": SECURITY, "reviewers": ["U0CAROL"], "deadline_seconds": 0.5},
    },
    "rules": [{"name": "deploys", "action": "ask", "route": "a", "match": {"tool": "deploy"}}],
}  # fmt: skip


async def submit_posted_on_a(bot: Bot, slack: SlackEmulator) -> tuple[str, dict[str, Any]]:
    """A deploy request and its message on route a, the sweeper held until that message is
    in Slack: a request that escalates before it is posted is posted on route b only (or,
    if the post was under way, late: `test_a_post_that_lands_after_its_escalation_…`)."""
    async with sweeper_held(bot):
        rid = (await submit(bot)).id
        first = await posted_in(slack, CHANNEL, rid)
    return rid, first


async def test_escalation_chain_posts_on_each_route_and_the_agent_keeps_waiting(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot(policy(CHAIN))
    assert bot.ctx is not None
    rid, first = await submit_posted_on_a(bot, slack)
    waiting = asyncio.create_task(bot.ctx.waiter.wait(rid, timeout=15))
    second = await posted_in(slack, OPS, rid)
    # The first message says where the request went, and takes no more clicks.
    await slack.wait_until(
        lambda: "Escalated to <#C0OPS>" in text_of(slack.messages[(CHANNEL, first["ts"])]),
        3,
        "the escalated note",
    )
    assert not has_actions(slack.messages[(CHANNEL, first["ts"])])
    assert has_actions(second) and not waiting.done()
    # Alice (route a's reviewer) is no longer a reviewer once it moved to route b.
    assert await reviewer("U0ALICE").click(bot, second, OPS, ids.APPROVE) == 200
    (told,) = await slack.wait_for("chat.postEphemeral", 1)
    assert "not one of the reviewers" in told.body["text"]
    third = await posted_in(slack, SECURITY, rid)
    await slack.wait_until(
        lambda: "Escalated to <#C0SECURITY>" in text_of(slack.messages[(OPS, second["ts"])]),
        3,
        "the second escalated note",
    )
    req = await waiting
    assert req.status == "expired" and req.route == "c" and req.escalations == 2
    assert req.decision is not None and req.decision.reason == "approval timeout"
    assert posts_for(slack, rid) == [CHANNEL, OPS, SECURITY], "posted once per route"
    await slack.wait_until(
        lambda: "Expired" in text_of(slack.messages[(SECURITY, third["ts"])]), 3, "expired"
    )
    trail = [(e.event, e.reason) for e in await bot.ctx.store.audit_entries(request_id=rid)]
    assert [t for t in trail if t[0] == "escalated"] == [
        ("escalated", "a -> b"),
        ("escalated", "b -> c"),
    ]
    assert trail[-1][0] == "expired"


async def test_a_post_that_lands_after_its_escalation_is_no_second_live_message(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    """Slack is slow with route a's post: the request escalates to route b (posted there)
    before it lands. That late message says where the request went and has no buttons, so
    there is one live set; the decision made on b is drawn on both."""
    slack.slow_next("chat.postMessage", 1.2)  # past route a's 0.5 s deadline
    bot = await make_bot(policy(CHAIN))
    assert bot.ctx is not None
    rid = (await submit(bot)).id
    waiting = asyncio.create_task(bot.ctx.waiter.wait(rid, timeout=15))
    second = await posted_in(slack, OPS, rid)
    first = await posted_in(slack, CHANNEL, rid)
    assert posts_for(slack, rid) == [OPS, CHANNEL]  # the late one last
    await slack.wait_until(
        lambda: not has_actions(slack.messages[(CHANNEL, first["ts"])]), 5, "the late copy retired"
    )
    assert "Escalated to <#C0OPS>" in text_of(slack.messages[(CHANNEL, first["ts"])])
    assert has_actions(slack.messages[(OPS, second["ts"])]) and not waiting.done()
    assert await reviewer("U0BOB").click(bot, second, OPS, ids.APPROVE) == 200
    req = await waiting
    assert req.status == "approved" and req.route == "b"
    for channel, message in ((OPS, second), (CHANNEL, first)):
        await slack.wait_until(
            lambda c=channel, m=message: "Approved" in text_of(slack.messages[(c, m["ts"])]),
            5,
            f"the outcome on {channel}",
        )
        assert not has_actions(slack.messages[(channel, message["ts"])])


async def test_a_late_copy_whose_redraw_failed_is_retired_when_its_entry_is_retried(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """Slack fails every try of the late copy's redraw (5xx): the post entry fails, is taken
    again, and then retires the copy (the request was already posted on route b)."""
    slack.slow_next("chat.postMessage", 1.2)
    slack.server_error_next("chat.update", 500, times=4)  # the dispatcher's 4 quick tries
    bot = await make_bot(policy(CHAIN))
    assert bot.ctx is not None
    rid = (await submit(bot)).id
    await posted_in(slack, OPS, rid)
    first = await posted_in(slack, CHANNEL, rid)
    await slack.wait_until(
        lambda: not has_actions(slack.messages[(CHANNEL, first["ts"])]), 10, "the copy retired"
    )
    assert "Escalated to <#C0OPS>" in text_of(slack.messages[(CHANNEL, first["ts"])])
    failed = [c for c in slack.calls_to("chat.update") if c.body.get("ts") == first["ts"]]
    assert len(failed) >= 5 and not failed[0].ok and failed[-1].ok
    assert (await bot.ctx.store.get(rid)).is_pending


async def test_escalated_request_is_decided_on_the_new_route(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot(policy(CHAIN))
    assert bot.ctx is not None
    rid, _ = await submit_posted_on_a(bot, slack)
    waiting = asyncio.create_task(bot.ctx.waiter.wait(rid, timeout=15))
    second = await posted_in(slack, OPS, rid)
    assert await reviewer("U0BOB").click(bot, second, OPS, ids.APPROVE) == 200
    req = await waiting
    assert req.status == "approved" and req.decision is not None
    assert (req.decision.decided_by, req.route) == ("U0BOB", "b")
    await asyncio.sleep(B_DEADLINE + 0.3)  # past route b's deadline: nothing more happens
    assert posts_for(slack, rid) == [CHANNEL, OPS]
    assert (await bot.ctx.store.get(rid)).status == "approved"


async def test_max_escalations_stops_the_chain(make_bot: BotFactory, slack: SlackEmulator) -> None:
    data = copy.deepcopy(CHAIN)
    data["routes"]["b"]["max_escalations"] = 1
    bot = await make_bot(policy(data))
    assert bot.ctx is not None
    rid, _ = await submit_posted_on_a(bot, slack)
    req = await bot.ctx.waiter.wait(rid, timeout=15)
    assert (req.status, req.route, req.escalations) == ("expired", "b", 1)
    await asyncio.sleep(0.3)
    assert posts_for(slack, rid) == [CHANNEL, OPS]


async def test_on_timeout_approve_approves_at_the_deadline(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    data = {
        "routes": {
            "default": {"channel": CHANNEL, "deadline_seconds": 0.5, "on_timeout": "approve"}
        }
    }
    bot = await make_bot(policy(data))
    assert bot.ctx is not None
    # The caller asks for a longer deadline; the route's wins either way.
    async with sweeper_held(bot):
        request = await submit(bot, config=ApprovalConfig(deadline_seconds=60))
        message = await posted_in(slack, CHANNEL, request.id)
    req = await bot.ctx.waiter.wait(request.id, timeout=15)
    assert req.status == "approved" and req.decision is not None
    assert (req.decision.via, req.decision.decided_by) == ("timeout", "timeout")
    assert (req.decision.decided_at - request.created_at).total_seconds() >= 0.5
    await slack.wait_until(
        lambda: "Approved" in text_of(slack.messages[(CHANNEL, message["ts"])]), 3, "the update"
    )
    assert not has_actions(slack.messages[(CHANNEL, message["ts"])])


async def test_overdue_while_every_bot_was_stopped_expires_on_next_start(
    make_bot: BotFactory, slack: SlackEmulator, store: ApprovalStore
) -> None:
    first = await make_bot()
    assert first.ctx is not None
    # 3 s: the first bot must post and stop before the deadline, even on a loaded machine.
    rid = (await submit(first, config=ApprovalConfig(deadline_seconds=3))).id
    message = await posted_in(slack, CHANNEL, rid)
    await first.stop()
    await asyncio.sleep(3.3)
    assert (await store.get(rid)).status == "pending", "nobody was sweeping"
    assert updates_of(slack, message) == []
    second = await make_bot()
    assert second.ctx is not None
    req = await second.ctx.waiter.wait(rid, timeout=15)
    assert req.status == "expired"
    await slack.wait_until(lambda: len(updates_of(slack, message)) >= 1, 15, "the update")
    (update,) = updates_of(slack, message)
    assert "Expired" in text_of(update) and not has_actions(update)


# -- session grants ---------------------------------------------------------------------------

GRANTS = {
    "routes": {"default": {"channel": CHANNEL, "allow_for_session": True}},
    "defaults": {"grant_ttl_seconds": 1},
}


async def test_session_grant_reused_scoped_and_expired(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot(policy(GRANTS))
    assert bot.ctx is not None
    rid = (await submit(bot, "run_shell", arguments={"cmd": "ls"}, session_id="s1")).id
    message = await posted_in(slack, CHANNEL, rid)
    assert await reviewer("U0ERIN").click(bot, message, CHANNEL, ids.APPROVE_SESSION) == 200
    req = await bot.ctx.waiter.wait(rid, timeout=15)
    assert req.decision is not None and req.decision.for_session
    posts = len(slack.calls_to("chat.postMessage"))

    # The default scope is this exact call: the same call again is approved at once ...
    again = await submit(bot, "run_shell", arguments={"cmd": "ls"}, session_id="s1")
    assert again.status == "approved" and again.decision is not None
    assert (again.decision.decided_by, again.decision.via) == ("U0ERIN", "grant")
    (granted,) = [
        e for e in await bot.ctx.store.audit_entries(request_id=again.id) if e.event == "approved"
    ]
    assert (granted.by, granted.via) == ("U0ERIN", "grant") and rid in granted.reason

    # ... any other call is asked.
    other_call = await submit(bot, "run_shell", arguments={"cmd": "pwd"}, session_id="s1")
    assert other_call.status == "pending"
    other_session = await submit(bot, "run_shell", arguments={"cmd": "ls"}, session_id="s2")
    other_tool = await submit(bot, "drop_table", arguments={"t": "x"}, session_id="s1")
    no_session = await submit(bot, "run_shell", arguments={"cmd": "ls"})
    assert [r.status for r in (other_session, other_tool, no_session)] == ["pending"] * 3

    await asyncio.sleep(1.5)
    expired = await submit(bot, "run_shell", arguments={"cmd": "ls"}, session_id="s1")
    assert expired.status == "pending", "the grant outlived its TTL"
    await posted_in(slack, CHANNEL, expired.id)
    assert again.id not in json.dumps([c.body for c in slack.calls_to("chat.postMessage")])
    assert len(slack.calls_to("chat.postMessage")) == posts + 5


# -- sensitivity, policy answers, DMs -------------------------------------------------------------

SECRET_VALUE = "hunter2-correct-horse"

STRICT = {
    "routes": {
        "default": {"channel": CHANNEL, "reviewers": ["U0ALICE"]},
        "strict": {
            "channel": SECURITY,
            "reviewers": ["U0ALICE", "U0BOB"],
            "quorum": 2,
            "dm_reviewers": True,
        },
    },
    "sensitivity_routes": {"secret": "strict"},
}


async def test_secret_goes_to_the_strict_route_and_never_reaches_slack(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot(policy(STRICT))
    assert bot.ctx is not None
    request = await submit(
        bot,
        "rotate_key",
        ApprovalConfig(sensitivity="secret"),
        arguments={"service": "billing", "note": SECRET_VALUE},
    )
    assert (request.route, request.quorum, request.channel) == ("strict", 2, SECURITY)
    message = await posted_in(slack, SECURITY, request.id)
    assert "secret (values hidden)" in text_of(message)
    await slack.wait_for("chat.postMessage", 3)  # the post and two DMs
    alice, bob = reviewer("U0ALICE"), reviewer("U0BOB")
    assert await alice.click(bot, message, SECURITY, ids.APPROVE) == 200
    await slack.wait_until(lambda: len(updates_of(slack, message)) >= 1, 15, "progress")
    assert await bob.click(bot, message, SECURITY, ids.DENY) == 200
    view = await opened_view(slack)
    await bob.submit(bot, view, {ids.REASON_BLOCK: {ids.REASON_ACTION: "rotate next week"}})
    req = await bot.ctx.waiter.wait(request.id, timeout=15)
    assert req.status == "denied"
    assert req.event.arguments["note"] == SECRET_VALUE, "the agent's record keeps the value"
    assert await alice.click(bot, message, SECURITY, ids.APPROVE) == 200
    await slack.wait_for("chat.postEphemeral", 1)
    await slack.wait_until(
        lambda: "Denied" in text_of(slack.messages[(SECURITY, message["ts"])]), 3, "outcome"
    )
    assert slack.calls, "the emulator saw the traffic"
    for call in slack.calls:
        assert SECRET_VALUE not in json.dumps(call.body), f"{call.method} leaked the secret"
    assert "billing" not in text_of(slack.messages[(SECURITY, message["ts"])])


async def test_policy_allow_and_deny_answer_at_once_without_slack(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    data = {
        "routes": {"default": {"channel": CHANNEL}},
        "rules": [
            {"name": "reads-are-fine", "action": "allow", "match": {"tool": "read_*"}},
            {
                "name": "no-force-push",
                "action": "deny",
                "reason": "force pushes are off limits",
                "match": {"kind": "command", "arguments": {"command": "push --force"}},
            },
        ],
    }
    bot = await make_bot(policy(data))
    assert bot.ctx is not None
    allowed = await submit(bot, "read_file", arguments={"path": "README.md"})
    denied = await submit(
        bot, "Bash", kind="command", command="git push --force origin main", arguments={}
    )
    assert allowed.status == "approved" and denied.status == "denied"
    assert denied.decision is not None
    assert denied.decision.reason == "force pushes are off limits"
    control = await submit(bot, "deploy")
    await posted_in(slack, CHANNEL, control.id)
    await asyncio.sleep(0.3)
    assert posts_for(slack, allowed.id) == [] and posts_for(slack, denied.id) == []
    assert len(slack.calls_to("chat.postMessage")) == 1
    assert slack.calls_to("chat.update") == []
    audit = {
        e.request_id: (e.by, e.via)
        for e in await bot.ctx.store.audit_entries()
        if e.event in ("approved", "denied")
    }
    assert audit == {
        allowed.id: ("policy:reads-are-fine", "policy"),
        denied.id: ("policy:no-force-push", "policy"),
    }


async def test_reviewers_get_a_dm_when_the_route_says_so(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    data = {
        "routes": {
            "default": {"channel": CHANNEL, "reviewers": ["U0ALICE"]},
            "paged": {
                "channel": OPS,
                "reviewers": ["U0ALICE", "U0BOB", "S0ONCALL"],
                "dm_reviewers": True,
            },
        },
        "rules": [{"name": "pager", "action": "ask", "route": "paged", "match": {"tool": "page"}}],
    }
    # Bob is listed twice: one DM. Dave asks: he is on call, but may not decide his own request.
    slack.add_usergroup("S0ONCALL", ["U0BOB", "U0CAROL", "U0DAVE"])
    bot = await make_bot(policy(data))
    quiet = await submit(bot, "deploy")
    await posted_in(slack, CHANNEL, quiet.id)
    paged = await submit(bot, "page", arguments={"who": "oncall"}, requester="U0DAVE")
    await posted_in(slack, OPS, paged.id)
    opened = await slack.wait_for("conversations.open", 3)
    assert sorted(c.body["users"] for c in opened) == ["U0ALICE", "U0BOB", "U0CAROL"]
    dm_channels = {str(c.response["channel"]["id"]) for c in opened if c.response}
    assert all(ch.startswith("D") for ch in dm_channels) and len(dm_channels) == 3
    await slack.wait_until(
        lambda: (
            len([c for c in slack.calls_to("chat.postMessage") if c.body["channel"] in dm_channels])
            == 3
        ),
        15,
        "three DMs",
    )
    dms = [c for c in slack.calls_to("chat.postMessage") if c.body["channel"] in dm_channels]
    for dm in dms:
        assert dm.ok and f"<#{OPS}>" in dm.body["text"] and "page" in dm.body["text"]
    await asyncio.sleep(0.2)
    assert len(slack.calls_to("conversations.open")) == 3, "no DM for the quiet route"


async def test_reviewer_dms_a_stopped_replica_still_owed_are_sent_by_the_next(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """The message is recorded with its reviewers' DMs owed; a replica that stops before
    sending them (here: stuck opening Alice's DM) leaves them to whoever takes its entry over,
    which sends each one still owed, once. Before, they were never sent."""
    data = {
        "routes": {
            "default": {"channel": CHANNEL, "reviewers": ["U0ALICE", "U0BOB"], "dm_reviewers": True}
        }
    }
    slack.slow_next("conversations.open", 2.0)
    first = await make_bot(policy(data), dispatcher=fast_dispatcher())
    rid = (await submit(first)).id
    await posted_in(slack, CHANNEL, rid)
    await slack.wait_until(lambda: slack.arrived("conversations.open") == 1, 5, "Alice's DM")
    await first.stop()  # mid-DM: neither DM was sent
    second = await make_bot(policy(data), dispatcher=fast_dispatcher())
    assert second.ctx is not None

    def dms_to(user: str) -> list[Any]:
        channels = {
            str(c.response["channel"]["id"])
            for c in slack.calls_to("conversations.open", ok=True)
            if c.response and c.body["users"] == user
        }
        return [
            c for c in slack.calls_to("chat.postMessage", ok=True) if c.body["channel"] in channels
        ]

    await slack.wait_until(lambda: dms_to("U0ALICE") and dms_to("U0BOB"), 15, "both DMs")
    await asyncio.sleep(0.3)
    assert (len(dms_to("U0ALICE")), len(dms_to("U0BOB"))) == (1, 1), "one DM each"
    assert posts_for(slack, rid) == [CHANNEL], "the request itself was posted once"
    row = await second.ctx.redis.hgetall(second.ctx.keys.request(rid))
    assert not [name for name in row if name.startswith("dm:")], "none owed any more"


async def test_a_directory_that_fails_costs_the_dms_not_the_message(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    """Listing a route's reviewers to DM can fail (a user group's lookup cut off): the
    message is still recorded as the request's (its outcome is drawn on it), posted once;
    only the DMs are skipped."""
    data = {
        "routes": {"default": {"channel": CHANNEL, "reviewers": ["S0ONCALL"], "dm_reviewers": True}}
    }
    bot = await make_bot(policy(data))
    assert bot.ctx is not None

    async def cut_off(group: str) -> frozenset[str]:
        raise ConnectionError(f"lookup of {group} cut off")

    bot.ctx.service.membership = cut_off
    rid = (await submit(bot)).id
    await posted_in(slack, CHANNEL, rid)
    store = bot.ctx.store
    for _ in range(100):
        if (await store.get(rid)).message is not None:
            break
        await asyncio.sleep(0.05)
    assert (await store.get(rid)).message is not None, "recorded as the request's message"
    await asyncio.sleep(0.3)
    assert posts_for(slack, rid) == [CHANNEL] and not slack.calls_to("conversations.open")


# -- reload -------------------------------------------------------------------------------------


def write_policy(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


async def test_reload_keeps_pending_requests_decidable(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any, tmp_path: Path
) -> None:
    before = {
        "routes": {
            "default": {"channel": CHANNEL, "reviewers": ["U0ALICE"]},
            "ops": {"channel": OPS, "reviewers": ["U0BOB", "U0CAROL"], "quorum": 2},
        },
        "rules": [
            {"name": "deploys", "action": "ask", "route": "ops", "match": {"tool": "deploy"}}
        ],
    }
    path = write_policy(tmp_path / "policy.yaml", before)
    bot = await make_bot(policy_file=path)
    assert bot.ctx is not None
    pending = (await submit(bot)).id
    message = await posted_in(slack, OPS, pending)
    assert await reviewer("U0BOB").click(bot, message, OPS, ids.APPROVE) == 200
    await slack.wait_until(lambda: len(updates_of(slack, message)) >= 1, 15, "progress")

    # The new file drops route ops and its rule; deploys now go to the default route.
    after = {"routes": {"default": {"channel": CHANNEL, "reviewers": ["U0DAVE"]}}}
    write_policy(path, after)
    assert bot.reload_policy() is True
    assert bot.ctx.service.policy is bot.policy and "ops" not in bot.policy.routes
    fresh = await submit(bot)
    assert (fresh.route, fresh.reviewers) == ("default", ("U0DAVE",))

    # The pending request keeps its route's reviewers, quorum and the vote it had.
    kept = await bot.ctx.store.get(pending)
    assert (kept.route, kept.reviewers, kept.quorum, len(kept.votes)) == (
        "ops",
        ("U0BOB", "U0CAROL"),
        2,
        1,
    )
    assert await reviewer("U0CAROL").click(bot, message, OPS, ids.APPROVE) == 200
    req = await bot.ctx.waiter.wait(pending, timeout=15)
    assert req.status == "approved" and {v.user for v in req.votes} == {"U0BOB", "U0CAROL"}

    # A bad file keeps the policy in force.
    path.write_text("routes:\n  default:\n    channel: '#general'\n    quorum: 0\n")
    current = bot.policy
    assert bot.reload_policy() is False
    assert bot.policy is current and bot.ctx.service.policy is current
    still = await submit(bot)
    assert still.reviewers == ("U0DAVE",)
