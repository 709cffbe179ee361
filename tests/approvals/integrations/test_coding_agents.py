"""Claude Code / Codex hook JSON: the translation tables, the output shapes, and answer_hook."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from approvals._internal.service import Actor
from approvals.errors import ApprovalTimeout, InvalidRequest, StoreUnavailable
from approvals.integrations.coding_agents import (
    answer_hook,
    event_from_claude,
    event_from_codex,
    hook_metadata,
    output_for_request,
    output_for_timeout,
    time_budget,
)
from approvals.models import (
    MAX_EVENT_BYTES,
    ApprovalConfig,
    ApprovalEvent,
    ApprovalRequest,
    Decision,
)
from bot.core.context import BotContext


def claude(tool_name: str, tool_input: Any, **extra: Any) -> dict[str, Any]:
    payload = {
        "session_id": "sess-1",
        "transcript_path": "/home/u/.claude/projects/x/t.jsonl",
        "cwd": "/home/u/project",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool_name,
        "tool_input": tool_input,
        "tool_use_id": "toolu_01ABC",
    }
    payload.update(extra)
    return payload


# -- input ------------------------------------------------------------------------------------

CLAUDE_TABLE = [
    # tool, tool_input, kind, command, path
    ("Bash", {"command": "npm test", "description": "Run tests"}, "command", "npm test", None),
    (
        "Edit",
        {"file_path": "/p/a.py", "old_string": "a", "new_string": "b"},
        "file",
        None,
        "/p/a.py",
    ),
    ("Write", {"file_path": "/p/b.py", "content": "x"}, "file", None, "/p/b.py"),
    ("MultiEdit", {"file_path": "/p/c.py", "edits": []}, "file", None, "/p/c.py"),
    (
        "NotebookEdit",
        {"notebook_path": "/p/n.ipynb", "new_source": "1"},
        "file",
        None,
        "/p/n.ipynb",
    ),
    ("NotebookEdit", {"file_path": "/p/m.ipynb"}, "file", None, "/p/m.ipynb"),
    ("mcp__github__create_issue", {"title": "t"}, "tool", None, None),
    ("WebFetch", {"url": "https://example.com"}, "tool", None, None),
]


@pytest.mark.parametrize(("tool", "tool_input", "kind", "command", "path"), CLAUDE_TABLE)
def test_claude_translation_table(
    tool: str, tool_input: dict[str, Any], kind: str, command: str | None, path: str | None
) -> None:
    event = event_from_claude(claude(tool, tool_input))
    # What a file tool changes is drawn into the context (tests/approvals/internal/
    # test_file_changes.py), always for the file the event names.
    files = event.context.files if event.context else ()
    assert [f.path for f in files] == ([path] if path and tool != "MultiEdit" else [])
    assert event.model_copy(update={"context": None}) == ApprovalEvent(
        kind=kind,
        tool_name=tool,
        arguments=tool_input,
        call_id="toolu_01ABC",
        session_id="sess-1",
        agent="claude-code",
        cwd="/home/u/project",
        command=command,
        path=path,
    )


def test_claude_accepts_other_documented_fields_and_permission_request_has_no_call_id() -> None:
    payload = claude(
        "Bash",
        {"command": "rm -rf node_modules"},
        hook_event_name="PermissionRequest",
        prompt_id="550e8400",
        permission_suggestions=[{"type": "addRules"}],
        effort={"level": "high"},
    )
    del payload["tool_use_id"]
    event = event_from_claude(payload)
    assert event.call_id is None
    assert event.command == "rm -rf node_modules"
    assert hook_metadata(payload) == {
        "hook_event_name": "PermissionRequest",
        "permission_mode": "default",
    }


@pytest.mark.parametrize("tool_input", [["ls"], "ls", None, 3])
def test_non_object_tool_input_is_rejected(tool_input: Any) -> None:
    with pytest.raises(InvalidRequest) as e:
        event_from_claude(claude("Bash", tool_input))
    assert [d["loc"] for d in e.value.details] == [["tool_input"]]
    assert "tool_input" in e.value.message


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (claude("Bash", {}, hook_event_name="PostToolUse"), "hook_event_name"),
        ({k: v for k, v in claude("Bash", {}).items() if k != "tool_name"}, "tool_name"),
        (claude("", {}), "tool_name"),
    ],
)
def test_bad_hook_input_names_the_field(payload: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        event_from_codex(payload)
    assert [d["loc"] for d in e.value.details] == [[field]]


def test_hook_input_must_be_an_object() -> None:
    with pytest.raises(InvalidRequest, match="JSON object, not list"):
        event_from_claude([claude("Bash", {})])


PATCH = "*** Begin Patch\n*** Update File: src/app.py\n@@\n-a\n+b\n*** Add File: b.txt\n+x\n"

CODEX_TABLE = [
    ("Bash", {"command": "cargo test"}, "command", "cargo test", None, None),
    ("apply_patch", {"command": PATCH}, "file", None, "src/app.py", None),
    ("apply_patch", {"command": "garbage"}, "file", None, None, None),
    # Network approvals arrive as Bash: reviewed as the command that wants the network.
    (
        "Bash",
        {"command": "curl x.io", "description": "network-access x.io"},
        "command",
        "curl x.io",
        None,
        None,
    ),
    ("mcp__linear__create", {"title": "t"}, "tool", None, None, None),
]


@pytest.mark.parametrize(("tool", "tool_input", "kind", "command", "path", "perms"), CODEX_TABLE)
def test_codex_translation_table(
    tool: str,
    tool_input: dict[str, Any],
    kind: str,
    command: str | None,
    path: str | None,
    perms: dict[str, Any] | None,
) -> None:
    payload = claude(tool, tool_input, model="gpt-5", turn_id="turn-1", tool_use_id="call_9")
    event = event_from_codex(payload)
    assert (event.kind, event.command, event.path, event.agent, event.call_id) == (
        kind,
        command,
        path,
        "codex",
        "call_9",
    )
    assert event.arguments == tool_input
    if perms is not None:
        assert event.permissions == perms


# -- output -----------------------------------------------------------------------------------


def decided(status: str, decision: Decision | None) -> ApprovalRequest:
    request = ApprovalRequest(
        event=ApprovalEvent(tool_name="Bash", arguments={"command": "ls"}),
        config=ApprovalConfig(kind="input"),
    )
    return request.model_copy(update={"status": status, "decision": decision})


APPROVED = decided("approved", Decision.approve(by="U1", via="slack"))
APPROVED_INPUT = decided("approved", Decision.approve(by="U1", via="slack", input="use --dry-run"))
DENIED = decided("denied", Decision.deny("not on Fridays", by="U2", via="slack"))
EXPIRED = decided("expired", Decision.deny("approval timeout", by="timeout", via="timeout"))
CANCELLED = decided("cancelled", Decision.deny("agent gave up", by="agent", via="api"))
FAILED = decided("error", Decision.error("channel_not_found"))


def pre(decision: str, reason: str, **more: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
            **more,
        }
    }


def perm(behavior: str, message: str | None = None, **top: str) -> dict[str, Any]:
    decision = (
        {"behavior": behavior} if message is None else {"behavior": behavior, "message": message}
    )
    return {
        "hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision},
        **top,
    }


OUTPUT_TABLE = [
    ("claude-code", "PreToolUse", APPROVED, pre("allow", "Approved by <@U1>")),
    (
        "claude-code",
        "PreToolUse",
        APPROVED_INPUT,
        pre(
            "allow",
            "Approved by <@U1>: use --dry-run",
            additionalContext="Approved by <@U1>: use --dry-run",
        ),
    ),
    ("claude-code", "PreToolUse", DENIED, pre("deny", "Denied by <@U2>: not on Fridays")),
    (
        "claude-code",
        "PreToolUse",
        EXPIRED,
        pre("deny", "Approval request expired: approval timeout"),
    ),
    (
        "claude-code",
        "PreToolUse",
        CANCELLED,
        pre("deny", "Approval request was cancelled: agent gave up"),
    ),
    ("claude-code", "PreToolUse", FAILED, pre("deny", "Approval failed: channel_not_found")),
    ("claude-code", "PermissionRequest", APPROVED, perm("allow")),
    (
        "claude-code",
        "PermissionRequest",
        APPROVED_INPUT,
        perm("allow", systemMessage="Approved by <@U1>: use --dry-run"),
    ),
    ("claude-code", "PermissionRequest", DENIED, perm("deny", "Denied by <@U2>: not on Fridays")),
    ("codex", "PreToolUse", APPROVED, None),
    # Codex: reviewer input on an approval reaches it as a system message.
    ("codex", "PreToolUse", APPROVED_INPUT, {"systemMessage": "Approved by <@U1>: use --dry-run"}),
    ("codex", "PreToolUse", DENIED, pre("deny", "Denied by <@U2>: not on Fridays")),
    ("codex", "PermissionRequest", APPROVED, perm("allow")),
    ("codex", "PermissionRequest", DENIED, perm("deny", "Denied by <@U2>: not on Fridays")),
    ("codex", "PermissionRequest", FAILED, perm("deny", "Approval failed: channel_not_found")),
]


@pytest.mark.parametrize(("dialect", "event", "request_", "expected"), OUTPUT_TABLE)
def test_output_table(
    dialect: Any, event: Any, request_: ApprovalRequest, expected: dict[str, Any] | None
) -> None:
    assert output_for_request(dialect, event, request_) == expected


def test_selection_and_policy_approvals_read_well() -> None:
    chose = decided("approved", Decision.approve(by="U1", selection="blue"))
    policy = decided("approved", Decision.approve(by="policy:read-only tools", via="policy"))
    assert output_for_request("claude-code", "PreToolUse", chose) == pre(
        "allow",
        "Approved by <@U1> (choice: blue)",
        additionalContext="Approved by <@U1> (choice: blue)",
    )
    assert output_for_request("claude-code", "PreToolUse", policy) == pre(
        "allow", "Approved by policy:read-only tools"
    )


TIMEOUT_TABLE = [
    (
        "claude-code",
        "PreToolUse",
        "deny",
        pre("deny", "No approval decision within 5 s (request r1); denied by default."),
    ),
    (
        "claude-code",
        "PreToolUse",
        "ask",
        pre("ask", "No approval decision within 5 s (request r1); please decide here."),
    ),
    (
        "claude-code",
        "PermissionRequest",
        "deny",
        perm("deny", "No approval decision within 5 s (request r1); denied by default."),
    ),
    ("claude-code", "PermissionRequest", "ask", None),
    (
        "codex",
        "PreToolUse",
        "deny",
        pre("deny", "No approval decision within 5 s (request r1); denied by default."),
    ),
    ("codex", "PreToolUse", "ask", None),
    ("codex", "PermissionRequest", "ask", None),
    (
        "claude-code",
        "PreToolUse",
        "defer",
        pre(
            "defer",
            "Waiting for a reviewer in Slack (request r1); resume this session once they decide.",
        ),
    ),
    # Defer exists only for Claude Code's PreToolUse: elsewhere it is a deny.
    (
        "claude-code",
        "PermissionRequest",
        "defer",
        perm("deny", "No approval decision within 5 s (request r1); denied by default."),
    ),
    (
        "codex",
        "PreToolUse",
        "defer",
        pre("deny", "No approval decision within 5 s (request r1); denied by default."),
    ),
]


@pytest.mark.parametrize(("dialect", "event", "on_timeout", "expected"), TIMEOUT_TABLE)
def test_timeout_table(
    dialect: Any, event: Any, on_timeout: Any, expected: dict[str, Any] | None
) -> None:
    assert output_for_timeout(dialect, event, on_timeout, 5, "r1") == expected


def test_time_budget_answers_before_the_hook_timeout() -> None:
    assert time_budget(60) == 58
    assert time_budget(5) == 4
    assert 0 < time_budget(1) < 1


# -- answer_hook on the real store and waiter ------------------------------------------------------


async def _pending_id(ctx: BotContext) -> str:
    for _ in range(500):
        pending = await ctx.store.list_pending()
        if pending:
            return pending[0].id
        await asyncio.sleep(0.01)
    raise AssertionError("no pending request appeared")


async def test_run_hook_waits_for_the_reviewer(ctx: BotContext) -> None:
    task = asyncio.create_task(
        answer_hook(
            "claude-code",
            claude("Bash", {"command": "make deploy"}),
            ctx.service.submit,
            ctx.waiter.wait,
            timeout=10,
        )
    )
    request_id = await _pending_id(ctx)
    await asyncio.sleep(0.1)
    assert not task.done()
    await ctx.service.decide(request_id, "deny", Actor("U7"), reason="use staging first")
    assert await asyncio.wait_for(task, 5) == pre("deny", "Denied by <@U7>: use staging first")
    stored = await ctx.store.get(request_id)
    assert (stored.event.kind, stored.event.command, stored.event.call_id) == (
        "command",
        "make deploy",
        "toolu_01ABC",
    )


async def test_run_hook_retry_with_the_same_tool_use_id_reuses_the_request(ctx: BotContext) -> None:
    payload = claude("Bash", {"command": "ls"})
    first = asyncio.create_task(
        answer_hook("claude-code", payload, ctx.service.submit, ctx.waiter.wait, timeout=10)
    )
    request_id = await _pending_id(ctx)
    await ctx.service.decide(request_id, "approve", Actor("U1"))
    assert await first == pre("allow", "Approved by <@U1>")
    again = await answer_hook(
        "claude-code", payload, ctx.service.submit, ctx.waiter.wait, timeout=1
    )
    assert again == pre("allow", "Approved by <@U1>")
    created = [e for e in await ctx.store.audit_entries() if e.event == "created"]
    assert [e.request_id for e in created] == [request_id]  # one request, asked once


async def test_run_hook_timeout_cancels_and_answers_in_time(ctx: BotContext) -> None:
    async def cancel(request_id: str, reason: str) -> ApprovalRequest:
        return (await ctx.service.cancel(request_id, by="hook", reason=reason)).request

    started = time.monotonic()
    out = await answer_hook(
        "claude-code",
        claude("Bash", {"command": "ls"}, hook_event_name="PermissionRequest"),
        ctx.service.submit,
        ctx.waiter.wait,
        timeout=0.3,
        on_timeout="ask",
        cancel=cancel,
    )
    assert out is None
    assert time.monotonic() - started < 2  # generous: a loaded machine schedules late
    (created,) = [e for e in await ctx.store.audit_entries() if e.event == "created"]
    request = await ctx.store.get(created.request_id)
    assert request.status == "cancelled"
    assert request.decision is not None
    assert request.decision.reason == "no decision within 0.3 s; claude-code asked its user instead"


async def test_defer_keeps_the_request_and_the_resumed_hook_gets_the_decision(
    ctx: BotContext,
) -> None:
    """`claude -p` with a deferring hook: the first run answers defer and leaves the request
    pending in Slack; after the reviewer decides, the resumed session's hook (same
    tool_use_id) gets the decision at once."""
    cancelled: list[str] = []

    async def cancel(request_id: str, reason: str) -> ApprovalRequest:
        cancelled.append(request_id)
        return (await ctx.service.cancel(request_id, by="hook", reason=reason)).request

    payload = claude("Bash", {"command": "make deploy"})
    first = await answer_hook(
        "claude-code",
        payload,
        ctx.service.submit,
        ctx.waiter.wait,
        timeout=1.0,
        on_timeout="defer",
        cancel=cancel,
    )
    (pending,) = await ctx.store.list_pending()
    assert first == pre(
        "defer",
        f"Waiting for a reviewer in Slack (request {pending.id}); "
        "resume this session once they decide.",
    )
    assert cancelled == []
    await ctx.service.decide(pending.id, "approve", Actor("U5"))
    resumed = await answer_hook(
        "claude-code",
        payload,
        ctx.service.submit,
        ctx.waiter.wait,
        timeout=1.0,
        on_timeout="defer",
        cancel=cancel,
    )
    assert resumed == pre("allow", "Approved by <@U5>")
    created = [e for e in await ctx.store.audit_entries() if e.event == "created"]
    assert [e.request_id for e in created] == [pending.id]  # one request, asked once


async def test_defer_where_the_agent_cannot_defer_denies_and_withdraws(ctx: BotContext) -> None:
    async def cancel(request_id: str, reason: str) -> ApprovalRequest:
        return (await ctx.service.cancel(request_id, by="hook", reason=reason)).request

    out = await answer_hook(
        "codex",
        claude("Bash", {"command": "ls"}),
        ctx.service.submit,
        ctx.waiter.wait,
        timeout=1.0,
        on_timeout="defer",
        cancel=cancel,
    )
    assert out is not None
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert await ctx.store.list_pending() == []  # withdrawn: nobody approves a call gone by


async def test_a_decision_that_wins_the_race_with_the_cancel_is_used(ctx: BotContext) -> None:
    async def late_cancel(request_id: str, reason: str) -> ApprovalRequest:
        await ctx.service.decide(request_id, "approve", Actor("U3"), input="ok, go")
        return (await ctx.service.cancel(request_id, reason=reason)).request

    async def no_decision_in_time(request_id: str, limit: float) -> ApprovalRequest:
        raise ApprovalTimeout(f"no decision on {request_id}")  # the wait ran out, at once

    # A budget with a whole second for the withdraw: a loaded machine still fits the race in.
    out = await answer_hook(
        "claude-code",
        claude("Bash", {"command": "ls"}),
        ctx.service.submit,
        no_decision_in_time,
        timeout=10,
        cancel=late_cancel,
    )
    assert out == pre(
        "allow", "Approved by <@U3>: ok, go", additionalContext="Approved by <@U3>: ok, go"
    )


async def test_run_hook_fails_closed_when_the_store_is_down() -> None:
    async def submit(event: ApprovalEvent) -> ApprovalRequest:
        raise StoreUnavailable("Redis is unreachable: connection refused")

    async def wait(request_id: str, limit: float) -> ApprovalRequest:
        raise AssertionError("never waits")

    out = await answer_hook("codex", claude("Bash", {"command": "ls"}), submit, wait, timeout=1)
    # The problem, without internals (the store's address stays in the bot's log).
    assert out == pre(
        "deny", "Approval service error: the approval store is unavailable; try again"
    )


async def test_run_hook_denies_bad_input_without_storing(ctx: BotContext) -> None:
    out = await answer_hook(
        "claude-code", claude("Bash", ["ls"]), ctx.service.submit, ctx.waiter.wait, timeout=1
    )
    assert out is not None and out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "tool_input" in out["hookSpecificOutput"]["permissionDecisionReason"]
    bad_permission = claude("Bash", "ls", hook_event_name="PermissionRequest")
    out = await answer_hook(
        "claude-code", bad_permission, ctx.service.submit, ctx.waiter.wait, timeout=1
    )
    assert out is not None and out["hookSpecificOutput"]["decision"]["behavior"] == "deny"
    assert await ctx.store.audit_entries() == []


async def test_run_hook_answers_within_its_budget_when_submit_or_cancel_hang(
    ctx: BotContext,
) -> None:
    """The agent treats a hook that outlives its timeout as no decision (the tool may run):
    a hanging submit or withdraw must not make the answer late."""

    async def hang(*args: Any) -> ApprovalRequest:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    started = time.monotonic()
    out = await answer_hook(
        "claude-code", claude("Bash", {"command": "ls"}), hang, ctx.waiter.wait, timeout=1
    )
    # A generous bound (a loaded machine schedules late); a hang would never return.
    assert time.monotonic() - started < 2
    assert out is not None and out["hookSpecificOutput"]["permissionDecision"] == "deny"

    started = time.monotonic()
    out = await answer_hook(
        "codex",
        claude("Bash", {"command": "ls"}, tool_use_id="toolu_hang"),
        ctx.service.submit,
        ctx.waiter.wait,
        timeout=1,
        cancel=hang,
    )
    assert time.monotonic() - started < 2
    assert out is not None and out["hookSpecificOutput"]["permissionDecision"] == "deny"


async def test_run_hook_denies_a_call_it_cannot_review(ctx: BotContext) -> None:
    too_long = claude("Bash", {"command": "x" * (MAX_EVENT_BYTES + 1)})
    out = await answer_hook("codex", too_long, ctx.service.submit, ctx.waiter.wait, timeout=1)
    assert out is not None and out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert await ctx.store.audit_entries() == []


async def test_report_tells_each_problem_in_one_plain_line(ctx: BotContext) -> None:
    """The command hook prints what `report` is told on stderr: a failed withdrawal, a store
    that is down, input refused — each one line of plain words."""
    lines: list[str] = []

    async def broken_cancel(request_id: str, reason: str) -> ApprovalRequest:
        raise StoreUnavailable("the approval store (Redis) is unavailable; try again")

    out = await answer_hook(
        "claude-code",
        claude("Bash", {"command": "ls"}, tool_use_id="toolu_report"),
        ctx.service.submit,
        ctx.waiter.wait,
        timeout=0.5,
        cancel=broken_cancel,
        report=lines.append,
    )
    assert out is not None and out["hookSpecificOutput"]["permissionDecision"] == "deny"
    (pending,) = await ctx.store.list_pending()
    assert lines == [
        f"could not withdraw {pending.id} (it stays pending until its deadline): "
        "the approval store (Redis) is unavailable; try again",
        f"no decision on {pending.id} within 0.5 s; deny",
    ]

    lines.clear()

    async def down(event: ApprovalEvent) -> ApprovalRequest:
        raise StoreUnavailable("the approval store (Redis) is unavailable; try again")

    await answer_hook("codex", claude("Bash", {"command": "ls"}), down, ctx.waiter.wait,
                      timeout=1, report=lines.append)  # fmt: skip
    assert lines == ["the approval store (Redis) is unavailable; try again; denied"]

    lines.clear()
    await answer_hook("codex", {"hook_event_name": "PreToolUse"}, down, ctx.waiter.wait,
                      timeout=1, report=lines.append)  # fmt: skip
    assert len(lines) == 1 and lines[0].endswith("; denied") and "Traceback" not in lines[0]


# -- approval_context: the agent's reason and the files as its hook read them ----------------


def test_the_context_field_gives_the_reason_and_a_diff_against_the_file() -> None:
    from approvals.integrations.coding_agents import CONTEXT_FIELD

    edit = {"file_path": "src/app.py", "old_string": "DEBUG = True", "new_string": "DEBUG = False"}
    context = {
        "reason": "Debug mode leaks stack traces in production.",
        "user_request": "harden the prod config",
        "files": [{"path": "src/app.py", "exists": True, "text": "import os\nDEBUG = True\n"}],
    }
    event = event_from_claude(claude("Edit", edit, **{CONTEXT_FIELD: context}))
    assert event.context is not None
    assert event.context.reason == "Debug mode leaks stack traces in production."
    assert event.context.user_request == "harden the prod config"
    (change,) = event.context.files
    assert change.basis == "file" and change.diff.startswith("@@ -1,2 +1,2 @@\n import os\n")
    # Not part of what is decided: the same call without it has the same fingerprint.
    plain = event_from_claude(claude("Edit", edit))
    assert ApprovalRequest(event=event).fingerprint == ApprovalRequest(event=plain).fingerprint


@pytest.mark.parametrize(
    "context",
    [
        "a string",
        ["a", "list"],
        {"reason": 5, "user_request": {"x": 1}, "files": "nope"},
        {"files": [1, None, {"path": 7}, {"path": "src/app.py", "text": 9, "note": ["x"]}]},
        {"reason": "   ", "user_request": ""},
        {"reason": "r" * 100_000},
    ],
)
def test_a_malformed_context_is_left_out_never_a_deny(context: Any) -> None:
    from approvals.integrations.coding_agents import CONTEXT_FIELD

    edit = {"file_path": "src/app.py", "old_string": "a", "new_string": "b"}
    event = event_from_claude(claude("Edit", edit, **{CONTEXT_FIELD: context}))
    assert event.tool_name == "Edit" and event.arguments == edit
    assert event.context is not None and len(event.context.files) == 1  # from the call alone
    assert event.context.reason is None or len(event.context.reason) <= 2000


async def test_answer_hook_with_a_malformed_context_gets_the_reviewers_answer(
    ctx: BotContext,
) -> None:
    from approvals.integrations.coding_agents import CONTEXT_FIELD

    payload = claude("Bash", {"command": "make deploy"}, **{CONTEXT_FIELD: {"files": {"x": 1}}})

    async def submit(event: ApprovalEvent) -> ApprovalRequest:
        return await ctx.service.submit(event, ApprovalConfig(deadline_seconds=30))

    async def wait(request_id: str, seconds: float) -> ApprovalRequest:
        return await ctx.waiter.wait(request_id, seconds)

    async def approve_when_asked() -> None:
        for _ in range(100):
            pending = await ctx.store.list_pending()
            if pending:
                await ctx.service.decide(pending[0].id, "approve", Actor("U0REVIEWER"))
                return
            await asyncio.sleep(0.05)

    reviewer = asyncio.create_task(approve_when_asked())
    output = await answer_hook("claude-code", payload, submit, wait, timeout=20)
    await reviewer
    assert output is not None
    assert output["hookSpecificOutput"]["permissionDecision"] == "allow"
