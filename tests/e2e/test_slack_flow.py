"""Interactive approvals end to end: post, click (signed), decide, resume the agent, update."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from approvals._internal.policy_file import parse_policy
from approvals.models import ApprovalConfig, ApprovalEvent
from bot.core.app import Bot
from bot.slack import action_ids as ids
from tests.support import eventually
from tests.support.credentials import API_TOKEN, BOT_TOKEN
from tests.support.e2e import (
    CHANNEL,
    SIGNING_SECRET,
    BotFactory,
    Reviewer,
    has_actions,
    opened_view,
    posted_message,
    sweeper_held,
)
from tests.support.slack_emulator import SlackEmulator


async def ask(
    bot: Bot, tool: str = "deploy", config: ApprovalConfig | None = None, **event: Any
) -> str:
    assert bot.ctx is not None
    args = event.pop("arguments", {"env": "prod", "version": "1.2.3"})
    requester = event.pop("requester", None)
    request = await bot.ctx.service.submit(
        ApprovalEvent(tool_name=tool, arguments=args, agent="agent-7", **event),
        config,
        requester=requester,
    )
    return request.id


async def posted(slack: SlackEmulator, request_id: str) -> tuple[str, dict[str, Any]]:
    await slack.wait_until(
        lambda: any(request_id in json.dumps(m.get("blocks", [])) for m in slack.messages.values()),
        5,
        "the post",
    )
    return posted_message(slack, request_id)


def message_text(message: dict[str, Any]) -> str:
    return json.dumps(message.get("blocks", []), ensure_ascii=False)


async def test_approve_click_resumes_the_waiting_agent_and_updates_the_message(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    rid = await ask(bot)
    waiting = asyncio.create_task(bot.ctx.waiter.wait(rid, timeout=15))
    channel, message = await posted(slack, rid)
    assert channel == CHANNEL and has_actions(message)
    text = message_text(message)
    assert "deploy" in text and "1.2.3" in text and "agent-7" in text
    alice: Reviewer = reviewer("U0ALICE")
    assert await alice.click(bot, message, channel, ids.APPROVE) == 200
    req = await waiting
    assert req.status == "approved"
    assert req.decision is not None and req.decision.decided_by == "U0ALICE"
    assert req.decision.via == "slack"
    await slack.wait_for("chat.update", 1)
    _, updated = posted_message(slack, rid)
    assert not has_actions(updated), "buttons are gone"
    assert "Approved" in message_text(updated) and "U0ALICE" in message_text(updated)


async def test_deny_opens_modal_and_reason_reaches_the_agent(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    rid = await ask(bot)
    channel, message = await posted(slack, rid)
    bob: Reviewer = reviewer("U0BOB")
    assert await bob.click(bot, message, channel, ids.DENY) == 200
    view = await opened_view(slack)
    assert view["callback_id"] == ids.DENY_MODAL
    assert (await bot.ctx.store.get(rid)).status == "pending", "opening the modal decides nothing"
    status = await bob.submit(bot, view, {ids.REASON_BLOCK: {ids.REASON_ACTION: "not on Friday"}})
    assert status == 200
    req = await bot.ctx.waiter.wait(rid, timeout=15)
    assert req.status == "denied"
    assert req.decision is not None and req.decision.reason == "not on Friday"
    await slack.wait_for("chat.update", 1)
    updated = message_text(posted_message(slack, rid)[1])
    assert "Denied" in updated and "not on Friday" in updated


async def test_choice_and_input_kinds(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    carol: Reviewer = reviewer("U0CAROL")
    choice = await ask(
        bot,
        "pick_region",
        ApprovalConfig(kind="choice", options=("eu-west-1", "us-east-1", "ap-1")),
    )
    channel, message = await posted(slack, choice)
    assert await carol.click(bot, message, channel, ids.choose_action_id(1)) == 200
    req = await bot.ctx.waiter.wait(choice, timeout=15)
    assert req.status == "approved" and req.decision is not None
    assert req.decision.selection == "us-east-1"

    question = await ask(bot, "ask_human", ApprovalConfig(kind="input", prompt="Which ticket?"))
    channel, message = await posted(slack, question)
    assert await carol.click(bot, message, channel, ids.RESPOND) == 200
    view = await opened_view(slack)
    assert view["callback_id"] == ids.INPUT_MODAL
    assert await carol.submit(bot, view, {ids.INPUT_BLOCK: {ids.INPUT_ACTION: "   "}}) == 200
    errors = json.loads(carol.last_body)
    assert errors["response_action"] == "errors" and ids.INPUT_BLOCK in errors["errors"]
    assert (await bot.ctx.store.get(question)).status == "pending"
    assert await carol.submit(bot, view, {ids.INPUT_BLOCK: {ids.INPUT_ACTION: "OPS-42"}}) == 200
    req = await bot.ctx.waiter.wait(question, timeout=15)
    assert req.status == "approved" and req.decision is not None
    assert req.decision.input == "OPS-42"


async def test_static_select_for_many_options(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    options = tuple(f"option-{i}" for i in range(8))
    rid = await ask(bot, "pick", ApprovalConfig(kind="choice", options=options))
    channel, message = await posted(slack, rid)
    dave: Reviewer = reviewer("U0DAVE")
    assert await dave.click(bot, message, channel, ids.CHOOSE_SELECT, selected="6") == 200
    req = await bot.ctx.waiter.wait(rid, timeout=15)
    assert req.decision is not None and req.decision.selection == "option-6"


async def test_approve_for_session_grants_later_calls(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    cfg = ApprovalConfig(allow_for_session=True)
    rid = await ask(bot, "run_shell", cfg, session_id="sess-1")
    channel, message = await posted(slack, rid)
    assert await reviewer("U0ERIN").click(bot, message, channel, ids.APPROVE_SESSION) == 200
    req = await bot.ctx.waiter.wait(rid, timeout=15)
    assert req.decision is not None and req.decision.for_session
    same = {"env": "prod", "version": "1.2.3"}  # what `ask` sent, as agent-7
    again = await bot.ctx.service.submit(
        ApprovalEvent(tool_name="run_shell", arguments=same, agent="agent-7", session_id="sess-1"),
        cfg,
    )
    assert again.status == "approved" and again.decision is not None
    assert again.decision.via == "grant" and again.decision.decided_by == "U0ERIN"
    other = await bot.ctx.service.submit(
        ApprovalEvent(tool_name="run_shell", arguments=same, agent="agent-7", session_id="sess-2"),
        cfg,
    )
    assert other.status == "pending", "grants are scoped to their session"


async def test_forged_and_stale_signatures_are_rejected(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    rid = await ask(bot)
    channel, message = await posted(slack, rid)
    mallory: Reviewer = reviewer("U0MALLORY")
    payload = mallory.click_payload(message, channel, ids.APPROVE)
    assert await mallory.send(bot, payload, secret="wrong-secret") == 401
    assert await mallory.send(bot, payload, timestamp=int(time.time()) - 600) == 401
    await asyncio.sleep(0.2)
    assert (await bot.ctx.store.get(rid)).status == "pending"
    assert [e.event for e in await bot.ctx.store.audit_entries(request_id=rid)] == ["created"]


async def test_double_click_and_racing_reviewers_decide_once(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    rid = await ask(bot)
    channel, message = await posted(slack, rid)
    alice, bob = reviewer("U0ALICE"), reviewer("U0BOB")
    statuses = await asyncio.gather(
        alice.click(bot, message, channel, ids.APPROVE),
        alice.click(bot, message, channel, ids.APPROVE),
        bob.click(bot, message, channel, ids.APPROVE),
        bob.click(bot, message, channel, ids.APPROVE),
    )
    assert statuses == [200] * 4
    req = await bot.ctx.waiter.wait(rid, timeout=15)
    assert req.status == "approved"
    await slack.wait_for("chat.postEphemeral", 3)
    await asyncio.sleep(0.3)
    updates = [c for c in slack.calls_to("chat.update") if c.body.get("ts") == message["ts"]]
    assert len(updates) == 1, "one decision, one message update"
    told = slack.calls_to("chat.postEphemeral")
    assert len(told) == 3
    winner = req.decision.decided_by if req.decision else None
    assert all(f"Already approved by <@{winner}>" in c.body["text"] for c in told)
    transitions = [
        e for e in await bot.ctx.store.audit_entries(request_id=rid) if e.event == "approved"
    ]
    assert len(transitions) == 1


async def test_unauthorised_reviewer_and_self_approval_are_refused(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    slack.add_usergroup("S0SRE", ["U0GROUPIE"])
    policy = parse_policy(
        {"routes": {"default": {"channel": CHANNEL, "reviewers": ["U0ALICE", "S0SRE"]}}},
        source="test",
    )
    bot = await make_bot(policy)
    assert bot.ctx is not None
    rid = await ask(bot, requester="U0ALICE")
    channel, message = await posted(slack, rid)
    assert await reviewer("U0EVE").click(bot, message, channel, ids.APPROVE) == 200
    assert await reviewer("U0ALICE").click(bot, message, channel, ids.APPROVE) == 200
    told = await slack.wait_for("chat.postEphemeral", 2)
    texts = {c.body["user"]: c.body["text"] for c in told}
    assert "not one of the reviewers" in texts["U0EVE"]
    assert "someone else has to decide" in texts["U0ALICE"]
    assert (await bot.ctx.store.get(rid)).status == "pending"
    # A member of an allowed user group may decide.
    assert await reviewer("U0GROUPIE").click(bot, message, channel, ids.APPROVE) == 200
    req = await bot.ctx.waiter.wait(rid, timeout=15)
    assert req.status == "approved" and req.decision is not None
    assert req.decision.decided_by == "U0GROUPIE"
    assert slack.calls_to("usergroups.users.list")[0].body["usergroup"] == "S0SRE"


async def test_unknown_request_click_gets_an_explanation(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    rid = await ask(bot)
    channel, message = await posted(slack, rid)
    alice: Reviewer = reviewer("U0ALICE")
    assert await alice.click(bot, message, channel, ids.APPROVE, value="apr_doesnotexist") == 200
    (told,) = await slack.wait_for("chat.postEphemeral", 1)
    assert "no longer exists" in told.body["text"]
    assert (await bot.ctx.store.get(rid)).status == "pending"


async def test_permanent_slack_error_ends_the_request_as_error(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    slack.fail_next("chat.postMessage", "not_in_channel")
    rid = await ask(bot)
    req = await bot.ctx.waiter.wait(rid, timeout=15)
    assert req.status == "error"
    assert req.decision is not None and "not_in_channel" in (req.decision.reason or "")


async def test_stop_finishes_the_clicks_already_taken(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    """slack-bolt answers Slack at `ack()` and runs the rest of a listener in a task nothing
    awaits: `stop()` waits for it (here, a Deny click opening its modal, Slack slow to
    answer), so no listener work outlives the Redis and Slack clients it closes."""
    bot = await make_bot()
    assert bot.listeners is not None
    rid = await ask(bot)
    _, message = await posted(slack, rid)
    slack.answer_late_next("views.open", 1.0)
    assert await reviewer("U0BOB").click(bot, message, CHANNEL, ids.DENY) == 200
    await slack.wait_until(lambda: slack.arrived("views.open") == 1, 5, "views.open")
    assert bot.listeners.running == 1, "the click's work goes on after its ack"
    await bot.stop()
    assert bot.listeners.running == 0
    listener_tasks = [t for t in asyncio.all_tasks() if "run_ack_function" in repr(t.get_coro())]
    assert listener_tasks == [], "no bolt listener task left running"
    assert slack.calls_to("views.open", ok=True), "the modal was opened"


async def test_expiry_updates_the_message(make_bot: BotFactory, slack: SlackEmulator) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    async with sweeper_held(bot):
        rid = await ask(bot, config=ApprovalConfig(deadline_seconds=0.5))
        await posted(slack, rid)
    req = await bot.ctx.waiter.wait(rid, timeout=15)
    assert req.status == "expired"
    assert req.decision is not None and req.decision.reason == "approval timeout"
    await slack.wait_for("chat.update", 1)
    updated = posted_message(slack, rid)[1]
    assert not has_actions(updated) and "Expired" in message_text(updated)


async def test_healthz_and_metrics(make_bot: BotFactory, http: Any) -> None:
    bot = await make_bot()

    async def health() -> dict[str, Any]:
        async with http.get(f"http://127.0.0.1:{bot.port}/healthz") as resp:
            assert resp.status == 200
            return dict(await resp.json())

    assert (await health())["slack"] in ("connecting", "ok")
    body = await eventually(
        lambda: _when(health(), lambda b: b["slack"] == "ok"), what="auth.test passed"
    )
    assert body["redis"] is True
    async with http.get(f"http://127.0.0.1:{bot.port}/metrics") as resp:
        assert "approvals_pending 0.0" in await resp.text()


async def test_no_secret_reaches_a_log_line_or_a_repr(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any, http: Any, caplog: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    bot = await make_bot()
    assert bot.ctx is not None
    async with http.post(
        f"http://127.0.0.1:{bot.port}/v1/approvals",
        json={"tool_name": "deploy", "arguments": {"env": "prod"}},
        headers={"Authorization": f"Bearer {API_TOKEN}"},
    ) as resp:
        rid = (await resp.json())["id"]
    channel, message = await posted(slack, rid)
    assert await reviewer("U0ALICE").click(bot, message, channel, ids.APPROVE) == 200
    await bot.ctx.waiter.wait(rid, timeout=15)
    await slack.wait_for("chat.update", 1)
    secrets = (BOT_TOKEN, SIGNING_SECRET, API_TOKEN)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "chat.postMessage" in logged or "posted" in logged  # the logs were captured
    for secret in secrets:
        assert secret not in logged
        assert secret not in repr(bot.config) and secret not in repr(bot.ctx)


async def _when(result: Any, check: Any) -> Any:
    """`result` (awaited) if `check` holds for it, else None: for `eventually`."""
    value = await result
    return value if check(value) else None
