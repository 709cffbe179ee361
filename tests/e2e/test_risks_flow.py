"""Risk hints and grants on the shell model end to end: a Claude Code Bash call
through `POST /hooks/claude-code` and the real app is posted with its risk lines and parsed
view, its approval object over the HTTP API has `risks`, `approval-bot show` prints them, and
an approve-for-session prefix grant then allows the command family, one command or several,
and nothing chained after it."""

from __future__ import annotations

import asyncio
import copy
import json
import re
from typing import Any

import aiohttp
import pytest

from approvals._internal.policy_file import parse_policy
from approvals._internal.service import Actor
from bot.cli.main import main
from bot.core.app import Bot
from bot.slack import action_ids as ids
from tests.support.credentials import API_TOKEN
from tests.support.e2e import CHANNEL, BotFactory, bash_hook, posted_message
from tests.support.slack_emulator import SlackEmulator

HEADERS = {"Authorization": f"Bearer {API_TOKEN}"}
POLICY = {
    "routes": {"default": {"channel": CHANNEL, "allow_for_session": True}},
    "rules": [
        {
            "name": "ask-before-deleting",
            "action": "ask",
            "match": {"risks": ["recursive_delete"]},
            "reason": "a recursive delete",
        }
    ],
}


async def pending_id(bot: Bot, command: str) -> str:
    assert bot.ctx is not None
    for _ in range(1000):
        for request in await bot.ctx.store.list_pending():
            if request.event.command == command:
                return request.id
        await asyncio.sleep(0.01)
    raise AssertionError(f"{command!r} is not pending")


async def posted(slack: SlackEmulator, request_id: str) -> tuple[str, dict[str, Any]]:
    await slack.wait_until(
        lambda: any(request_id in json.dumps(m.get("blocks", [])) for m in slack.messages.values()),
        10,
        "the post",
    )
    return posted_message(slack, request_id)


def sections(message: dict[str, Any]) -> list[str]:
    return [b["text"]["text"] for b in message["blocks"] if b["type"] == "section"]


def code_lines(text: str) -> list[str]:
    return [
        line for block in re.findall(r"```\n(.*?)\n```", text, re.S) for line in block.split("\n")
    ]


async def test_a_bash_call_shows_its_risks_everywhere(
    make_bot: BotFactory,
    slack: SlackEmulator,
    http: aiohttp.ClientSession,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bot = await make_bot(parse_policy(copy.deepcopy(POLICY), source="risks.yaml"))
    assert bot.ctx is not None
    command = "CI=1 timeout 5 env rm -fr build"
    call = asyncio.create_task(bash_hook(http, bot, command))
    rid = await pending_id(bot, command)
    # The message: a line per risk beside the policy's reason, the parsed view under the command.
    _, message = await posted(slack, rid)
    texts = sections(message)
    assert "⚠️ *recursive delete*: rm -r of build" in texts
    command_at = next(i for i, t in enumerate(texts) if t.startswith("*Command*"))
    parsed = texts[command_at + 1]
    assert parsed.startswith("*As the shell runs it:*")
    assert code_lines(parsed) == ["rm -f -r build   (via timeout 5, env; with CI=1)"]
    # The approval object the agent reads has the same list.
    url = f"http://127.0.0.1:{bot.port}/v1/approvals/{rid}"
    async with http.get(url, headers=HEADERS) as resp:
        assert resp.status == 200
        approval = await resp.json()
    assert approval["risks"] == [{"code": "recursive_delete", "text": "rm -r of build"}]
    # `approval-bot show` prints them.
    for name in ("APPROVALS_URL", "APPROVALS_TOKEN", "APPROVALS_POLICY_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("APPROVALS_PREFIX", bot.ctx.keys.prefix)
    assert await asyncio.to_thread(main, ["show", rid]) == 0
    shown = capsys.readouterr().out
    assert "risk:       recursive delete: rm -r of build" in shown
    assert "parsed:     rm -f -r build   (via timeout 5, env; with CI=1)" in shown
    await bot.ctx.service.decide(rid, "deny", Actor("U0ERIN"), reason="keep the build")
    answer = await asyncio.wait_for(call, 10)
    assert answer["permissionDecision"] == "deny"


async def test_a_prefix_grant_allows_its_commands_and_nothing_chained_after_them(
    make_bot: BotFactory, slack: SlackEmulator, http: aiohttp.ClientSession, reviewer: Any
) -> None:
    policy = copy.deepcopy(POLICY)
    policy["rules"] = []  # every command is asked
    bot = await make_bot(parse_policy(policy, source="risks.yaml"))
    assert bot.ctx is not None
    call = asyncio.create_task(bash_hook(http, bot, "npm test"))
    rid = await pending_id(bot, "npm test")
    channel, message = await posted(slack, rid)
    assert "commands starting with `npm test`" in json.dumps(message["blocks"])
    assert await reviewer("U0ERIN").click(bot, message, channel, ids.APPROVE_SESSION_PREFIX) == 200
    assert (await asyncio.wait_for(call, 10))["permissionDecision"] == "allow"
    posts = len(slack.calls_to("chat.postMessage"))
    # Allowed by the grant at once, without a message: the command again, with arguments, and
    # several of it.
    for command in ("npm test", "npm test -- --ci", "npm test && npm test -- --watch=false"):
        answer = await bash_hook(http, bot, command)
        assert answer["permissionDecision"] == "allow", command
    assert len(slack.calls_to("chat.postMessage")) == posts
    # Not a command chained after it, not one with a wrapper, a redirection or a path: each is
    # asked (nobody answers in the hook's 4 s: Claude Code is told to ask its user).
    commands = ("npm test; rm -rf /", "timeout 60 npm test", "npm test > out", "/usr/bin/npm test")
    query = "timeout=4&on_timeout=ask"
    calls = [asyncio.create_task(bash_hook(http, bot, c, query)) for c in commands]
    ids_ = [await pending_id(bot, c) for c in commands]
    chained = await bot.ctx.store.get(ids_[0])
    assert [(h.code, h.text) for h in chained.risks] == [
        ("recursive_delete", "rm -r of /"),
        ("writes_outside_cwd", "rm writes / (outside /srv/app)"),
    ]
    answers = await asyncio.gather(*calls)
    assert [a["permissionDecision"] for a in answers] == ["ask"] * len(commands)
