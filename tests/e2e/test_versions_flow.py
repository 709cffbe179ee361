"""Every decision control is bound to the version of the arguments it was drawn on, and a
session grant to what a quorum chose — signed clicks and modal submissions
through the real app on the emulator: channel messages, `/approvals` replies, the Home tab."""

from __future__ import annotations

import json
from typing import Any

from approvals._internal.policy_file import parse_policy
from approvals.models import ApprovalEvent, ApprovalRequest
from bot.core.app import Bot
from bot.slack import action_ids as ids
from tests.e2e.test_edits_flow import buttons, message_of, open_edit, submit_edit
from tests.support import eventually
from tests.support.e2e import CHANNEL, BotFactory, Reviewer, opened_view, posted_message
from tests.support.slack_emulator import SlackEmulator

REVIEWERS = ["U0ALICE", "U0BOB", "U0CAROL"]
EDITED = {"command": "rm -rf build/cache"}


async def quorum_bot(make_bot: BotFactory, quorum: int = 2) -> Bot:
    routes = {
        "default": {
            "channel": CHANNEL,
            "reviewers": REVIEWERS,
            "quorum": quorum,
            "allow_for_session": True,
        }
    }
    return await make_bot(parse_policy({"routes": routes}, source="versions.yaml"))


def bash(command: str) -> ApprovalEvent:
    return ApprovalEvent(
        kind="command",
        tool_name="Bash",
        arguments={"command": command},
        command=command,
        session_id="s1",
        agent="claude-code",
    )


async def ask(bot: Bot, command: str = "rm -rf build") -> ApprovalRequest:
    assert bot.ctx is not None
    return await bot.ctx.service.submit(bash(command))


async def edit_by(slack: SlackEmulator, bot: Bot, who: Reviewer, request_id: str) -> None:
    """`who` edits the request's arguments through the Edit… modal; waits until recorded and
    the channel message is redrawn with the edit."""
    view, _ = await open_edit(slack, bot, who, request_id)
    assert await submit_edit(bot, who, view, json.dumps(EDITED)) is None
    assert bot.ctx is not None
    store = bot.ctx.store
    await eventually(lambda: _edited(store, request_id), what="the edit")
    await eventually(
        lambda: "Approve edited" in json.dumps(posted_message(slack, request_id)[1]),
        what="the message redrawn with the edit",
    )


async def _edited(store: Any, request_id: str) -> bool:
    return (await store.get(request_id)).proposal is not None


async def audit_events(bot: Bot, request_id: str) -> list[str]:
    assert bot.ctx is not None
    return [e.event for e in await bot.ctx.store.audit_entries(request_id=request_id)]


async def told(slack: SlackEmulator, count: int) -> str:
    return str((await slack.wait_for("chat.postEphemeral", count))[count - 1].body["text"])


