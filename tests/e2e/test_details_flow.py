"""The Details button through the real app: opened from the channel message, from the App Home
tab, pushed over the review modal; refused to whoever may not see the request; it decides
nothing and changes no message (exactly-once: `tests/e2e/test_exactly_once.py`)."""

from __future__ import annotations

import json
from typing import Any

from approvals._internal.policy_file import parse_policy
from approvals.models import ApprovalEvent, CallContext
from bot.core.app import Bot
from bot.slack import action_ids as ids
from tests.support.e2e import CHANNEL, BotFactory, Reviewer, posted_message
from tests.support.slack_emulator import SlackEmulator

POLICY = {"routes": {"default": {"channel": CHANNEL, "reviewers": ["U0ALICE"]}}}
REASON = "The nightly backup needs the new bucket; I'll point the config at it."


async def explained(bot: Bot) -> str:
    assert bot.ctx is not None
    event = ApprovalEvent(
        kind="file",
        tool_name="Edit",
        arguments={
            "file_path": "/srv/app/backup.yaml",
            "old_string": "bucket: backups-old",
            "new_string": "bucket: backups-2026",
        },
        path="/srv/app/backup.yaml",
        cwd="/srv/app",
        context=CallContext(reason=REASON, user_request="move backups to the new bucket"),
    )
    return (await bot.ctx.service.submit(event)).id


async def posted(slack: SlackEmulator, request_id: str) -> dict[str, Any]:
    await slack.wait_until(
        lambda: any(request_id in json.dumps(m) for m in slack.messages.values()), 10, "the post"
    )
    return posted_message(slack, request_id)[1]


def view_of(call: Any) -> dict[str, Any]:
    view = call.body["view"]
    return json.loads(view) if isinstance(view, str) else view  # type: ignore[no-any-return]


async def test_details_from_the_message_home_and_over_the_review_modal(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot(parse_policy(json.loads(json.dumps(POLICY)), source="test"))
    rid = await explained(bot)
    message = await posted(slack, rid)
    alice: Reviewer = reviewer("U0ALICE")
    # From the channel message: views.open with the whole reason and the diff.
    assert await alice.click(bot, message, CHANNEL, ids.DETAILS) == 200
    (opened,) = await slack.wait_for("views.open", 1)
    view = view_of(opened)
    text = json.dumps(view, ensure_ascii=False)
    assert view["callback_id"] == ids.DETAILS_MODAL and REASON in text
    assert "-bucket: backups-old" in text and "+bucket: backups-2026" in text
    # From the Home tab (no channel): a reviewer sees it.
    assert await alice.open_home(bot) == 200
    await slack.wait_until(
        lambda: rid in json.dumps(slack.home_views.get("U0ALICE", {})), 10, "home"
    )
    home = slack.home_views["U0ALICE"]
    assert await alice.send(bot, alice.home_click_payload(home, ids.DETAILS, rid)) == 200
    await slack.wait_for("views.open", 2)
    # Clicked inside a modal (the review modal of a digest row): pushed on top of it.
    payload = alice.click_payload(message, CHANNEL, ids.DETAILS)
    payload["container"] = {"type": "view", "view_id": "V0REVIEW"}
    payload["view"] = {"id": "V0REVIEW", "type": "modal", "callback_id": ids.REVIEW_MODAL}
    assert await alice.send(bot, payload) == 200
    (pushed,) = await slack.wait_for("views.push", 1)
    assert view_of(pushed)["callback_id"] == ids.DETAILS_MODAL
    assert bot.ctx is not None and (await bot.ctx.store.get(rid)).is_pending


async def test_details_refused_to_whoever_may_not_see_the_request(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    """Outside the request's channel, only those who may decide it (or decided it) open it."""
    bot = await make_bot(parse_policy(json.loads(json.dumps(POLICY)), source="test"))
    rid = await explained(bot)
    message = await posted(slack, rid)
    mallory: Reviewer = reviewer("U0MALLORY")
    elsewhere = mallory.click_payload(message, "C0ELSEWHERE", ids.DETAILS)
    assert await mallory.send(bot, elsewhere) == 200
    await slack.wait_for("chat.postEphemeral", 1)
    (refusal,) = slack.calls_to("chat.postEphemeral")
    assert "not one of the reviewers" in json.dumps(refusal.body)
    assert not slack.calls_to("views.open")
    # In the request's own channel, anyone there already sees the message: it opens.
    assert await mallory.click(bot, message, CHANNEL, ids.DETAILS) == 200
    await slack.wait_for("views.open", 1)
