"""`/hooks/claude-code` and `/hooks/codex` fail closed on what the property tests do not
generate: the handler itself raising, and bodies aiohttp would refuse before any handler runs
(a compressed body it cannot or will not decode). Always HTTP 200 with the deny shaped for the
event, through the real bot's aiohttp app and server options."""

from __future__ import annotations

import json
import zlib
from typing import Any

import aiohttp
import pytest

from bot.core.app import Bot
from bot.http import agent_hooks
from tests.support.credentials import API_TOKEN
from tests.support.e2e import BotFactory

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
PRE_TOOL_USE = {
    "hook_event_name": "PreToolUse",
    "session_id": "3f1c2a9e-5b7d-4c1e-9a8f-2d6b0e4c7a15",
    "transcript_path": "/home/dev/.claude/projects/-home-dev-app/3f1c2a9e.jsonl",
    "cwd": "/home/dev/app",
    "permission_mode": "default",
    "tool_name": "Bash",
    "tool_input": {"command": "rm -rf build/", "description": "Remove the build directory"},
    "tool_use_id": "toolu_01HJ6RxQ2vX5wVbF9nT3kLmP",
}
PERMISSION_REQUEST = {
    "hook_event_name": "PermissionRequest",
    "session_id": "3f1c2a9e-5b7d-4c1e-9a8f-2d6b0e4c7a15",
    "transcript_path": "/home/dev/.claude/projects/-home-dev-app/3f1c2a9e.jsonl",
    "cwd": "/home/dev/app",
    "permission_mode": "default",
    "tool_name": "Bash",
    "tool_input": {"command": "rm -rf build/"},
}


def hook_url(bot: Bot, dialect: str = "claude-code") -> str:
    return f"http://127.0.0.1:{bot.port}/hooks/{dialect}?timeout=30"


def denied(output: dict[str, Any], event: str) -> str:
    """The deny's reason, asserting the answer is a deny shaped for `event`."""
    specific = output["hookSpecificOutput"]
    assert specific["hookEventName"] == event, output
    if event == "PermissionRequest":
        assert specific["decision"]["behavior"] == "deny", output
        return str(specific["decision"]["message"])
    assert specific["permissionDecision"] == "deny", output
    return str(specific["permissionDecisionReason"])


@pytest.mark.parametrize("dialect", ["claude-code", "codex"])
@pytest.mark.parametrize(
    "event", [PRE_TOOL_USE, PERMISSION_REQUEST], ids=lambda e: e["hook_event_name"]
)
async def test_a_handler_that_raises_answers_the_deny_in_the_events_shape(
    make_bot: BotFactory,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    dialect: str,
    event: dict[str, Any],
) -> None:
    """A bug anywhere in the review (here: `answer_hook` itself raising) is a deny the agent
    reads, never `{}` (no decision: the agent would fall back to running the tool)."""

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("redis://:hunter2@10.0.0.7:6379 exploded")

    monkeypatch.setattr(agent_hooks, "answer_hook", broken)
    bot = await make_bot(with_slack=False)
    async with http.post(hook_url(bot, dialect), json=event, headers=AUTH) as resp:
        assert resp.status == 200
        output = await resp.json()
        problem = resp.headers.get(agent_hooks.PROBLEM_HEADER, "")
    reason = denied(output, event["hook_event_name"])
    assert "internal error" in reason
    assert "hunter2" not in json.dumps(output) + problem
    assert "internal error" in problem


def deflate(data: bytes) -> bytes:
    return zlib.compress(data)


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("br", b"\x1b\x03\x00\xf8\xa5\x00\xe2\x0a"),  # brotli: aiohttp has no decoder here
        ("zstd", b"\x28\xb5\x2f\xfd\x00\x58\x19\x00\x00junk"),
        ("deflate", b"this is not deflate data at all" * 40),  # junk
        ("gzip", b"\x1f\x8b\x08\x00junk junk junk"),  # a gzip header, then junk
        ("deflate", deflate(json.dumps(PRE_TOOL_USE).encode())),  # well-formed, still refused
        ("x-unheard-of", json.dumps(PRE_TOOL_USE).encode()),
    ],
    ids=["br", "zstd", "deflate-junk", "gzip-junk", "deflate", "unknown"],
)
async def test_a_compressed_body_is_a_deny_in_the_hooks_shape(
    make_bot: BotFactory, http: aiohttp.ClientSession, encoding: str, body: bytes
) -> None:
    """Hook bodies are read uncompressed only: any `Content-Encoding` but identity is a deny
    naming it (aiohttp would answer a plain-text 400, or reset the connection, which Claude
    Code's http hook treats as no decision)."""
    bot = await make_bot(with_slack=False)
    headers = {**AUTH, "Content-Type": "application/json", "Content-Encoding": encoding}
    for _ in range(2):  # and the connection stays usable
        async with http.post(hook_url(bot), data=body, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.content_type == "application/json"
            output = await resp.json()
            problem = resp.headers.get(agent_hooks.PROBLEM_HEADER, "")
        reason = denied(output, "PreToolUse")
        assert "Content-Encoding" in reason and encoding in reason, reason
        assert "Content-Encoding" in problem


async def test_identity_encoding_is_read_as_usual(
    make_bot: BotFactory, http: aiohttp.ClientSession
) -> None:
    bot = await make_bot(with_slack=False)
    body = {**PERMISSION_REQUEST, "hook_event_name": "PostToolUse", "tool_response": {}}
    headers = {**AUTH, "Content-Encoding": "identity"}
    async with http.post(hook_url(bot), json=body, headers=headers) as resp:
        assert (resp.status, await resp.json()) == (200, {})
