"""Ask the agent… end to end, through the real app, the emulator and the command hook: a
reviewer's question ends the request `asked`; the hook's deny carries the question; the agent's
retry (its answer in the transcript before the call) is posted in the original message's
thread with the answer shown; approving it allows the call. Also: from the App Home tab and
`/approvals`, from a digest row's review modal, stale and refused clicks, quorum routes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View

from approvals._internal.policy_file import parse_policy
from approvals._internal.service import Actor
from approvals.models import ApprovalEvent, CallContext
from bot.core.app import Bot
from bot.slack import action_ids as ids
from tests.e2e.test_coding_agents_flow import edit_call, project_with_client, run_command_hook
from tests.support import transcripts
from tests.support.e2e import (
    CHANNEL,
    BotFactory,
    Reviewer,
    has_actions,
    opened_view,
    posted_message,
)
from tests.support.slack_emulator import SlackEmulator

QUESTION = "Why 5 and not 10? The nightly CI run sometimes needs 8 retries."
ANSWER = (
    "5 covered the slowest runner I saw, but you are right about the nightly run: "
    "I'll default to 8 instead."
)
RETRY_CALL = "toolu_01Retry7c3e9bWq5Xn2KdTf"


def valid_blocks(message: dict[str, Any]) -> None:
    blocks = message.get("blocks", [])
    assert len(blocks) <= 50
    for block in blocks:
        Block.parse(block).validate_json()  # type: ignore[union-attr]
        assert len((block.get("text") or {}).get("text", "")) <= 3000


def texts(message: dict[str, Any]) -> str:
    return "\n".join(
        b["text"]["text"] for b in message.get("blocks", []) if b.get("type") == "section"
    )


async def ask(
    bot: Bot, slack: SlackEmulator, who: Reviewer, message: dict[str, Any], channel: str, q: str
) -> dict[str, Any]:
    """Click Ask the agent… on `message` and submit the dialog with `q`; the dialog's view."""
    opened = len(slack.calls_to("views.open"))
    assert await who.click(bot, message, channel, ids.ASK) == 200
    (call, *_) = (await slack.wait_for("views.open", opened + 1))[opened:]
    view = call.body["view"]
    view = json.loads(view) if isinstance(view, str) else view
    assert view["callback_id"] == ids.ASK_MODAL
    View(**view).validate_json()
    assert await who.submit(bot, view, {ids.QUESTION_BLOCK: {ids.QUESTION_ACTION: q}}) == 200
    return view  # type: ignore[no-any-return]


