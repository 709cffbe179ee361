"""Codex specifics: a stable call id for PermissionRequest (no `tool_use_id`), and reasons that
read well after Codex appends ". Command: …"."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from approvals._internal.service import Actor
from approvals.integrations.coding_agents import answer_hook, codex_reason, event_from_codex
from bot.core.context import BotContext


def permission_request(command: str, *, turn: str | None = "turn-1", session: str = "s-1") -> Any:
    payload: dict[str, Any] = {
        "session_id": session,
        "cwd": "/home/u/project",
        "hook_event_name": "PermissionRequest",
        "model": "gpt-5",
        "permission_mode": "default",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "needs network"},
    }
    if turn is not None:
        payload["turn_id"] = turn
    return payload


def test_permission_request_call_id_is_derived_from_session_turn_and_command() -> None:
    first = event_from_codex(permission_request("curl x.io")).call_id
    assert first is not None and first.startswith("hook:")
    assert event_from_codex(permission_request("curl x.io")).call_id == first  # a retry
    others = {
        event_from_codex(permission_request("curl y.io")).call_id,
        event_from_codex(permission_request("curl x.io", turn="turn-2")).call_id,
        event_from_codex(permission_request("curl x.io", session="s-2")).call_id,
    }
    assert first not in others and len(others) == 3


def test_no_turn_means_no_derived_call_id() -> None:
    assert event_from_codex(permission_request("ls", turn=None)).call_id is None


def test_a_tool_use_id_still_wins() -> None:
    payload = {**permission_request("ls"), "hook_event_name": "PreToolUse", "tool_use_id": "c9"}
    assert event_from_codex(payload).call_id == "c9"


async def test_a_retried_permission_request_finds_the_same_request(ctx: BotContext) -> None:
    payload = permission_request("curl x.io")
    first = asyncio.create_task(
        answer_hook("codex", payload, ctx.service.submit, ctx.waiter.wait, timeout=10)
    )
    pending: list[str] = []
    for _ in range(200):
        pending = [r.id for r in await ctx.store.list_pending()]
        if pending:
            break
        await asyncio.sleep(0.02)
    assert len(pending) == 1
    retry = asyncio.create_task(
        answer_hook("codex", payload, ctx.service.submit, ctx.waiter.wait, timeout=10)
    )
    await asyncio.sleep(0.2)
    await ctx.service.decide(pending[0], "deny", Actor("U1"), reason="not today.")
    for out in (await first, await retry):
        assert out == {
            "hookSpecificOutput": {
                "hookEventName": "PermissionRequest",
                "decision": {"behavior": "deny", "message": "Denied by <@U1>: not today"},
            }
        }
    created = [e for e in await ctx.store.audit_entries() if e.event == "created"]
    assert len(created) == 1


async def test_codex_timeout_reason_has_no_trailing_full_stop(ctx: BotContext) -> None:
    payload = {**permission_request("ls"), "hook_event_name": "PreToolUse", "tool_use_id": "t1"}
    out = await answer_hook("codex", payload, ctx.service.submit, ctx.waiter.wait, timeout=0.3)
    assert out is not None
    reason = out["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.endswith("denied by default")
    assert f"{reason}. Command: ls".count("..") == 0


@given(st.text(max_size=60))
@example("\r.")  # found by hypothesis: whitespace before the full stop
def test_codex_reason_never_ends_in_punctuation_codex_would_double(text: str) -> None:
    out = codex_reason(text)
    if text.strip().rstrip(".!;:,。"):
        assert not out.endswith((".", "!", ";", ":", ",", "。"))
        assert text.startswith(out.rstrip()) or text.strip().startswith(out)
    else:
        assert out == text  # nothing but punctuation: left alone, never empty
