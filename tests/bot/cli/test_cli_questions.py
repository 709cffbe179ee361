"""`approval-bot` and a reviewer's question: `show` says `asked` with the question (masked,
escaped) and, on the retry, what it answers; `audit` lists the question with who asked;
`request` exits 1 for an asked request (not approved) and prints the question."""

from __future__ import annotations

import asyncio
import json

import pytest

from approvals._internal.service import Actor
from approvals.models import ApprovalEvent, CallContext
from bot.core.context import BotContext
from tests.bot.cli.test_cli import cli, cli_env, submit
from tests.support.mcp import pending_for
from tests.support.secret_corpus import FAKES

__all__ = ["cli_env"]  # the fixture, used by name

#: A GitHub token of the corpus (a reviewer pasting one into a question).
GITHUB_TOKEN = next(f.secret for f in FAKES if f.rule == "github_token")


async def test_show_and_audit_an_asked_request_and_its_retry(
    cli_env: None, ctx: BotContext, capsys: pytest.CaptureFixture[str]
) -> None:
    request = await submit(ctx, "deploy", {"env": "prod"})
    question = f"Is {GITHUB_TOKEN} the CI token?\x1b[2K Which region?"
    await ctx.service.ask(request.id, Actor("U0ANN"), question)
    assert await cli("show", request.id) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{request.id}  asked\n")
    assert "decision:   asked by U0ANN via slack" in text
    (line,) = [x for x in text.splitlines() if x.startswith("question:")]
    assert "Which region?" in line and GITHUB_TOKEN not in line and "\x1b" not in line
    retry = await ctx.service.submit(
        ApprovalEvent(
            tool_name="deploy",
            arguments={"env": "prod", "region": "eu"},
            session_id="s-1",
            context=CallContext(reason="eu-west-1"),
        )
    )
    assert await cli("show", retry.id) == 0
    text = capsys.readouterr().out
    (line,) = [x for x in text.splitlines() if x.startswith("answers:")]
    assert request.id in line and "asked by U0ANN" in line and GITHUB_TOKEN not in line
    assert await cli("show", request.id, "--json") == 0
    body = json.loads(capsys.readouterr().out)
    assert body["status"] == "asked" and body["question"] == question
    assert await cli("audit", "--json", "--id", request.id) == 0
    entries = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(e["event"], e["by"], e["via"]) for e in entries][-1] == ("asked", "U0ANN", "slack")
    assert entries[-1]["reason"] == question


async def test_request_exits_1_when_asked(
    cli_env: None, ctx: BotContext, capsys: pytest.CaptureFixture[str]
) -> None:
    run = asyncio.create_task(cli("request", "--tool", "sh_rotate", "--session-id", "s-9"))
    request = await pending_for(ctx.store, "sh_rotate", within=20.0)
    await ctx.service.ask(request.id, Actor("U0ANN"), "Which keys?")
    assert await run == 1
    out = capsys.readouterr().out
    assert out.startswith(f'{request.id} asked by U0ANN: "Which keys?"')
