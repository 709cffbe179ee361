"""Approve with edits end to end: the Edit… modal (signed clicks and submissions through the
real app), the agent running exactly the edited call, masks kept, quorum restarts."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from approvals import ApprovalClient, require_approval
from approvals._internal.policy_file import parse_policy
from approvals._internal.transports import HttpTransport
from approvals.approval import approval_object
from approvals.gate import current_approval
from approvals.integrations.langgraph import approval_resume
from approvals.models import ApprovalEvent
from bot.core.app import Bot
from bot.masking.masker import MASK
from bot.slack import action_ids as ids
from tests.e2e.test_coding_agents_flow import claude_payload, run_command_hook
from tests.support import eventually
from tests.support.credentials import API_TOKEN, OTHER_BOT_TOKEN
from tests.support.e2e import CHANNEL, BotFactory, Reviewer, posted_message
from tests.support.slack_emulator import SlackEmulator

TOKEN = OTHER_BOT_TOKEN  # another workspace's bot token, in an argument
#: The token a reviewer pastes in its place.
PASTED = "xoxb-5829104736-4019283746501-Zp3Kq8WmX2cV7nB4tY9rL6sJ"


async def ask(bot: Bot, arguments: dict[str, Any], **event: Any) -> str:
    assert bot.ctx is not None
    request = await bot.ctx.service.submit(
        ApprovalEvent(tool_name=event.pop("tool", "deploy"), arguments=arguments, **event)
    )
    return request.id


async def message_of(slack: SlackEmulator, request_id: str) -> tuple[str, dict[str, Any]]:
    await slack.wait_until(
        lambda: any(request_id in json.dumps(m.get("blocks", [])) for m in slack.messages.values()),
        5,
        "the post",
    )
    return posted_message(slack, request_id)


def buttons(message: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        el["action_id"]: el
        for block in message.get("blocks", [])
        if block.get("type") == "actions"
        for el in block.get("elements", [])
    }


async def open_edit(
    slack: SlackEmulator, bot: Bot, who: Reviewer, request_id: str
) -> tuple[dict[str, Any], str]:
    """Click Edit… on the request's message; the opened view and its JSON text."""
    before = len(slack.calls_to("views.open"))
    channel, message = await message_of(slack, request_id)
    assert await who.click(bot, message, channel, ids.EDIT) == 200
    opened = await slack.wait_for("views.open", before + 1)
    view = opened[-1].body["view"]
    view = json.loads(view) if isinstance(view, str) else view
    assert view["callback_id"] == ids.EDIT_MODAL
    (field,) = [b for b in view["blocks"] if b.get("block_id") == ids.EDIT_BLOCK]
    return view, field["element"]["initial_value"]


async def submit_edit(
    bot: Bot, who: Reviewer, view: dict[str, Any], text: str, note: str = ""
) -> Any:
    values = {ids.EDIT_BLOCK: {ids.EDIT_ACTION: text}, ids.NOTE_BLOCK: {ids.NOTE_ACTION: note}}
    assert await who.submit(bot, view, values) == 200
    return json.loads(who.last_body) if who.last_body.strip() else None