async def test_a_stale_approve_for_session_records_nothing_and_says_so(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    """The issue's probe: on a quorum-2 route reviewer 1 edits; reviewer 2 clicks Approve for
    session on the message drawn before the edit. That click completed the quorum for the
    edited call reviewer 2 never saw, and granted the original arguments, which then ran
    with no vote at all."""
    bot = await quorum_bot(make_bot)
    assert bot.ctx is not None
    req = await ask(bot)
    channel, before = await message_of(slack, req.id)
    assert ids.APPROVE_SESSION in buttons(before)
    alice, bob = reviewer("U0ALICE"), reviewer("U0BOB")
    await edit_by(slack, bot, alice, req.id)

    assert await bob.click(bot, before, channel, ids.APPROVE_SESSION) == 200
    text = await told(slack, 1)
    assert "nothing was recorded" in text and "redrawn" in text
    after = await bot.ctx.store.get(req.id)
    assert after.is_pending and [v.user for v in after.votes] == ["U0ALICE"]
    assert await bot.ctx.service.grants.list() == []
    assert await audit_events(bot, req.id) == ["created", "edit"]
    _, redrawn = posted_message(slack, req.id)
    assert ids.APPROVE_SESSION not in buttons(redrawn), "no session grant for an edited call"
    again = await ask(bot)
    assert again.status == "pending", "the original arguments are asked again"

    # Bob approves what he now sees: the edit, and nothing for the session.
    assert await bob.click(bot, redrawn, channel, ids.APPROVE) == 200
    done = await bot.ctx.waiter.wait(req.id, timeout=10)
    assert done.status == "approved" and done.decision is not None
    assert done.decision.edited_arguments == EDITED and not done.decision.for_session
    assert await bot.ctx.service.grants.list() == []


async def test_deny_and_edit_drawn_before_an_edit_record_nothing(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await quorum_bot(make_bot)
    assert bot.ctx is not None
    req = await ask(bot)
    channel, before = await message_of(slack, req.id)
    alice, bob, carol = reviewer("U0ALICE"), reviewer("U0BOB"), reviewer("U0CAROL")
    # Bob opens the Deny dialog on the agent's own arguments, and leaves it open.
    assert await bob.click(bot, before, channel, ids.DENY) == 200
    deny_view = await opened_view(slack)
    assert ids.decode_metadata(deny_view["private_metadata"]).version == ""
    await edit_by(slack, bot, alice, req.id)
    opened = len(slack.calls_to("views.open"))

    # Submitted after the edit, the dialog drawn before it denies nothing.
    values = {ids.REASON_BLOCK: {ids.REASON_ACTION: "not the prod tree"}}
    assert await bob.submit(bot, deny_view, values) == 200
    assert "nothing was recorded" in await told(slack, 1)
    # Deny… and Edit… on the message drawn before the edit open no dialog.
    for count, action in ((2, ids.DENY), (3, ids.EDIT)):
        assert await carol.click(bot, before, channel, action) == 200
        assert "nothing was recorded" in await told(slack, count)
    assert len(slack.calls_to("views.open")) == opened
    after = await bot.ctx.store.get(req.id)
    assert after.is_pending and [v.user for v in after.votes] == ["U0ALICE"]
    assert await audit_events(bot, req.id) == ["created", "edit"]

    # The redrawn message's Deny names the edit's version: its dialog denies.
    _, redrawn = posted_message(slack, req.id)
    assert after.proposal is not None
    assert buttons(redrawn)[ids.DENY]["value"] == f"{req.id}@{after.proposal.version}"
    assert await carol.click(bot, redrawn, channel, ids.DENY) == 200
    fresh = (await slack.wait_for("views.open", opened + 1))[-1]
    view = fresh.body["view"]
    view = json.loads(view) if isinstance(view, str) else view
    assert await carol.submit(bot, view, values) == 200
    done = await bot.ctx.waiter.wait(req.id, timeout=10)
    assert done.status == "denied" and done.decision is not None
    assert done.decision.decided_by == "U0CAROL"


async def test_a_grant_on_a_quorum_route_needs_a_quorum_of_session_approvals(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    """The last voter alone no longer turns a quorum's approval into a session grant; when
    both chose one, the narrowest scope chosen is granted."""
    bot = await quorum_bot(make_bot)
    assert bot.ctx is not None
    alice, bob = reviewer("U0ALICE"), reviewer("U0BOB")
    first = await ask(bot, "npm test -- -k unit")
    channel, message = await message_of(slack, first.id)
    assert await alice.click(bot, message, channel, ids.APPROVE) == 200
    await eventually(lambda: _votes(bot, first.id, 1), what="alice's vote")
    assert await bob.click(bot, message, channel, ids.APPROVE_SESSION_PREFIX) == 200
    done = await bot.ctx.waiter.wait(first.id, timeout=10)
    assert done.status == "approved" and done.decision is not None
    assert not done.decision.for_session and done.decision.decided_by == "U0BOB"
    assert await bot.ctx.service.grants.list() == []
    assert (await ask(bot, "npm test -- -k unit")).status == "pending"

    second = await ask(bot, "npm test -- -k e2e")
    channel, message = await message_of(slack, second.id)
    assert await alice.click(bot, message, channel, ids.APPROVE_SESSION_PREFIX) == 200
    await eventually(lambda: _votes(bot, second.id, 1), what="alice's vote")
    assert await bob.click(bot, message, channel, ids.APPROVE_SESSION) == 200
    done = await bot.ctx.waiter.wait(second.id, timeout=10)
    assert done.decision is not None and (done.decision.for_session, done.decision.scope) == (
        True,
        "call",
    )
    (grant,) = await bot.ctx.service.grants.list()
    assert grant.scope == "call" and grant.request_id == second.id
    assert (await ask(bot, "npm test -- -k e2e")).status == "approved"
    assert (await ask(bot, "npm test -- -k other")).status == "pending", "not the prefix"
    # The message says so before anyone clicks.
    assert "given only when 2 approvals choose it" in json.dumps(message["blocks"])


async def _votes(bot: Bot, request_id: str, count: int) -> bool:
    assert bot.ctx is not None
    return len((await bot.ctx.store.get(request_id)).votes) >= count


def ephemeral_click(
    who: Reviewer, reply: dict[str, Any], action: str, **kw: Any
) -> tuple[dict[str, Any], str]:
    """A click in an ephemeral reply (`/approvals …`) as Slack sends it, and the name of its
    response_url on the emulator."""
    payload = who.click_payload(reply, CHANNEL, action, **kw)
    payload["container"]["is_ephemeral"] = True
    return payload, str(payload["response_url"]).rsplit("/", 1)[-1]


async def test_a_slash_reply_is_bound_to_its_version_and_redrawn_after_each_click(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await quorum_bot(make_bot)
    assert bot.ctx is not None
    req = await ask(bot)
    await message_of(slack, req.id)
    alice, bob = reviewer("U0ALICE"), reviewer("U0BOB")
    assert await bob.slash(bot, req.id) == 200
    reply = {"ts": "1.000001", "blocks": json.loads(bob.last_body)["blocks"]}
    assert ids.APPROVE_SESSION in buttons(reply)
    await edit_by(slack, bot, alice, req.id)

    # A stale click in the reply: nothing recorded, told so, and the reply redrawn as it is now.
    payload, name = ephemeral_click(bob, reply, ids.APPROVE_SESSION)
    assert await bob.send(bot, payload) == 200
    assert "nothing was recorded" in await told(slack, 1)
    (redraw,) = await slack.wait_for_response(name)
    assert redraw.body["replace_original"] is True
    redrawn = {"ts": "1.000001", "blocks": redraw.body["blocks"]}
    text = json.dumps(redrawn["blocks"], ensure_ascii=False)
    assert "Arguments edited by <@U0ALICE>" in text
    assert ids.APPROVE_SESSION not in buttons(redrawn)
    assert [v.user for v in (await bot.ctx.store.get(req.id)).votes] == ["U0ALICE"]

    # A click in the redrawn reply decides, and the reply is redrawn with the outcome.
    payload, name = ephemeral_click(bob, redrawn, ids.APPROVE)
    assert await bob.send(bot, payload) == 200
    done = await bot.ctx.waiter.wait(req.id, timeout=10)
    assert done.status == "approved" and done.decision is not None
    assert done.decision.edited_arguments == EDITED
    (outcome,) = await slack.wait_for_response(name)
    shown = json.dumps(outcome.body["blocks"], ensure_ascii=False)
    assert "Approved" in shown and not buttons({"blocks": outcome.body["blocks"]})


async def test_a_slash_list_reply_is_redrawn_and_its_deny_dialog_bound(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await quorum_bot(make_bot, quorum=1)
    assert bot.ctx is not None
    first, second = await ask(bot, "ls"), await ask(bot, "ls -la")
    await message_of(slack, second.id)
    bob = reviewer("U0BOB")
    assert await bob.slash(bot) == 200
    listed = {"ts": "1.000002", "blocks": json.loads(bob.last_body)["blocks"]}
    deny = next(
        el
        for block in listed["blocks"]
        if block.get("block_id") == f"{ids.ACTIONS_BLOCK}:{first.id}"
        for el in block["elements"]
        if el["action_id"] == ids.DENY
    )
    payload, name = ephemeral_click(bob, listed, ids.DENY, value=deny["value"])
    payload["actions"][0]["block_id"] = f"{ids.ACTIONS_BLOCK}:{first.id}"
    assert await bob.send(bot, payload) == 200
    view = await opened_view(slack)
    meta = ids.decode_metadata(view["private_metadata"])
    assert (meta.request_id, meta.version) == (first.id, "")
    assert meta.reply is not None and meta.reply.listed
    values = {ids.REASON_BLOCK: {ids.REASON_ACTION: "not now"}}
    assert await bob.submit(bot, view, values) == 200
    assert (await bot.ctx.waiter.wait(first.id, timeout=10)).status == "denied"
    (redraw,) = await slack.wait_for_response(name)
    text = json.dumps(redraw.body, ensure_ascii=False)
    assert second.id in text and first.id not in text, "the list as it is now"


async def test_a_stale_click_on_the_home_tab_records_nothing_and_says_so(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await quorum_bot(make_bot)
    assert bot.ctx is not None
    req = await ask(bot)
    await message_of(slack, req.id)
    alice, bob = reviewer("U0ALICE"), reviewer("U0BOB")
    assert await bob.open_home(bot) == 200
    await slack.wait_until(lambda: req.id in json.dumps(slack.home_views.get("U0BOB", {})), 10)
    tab = slack.home_views["U0BOB"]
    await edit_by(slack, bot, alice, req.id)
    posts = len(slack.calls_to("chat.postMessage"))

    assert await bob.send(bot, bob.home_click_payload(tab, ids.APPROVE_SESSION, req.id)) == 200
    (*_, notice) = await slack.wait_for("chat.postMessage", posts + 1)
    assert notice.body["channel"] == "U0BOB" and "nothing was recorded" in notice.body["text"]
    assert [v.user for v in (await bot.ctx.store.get(req.id)).votes] == ["U0ALICE"]
    await slack.wait_until(
        lambda: "edited by" in json.dumps(slack.home_views["U0BOB"], ensure_ascii=False), 10
    )
