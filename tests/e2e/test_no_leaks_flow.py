"""No secret reaches Slack through the real app: every fake of the corpus, in every field an
agent controls, through posts, DMs, modals, refusals and updates, and in shell commands whose
parsed view and risk lines are drawn from it; every call the emulator received is searched for
any piece of any secret."""

from __future__ import annotations

import copy
import json
import shlex
import time
import uuid
from typing import Any

from approvals._internal.policy_file import parse_policy
from approvals.models import (
    ApprovalConfig,
    ApprovalEvent,
    ApprovalRequest,
    CallContext,
    clip_reason,
    clip_request,
)
from bot.core.app import Bot
from bot.masking.masker import mask_text
from bot.masking.rules import normalise
from bot.slack import action_ids as ids
from tests.support.e2e import CHANNEL, BotFactory, Reviewer, posted_message
from tests.support.secret_corpus import FAKES, PIECE, Fake, leaked_piece
from tests.support.slack_emulator import SlackEmulator

POLICY = {
    "routes": {
        "default": {"channel": CHANNEL, "reviewers": ["U0ALICE", "U0BOB"], "dm_reviewers": True},
    },
}


def chunks(limit: int = 2500) -> list[list[Fake]]:
    """The corpus in groups whose texts, one per line, fit one 3000-character field."""
    groups: list[list[Fake]] = [[]]
    size = 0
    for fake in FAKES:
        if size + len(fake.text) + 1 > limit and groups[-1]:
            groups.append([])
            size = 0
        groups[-1].append(fake)
        size += len(fake.text) + 1
    return groups


def short(group: list[Fake], limit: int) -> list[str]:
    """Fakes of `group` that fit a short field (whole, or their bare token)."""
    out = []
    for fake in group:
        if len(fake.text) <= limit and "\n" not in fake.text:
            out.append(fake.text)
        elif len(fake.secret) <= limit and mask_text(fake.secret) != fake.secret:
            out.append(fake.secret)
    return out


async def submit(
    bot: Bot, group: list[Fake], config: ApprovalConfig, n: int, *, context: bool = False
) -> ApprovalRequest:
    """A request with the group's fakes in every field; with `context`, an Edit whose reason,
    user request and diff (old and new strings) hold them too."""
    assert bot.ctx is not None
    text = "\n".join(f.text for f in group)
    names = short(group, 200)
    if context:
        event = ApprovalEvent(
            kind="file",
            tool_name="Edit",
            arguments={
                "file_path": "/srv/app/.env",
                "old_string": text,
                "new_string": f"{text}\nx",
            },
            path="/srv/app/.env",
            cwd="/srv/app",
            call_id=uuid.uuid4().hex,
            # Cut as the hook's context is (its end, its start; between words, no key body).
            context=CallContext(reason=clip_reason(text), user_request=clip_request(text)),
        )
        return await bot.ctx.service.submit(event, config)
    event = ApprovalEvent(
        tool_name=names[n % len(names)] if names else "deploy",
        arguments={f"arg{i}": {"deep": [f.as_value]} for i, f in enumerate(group)},
        command=text,
        path=text,
        cwd=text,
        agent=names[(n + 1) % len(names)] if names else None,
        session_id=names[(n + 2) % len(names)] if names else None,
        call_id=uuid.uuid4().hex,
    )
    return await bot.ctx.service.submit(event, config)


def command_for(group: list[Fake]) -> str:
    """A shell command holding each fake of `group` as a word (where masking the command text
    finds it whole): behind wrappers, as an assignment, glued to an option (the parsed view
    splits `-pSECRET` letter by letter), and as a path a recursive delete names (cut to 60
    characters in its risk line), so the parsed view and the risk lines are drawn from them
    too."""
    parts = []
    for fake in group:
        word = shlex.quote(fake.text)
        for part in (
            f"CI=1 timeout 5 curl -H {word} https://example.com",
            f"nice rm -rf {word}",
            f"env TOKEN={word} timeout 9 mysql -p{word} db",
        ):
            if leaked_piece(mask_text(part), fake.secret):
                continue  # the rules do not find it glued into a command (not this test's)
            parts.append(part)
    return " && ".join(parts) or "timeout 5 rm -rf build"


