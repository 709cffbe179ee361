"""App Home and `/approvals` end to end: signed `app_home_opened` events and slash commands
through the real app, `views.publish` on the emulator, decisions from the Home tab and from
a slash reply through the same checks as the channel message."""

from __future__ import annotations

import json
from typing import Any

from approvals._internal.policy_file import parse_policy
from approvals.models import ApprovalEvent
from bot.core.app import Bot
from bot.slack import action_ids as ids
from bot.slack.home import MAX_HOME_BLOCKS
from tests.support import eventually
from tests.support.e2e import CHANNEL, BotFactory, Reviewer, posted_message
from tests.support.slack_emulator import SlackEmulator

POLICY = {
    "routes": {
        "default": {"channel": CHANNEL, "reviewers": ["U0ALICE", "U0BOB"]},
        "ops": {"channel": "C0OPS", "reviewers": ["U0CAROL"]},
    },
    "rules": [{"name": "ops", "match": {"tool": "restart_*"}, "action": "ask", "route": "ops"}],
}


async def ask(bot: Bot, tool: str, **arguments: Any) -> str:
    assert bot.ctx is not None
    request = await bot.ctx.service.submit(ApprovalEvent(tool_name=tool, arguments=arguments))
    return request.id


def text_of(view: dict[str, Any]) -> str:
    return json.dumps(view.get("blocks", []), ensure_ascii=False)


async def home_of(slack: SlackEmulator, user: str, *, showing: str = "", hiding: str = "") -> Any:
    """The user's published Home tab, once it shows `showing` and not `hiding`."""

    def ready() -> bool:
        view = slack.home_views.get(user)
        if view is None:
            return False
        text = text_of(view)
        return (not showing or showing in text) and (not hiding or hiding not in text)

    await slack.wait_until(ready, 10, f"{user}'s Home tab")
    return slack.home_views[user]


async def is_posted(slack: SlackEmulator, request_id: str) -> None:
    """Until the request's channel message is in Slack (a loaded machine may take a while)."""

    def posted() -> bool:
        try:
            posted_message(slack, request_id)
        except AssertionError:
            return False
        return True

    await eventually(posted, what=f"the message of {request_id}")


async def test_home_tab_per_person_and_republished_after_a_decision(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot(parse_policy(json.loads(json.dumps(POLICY)), source="test"))
    assert bot.ctx is not None
    first = await ask(bot, "deploy", env="prod")
    second = await ask(bot, "deploy", env="staging")
    ops = await ask(bot, "restart_db", host="db1")
    alice: Reviewer = reviewer("U0ALICE")
    carol: Reviewer = reviewer("U0CAROL")
    assert await alice.open_home(bot) == 200
    assert await carol.open_home(bot) == 200
    view = await home_of(slack, "U0ALICE", showing=second)
    text = text_of(view)
    assert "Waiting for you (2)" in text and first in text and ops not in text
    assert text.index(second) < text.index(first), "newest first"
    assert "Recently decided" in text
    carols = text_of(await home_of(slack, "U0CAROL", showing=ops))
    assert "Waiting for you (1)" in carols and first not in carols

    # Alice approves from her Home tab: the same compare-and-set and checks; the channel
    # message is redrawn and her tab shows it decided. (The tab lists the request before its
    # message is posted; one decided before it is posted is never posted.)
    await is_posted(slack, first)
    click = alice.home_click_payload(view, ids.APPROVE, first)
    assert await alice.send(bot, click) == 200
    req = await bot.ctx.waiter.wait(first, timeout=10)
    assert req.status == "approved" and req.decision is not None
    assert req.decision.decided_by == "U0ALICE"
    await eventually(lambda: "Approved" in text_of(posted_message(slack, first)[1]))
    view = await home_of(slack, "U0ALICE", showing="Waiting for you (1)")
    recent = text_of(view).split("Recently decided")[1]
    assert first in recent and "approved" in recent and "<@U0ALICE>" in recent

    # A new request on Bob's and Alice's route reaches Alice's open tab without her asking.
    third = await ask(bot, "deploy", env="dev")
    await home_of(slack, "U0ALICE", showing=third)
    assert third not in text_of(slack.home_views["U0CAROL"])

    # Carol may not decide Alice's requests: a forged click from her tab is refused.
    forged = alice.home_click_payload(slack.home_views["U0ALICE"], ids.APPROVE, second)
    forged["user"] = {"id": "U0CAROL", "username": "u0carol", "name": "u0carol", "team_id": "T"}
    assert await carol.send(bot, forged) == 200
    assert (await bot.ctx.store.get(second)).is_pending


async def test_home_tab_fits_block_kit_with_n_more(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    for n in range(40):
        await ask(bot, "deploy", n=n)
    alice: Reviewer = reviewer("U0ALICE")
    assert await alice.open_home(bot) == 200
    view = await home_of(slack, "U0ALICE", showing="Waiting for you (40)")
    assert len(view["blocks"]) <= MAX_HOME_BLOCKS
    assert "more waiting" in text_of(view)
    publishes = len(slack.calls_to("views.publish"))
    # Changes are coalesced, and an unchanged tab is not published again.
    assert bot.ctx is not None and bot.ctx.home is not None
    for _ in range(5):
        bot.ctx.home.changed()
    await eventually(lambda: not bot.ctx.home._wake.is_set())  # type: ignore[union-attr]
    assert len(slack.calls_to("views.publish")) == publishes


async def test_slash_command_lists_shows_one_and_decides(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot(parse_policy(json.loads(json.dumps(POLICY)), source="test"))
    assert bot.ctx is not None
    rid = await ask(bot, "deploy", env="prod")
    ops = await ask(bot, "restart_db", host="db1")
    bob: Reviewer = reviewer("U0BOB")
    assert await bob.slash(bot) == 200
    listed = json.loads(bob.last_body)
    assert listed["response_type"] == "ephemeral"
    assert rid in json.dumps(listed) and ops not in json.dumps(listed)

    assert await bob.slash(bot, "help") == 200
    assert "/approvals ID" in json.loads(bob.last_body)["text"]

    assert await bob.slash(bot, ops) == 200
    assert "not one you may see" in json.loads(bob.last_body)["text"]
    assert await bob.slash(bot, "apr_nope") == 200
    assert "No such request" in json.loads(bob.last_body)["text"]

    assert await bob.slash(bot, rid) == 200
    one = json.loads(bob.last_body)
    assert one["response_type"] == "ephemeral" and "env" in json.dumps(one)
    # A click on the slash reply's Approve button decides it like the channel message's.
    await is_posted(slack, rid)
    reply = {"ts": "1.000001", "blocks": one["blocks"]}
    assert await bob.click(bot, reply, CHANNEL, ids.APPROVE) == 200
    req = await bot.ctx.waiter.wait(rid, timeout=10)
    assert req.status == "approved" and req.decision is not None
    assert req.decision.decided_by == "U0BOB"
    await eventually(lambda: "Approved" in text_of(posted_message(slack, rid)[1]))
    assert await bob.slash(bot) == 200
    assert json.loads(bob.last_body)["text"] == "Nothing waits for you."
