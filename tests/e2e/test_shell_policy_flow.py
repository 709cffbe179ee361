"""The shell-aware policy end to end: Claude Code's http hook (`POST /hooks/claude-code`, the
real aiohttp app) and the command hook (`approval-bot hook claude-code`, a process) under
the example policy. Evasions are denied or asked, never allowed; a read-only
command is allowed at once without a Slack message."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from approvals._internal.policy_file import load_policy
from approvals._internal.store.keys import Keys
from bot.core.app import Bot
from tests.support.credentials import API_TOKEN
from tests.support.e2e import CHANNEL, BotFactory, bash_hook, bash_pre_tool_use
from tests.support.slack_emulator import SlackEmulator

ROOT = Path(__file__).resolve().parents[2]
SHELL = ROOT / "tests" / "approvals" / "internal" / "shell"
HEADERS = {"Authorization": f"Bearer {API_TOKEN}"}


def evasions(expect: str) -> list[str]:
    cases = yaml.safe_load((SHELL / "evasions.yaml").read_text())
    return [c["cmd"] for c in cases if c["expect"] == expect and "cmd" in c]


async def example_bot(make_bot: BotFactory) -> Bot:
    policy = load_policy(SHELL / "example_policy.yaml", default_channel=CHANNEL)
    return await make_bot(policy)


async def test_denied_evasions_are_denied_at_once_without_slack(
    make_bot: BotFactory, slack: SlackEmulator, http: aiohttp.ClientSession
) -> None:
    bot = await example_bot(make_bot)
    commands = evasions("deny")
    assert len(commands) > 100
    answers = await asyncio.gather(*(bash_hook(http, bot, c) for c in commands))
    for command, answer in zip(commands, answers, strict=True):
        assert answer["permissionDecision"] == "deny", command
        reason = answer["permissionDecisionReason"]
        assert "recursive deletes are not allowed" in reason or "no-pipe-to-shell" in reason
    assert slack.calls_to("chat.postMessage") == []


async def test_asked_evasions_reach_slack_and_are_never_allowed(
    make_bot: BotFactory, slack: SlackEmulator, http: aiohttp.ClientSession
) -> None:
    """Each is posted for review; nobody answers within the hook's 4 s, so Claude Code is
    told to ask its user (`on_timeout=ask`): never an allow."""
    bot = await example_bot(make_bot)
    commands = [
        "git -C /repo push --force origin main",
        "cd /srv/app && git push --dry-run",
        '"$(echo rm)" -rf build',
        'eval "$CMD"',
        "sudo --weird-option rm -rf build",
        "ls && touch marker",
    ]
    answers = await asyncio.gather(
        *(bash_hook(http, bot, c, "timeout=4&on_timeout=ask") for c in commands)
    )
    assert [a["permissionDecision"] for a in answers] == ["ask"] * len(commands)
    posted = json.dumps([c.body for c in slack.calls_to("chat.postMessage")])
    assert len(slack.calls_to("chat.postMessage")) == len(commands)
    for command in ("git -C /repo push --force origin main", "touch marker"):
        assert json.dumps(command)[1:-1] in posted


async def posts_queued(redis: Any, keys: Keys) -> int:
    """Outbox entries that would post a Slack message (an allow queues none)."""
    entries = await redis.xrange(keys.outbox)
    return sum(
        1 for _, fields in entries if fields.get(b"op", fields.get("op")) in (b"post", "post")
    )


async def test_a_read_only_command_is_allowed_without_a_slack_message(
    make_bot: BotFactory,
    slack: SlackEmulator,
    http: aiohttp.ClientSession,
    redis: Any,
    keys: Keys,
) -> None:
    bot = await example_bot(make_bot)
    for command in ("git status && git diff --stat | head -20", "ls -la", "rg TODO src/"):
        answer = await bash_hook(http, bot, command)
        assert answer["permissionDecision"] == "allow", command
    assert await posts_queued(redis, keys) == 0
    assert slack.calls_to("chat.postMessage") == []
    await bash_hook(http, bot, "touch marker", "timeout=2&on_timeout=deny")  # asked: it posts
    assert await posts_queued(redis, keys) == 1


async def run_command_hook(bot: Bot, command: str) -> dict[str, Any]:
    """`approval-bot hook claude-code` as Claude Code runs it: a process, JSON on stdin."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_", "REDIS"))
    }
    env.update(APPROVALS_URL=f"http://127.0.0.1:{bot.port}", APPROVALS_TOKEN=API_TOKEN)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli.main", "hook", "claude-code", "--timeout", "30",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env, cwd=ROOT,
    )  # fmt: skip
    out, err = await asyncio.wait_for(
        proc.communicate(json.dumps(bash_pre_tool_use(command)).encode()), 30
    )
    assert proc.returncode == 0, err.decode()
    output: dict[str, Any] = json.loads(out)["hookSpecificOutput"]
    return output


async def test_the_command_hook_denies_an_evasion_and_allows_a_read(
    make_bot: BotFactory, slack: SlackEmulator
) -> None:
    bot = await example_bot(make_bot)
    denied, allowed = await asyncio.gather(
        run_command_hook(bot, "CI=1 timeout 5 env rm -fr build"),
        run_command_hook(bot, "git log --oneline -5 && cat README.md"),
    )
    assert denied["permissionDecision"] == "deny"
    assert "recursive deletes are not allowed" in denied["permissionDecisionReason"]
    assert allowed["permissionDecision"] == "allow"
    assert slack.calls_to("chat.postMessage") == []