async def test_ask_the_agent_then_approve_its_answer_in_the_thread(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any, tmp_path: Path
) -> None:
    bot = await make_bot()
    project = project_with_client(tmp_path)
    transcript = transcripts.write(tmp_path, transcripts.CLAUDE_EDIT)
    first = asyncio.create_task(
        run_command_hook(bot, "claude-code", edit_call(project, transcript), "--timeout", "30")
    )
    await slack.wait_for("chat.postMessage", 1, timeout=10)
    (channel, root), message = next(iter(slack.messages.items()))
    valid_blocks(message)
    alice: Reviewer = reviewer("U0ALICE")
    await ask(bot, slack, alice, message, channel, QUESTION)

    # The hook's deny carries the question and asks the model to answer and retry.
    code, out, err = await asyncio.wait_for(first, 15)
    assert code == 0, err
    decision = json.loads(out)["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny"
    denial = decision["permissionDecisionReason"]
    assert QUESTION in denial and "<@U0ALICE>" in denial
    assert "Answer the question" in denial and "retry the same call" in denial
    # The original message: asked, no buttons left.
    await slack.wait_until(
        lambda: "Asked by <@U0ALICE>" in texts(slack.messages[(channel, root)]),
        10,
        "the asked line",
    )
    assert not has_actions(slack.messages[(channel, root)])

    # The agent answers (its words before the retried Edit) and calls again, edited.
    retry_input = {
        "file_path": str(project / "src" / "client.py"),
        "old_string": "MAX_RETRIES = 3",
        "new_string": 'MAX_RETRIES = int(os.environ.get("CLIENT_MAX_RETRIES", "8"))',
    }
    extra = transcripts.claude_retry_lines(
        transcripts.CLAUDE_EDIT_CALL, denial, ANSWER, RETRY_CALL, retry_input
    )
    transcript = transcripts.write(tmp_path, transcripts.CLAUDE_EDIT, extra=extra)
    payload = edit_call(project, transcript) | {
        "tool_input": retry_input,
        "tool_use_id": RETRY_CALL,
    }
    second = asyncio.create_task(run_command_hook(bot, "claude-code", payload, "--timeout", "30"))
    await slack.wait_for("chat.postMessage", 2, timeout=10)
    (post,) = slack.calls_to("chat.postMessage")[1:]
    assert post.body.get("thread_ts") == root, "the retry is a reply in the asked message's thread"
    replies = [m for m in slack.messages.values() if m.get("thread_ts") == root]
    (reply,) = replies
    valid_blocks(reply)
    shown = texts(reply)
    assert f"❓ *<@U0ALICE> asked:* {QUESTION}" in shown
    assert "*Why:* 5 covered the slowest runner" in shown  # its answer
    assert "+MAX_RETRIES" in shown and '"8"' in shown
    # The original message now says the question was answered in the thread.
    await slack.wait_until(
        lambda: "answered in the thread" in texts(slack.messages[(channel, root)]),
        10,
        "the answered line",
    )
    original = slack.messages[(channel, root)]
    valid_blocks(original)
    assert "❓ Asked by <@U0ALICE> at" in texts(original)

    # Approve the answer in the thread: the retried call runs.
    assert await alice.click(bot, reply, channel, ids.APPROVE) == 200
    code, out, err = await asyncio.wait_for(second, 15)
    assert code == 0, err
    assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert bot.ctx is not None
    audit = await bot.ctx.store.audit_entries()
    asked = [e for e in audit if e.event == "asked"]
    assert len(asked) == 1 and asked[0].by == "U0ALICE" and asked[0].reason == QUESTION
    assert asked[0].via == "slack"


async def test_the_question_from_the_home_tab_and_a_slash_reply(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    """The Ask button is on the App Home tab and in `/approvals` replies; asking from the
    Home tab is the same decision (bound to the version drawn), and the tab is redrawn."""
    policy = parse_policy(
        {"routes": {"default": {"channel": CHANNEL, "reviewers": ["U0ALICE"]}}}, source="test"
    )
    bot = await make_bot(policy)
    assert bot.ctx is not None
    event = ApprovalEvent(
        tool_name="deploy",
        arguments={"env": "prod"},
        session_id="sess-home",
        context=CallContext(reason="Ship the hotfix"),
    )
    rid = (await bot.ctx.service.submit(event, principal="ci-agent")).id
    await slack.wait_for("chat.postMessage", 1, timeout=10)
    alice: Reviewer = reviewer("U0ALICE")
    assert await alice.slash(bot) == 200
    assert ids.ASK in alice.last_body and rid in alice.last_body
    assert await alice.open_home(bot) == 200
    await slack.wait_until(
        lambda: rid in json.dumps(slack.home_views.get("U0ALICE", {})), 10, "home"
    )
    home = slack.home_views["U0ALICE"]
    assert await alice.send(bot, alice.home_click_payload(home, ids.ASK, rid)) == 200
    view = await opened_view(slack)
    assert view["callback_id"] == ids.ASK_MODAL
    assert (
        await alice.submit(bot, view, {ids.QUESTION_BLOCK: {ids.QUESTION_ACTION: "Which region?"}})
        == 200
    )

    async def asked() -> bool:
        return (await bot.ctx.store.get(rid)).status == "asked"  # type: ignore[union-attr]

    for _ in range(100):
        if await asked():
            break
        await asyncio.sleep(0.05)
    request = await bot.ctx.store.get(rid)
    assert request.status == "asked" and request.decision is not None
    assert request.decision.question == "Which region?" and request.decision.decided_by == "U0ALICE"
    # The retry (same caller, session, tool; edited arguments) goes in the thread.
    retry = ApprovalEvent(
        tool_name="deploy",
        arguments={"env": "prod", "region": "eu-west-1"},
        session_id="sess-home",
        context=CallContext(reason="eu-west-1: the hotfix is for EU customers only."),
    )
    again = await bot.ctx.service.submit(retry, principal="ci-agent")
    assert again.answers is not None and again.answers.request_id == rid
    await slack.wait_for("chat.postMessage", 2, timeout=10)
    (post,) = slack.calls_to("chat.postMessage")[1:]
    _, first = posted_message(slack, rid)
    assert post.body.get("thread_ts") == first["ts"]


async def test_a_stale_or_refused_question_records_nothing(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    """The Ask button names the version drawn: a reviewer's edit since turns it away; the
    requester's own person and a non-reviewer are refused; nothing is recorded."""
    policy = parse_policy(
        {
            "routes": {
                "default": {"channel": CHANNEL, "reviewers": ["U0ALICE", "U0BOB"], "quorum": 2}
            },
            "principals": {"ci-agent": {"slack_user": "U0BOB"}},
        },
        source="test",
    )
    bot = await make_bot(policy)
    assert bot.ctx is not None
    event = ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}, session_id="s1")
    rid = (await bot.ctx.service.submit(event, principal="ci-agent")).id
    _, message = await _posted(slack, rid)
    mallory: Reviewer = reviewer("U0MALLORY")
    assert await mallory.click(bot, message, CHANNEL, ids.ASK) == 200
    await slack.wait_for("chat.postEphemeral", 1)
    assert "not one of the reviewers" in json.dumps(slack.calls_to("chat.postEphemeral")[-1].body)
    bob: Reviewer = reviewer("U0BOB")
    assert await bob.click(bot, message, CHANNEL, ids.ASK) == 200
    await slack.wait_for("chat.postEphemeral", 2)
    assert "someone else has to decide" in json.dumps(slack.calls_to("chat.postEphemeral")[-1].body)
    # Alice opens the dialog; an edit lands before she submits: stale, nothing recorded.
    alice: Reviewer = reviewer("U0ALICE")
    assert await alice.click(bot, message, CHANNEL, ids.ASK) == 200
    view = await opened_view(slack)
    await bot.ctx.service.edit(rid, Actor("U0ALICE"), {"env": "staging"})
    assert await alice.submit(bot, view, {ids.QUESTION_BLOCK: {ids.QUESTION_ACTION: "Why?"}}) == 200
    await slack.wait_for("chat.postEphemeral", 3)
    assert "changed since" in json.dumps(slack.calls_to("chat.postEphemeral")[-1].body)
    assert (await bot.ctx.store.get(rid)).status == "pending"  # a proposal: quorum 2
    assert not [e for e in await bot.ctx.store.audit_entries() if e.event == "asked"]


async def _posted(slack: SlackEmulator, rid: str) -> tuple[str, dict[str, Any]]:
    await slack.wait_until(
        lambda: any(rid in json.dumps(m) for m in slack.messages.values()), 10, "the post"
    )
    return posted_message(slack, rid)