def fitting(group: list[Fake], limit: int = 2000) -> list[Fake]:
    """The fakes of `group` whose arguments fit the Edit… modal's JSON input together."""
    out: list[Fake] = []
    size = 0
    for fake in group:
        grows = len(json.dumps({"deep": [fake.as_value]}, indent=2, ensure_ascii=False)) + 20
        if size + grows <= limit:
            out.append(fake)
            size += grows
    return out or group[:1]


async def latest_view(slack: SlackEmulator, count: int) -> dict[str, Any]:
    """The view of the `count`th `views.open` call, once it has come."""
    opened = (await slack.wait_for("views.open", count))[count - 1]
    view = opened.body["view"]
    return json.loads(view) if isinstance(view, str) else view  # type: ignore[no-any-return]


def block_actions(reviewer: Reviewer, message: dict[str, Any], action_id: str, value: str) -> Any:
    """A click on a button the message does not show (a stale or crafted one)."""
    payload = reviewer.click_payload(message, CHANNEL, ids.DENY)
    payload["actions"][0].update(action_id=action_id, value=value, action_ts=f"{time.time():.6f}")
    return payload


async def test_no_piece_of_any_fake_reaches_slack(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    slack.add_user("U0ALICE")
    slack.add_user("U0BOB")
    bot = await make_bot(parse_policy(copy.deepcopy(POLICY), source="test"))
    alice: Reviewer = reviewer("U0ALICE")
    outsider: Reviewer = reviewer("U0MALLORY")
    sent_back: list[str] = []  # the bot's answers to modal submissions
    for n, group in enumerate(chunks()):
        text = "\n".join(f.text for f in group)
        options = tuple(dict.fromkeys(short(group, 75)))[:100] or ("a", "b")
        plain = await submit(bot, group, ApprovalConfig(prompt=text), n)
        choice = await submit(bot, group, ApprovalConfig(kind="choice", options=options), n)
        question = await submit(bot, group, ApprovalConfig(kind="input", prompt=text), n)
        for request in (plain, choice, question):
            await slack.wait_until(
                lambda r=request: any(r.id in json.dumps(m) for m in slack.messages.values()),
                10,
                f"the post of {request.id}",
            )
        # refused (not a reviewer), then the Deny modal with every secret as the reason
        _, message = posted_message(slack, plain.id)
        assert await outsider.click(bot, message, CHANNEL, ids.APPROVE) == 200
        assert await alice.click(bot, message, CHANNEL, ids.DENY) == 200
        view = await latest_view(slack, 5 * n + 1)
        await alice.submit(bot, view, {ids.REASON_BLOCK: {ids.REASON_ACTION: text}})
        # a plain Approve on a choice: "choose one of: <options>"
        _, message = posted_message(slack, choice.id)
        assert await alice.send(bot, block_actions(alice, message, ids.APPROVE, choice.id)) == 200
        # the Respond modal, every secret as the answer; then a late click on the decided one
        _, message = posted_message(slack, question.id)
        assert await alice.click(bot, message, CHANNEL, ids.RESPOND) == 200
        view = await latest_view(slack, 5 * n + 2)
        await alice.submit(bot, view, {ids.INPUT_BLOCK: {ids.INPUT_ACTION: text}})
        assert bot.ctx is not None
        await bot.ctx.waiter.wait(question.id, timeout=5)
        assert await alice.click(bot, message, CHANNEL, ids.RESPOND) == 200
        # Edit…: the arguments in the modal; an edit refused (a mask changed in part), then
        # one adding every secret as a new argument: the diff on the message shows it
        edited = await submit(bot, fitting(group), ApprovalConfig(), n)
        await slack.wait_until(
            lambda r=edited: any(r.id in json.dumps(m) for m in slack.messages.values()),
            10,
            f"the post of {edited.id}",
        )
        _, message = posted_message(slack, edited.id)
        assert await alice.click(bot, message, CHANNEL, ids.EDIT) == 200
        view = await latest_view(slack, 5 * n + 3)
        (field,) = [b for b in view["blocks"] if b.get("block_id") == ids.EDIT_BLOCK]
        shown = json.loads(field["element"]["initial_value"])
        broken = {k: json.dumps(v, ensure_ascii=False) + "x" for k, v in shown.items()}
        values = {ids.EDIT_ACTION: json.dumps(broken, ensure_ascii=False)}
        await alice.submit(bot, view, {ids.EDIT_BLOCK: values})
        assert "response_action" in alice.last_body
        sent_back.append(alice.last_body)
        shown["added"] = text
        values = {ids.EDIT_ACTION: json.dumps(shown, ensure_ascii=False)}
        await alice.submit(
            bot, view, {ids.EDIT_BLOCK: values, ids.NOTE_BLOCK: {"approval_note": text}}
        )
        decided = await bot.ctx.waiter.wait(edited.id, timeout=5)
        assert decided.decision is not None and decided.decision.edited_arguments is not None
        # The agent's reason, the user's request and the diff: on the message, in Details
        # (opened by a reviewer), and the message once denied.
        explained = await submit(bot, group, ApprovalConfig(), n, context=True)
        await slack.wait_until(
            lambda r=explained: any(r.id in json.dumps(m) for m in slack.messages.values()),
            10,
            f"the post of {explained.id}",
        )
        _, message = posted_message(slack, explained.id)
        assert await alice.click(bot, message, CHANNEL, ids.DETAILS) == 200
        view = await latest_view(slack, 5 * n + 4)
        assert view["callback_id"] == ids.DETAILS_MODAL
        assert await alice.click(bot, message, CHANNEL, ids.DENY) == 200
        view = await latest_view(slack, 5 * n + 5)
        await alice.submit(bot, view, {ids.REASON_BLOCK: {ids.REASON_ACTION: "no"}})
        await bot.ctx.waiter.wait(explained.id, timeout=5)
    # A shell command holding them: its parsed view and risk lines on the message, and in
    # Details (opened by a reviewer).
    assert bot.ctx is not None
    for n, group in enumerate(chunks()):
        command = command_for(group)
        event = ApprovalEvent(
            kind="command",
            tool_name="Bash",
            arguments={"command": command},
            command=command,
            cwd="/srv/app",
            call_id=uuid.uuid4().hex,
        )
        shell = await bot.ctx.service.submit(event, ApprovalConfig())
        assert shell.risks, "risk lines to draw"
        await slack.wait_until(
            lambda r=shell: any(r.id in json.dumps(m) for m in slack.messages.values()),
            10,
            f"the post of {shell.id}",
        )
        _, message = posted_message(slack, shell.id)
        assert "As the shell runs it" in json.dumps(message, ensure_ascii=False)
        assert await alice.click(bot, message, CHANNEL, ids.DETAILS) == 200
        view = await latest_view(slack, 5 * len(chunks()) + n + 1)
        assert view["callback_id"] == ids.DETAILS_MODAL
    await slack.wait_until(
        lambda: len(slack.calls_to("chat.postEphemeral")) >= 3 * len(chunks()), 10, "ephemerals"
    )
    await slack.wait_until(
        lambda: len(slack.calls_to("chat.update")) >= 3 * len(chunks()), 10, "updates"
    )
    methods = {c.method for c in slack.calls}
    assert {"chat.postMessage", "chat.update", "chat.postEphemeral", "views.open"} <= methods
    assert len(slack.calls_to("conversations.open")) >= 2, "reviewers were DMed"
    sent = [json.dumps(c.body, ensure_ascii=False) for c in slack.calls]
    sent += [alice.last_body, outsider.last_body, *sent_back]
    shown = normalise("\n".join(sent))[0]
    # Every PIECE-character window of every secret, looked up once per window of what was sent.
    pieces: dict[str, str] = {}
    for fake in FAKES:
        secret = normalise(fake.secret)[0]
        if len(secret) <= PIECE:
            assert secret not in shown, f"{fake.rule}: {secret!r} reached Slack"
        for i in range(len(secret) - PIECE + 1):
            pieces[secret[i : i + PIECE]] = fake.rule
    for i in range(len(shown) - PIECE + 1):
        window = shown[i : i + PIECE]
        assert window not in pieces, (
            f"{pieces[window]}: {window!r} reached Slack near {shown[max(0, i - 150) : i + 50]!r}"
        )


def assert_no_piece(slack: SlackEmulator, *also: str) -> None:
    """No PIECE-character window of any secret in anything the emulator received (or `also`)."""
    sent = [json.dumps(c.body, ensure_ascii=False) for c in slack.calls]
    shown = normalise("\n".join([*sent, *also]))[0]
    pieces: dict[str, str] = {}
    for fake in FAKES:
        secret = normalise(fake.secret)[0]
        if len(secret) <= PIECE:
            assert secret not in shown, f"{fake.rule}: {secret!r} reached Slack"
        for i in range(len(secret) - PIECE + 1):
            pieces[secret[i : i + PIECE]] = fake.rule
    for i in range(len(shown) - PIECE + 1):
        window = shown[i : i + PIECE]
        assert window not in pieces, (
            f"{pieces[window]}: {window!r} reached Slack near {shown[max(0, i - 150) : i + 50]!r}"
        )


async def test_no_piece_of_a_fake_in_a_question_reaches_slack(
    make_bot: BotFactory, slack: SlackEmulator, reviewer: Any
) -> None:
    """Every fake typed into the Ask the agent… dialog (a reviewer pasting a token, say):
    the asked message, its redraw once answered, the retry in the thread showing the
    question (its reason holding the fakes too), a second question on the retry, and the
    ephemeral for a late click: nothing of a secret reaches Slack."""
    bot = await make_bot(parse_policy(copy.deepcopy(POLICY), source="test"))
    assert bot.ctx is not None
    alice: Reviewer = reviewer("U0ALICE")
    opened = 0
    for n, group in enumerate(chunks(1900)):
        text = "\n".join(f.text for f in group)
        session = f"sess-{n}"
        first = ApprovalEvent(tool_name="deploy", arguments={"n": n}, session_id=session)
        asked = await bot.ctx.service.submit(first, principal="ci-agent")
        await slack.wait_until(
            lambda r=asked: any(r.id in json.dumps(m) for m in slack.messages.values()),
            10,
            f"the post of {asked.id}",
        )
        _, message = posted_message(slack, asked.id)
        assert await alice.click(bot, message, CHANNEL, ids.ASK) == 200
        opened += 1
        view = await latest_view(slack, opened)
        assert view["callback_id"] == ids.ASK_MODAL
        await alice.submit(bot, view, {ids.QUESTION_BLOCK: {ids.QUESTION_ACTION: text}})
        decided = await bot.ctx.waiter.wait(asked.id, timeout=5)
        assert decided.status == "asked" and decided.decision is not None
        assert decided.decision.question == text.strip()
        retry = ApprovalEvent(
            tool_name="deploy",
            arguments={"n": n, "again": True},
            session_id=session,
            context=CallContext(reason=clip_reason(text)),
        )
        answer = await bot.ctx.service.submit(retry, principal="ci-agent")
        assert answer.answers is not None
        await slack.wait_until(
            lambda a=asked.id: (
                "answered in the thread"
                in json.dumps([m for m in slack.messages.values() if a in json.dumps(m)])
            ),
            10,
            "the answered redraw",
        )
        # A question on the retry (in the thread), then a late click on the first.
        _, reply = posted_message(slack, answer.id)
        assert reply.get("thread_ts") == message["ts"]
        assert await alice.click(bot, reply, CHANNEL, ids.ASK) == 200
        opened += 1
        view = await latest_view(slack, opened)
        await alice.submit(bot, view, {ids.QUESTION_BLOCK: {ids.QUESTION_ACTION: text}})
        await bot.ctx.waiter.wait(answer.id, timeout=5)
        assert await alice.click(bot, message, CHANNEL, ids.APPROVE) == 200
    await slack.wait_until(
        lambda: len(slack.calls_to("chat.postEphemeral")) >= len(chunks(1900)), 10, "ephemerals"
    )
    assert_no_piece(slack, alice.last_body)
