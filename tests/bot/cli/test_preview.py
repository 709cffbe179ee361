"""`approval-bot preview`: a request's Slack message, digest row and dialogs without Slack,
drawn by the bot's own renderers and masked exactly as the bot sends them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import pytest

from approvals.models import ApprovalConfig, ApprovalEvent
from bot.cli.main import main
from bot.cli.preview import BUILDER, as_text, parts
from bot.core.context import BotContext
from bot.core.settings import VARIABLES
from bot.masking.masker import outbound
from bot.slack.render import modals
from bot.slack.render.request_message import message_for

#: A GitHub token as an agent might pass it (a realistic secret the masker knows).
GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"


@pytest.fixture
def no_config(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in (*VARIABLES, "APPROVALS_ENV_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("APPROVALS_DEFAULT_CHANNEL", "C0APPROVALS")
    yield


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, redis_url: str, ctx: BotContext) -> Iterator[None]:
    """The CLI's environment: the test Redis and this test's key prefix."""
    for name in (*VARIABLES, "APPROVALS_ENV_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("APPROVALS_PREFIX", ctx.keys.prefix)
    yield


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, dict[str, Any]]:
    assert main(["preview", *argv, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return {line["part"]: line for line in lines}


def test_a_tool_call_is_drawn_in_every_part_masked(
    no_config: None, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = json.dumps({"env": "prod", "token": GHP, "replicas": 3})
    found = run_json(capsys, "--tool", "deploy", "--args", arguments)
    assert list(found) == ["message", "digest", "deny", "edit", "ask", "review"]
    for part in found.values():
        text = json.dumps(part)
        assert GHP not in text and GHP not in unquote(part["builder_url"]), part["part"]
        # the link carries the payload: a message's blocks, a dialog's view
        assert part["builder_url"].startswith(BUILDER)
        shown = json.loads(unquote(part["builder_url"].removeprefix(BUILDER)))
        payload = part["payload"]
        assert shown == (
            payload if payload.get("type") == "modal" else {"blocks": payload["blocks"]}
        )
    message = found["message"]["payload"]
    assert message["blocks"][0]["text"]["text"] == "🔐 Approval needed: deploy"
    assert "<#C0APPROVALS>" in json.dumps(message), "routed by the policy (default channel)"
    assert found["review"]["payload"]["type"] == "modal"


def test_a_shell_call_shows_its_risks_and_parsed_view_and_the_details_dialog(
    no_config: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The risk lines and the parsed view, on the message and in Details."""
    command = f"CI=1 timeout 5 env GH_TOKEN={GHP} rm -fr build"
    found = run_json(capsys, "--tool", "Bash", "--args", json.dumps({"command": command}))
    assert list(found) == ["message", "details", "digest", "deny", "edit", "ask", "review"]
    for name in ("message", "details", "review"):
        text = json.dumps(found[name]["payload"], ensure_ascii=False)
        assert "⚠️ *recursive delete*: rm -r of build" in text, name
        assert "rm -f -r build   (via timeout 5, env; with CI=1 GH_TOKEN=••••••" in text, name
        assert GHP not in text and GHP not in unquote(found[name]["builder_url"])
    assert "⚠️ 1 risk: recursive delete" in json.dumps(found["digest"], ensure_ascii=False)
    assert main(["preview", "--tool", "Bash", "--args", json.dumps({"command": command})]) == 0
    plain = capsys.readouterr().out
    assert "⚠️ *recursive delete*: rm -r of build" in plain
    assert "== details: the Details dialog (views.open)" in plain


def test_the_parts_are_the_bots_own_payloads(no_config: None) -> None:
    """Exactly what the bot sends: the renderers' output through the outbound masker."""
    from approvals._internal.policy_file import default_policy
    from approvals._internal.service import draft_request

    event = ApprovalEvent(tool_name="ask", arguments={"q": f"use {GHP}?"}, session_id="s-1")
    request, _ = draft_request(
        default_policy("C0APPROVALS"),
        event,
        ApprovalConfig(kind="input", sensitivity="secret"),
        now=event_time(),
    )
    drawn = {name: payload for name, _, payload in parts(request)}
    assert list(drawn) == ["message", "digest", "deny", "respond", "review"], "input: no edit"
    assert drawn["message"] == dict(message_for(request))
    assert drawn["deny"] == outbound(modals.deny_modal(request))
    assert drawn["respond"] == outbound(modals.input_modal(request))
    assert drawn["review"] == outbound(modals.review_modal(request))
    assert GHP not in json.dumps(drawn)
    assert "[Respond…] [Deny]" in as_text(drawn["message"])


def event_time() -> Any:
    from datetime import UTC, datetime

    return datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_plain_text_shows_what_a_reviewer_reads(
    no_config: None, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["preview", "--tool", "pick", "--kind", "choice", "--options", "blue,green"]
    assert main([*argv, "--prompt", "Which colour & why <now>?"]) == 0
    out = capsys.readouterr().out
    assert "== message: the request's message (chat.postMessage)" in out
    assert "Which colour & why <now>?" in out, "mrkdwn escapes undone for reading"
    assert "[blue] [green] [Deny]" in out
    assert "== deny: the Deny dialog" in out and "┌ Deny request ┐" in out
    assert "== edit" not in out, "no edits for a choice"


async def test_an_existing_request_is_read_from_redis(
    cli_env: None, ctx: BotContext, capsys: pytest.CaptureFixture[str]
) -> None:
    event = ApprovalEvent(tool_name="deploy", arguments={"password": "hunter2-Xk9!"})
    request = await ctx.service.submit(event, ApprovalConfig(sensitivity="pii"))
    stored = await ctx.store.get(request.id)
    found = await asyncio.to_thread(run_json, capsys, request.id)
    assert found["message"]["payload"] == json.loads(json.dumps(dict(message_for(stored))))
    assert found["deny"]["payload"] == json.loads(json.dumps(outbound(modals.deny_modal(stored))))
    assert "hunter2-Xk9!" not in json.dumps(found)


def test_an_id_and_a_tool_together_are_refused(
    no_config: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["preview", "apr_x", "--tool", "deploy"]) == 2
    assert "either a request id or --tool" in capsys.readouterr().err
    assert main(["preview", "--tool", "deploy", "--args", "[1]"]) == 2
    assert "--args must be a JSON object" in capsys.readouterr().err
