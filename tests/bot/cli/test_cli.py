"""`approval-bot` in-process: pending/show/approve/deny/audit on real Redis, request and the
agent hooks (decided concurrently through the service), exit codes, configuration errors."""

from __future__ import annotations

import asyncio
import functools
import gc
import io
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from approvals._internal.store.store import ApprovalStore
from approvals.approval import approval_object
from approvals.integrations.hook_input import time_budget
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest
from bot.agents.command_hook import bot_timeout, hook_options
from bot.cli.durations import duration
from bot.cli.main import build_parser, main
from bot.cli.serve import SERVE_GC_THRESHOLD, tune_gc_for_serving
from bot.core.context import BotContext
from bot.core.settings import VARIABLES
from tests import support
from tests.support.credentials import API_TOKEN, UNKNOWN_API_TOKEN

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_POLICY = Path(__file__).resolve().parents[3] / "config" / "policy.example.yaml"


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, redis_url: str, ctx: BotContext) -> Iterator[None]:
    """The CLI's environment: the test Redis and this test's key prefix, nothing else."""
    for name in (*VARIABLES, "APPROVALS_ENV_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("APPROVALS_PREFIX", ctx.keys.prefix)
    monkeypatch.setenv("APPROVALS_DEFAULT_CHANNEL", "C0APPROVALS")
    yield


async def submit(
    ctx: BotContext, tool: str, arguments: dict[str, Any] | None = None, **config: Any
) -> ApprovalRequest:
    event = ApprovalEvent(tool_name=tool, arguments=arguments or {}, session_id="s-1")
    return await ctx.service.submit(event, ApprovalConfig(**config))


#: `tests.support.decide_next` with more time: the CLI runs its own loop on a worker thread.
decide_next = functools.partial(support.decide_next, within=20.0)


async def cli(*argv: str) -> int:
    """Run `main` on a worker thread (it runs its own event loop), as a shell would."""
    return await asyncio.to_thread(main, list(argv))


# -- pending / show ----------------------------------------------------------------------------


async def test_pending_lists_a_table_and_json_lines(
    cli_env: None, ctx: BotContext, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await cli("pending") == 0
    assert capsys.readouterr().out == "no pending approval requests\n"
    first = await submit(ctx, "deploy", {"env": "prod"})
    second = await submit(ctx, "drop_table", {"name": "users"}, deadline_seconds=600)
    assert await cli("pending") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "AGE", "TOOL", "ROUTE", "CHANNEL", "VOTES", "DEADLINE"]
    assert lines[1].split()[:6] == [first.id, "0s", "deploy", "default", "C0APPROVALS", "0/1"]
    assert lines[1].split()[6:] == ["in", "23h"]
    assert lines[2].split()[2:] == ["drop_table", "default", "C0APPROVALS", "0/1", "in", "9m"]
    assert await cli("pending", "--json") == 0
    objects = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["id"] for o in objects] == [first.id, second.id]
    assert objects[0]["arguments"] == {"env": "prod"}


async def test_show_text_masks_secrets_and_json_is_the_approval_object(
    cli_env: None, ctx: BotContext, capsys: pytest.CaptureFixture[str]
) -> None:
    request = await submit(
        ctx,
        "login",
        {"user": "ann", "password": "hunter22"},
        kind="choice",
        options=("read", "write"),
    )
    assert await cli("show", request.id) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{request.id}  pending\n")
    assert "tool:       login (tool)" in text
    assert "kind:       choice [read, write], sensitivity low" in text
    assert '"user": "ann"' in text and "hunter22" not in text and "••••••" in text
    assert "route:      default → C0APPROVALS" in text
    assert "reviewers:  anyone (quorum 1)" in text
    assert await cli("show", request.id, "--json") == 0
    assert json.loads(capsys.readouterr().out) == approval_object(request)