async def test_edit_approves_the_edited_call_and_the_message_shows_the_diff(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    rid = await ask(bot, {"env": "prod", "replicas": 10}, agent="agent-7")
    waiting = asyncio.create_task(bot.ctx.waiter.wait(rid, timeout=15))
    alice: Reviewer = reviewer("U0ALICE")
    view, text = await open_edit(slack, bot, alice, rid)
    assert json.loads(text) == {"env": "prod", "replicas": 10}
    assert (await bot.ctx.store.get(rid)).status == "pending", "opening the modal decides nothing"
    edited = json.dumps({"env": "staging", "replicas": 2})
    assert await submit_edit(bot, alice, view, edited, note="staging first") is None
    req = await waiting
    assert req.status == "approved" and req.decision is not None
    assert req.decision.edited_arguments == {"env": "staging", "replicas": 2}
    assert req.decision.edited_by == "U0ALICE" and req.decision.decided_by == "U0ALICE"
    assert req.event.arguments == {"env": "prod", "replicas": 10}, "the ask is kept as it was"
    # The approval object and the audit entry carry the edit.
    body = approval_object(await bot.ctx.store.get(rid))
    assert body["edited_arguments"] == {"env": "staging", "replicas": 2}
    assert body["edited_by"] == "U0ALICE"
    entries = [e for e in await bot.ctx.store.audit_entries(request_id=rid)]
    approved = [e for e in entries if e.event == "approved"]
    assert json.loads(approved[0].edited_arguments) == {"env": "staging", "replicas": 2}
    # The message shows what changed and who changed it.
    await slack.wait_for("chat.update", 1)
    updated = json.dumps(posted_message(slack, rid)[1]["blocks"], ensure_ascii=False)
    assert "Approved with edits by <@U0ALICE>" in updated
    assert '~ env: \\"prod\\" → \\"staging\\"' in updated
    assert "~ replicas: 10 → 2" in updated


async def test_invalid_edits_show_errors_in_the_modal_and_decide_nothing(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    schema = {
        "type": "object",
        "properties": {"env": {"enum": ["prod", "staging"]}, "replicas": {"type": "integer"}},
        "required": ["env"],
        "additionalProperties": False,
    }
    rid = await ask(bot, {"env": "prod", "replicas": 3}, arguments_schema=schema)
    bob: Reviewer = reviewer("U0BOB")
    view, _ = await open_edit(slack, bot, bob, rid)
    cases = {
        '{"env": "prod",': "Not valid JSON",
        '["prod"]': "not an array",
        '"prod"': "not a single value",
        '{"env": "qa"}': 'env: must be one of ["prod", "staging"]',
        '{"env": "prod", "replicas": "3"}': 'replicas: must be of type "integer"',
        '{"env": "prod", "extra": 1}': "properties the schema does not allow",
        '{"replicas": 1}': 'missing required "env"',
        '{"env": "prod", "replicas": 3}': "nothing was changed",
    }
    for text, expected in cases.items():
        answer = await submit_edit(bot, bob, view, text)
        assert answer is not None, (text, bob.last_status, bob.last_body)
        assert answer["response_action"] == "errors", text
        assert expected.lower() in answer["errors"][ids.EDIT_BLOCK].lower(), (text, answer)
    req = await bot.ctx.store.get(rid)
    assert req.status == "pending" and not req.votes and req.proposal is None
    assert not slack.calls_to("chat.update"), "nothing was decided"


async def test_masked_values_are_kept_unless_replaced_whole(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    assert bot.ctx is not None
    args = {"env": "prod", "api_token": TOKEN, "note": f"use {TOKEN} here"}
    rid = await ask(bot, args)
    carol: Reviewer = reviewer("U0CAROL")
    view, text = await open_edit(slack, bot, carol, rid)
    assert TOKEN not in json.dumps(slack.calls_to("views.open")[-1].body)
    shown = json.loads(text)
    assert MASK in shown["api_token"] and MASK in shown["note"]
    # A mask changed in part is refused (it would reach the agent as bullets).
    broken = {**shown, "note": shown["note"].replace("use", "take")}
    answer = await submit_edit(bot, carol, view, json.dumps(broken, ensure_ascii=False))
    assert answer["response_action"] == "errors" and "masked" in answer["errors"][ids.EDIT_BLOCK]
    # Left exactly as shown: the real values are kept; `env` changed.
    kept = {**shown, "env": "staging"}
    assert await submit_edit(bot, carol, view, json.dumps(kept, ensure_ascii=False)) is None
    req = await bot.ctx.waiter.wait(rid, timeout=15)
    assert req.decision is not None
    assert req.decision.edited_arguments == {**args, "env": "staging"}
    await slack.wait_for("chat.update", 1)
    assert TOKEN not in json.dumps(slack.calls, default=str)

    # Replaced whole: the reviewer's value is used.
    rid2 = await ask(bot, args)
    view, text = await open_edit(slack, bot, carol, rid2)
    replaced = {**json.loads(text), "api_token": PASTED}
    assert await submit_edit(bot, carol, view, json.dumps(replaced, ensure_ascii=False)) is None
    req = await bot.ctx.waiter.wait(rid2, timeout=15)
    assert req.decision is not None and req.decision.edited_arguments is not None
    assert req.decision.edited_arguments["api_token"] == PASTED
    assert req.decision.edited_arguments["note"] == args["note"]


async def test_quorum_an_edit_restarts_the_votes_and_binds_them_to_its_version(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    policy = parse_policy({"routes": {"default": {"channel": CHANNEL, "quorum": 2}}}, source="test")
    bot = await make_bot(policy)
    assert bot.ctx is not None
    rid = await ask(bot, {"env": "prod"})
    alice, bob, carol = reviewer("U0ALICE"), reviewer("U0BOB"), reviewer("U0CAROL")
    channel, first = await message_of(slack, rid)
    assert await alice.click(bot, first, channel, ids.APPROVE) == 200
    await eventually(lambda: len(slack.calls_to("chat.update")) >= 1)
    assert [v.user for v in (await bot.ctx.store.get(rid)).votes] == ["U0ALICE"]

    view, _ = await open_edit(slack, bot, bob, rid)
    assert "Earlier votes are dropped" in json.dumps(view)
    assert await submit_edit(bot, bob, view, '{"env": "staging"}', note="staging first") is None
    await eventually(lambda: len(slack.calls_to("chat.update")) >= 2)
    req = await bot.ctx.store.get(rid)
    assert req.status == "pending" and req.proposal is not None
    assert [(v.user, v.outcome) for v in req.votes] == [("U0BOB", "approve")], "count restarted"
    _, proposed = posted_message(slack, rid)
    text = json.dumps(proposed["blocks"], ensure_ascii=False)
    assert "Arguments edited by <@U0BOB>" in text and "votes restarted" in text
    assert buttons(proposed)[ids.APPROVE]["value"] == f"{rid}@{req.proposal.version}"

    # A click on the message as it was before the edit approves nothing: it was for another
    # version of the call.
    assert await carol.click(bot, first, channel, ids.APPROVE) == 200
    told = await slack.wait_for("chat.postEphemeral", 1)
    assert "nothing was recorded" in told[-1].body["text"]
    assert [v.user for v in (await bot.ctx.store.get(rid)).votes] == ["U0BOB"]

    # Votes on the edited version decide it: the approval is of exactly the edit.
    assert await carol.click(bot, proposed, channel, ids.APPROVE) == 200
    req = await bot.ctx.waiter.wait(rid, timeout=15)
    assert req.status == "approved" and req.decision is not None
    assert req.decision.decided_by == "U0CAROL"
    assert req.decision.edited_arguments == {"env": "staging"}
    assert req.decision.edited_by == "U0BOB"
    edits = [e for e in await bot.ctx.store.audit_entries(request_id=rid) if e.event == "edit"]
    assert len(edits) == 1 and edits[0].by == "U0BOB"


async def test_no_edit_button_where_the_agent_or_route_cannot_take_edits(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    policy = parse_policy(
        {
            "routes": {
                "default": {"channel": CHANNEL},
                "strict": {"channel": CHANNEL, "allow_edits": False},
            },
            "rules": [
                {"name": "db", "match": {"tool": "drop_db"}, "action": "ask", "route": "strict"}
            ],
        },
        source="test",
    )
    bot = await make_bot(policy)
    assert bot.ctx is not None
    codex = await ask(bot, {"command": "ls"}, agent="codex")
    sdk = await ask(bot, {"x": 1}, agent="openai-agents")
    strict = await ask(bot, {"x": 1}, tool="drop_db")
    claude = await ask(bot, {"x": 1}, agent="claude-code")
    for rid in (codex, sdk, strict):
        assert ids.EDIT not in buttons((await message_of(slack, rid))[1]), rid
    channel, message = await message_of(slack, claude)
    assert ids.EDIT in buttons(message)
    # A forged Edit click on a request that does not offer it opens nothing.
    forged = reviewer("U0EVE").click_payload(message, channel, ids.EDIT, value=codex)
    assert await reviewer("U0EVE").send(bot, forged) == 200
    told = await slack.wait_for("chat.postEphemeral", 1)
    assert "not offered" in told[-1].body["text"]
    assert not slack.calls_to("views.open")


async def test_claude_code_hooks_get_the_edited_call_as_updated_input(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any, http: aiohttp.ClientSession
) -> None:
    bot = await make_bot()
    alice: Reviewer = reviewer("U0ALICE")
    edited = {"command": "kubectl rollout restart deploy/web -n staging"}

    async def edit_when_posted(count: int) -> None:
        await slack.wait_for("chat.postMessage", count, timeout=10)
        rid = next(iter(reversed(list(bot_requests(slack)))))
        view, _ = await open_edit(slack, bot, alice, rid)
        assert await submit_edit(bot, alice, view, json.dumps(edited)) is None

    # The http hook (PreToolUse).
    url = f"http://127.0.0.1:{bot.port}/hooks/claude-code?timeout=30"
    call = asyncio.create_task(
        http.post(url, json=claude_payload(), headers={"Authorization": f"Bearer {API_TOKEN}"})
    )
    await edit_when_posted(1)
    resp = await asyncio.wait_for(call, 10)
    output = await resp.json()
    resp.release()
    specific = output["hookSpecificOutput"]
    assert specific["permissionDecision"] == "allow"
    assert specific["updatedInput"] == edited
    assert "edited by <@U0ALICE>" in specific["additionalContext"]

    # The command hook, PreToolUse and PermissionRequest.
    for count, event in ((2, "PreToolUse"), (3, "PermissionRequest")):
        task = asyncio.create_task(
            run_command_hook(bot, "claude-code", claude_payload(event), "--timeout", "30")
        )
        await edit_when_posted(count)
        code, out, err = await task
        assert code == 0, err
        specific = json.loads(out)["hookSpecificOutput"]
        if event == "PreToolUse":
            assert specific["permissionDecision"] == "allow"
            assert specific["updatedInput"] == edited
        else:
            assert specific["decision"] == {"behavior": "allow", "updatedInput": edited}


def bot_requests(slack: SlackEmulator) -> list[str]:
    """The request ids of the bot's posts, in posting order."""
    found = []
    for call in slack.calls_to("chat.postMessage"):
        meta = call.body.get("metadata")
        meta = json.loads(meta) if isinstance(meta, str) else meta
        found.append(meta["event_payload"]["request_id"])
    return found


async def test_python_gate_runs_the_edited_call_and_sees_both_versions(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    client = ApprovalClient(HttpTransport(f"http://127.0.0.1:{bot.port}", API_TOKEN))
    seen: list[Any] = []

    @require_approval(client)
    async def scale(env: str, replicas: int) -> str:
        decision = current_approval()
        seen.append((decision.edited_arguments, decision.original_arguments) if decision else None)
        return f"{env}:{replicas}"

    async def edit(text: str) -> None:
        await slack.wait_for("chat.postMessage", len(seen) + 1 + failures, timeout=10)
        rid = bot_requests(slack)[-1]
        view, _ = await open_edit(slack, bot, reviewer("U0ALICE"), rid)
        assert await submit_edit(bot, reviewer("U0ALICE"), view, text) is None

    failures = 0
    call = asyncio.create_task(scale("prod", 10))
    await edit('{"env": "staging", "replicas": "2"}')
    assert await asyncio.wait_for(call, 15) == "staging:2", "validated against the signature"
    assert seen == [({"env": "staging", "replicas": "2"}, {"env": "prod", "replicas": 10})]

    # An edit that does not fit the function's signature is a deny, never a call.
    call = asyncio.create_task(scale("prod", 10))
    await edit('{"env": "staging", "replicas": 2, "force": true}')
    result = await asyncio.wait_for(call, 15)
    assert str(result).startswith("denied: the reviewer's edit does not fit scale")
    failures += 1
    call = asyncio.create_task(scale("prod", 10))
    await edit('{"env": "staging", "replicas": "two"}')
    result = await asyncio.wait_for(call, 15)
    assert "replicas" in str(result) and str(result).startswith("denied:")
    assert len(seen) == 1
    await client.aclose()


async def test_langgraph_resumes_with_the_edited_arguments(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    bot = await make_bot()
    client = ApprovalClient(HttpTransport(f"http://127.0.0.1:{bot.port}", API_TOKEN))
    payload = {"tool_name": "deploy", "arguments": {"env": "prod"}}
    resume = asyncio.create_task(approval_resume(client, payload, timeout=15))
    await slack.wait_for("chat.postMessage", 1, timeout=10)
    rid = bot_requests(slack)[-1]
    view, _ = await open_edit(slack, bot, reviewer("U0ALICE"), rid)
    assert await submit_edit(bot, reviewer("U0ALICE"), view, '{"env": "staging"}') is None
    command = await asyncio.wait_for(resume, 15)
    answer = command.resume
    assert answer["approved"] is True
    assert answer["arguments"] == {"env": "staging"}
    assert answer["edited_arguments"] == {"env": "staging"} and answer["edited_by"] == "U0ALICE"
    await client.aclose()