async def test_show_prints_the_risks_and_the_parsed_view_masked(
    cli_env: None, ctx: BotContext, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show` prints each risk and the parsed view, masked as Slack shows them; the
    JSON is the approval object, its `risks` the same list."""
    token = "ghp_" + "Zq8" * 12
    command = f"CI=1 timeout 5 env GITHUB_TOKEN={token} rm -fr build"
    event = ApprovalEvent(
        kind="command", tool_name="Bash", arguments={"command": command}, command=command,
        cwd="/srv/app", session_id="s-1",
    )  # fmt: skip
    request = await ctx.service.submit(event)
    assert await cli("show", request.id) == 0
    text = capsys.readouterr().out
    assert "risk:       recursive delete: rm -r of build\n" in text
    (parsed,) = [line for line in text.splitlines() if line.startswith("parsed:")]
    assert parsed.startswith(
        "parsed:     rm -f -r build   (via timeout 5, env; with CI=1 GITHUB_TOKEN=••••"
    )
    assert token not in text and token[4:16] not in text
    assert await cli("show", request.id, "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["risks"] == [{"code": "recursive_delete", "text": "rm -r of build"}]


#: Characters that let a crafted value rewrite what an operator sees on a terminal.
CRAFTED = "\r\x1b[2K\x1b[1A\x07\b\u202e\u2028\x9b"


async def test_show_and_audit_escape_what_could_rewrite_the_terminal(
    cli_env: None, ctx: BotContext, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tool name, prompt, agent, session or reason holding CR, LF, ANSI escapes, BEL,
    backspace or a bidi override is printed escaped (as log lines are), never raw."""
    event = ApprovalEvent(
        tool_name=f"deploy{CRAFTED}gnp.exe",
        arguments={},
        session_id=f"s{CRAFTED}",
        agent=f"agent\x1b]0;pwned\x07{CRAFTED}",
    )
    request = await ctx.service.submit(
        event, ApprovalConfig(prompt=f"ok\nvote:       U0BOSS approve{CRAFTED}")
    )
    assert await cli("deny", request.id, "--reason", f"fine{CRAFTED}", "--as", "dan") == 0
    assert await cli("show", request.id) == 0
    assert await cli("audit", "--since", "1h") == 0
    assert await cli("show", "--json", request.id) == 0
    assert await cli("audit", "--json", "--since", "1h") == 0
    out = capsys.readouterr().out
    for raw in "\r\x1b\x07\b\u202e\u2028\x9b":
        assert raw not in out, (repr(raw), out)
    assert "\\u202e" in out and "\\u001b[2K" in out and "\\r" in out
    assert not any(line.startswith("vote:       U0BOSS") for line in out.splitlines())
    # The escapes are JSON's own: the audit's JSON lines still parse, to the raw values.
    json_lines = [line for line in out.splitlines() if line.startswith("{") and line.endswith("}")]
    reasons = [json.loads(line).get("reason") for line in json_lines]
    assert f"fine{CRAFTED}" in reasons


async def test_show_unknown_id(cli_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert await cli("show", "apr_nope") == 1
    assert "no approval request with id 'apr_nope'" in capsys.readouterr().err


# -- approve / deny ------------------------------------------------------------------------------


async def test_approve_goes_through_the_cas_is_audited_and_queues_the_slack_update(
    cli_env: None, ctx: BotContext, capsys: pytest.CaptureFixture[str]
) -> None:
    request = await submit(ctx, "deploy", kind="input")
    assert await cli("approve", request.id, "--input", "v2 only", "--as", "alice") == 0
    assert capsys.readouterr().out == f"{request.id} approved by cli:alice (input: v2 only)\n"
    stored = await ctx.store.get(request.id)
    assert stored.status == "approved" and stored.decision is not None
    assert (stored.decision.decided_by, stored.decision.via, stored.decision.input) == (
        "cli:alice",
        "cli",
        "v2 only",
    )
    audit = [e for e in await ctx.store.audit_entries(request_id=request.id)]
    assert [(e.event, e.by, e.via) for e in audit][-1] == ("approved", "cli:alice", "cli")
    outbox = await ctx.redis.xrange(ctx.keys.outbox)
    assert (outbox[-1][1]["op"], outbox[-1][1]["id"]) == ("update", request.id)
    # A second decision loses the compare-and-set and says who won.
    assert await cli("deny", request.id, "--reason", "late", "--as", "bob") == 1
    assert f"{request.id} is already approved by cli:alice" in capsys.readouterr().err
    assert (await ctx.store.get(request.id)).status == "approved"


async def test_approve_and_deny_are_bound_to_the_version_shown(
    cli_env: None, ctx: BotContext, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI decides the version `show` printed. An edited request needs
    `--version`; a version that is no longer current records nothing."""
    from approvals._internal.policy_file import parse_policy
    from approvals._internal.service import Actor, ApprovalService

    routes = {"default": {"channel": "C0APPROVALS", "quorum": 2}}
    service = ApprovalService(ctx.store, parse_policy({"routes": routes}, source="q.yaml"))
    request = await service.submit(ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}))
    assert await cli("show", request.id) == 0
    assert "version:    original (the arguments as the agent asked)\n" in capsys.readouterr().out
    await service.edit(request.id, Actor("U0ANN"), {"env": "staging"})
    edited = await ctx.store.get(request.id)
    assert edited.proposal is not None
    version = edited.proposal.version
    for argv in (("approve", request.id), ("deny", request.id, "--reason", "no")):
        assert await cli(*argv, "--as", "ops") == 2
        err = capsys.readouterr().err
        assert "was edited by U0ANN" in err and "approval-bot show" in err, err
        assert f"--version {version}" in err
    assert await cli("approve", request.id, "--version", "original", "--as", "ops") == 1
    assert f"changed since version original: it is now version {version}" in (
        capsys.readouterr().err
    )
    assert await cli("approve", request.id, "--version", "0" * 16, "--as", "ops") == 1
    capsys.readouterr()
    after = await ctx.store.get(request.id)
    assert after.is_pending and [v.user for v in after.votes] == ["U0ANN"]
    events = [e.event for e in await ctx.store.audit_entries(request_id=request.id)]
    assert events == ["created", "edit"], "nothing recorded"
    assert await cli("show", request.id) == 0
    assert f"version:    {version} (edited by U0ANN)\n" in capsys.readouterr().out
    assert await cli("approve", request.id, "--version", version, "--as", "ops") == 0
    decided = await ctx.store.get(request.id)
    assert decided.decision is not None and decided.decision.edited_arguments == {"env": "staging"}


async def test_deny_with_reason_and_default_operator_name(
    cli_env: None,
    ctx: BotContext,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LOGNAME", "carol")
    request = await submit(ctx, "rotate_keys")
    assert await cli("deny", request.id, "--reason", "not today") == 0
    assert capsys.readouterr().out == f"{request.id} denied by cli:carol: not today\n"
    decision = (await ctx.store.get(request.id)).decision
    assert decision is not None and (decision.reason, decision.via) == ("not today", "cli")


async def test_approve_checks_the_answer_and_the_id(
    cli_env: None, ctx: BotContext, capsys: pytest.CaptureFixture[str]
) -> None:
    choice = await submit(ctx, "pick", kind="choice", options=("a", "b"))
    assert await cli("approve", choice.id, "--as", "x") == 2
    assert "choose one of: a, b" in capsys.readouterr().err
    assert await cli("approve", choice.id, "--selection", "b", "--as", "x") == 0
    assert "approved by cli:x (selection: b)" in capsys.readouterr().out
    plain = await submit(ctx, "plain", allow_for_session=True)
    assert await cli("approve", plain.id, "--for-session", "--as", "x") == 0
    (grant,) = await ctx.service.grants.list()
    assert (grant.session_id, grant.tool_name, grant.scope) == ("s-1", "plain", "call")
    assert await cli("approve", "apr_missing", "--as", "x") == 1
    assert "no approval request with id 'apr_missing'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["deny", choice.id])  # --reason is required
    assert exit_info.value.code == 2


# -- audit ------------------------------------------------------------------------------------


async def test_audit_exports_json_lines_and_a_table(
    cli_env: None, ctx: BotContext, capsys: pytest.CaptureFixture[str]
) -> None:
    request = await submit(ctx, "deploy")
    assert await cli("deny", request.id, "--reason", "freeze", "--as", "dan") == 0
    capsys.readouterr()
    assert await cli("audit", "--json", "--since", "1h") == 0
    entries = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["id"], e["event"]) for e in entries] == [
        (request.id, "created"),
        (request.id, "denied"),
    ]
    assert (entries[1]["by"], entries[1]["via"], entries[1]["reason"]) == (
        "cli:dan",
        "cli",
        "freeze",
    )
    assert await cli("audit", "--since", "2999-01-01T00:00:00") == 0
    assert capsys.readouterr().out == "no audit entries\n"
    assert await cli("audit", "--id", request.id) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["AT", "ID", "EVENT", "BY", "VIA", "REASON"]
    assert table[2].split()[1:] == [request.id, "denied", "cli:dan", "cli", "freeze"]


def test_durations() -> None:
    assert [duration(t) for t in ("90", "30s", "15m", "2h", "1d", "0.5")] == [
        90,
        30,
        900,
        7200,
        86400,
        0.5,
    ]
    assert hook_options(["hook", "codex", "--timeout", "2m"]) == ("codex", 120, "deny")
    # A hook's timeout is clamped, never refused; unreadable is Claude Code's default 600 s.
    assert hook_options(["hook", "codex", "--timeout=0", "--on-timeout", "ask"]) == (
        "codex",
        1,
        "ask",
    )
    assert hook_options(["hook", "claude-code", "--timeout", "soon"])[1] == 600
    assert hook_options(["hook", "claude-code", "--timeout", "1e9", "--on-timeout=x"])[1:] == (
        86400,
        "deny",
    )
    for bad in ("0", "-5", "soon"):
        with pytest.raises(SystemExit) as exit_info:
            build_parser().parse_args(["request", "--tool", "t", "--deadline", bad])
        assert exit_info.value.code == 2


# -- request ------------------------------------------------------------------------------------


async def test_request_exit_codes(
    cli_env: None, ctx: BotContext, capsys: pytest.CaptureFixture[str]
) -> None:
    run = asyncio.create_task(
        cli(
            "request",
            "--tool",
            "sh_deploy",
            "--args",
            '{"env": "qa"}',
            "--kind",
            "input",
            "--wait",
            "20",
        )
    )
    decided = await decide_next(ctx.service, "sh_deploy", input="ok")
    assert await run == 0
    assert capsys.readouterr().out == f"{decided.id} approved by U0REVIEWER (input: ok)\n"
    assert decided.event.arguments == {"env": "qa"} and decided.event.agent == "cli"

    run = asyncio.create_task(cli("request", "--tool", "sh_drop", "--json"))
    await decide_next(ctx.service, "sh_drop", "deny", reason="nope")
    assert await run == 1
    body = json.loads(capsys.readouterr().out)
    assert (body["status"], body["reason"]) == ("denied", "nope")

    assert await cli("request", "--tool", "sh_slow", "--wait", "0.3") == 2
    assert "timeout: no decision" in capsys.readouterr().err
    assert await cli("request", "--tool", "x", "--args", "[1]") == 2
    assert "--args must be a JSON object" in capsys.readouterr().err
    assert await cli("request", "--tool", "x", "--kind", "choice") == 2
    assert "--kind choice: needs --options" in capsys.readouterr().err


async def test_request_over_http(
    cli_env: None,
    ctx: BotContext,
    api_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("APPROVALS_URL", api_url)
    monkeypatch.setenv("APPROVALS_TOKEN", API_TOKEN)
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # must not be used
    run = asyncio.create_task(cli("request", "--tool", "http_tool", "--args", '{"a": 1}'))
    decided = await decide_next(ctx.service, "http_tool")
    assert await run == 0
    assert capsys.readouterr().out == f"{decided.id} approved by U0REVIEWER\n"


# -- hooks --------------------------------------------------------------------------------------


def hook_input(event: str = "PreToolUse", tool: str = "Bash", **extra: Any) -> str:
    payload = {
        "session_id": "sess-9",
        "cwd": "/repo",
        "hook_event_name": event,
        "tool_name": tool,
        "tool_input": {"command": "make deploy"},
        "permission_mode": "default",
        **extra,
    }
    if event == "PreToolUse":
        payload.setdefault("tool_use_id", f"toolu_{tool}_{event}")
    return json.dumps(payload)


async def test_claude_code_hook_approve_and_deny(
    cli_env: None,
    ctx: BotContext,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(hook_input()))
    run = asyncio.create_task(cli("hook", "claude-code", "--timeout", "30"))
    request = await decide_next(ctx.service, "Bash")
    assert await run == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    assert out["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert (request.event.kind, request.event.command, request.event.agent) == (
        "command",
        "make deploy",
        "claude-code",
    )
    # The deadline is when the hook stops waiting (what is left of its budget at the submit),
    # never later: a request nobody waits on must not stay approvable.
    assert request.config.deadline_seconds is not None
    assert 20 < request.config.deadline_seconds <= time_budget(30)

    monkeypatch.setattr("sys.stdin", io.StringIO(hook_input(tool_use_id="toolu_2")))
    run = asyncio.create_task(cli("hook", "claude-code"))
    await decide_next(ctx.service, "Bash", "deny", reason="use the staging target")
    assert await run == 0
    out = json.loads(capsys.readouterr().out)["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny"
    assert "use the staging target" in out["permissionDecisionReason"]


async def test_claude_code_hook_answers_before_its_timeout(
    cli_env: None,
    ctx: BotContext,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    loop = asyncio.get_running_loop()
    for on_timeout, expected in (("deny", "deny"), ("ask", "ask")):
        monkeypatch.setattr(
            "sys.stdin", io.StringIO(hook_input(tool_use_id=f"toolu_t_{on_timeout}"))
        )
        started = loop.time()
        assert await cli("hook", "claude-code", "--timeout", "2", "--on-timeout", on_timeout) == 0
        assert loop.time() - started < 2.0
        out = json.loads(capsys.readouterr().out)["hookSpecificOutput"]
        assert out["permissionDecision"] == expected
    assert await ctx.store.list_pending() == []  # both withdrawn


async def test_hook_called_in_a_long_running_process_counts_from_the_call(
    cli_env: None,
    ctx: BotContext,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # This process has been running for ten minutes (pytest late in a run, or a program that
    # embeds the entry point): the hook's 30 s still count from the call, not from the spawn.
    monkeypatch.setattr("bot.agents.spawn.process_age", lambda: 600.0)
    monkeypatch.setattr("sys.stdin", io.StringIO(hook_input(tool_use_id="toolu_old")))
    run = asyncio.create_task(cli("hook", "claude-code", "--timeout", "30"))
    await decide_next(ctx.service, "Bash")
    assert await run == 0
    out = json.loads(capsys.readouterr().out)["hookSpecificOutput"]
    assert out["permissionDecision"] == "allow"


async def test_hook_run_as_the_program_counts_from_the_process_spawn(
    cli_env: None,
    ctx: BotContext,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Spawned by the agent (argv from the command line): the agent's clock started at the
    # spawn, so a process that is already past the timeout answers at once — and, with no
    # time left to ask anyone, asks no one: nothing is submitted, so no request (with live
    # Slack buttons) can be left behind by a submit its own budget cuts off. The reason says
    # it had no time: with the 20 s granted afresh it would have asked and waited ~16 s.
    monkeypatch.setattr("bot.agents.spawn.process_age", lambda: 600.0)
    monkeypatch.setattr("sys.stdin", io.StringIO(hook_input(tool_use_id="toolu_spawn")))
    monkeypatch.setattr("sys.argv", ["approval-bot", "hook", "claude-code", "--timeout", "20"])
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await asyncio.to_thread(main) == 0
    assert loop.time() - started < 15, "the spent budget is not granted again"
    captured = capsys.readouterr()
    out = json.loads(captured.out)["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny"
    assert out["permissionDecisionReason"].startswith("No time left to ask a reviewer")
    assert captured.err.startswith("approval-bot hook: no time left to ask a reviewer")
    assert captured.err.count("\n") == 1
    assert await ctx.store.audit_entries() == []  # not one request written, nothing posted
    assert await ctx.store.list_pending() == []


@pytest.mark.parametrize("on_timeout", ["deny", "ask"])
@pytest.mark.parametrize("dialect", ["claude-code", "codex"])
async def test_forwarding_hook_with_no_time_left_sends_nothing(
    cli_env: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    on_timeout: str,
    dialect: str,
) -> None:
    """With a bot URL the command hook forwards to /hooks/<dialect>; with its budget spent at
    the spawn it does not even connect (the bot would post a request for its least timeout,
    1 s, that nobody waits on). Codex: "ask" is no output (its own approval flow), and a
    reason never ends in a full stop (Codex appends ". Command: …")."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    monkeypatch.setenv("APPROVALS_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("APPROVALS_TOKEN", API_TOKEN)
    monkeypatch.setattr("bot.agents.spawn.process_age", lambda: 600.0)
    monkeypatch.setattr("sys.stdin", io.StringIO(hook_input(tool_use_id="toolu_fwd")))
    argv = ["approval-bot", "hook", dialect, "--timeout", "20", "--on-timeout", on_timeout]
    monkeypatch.setattr("sys.argv", argv)
    try:
        assert await asyncio.to_thread(main) == 0
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    finally:
        listener.close()
    captured = capsys.readouterr()
    if dialect == "codex" and on_timeout == "ask":
        assert captured.out == ""
    else:
        out = json.loads(captured.out)["hookSpecificOutput"]
        assert out["permissionDecision"] == on_timeout
        reason = out["permissionDecisionReason"]
        assert reason.startswith("No time left to ask a reviewer")
        assert reason.endswith("default") if dialect == "codex" else reason.endswith(".")
    assert captured.err.startswith("approval-bot hook: no time left to ask a reviewer")
    assert captured.err.count("\n") == 1


@pytest.mark.parametrize("dialect", ["claude-code", "codex"])
async def test_hook_withdraws_a_submit_its_budget_cut_off_after_it_landed(
    cli_env: None,
    ctx: BotContext,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    dialect: str,
) -> None:
    """The Redis transport: the create reaches Redis, then its answer stalls past the hook's
    budget (a loaded machine). The hook never learns the id, yet withdraws the request by its
    call id: the agent reads a deny and no reviewer can approve what it gave up on."""
    original = ApprovalStore.create
    landed: list[str] = []

    async def lands_then_stalls(self: ApprovalStore, *args: Any, **kwargs: Any) -> Any:
        result = await original(self, *args, **kwargs)
        landed.append(result.request.id)
        await asyncio.Event().wait()  # only the hook's budget ends this

    monkeypatch.setattr(ApprovalStore, "create", lands_then_stalls)
    monkeypatch.setattr("sys.stdin", io.StringIO(hook_input(tool_use_id=f"toolu_cut_{dialect}")))
    # 3 s: a 2.4 s budget, 0.24 s of it kept back for the withdrawal.
    assert await cli("hook", dialect, "--timeout", "3") == 0
    captured = capsys.readouterr()
    assert deny_reason(captured.out).startswith("No approval decision within")
    assert captured.err.startswith("approval-bot hook: no decision within")
    assert captured.err.count("\n") == 1  # one plain line
    (request_id,) = landed
    assert (await ctx.store.get(request_id)).status == "cancelled"
    assert await ctx.store.list_pending() == []


async def test_codex_hook_pre_tool_use_and_permission_request(
    cli_env: None,
    ctx: BotContext,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(hook_input()))
    run = asyncio.create_task(cli("hook", "codex"))
    await decide_next(ctx.service, "Bash")
    assert await run == 0
    assert capsys.readouterr().out == ""  # Codex: no output lets the call run

    monkeypatch.setattr("sys.stdin", io.StringIO(hook_input("PermissionRequest")))
    run = asyncio.create_task(cli("hook", "codex"))
    await decide_next(ctx.service, "Bash", "deny", reason="no network")
    assert await run == 0
    decision = json.loads(capsys.readouterr().out)["hookSpecificOutput"]["decision"]
    assert decision["behavior"] == "deny" and "no network" in decision["message"]


def deny_reason(out: str) -> str:
    """The reason of the one deny a hook printed (PreToolUse or PermissionRequest shape)."""
    decided = json.loads(out)["hookSpecificOutput"]
    if decided["hookEventName"] == "PermissionRequest":
        assert decided["decision"]["behavior"] == "deny"
        return str(decided["decision"]["message"])
    assert decided["permissionDecision"] == "deny"
    return str(decided["permissionDecisionReason"])


async def test_hook_bad_input_is_a_deny_with_exit_0(
    cli_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 0 with a deny: the agents read JSON only on exit 0, and take 1 for "go ahead"."""
    monkeypatch.setattr("sys.stdin", io.StringIO("not json"))
    assert await cli("hook", "claude-code") == 0
    captured = capsys.readouterr()
    assert "not JSON" in deny_reason(captured.out) and "not JSON" in captured.err
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"tool_name": "Bash"})))
    assert await cli("hook", "codex") == 0
    assert "hook_event_name" in deny_reason(capsys.readouterr().out)


async def test_ungated_events_exit_0_silently(
    cli_env: None,
    ctx: BotContext,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """UserPromptSubmit must not lose the prompt, Stop must not loop: no output, exit 0."""
    for dialect in ("claude-code", "codex"):
        for event in ("PostToolUse", "UserPromptSubmit", "Stop", "SessionStart"):
            monkeypatch.setattr("sys.stdin", io.StringIO(hook_input(event)))
            assert await cli("hook", dialect) == 0
            assert capsys.readouterr() == ("", ""), (dialect, event)
    assert await ctx.store.audit_entries() == []


# -- configuration and connection problems --------------------------------------------------------


async def test_unreachable_redis_says_so(
    cli_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    assert await cli("pending") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, "one line"
    assert "cannot reach Redis: tried REDIS_URL (127.0.0.1:1 db 0)" in err
    assert (
        "need the bot's Redis: start `approval-bot serve` (with the same APPROVALS_DATA_DIR)" in err
    )
    assert err.endswith(
        "or set REDIS_URL (and APPROVALS_PREFIX, if the bot has one) to the Redis the bot uses\n"
    )


def test_serve_reports_settings_errors_and_runs_the_app(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in (*VARIABLES, "APPROVALS_ENV_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PORT", "not-a-port")
    assert main(["serve"]) == 2
    assert "PORT: must be an integer" in capsys.readouterr().err
    monkeypatch.setenv("PORT", "3123")
    seen: list[Any] = []

    async def fake_serve(settings: Any, **options: Any) -> None:
        seen.append(settings)
        seen.append(options)

    monkeypatch.setattr("bot.core.app.serve", fake_serve)
    assert main(["serve"]) == 0
    assert seen[0].port == 3123
    assert seen[1] == {"started": tune_gc_for_serving}


def test_serving_freezes_the_start_up_objects_and_raises_the_young_threshold() -> None:
    before = gc.get_threshold()
    try:
        tune_gc_for_serving()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (SERVE_GC_THRESHOLD, *before[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


async def test_policy_check_accepts_the_example_and_names_every_problem(
    cli_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = EXAMPLE_POLICY
    assert main(["policy", "check", str(example)]) == 0
    out = capsys.readouterr().out
    assert "ok" in out and "route default" in out and "rule " in out
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "routes:\n  ops:\n    channel: C0OPS\n    quorum: zero\n"
        "rules:\n  - name: r1\n    action: ask\n    route: nowhere\n"
    )
    assert main(["policy", "check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "routes.ops.quorum" in err


async def test_a_hook_that_cannot_read_its_configuration_still_blocks(
    cli_env: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Claude Code and Codex run the tool when a command hook exits with any status but 0 and 2:
    a crash while reading the configuration is a deny, exit 0."""
    env_file = tmp_path / "bad.env"
    env_file.write_bytes(b"PORT=\xff\xfe3000\n")
    monkeypatch.setenv("APPROVALS_ENV_FILE", str(env_file))
    monkeypatch.setattr("sys.stdin", io.StringIO(hook_input("PermissionRequest")))
    assert await cli("hook", "claude-code") == 0
    captured = capsys.readouterr()
    assert "APPROVALS_ENV_FILE" in deny_reason(captured.out)
    assert "APPROVALS_ENV_FILE" in captured.err and "Traceback" not in captured.err


# -- the first hour: messages, --version, Ctrl-C -------------------------------------------------


def test_version_and_help_need_no_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("approval-bot 0.")


async def test_request_validation_is_one_line_per_problem(
    cli_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await cli("request", "--tool", "", "--prompt", "") == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "approval-bot: invalid request:",
        "--prompt: must not be empty",
        "--tool: must not be empty",
    ], err
    assert await cli("request", "--tool", "x", "--kind", "choice") == 2
    assert capsys.readouterr().err.splitlines()[1:] == [
        "--kind choice: needs --options (a comma-separated list)"
    ]
    assert await cli("request", "--tool", "x", "--kind", "choice", "--options", "a,a") == 2
    assert capsys.readouterr().err.splitlines()[1:] == ["--options: options must be unique"]


async def test_show_a_decided_request_has_no_deadline_ahead(
    cli_env: None, ctx: BotContext, capsys: pytest.CaptureFixture[str]
) -> None:
    request = await submit(ctx, "deploy", deadline_seconds=600)
    assert await cli("show", request.id) == 0
    assert "deadline:" in capsys.readouterr().out
    await ctx.service.decide(request.id, "approve", support.REVIEWER)
    assert await cli("show", request.id) == 0
    out = capsys.readouterr().out
    assert "deadline:" not in out and "(in " not in out


def test_policy_check_says_1_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in (*VARIABLES, "APPROVALS_ENV_FILE"):
        monkeypatch.delenv(name, raising=False)
    one = tmp_path / "one.yaml"
    one.write_text("routes:\n  default: {channel: C0APPROVALS}\n")
    assert main(["policy", "check", str(one)]) == 0
    assert "ok — 1 route, 0 rules" in capsys.readouterr().out


async def interrupt_request_wait(
    env: dict[str, str], ctx: BotContext, delay: float = 0.0
) -> tuple[ApprovalRequest, str]:
    """Run `request --wait 60`, send SIGINT `delay` s after it says it is waiting, and return
    the request it made (after exit 130) with what it printed on stderr after that line."""
    # As from a terminal: SIGINT at its default. A run started in the background by a
    # non-interactive shell (CI, scripts/soak) inherits SIGINT ignored, and so would the CLI.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli.main", "request", "--tool", "deploy", "--wait", "60",
        env=env, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        first = await asyncio.wait_for(proc.stderr.readline(), 30)  # it is waiting now
        assert b"waiting for a decision on apr_" in first, first
        await asyncio.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, rest = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130, rest.decode()
    (created,) = [e for e in await ctx.store.audit_entries() if e.event == "created"]
    return await ctx.store.get(created.request_id), rest.decode()


async def test_ctrl_c_on_request_wait_withdraws_it(api_url: str, ctx: BotContext) -> None:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_", "REDIS"))
    }
    env.update(APPROVALS_URL=api_url, APPROVALS_TOKEN=API_TOKEN)
    request, rest = await interrupt_request_wait(env, ctx)
    assert request.status == "cancelled", "withdrawn, not left pending"
    assert f"withdrew {request.id}" in rest


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3])
async def test_ctrl_c_on_request_wait_over_redis_withdraws_it(
    redis_url: str, ctx: BotContext, delay: float
) -> None:
    """The same over the Redis transport (no APPROVALS_URL): the CLI's own Waiter must give up
    its wait however the cancellation lands (`delay`: right away, while the Waiter subscribes,
    once it waits), so one Ctrl-C withdraws the request and ends the process."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_", "REDIS"))
    }
    env.update(
        REDIS_URL=redis_url, APPROVALS_PREFIX=ctx.keys.prefix, APPROVALS_DEFAULT_CHANNEL="C0A"
    )
    request, rest = await interrupt_request_wait(env, ctx, delay)
    assert request.status == "cancelled", "withdrawn, not left pending"
    assert rest.splitlines() == [f"withdrew {request.id}"], rest


# -- the hook's stderr: one plain line per problem, as a real process -------------------------


async def run_review(env: dict[str, str], *args: str) -> tuple[dict[str, Any], list[str]]:
    """`approval-bot hook claude-code ARGS` as its own process (no logging configured, as an
    agent runs it): its JSON answer and its stderr lines."""
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_", "REDIS"))
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli.main", "hook", "claude-code", *args,
        env={**base, **env}, cwd=REPO, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(hook_input().encode()), 60)
    assert proc.returncode == 0
    return json.loads(out), err.decode().splitlines()


@pytest.mark.parametrize(
    "problem", ["bot unreachable", "wrong token", "no decision in time", "not the bot"]
)
async def test_hook_failures_are_one_plain_line_on_stderr(
    problem: str, api_url: str, ctx: BotContext
) -> None:
    env = {"APPROVALS_URL": api_url, "APPROVALS_TOKEN": API_TOKEN}
    args: tuple[str, ...] = ("--timeout", "30")
    if problem == "bot unreachable":
        with socket.socket() as s:  # a port nobody listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env["APPROVALS_URL"] = f"http://127.0.0.1:{port}"
        expected = (
            f"approval-bot hook: approval bot at http://127.0.0.1:{port} is unreachable: "
            f"cannot connect to 127.0.0.1:{port} (Connection refused); denied"
        )
    elif problem == "wrong token":
        env["APPROVALS_TOKEN"] = UNKNOWN_API_TOKEN
        expected = "approval-bot hook: the bearer token is not valid for this API; denied"
    elif problem == "not the bot":  # an HTTP server, but no approval bot at that path
        env["APPROVALS_URL"] = f"{api_url}/elsewhere"
        expected = (
            f"approval-bot hook: the approval bot at {api_url}/elsewhere answered HTTP 404 "
            "without a decision; denied"
        )
    else:  # long enough for the submit to fit on a loaded machine; nobody decides
        args = ("--timeout", "4")
        expected = "approval-bot hook: no decision on apr_"
    answer, err = await run_review(env, *args)
    decided = answer["hookSpecificOutput"]
    assert decided["permissionDecision"] == "deny", decided
    assert len(err) == 1 and err[0].startswith(expected), err
    reason = decided["permissionDecisionReason"]
    assert "ConnectionKey" not in reason and "Error(" not in reason, reason
    if problem == "no decision in time":
        assert await ctx.store.list_pending() == [], f"withdrawn: {err}"


@pytest.mark.parametrize("dialect", ["claude-code", "codex"])
async def test_hook_over_http_loads_no_aiohttp_pydantic_asyncio_redis_or_slack(
    api_url: str, ctx: BotContext, dialect: str
) -> None:
    """The command hook runs once per gated tool call: with APPROVALS_URL and APPROVALS_TOKEN
    it reads only those, and the call is passed on to the bot's hook endpoint for its agent
    (/hooks/claude-code, /hooks/codex) over http.client (`bot.agents.command_hook.forward`), so
    neither aiohttp nor pydantic(-settings), asyncio, Redis or Slack are imported. Answered
    as usual, in the agent's own words, as the token's principal."""
    heavy = (
        "aiohttp", "pydantic", "pydantic_settings", "asyncio", "redis", "slack_sdk",
        "slack_bolt", "yaml",
    )  # fmt: skip
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('loaded:' + ','.join(m for m in "
        f"{heavy!r} if m in sys.modules), file=sys.stderr))\n"
        "from bot.cli.main import main\n"
        f"sys.argv = ['approval-bot', 'hook', {dialect!r}, '--timeout', '30']\n"
        "sys.exit(main())\n"
    )
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVALS_", "REDIS"))
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code,
        env={**base, "APPROVALS_URL": api_url + "/", "APPROVALS_TOKEN": API_TOKEN},
        cwd=REPO, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    # Codex asks through PermissionRequest (a PreToolUse allow is no output for it).
    event = "PreToolUse" if dialect == "claude-code" else "PermissionRequest"
    talk = asyncio.create_task(proc.communicate(hook_input(event, turn_id="t-1").encode()))
    request = await decide_next(ctx.service, "Bash")
    out, err = await asyncio.wait_for(talk, 60)
    assert proc.returncode == 0
    decided = json.loads(out)["hookSpecificOutput"]
    if dialect == "claude-code":
        assert decided["permissionDecision"] == "allow"
    else:
        assert decided == {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}
    assert request.principal is not None, "asked through the API, as the token's principal"
    assert err.decode().splitlines() == ["loaded:"], err.decode()


async def test_request_allow_for_session_lets_the_reviewer_approve_the_session(
    cli_env: None, ctx: BotContext, capsys: pytest.CaptureFixture[str]
) -> None:
    """`request --allow-for-session`: the request offers the
    reviewer "approve for the session"; without the flag it does not."""
    for flag in (("--allow-for-session",), ()):
        args = ("request", "--tool", f"deploy{len(flag)}", "--session-id", "s-7", "--wait", "0")
        assert await cli(*args, *flag) == 2  # --wait 0: not decided in time
        capsys.readouterr()
    pending = await ctx.store.list_pending()
    offered = {r.event.tool_name: r.config.allow_for_session for r in pending}
    assert offered == {"deploy1": True, "deploy0": False}


@given(budget=st.floats(min_value=1.25, max_value=24 * 3600.0))
def test_the_bot_answers_a_forwarded_hook_before_the_command_gives_up(budget: float) -> None:
    """`forward` waits `budget` seconds for the bot's hook endpoint, which waits
    `time_budget(timeout)` for a decision: the timeout it is given must end that wait with
    room for the answer to come back (at least 0.2 s, up to 1 s)."""
    waits = time_budget(bot_timeout(budget))
    assert budget - min(1.0, budget * 0.2) - 1e-9 <= waits <= budget - 0.2 + 1e-9


def test_help_builds_every_command_group_without_loading_the_runtime() -> None:
    """`--help` and a parse error pay only for the parser: every group in `GROUPS` adds its
    commands (each with a `run`), and none of them imports asyncio, pydantic, Redis,
    aiohttp or Slack to do it."""
    from bot.cli.main import GROUPS

    heavy = ("asyncio", "aiohttp", "pydantic", "redis", "slack_sdk", "slack_bolt", "yaml", "mcp")
    code = (
        "import sys\n"
        "from bot.cli.main import build_parser\n"
        "parser = build_parser()\n"
        "actions = [a for a in parser._actions if a.dest == 'command'][0]\n"
        "missing = sorted(n for n, p in actions.choices.items()\n"
        "                 if n != 'hook' and 'run' not in p._defaults)\n"
        "print(sorted(actions.choices), missing)\n"
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert out.returncode == 0, out.stderr
    commands, loaded = out.stdout.splitlines()
    assert loaded == ""
    assert commands.endswith(" []"), f"commands without a run: {commands}"
    assert len(GROUPS) == len(set(GROUPS)) >= 9
