"""A hook with too little time, and a submit cut off in flight: nothing is left approvable.

The hook counts its budget from the agent's clock (the process spawn). A submit can reach
Redis and then be cut off by that budget before its id comes back: the agent is told "deny"
while a request with live Slack buttons would stay pending. So: with too little left, the
hook does not submit at all; when a submit is cut off, the hook withdraws whatever its call
id made; and a request a failed withdrawal leaves ends with the hook's budget.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from approvals._internal.policy_file import default_policy
from approvals._internal.service import ApprovalService
from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import WITHDRAWN_IN_FLIGHT, ApprovalStore
from approvals._internal.store.waiting import Waiter
from approvals.errors import CallIdConflict, StoreUnavailable
from approvals.integrations.coding_agents import (
    MIN_ASK_SECONDS,
    answer_hook,
    time_budget,
    withdraw_time,
)
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest
from bot.core.context import BotContext
from tests.support import delete_prefix


def claude(tool_use_id: str = "toolu_cut", **extra: Any) -> dict[str, Any]:
    return {
        "session_id": "sess-cut",
        "cwd": "/repo",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "make deploy"},
        "tool_use_id": tool_use_id,
        **extra,
    }


def codex_permission_request() -> dict[str, Any]:
    """Codex PermissionRequest without a turn: no call id of its own."""
    return {
        "session_id": "sess-cx",
        "cwd": "/repo",
        "hook_event_name": "PermissionRequest",
        "tool_name": "Bash",
        "tool_input": {"command": "curl example.com"},
    }


Submit = Callable[[ApprovalEvent], Awaitable[ApprovalRequest]]


def stalls_after_landing(service: ApprovalService, landed: list[str]) -> Submit:
    """A submit whose create reaches Redis and whose answer then never comes back (a reply
    lost on a loaded machine): only the budget ends it."""

    async def submit(event: ApprovalEvent) -> ApprovalRequest:
        request = await service.submit(event, ApprovalConfig(deadline_seconds=60))
        landed.append(request.id)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return submit


def hook_parts(service: ApprovalService, principal: str | None = None) -> dict[str, Any]:
    """`cancel` and `cancel_call` as the hook's callers give them (principal: whose ids)."""

    async def cancel(request_id: str, reason: str) -> ApprovalRequest:
        return (await service.cancel(request_id, by=principal, reason=reason, via="hook")).request

    async def cancel_call(call_id: str, reason: str) -> ApprovalRequest | None:
        found = await service.cancel_call(
            call_id, principal=principal, by=principal, reason=reason, via="hook"
        )
        return None if found is None else found.request

    return {"cancel": cancel, "cancel_call": cancel_call}


async def never_waited(request_id: str, limit: float) -> ApprovalRequest:
    raise AssertionError("the hook never learned an id to wait on")


# -- no time left: nothing submitted ---------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "on_timeout", "expected"),
    [
        ("claude-code", "deny", "deny"),
        ("claude-code", "defer", "deny"),  # nothing to come back to
        ("claude-code", "ask", "ask"),
        ("codex", "deny", "deny"),
        ("codex", "ask", None),  # Codex: no output, its own approval flow
    ],
)
async def test_too_little_budget_answers_at_once_and_submits_nothing(
    ctx: BotContext, dialect: Any, on_timeout: Any, expected: str | None
) -> None:
    asked: list[ApprovalEvent] = []

    async def submit(event: ApprovalEvent) -> ApprovalRequest:
        asked.append(event)
        return await ctx.service.submit(event)

    lines: list[str] = []
    out = await answer_hook(
        dialect,
        claude(),
        submit,
        never_waited,
        timeout=MIN_ASK_SECONDS - 0.01,
        on_timeout=on_timeout,
        report=lines.append,
        **hook_parts(ctx.service),
    )
    assert asked == []
    assert await ctx.store.audit_entries() == []  # not one request written, nothing posted
    if expected is None:
        assert out is None
    else:
        assert out is not None
        specific = out["hookSpecificOutput"]
        assert specific["permissionDecision"] == expected
        assert specific["permissionDecisionReason"].startswith("No time left to ask a reviewer")
    assert len(lines) == 1 and lines[0].startswith("no time left to ask a reviewer")


# -- a submit cut off in flight is withdrawn by its call id ----------------------------------


async def test_a_submit_cut_off_after_it_landed_is_withdrawn(ctx: BotContext) -> None:
    landed: list[str] = []
    lines: list[str] = []
    out = await answer_hook(
        "claude-code",
        claude(),
        stalls_after_landing(ctx.service, landed),
        never_waited,
        timeout=3.0,  # 0.3 s kept back for the withdrawal: room on a loaded machine
        report=lines.append,
        **hook_parts(ctx.service),
    )
    assert out == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "No approval decision within 3 s; denied by default.",
        }
    }
    (request_id,) = landed
    found = await ctx.store.get(request_id)
    assert found.status == "cancelled"
    assert found.decision is not None and "cut off" in (found.decision.reason or "")
    assert await ctx.store.list_pending() == []
    assert lines == ["no decision within 3 s; deny"]


async def test_a_call_without_its_own_call_id_is_found_and_withdrawn(ctx: BotContext) -> None:
    """Codex PermissionRequest without a turn has no stable call id: the hook gives it one,
    so a cut-off submit can still be found."""
    landed: list[str] = []
    out = await answer_hook(
        "codex",
        codex_permission_request(),
        stalls_after_landing(ctx.service, landed),
        never_waited,
        timeout=3.0,
        **hook_parts(ctx.service),
    )
    assert out is not None
    assert out["hookSpecificOutput"]["decision"]["behavior"] == "deny"
    (request_id,) = landed
    found = await ctx.store.get(request_id)
    assert found.event.call_id is not None and found.event.call_id.startswith("hook:")
    assert found.status == "cancelled"


async def test_a_submit_that_failed_after_landing_is_withdrawn(ctx: BotContext) -> None:
    landed: list[str] = []

    async def submit(event: ApprovalEvent) -> ApprovalRequest:
        request = await ctx.service.submit(event, ApprovalConfig(deadline_seconds=60))
        landed.append(request.id)
        raise StoreUnavailable("the reply was lost")

    lines: list[str] = []
    out = await answer_hook(
        "claude-code",
        claude(),
        submit,
        never_waited,
        timeout=3.0,
        report=lines.append,
        **hook_parts(ctx.service),
    )
    assert out is not None and out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert (await ctx.store.get(landed[0])).status == "cancelled"
    assert lines == ["the reply was lost; denied"]


async def test_a_refused_submit_withdraws_nothing(ctx: BotContext) -> None:
    """A call id already used for another call is refused: that other request is not ours to
    withdraw (it stays as it was)."""
    other = await ctx.service.submit(
        ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}, call_id="toolu_cut")
    )
    assert other.is_pending
    refused: list[BaseException] = []

    async def submit(event: ApprovalEvent) -> ApprovalRequest:
        try:
            return await ctx.service.submit(event)
        except CallIdConflict as e:
            refused.append(e)
            raise

    out = await answer_hook(
        "claude-code", claude(), submit, never_waited, timeout=3.0, **hook_parts(ctx.service)
    )
    assert out is not None and out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert len(refused) == 1
    assert (await ctx.store.get(other.id)).status == "pending"


async def test_a_hook_cancelled_in_flight_withdraws_what_it_made(ctx: BotContext) -> None:
    """The http hook's client went away mid-submit: nobody reads the answer, and nothing is
    left approvable."""
    landed: list[str] = []
    in_flight = asyncio.Event()

    async def submit(event: ApprovalEvent) -> ApprovalRequest:
        request = await ctx.service.submit(event, ApprovalConfig(deadline_seconds=60))
        landed.append(request.id)
        in_flight.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    run = asyncio.create_task(
        answer_hook(
            "claude-code", claude(), submit, never_waited, timeout=60.0, **hook_parts(ctx.service)
        )
    )
    await in_flight.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert (await ctx.store.get(landed[0])).status == "cancelled"


async def test_cancel_call_is_per_principal_and_leaves_decisions(ctx: BotContext) -> None:
    event = ApprovalEvent(tool_name="deploy", arguments={}, call_id="c-1")
    mine = await ctx.service.submit(event, principal="alice")
    assert await ctx.service.cancel_call("c-1", principal="bob") is None  # not bob's call id
    assert await ctx.service.cancel_call("c-unknown", principal="alice") is None
    assert (await ctx.store.get(mine.id)).status == "pending"
    done = await ctx.service.cancel_call("c-1", principal="alice", by="alice", reason="gone")
    assert done is not None and done.status == "decided"
    assert done.request.id == mine.id and done.request.status == "cancelled"
    again = await ctx.service.cancel_call("c-1", principal="alice")
    assert again is not None and again.status == "closed"  # already ended: unchanged


async def test_a_create_landing_after_its_withdrawal_is_born_cancelled(ctx: BotContext) -> None:
    """The submit was cut off while still on its way: the withdrawal finds nothing, and the
    create that lands after it must not leave an approvable request (nor a Slack post)."""
    assert await ctx.service.cancel_call("c-late", principal="alice", reason="cut off") is None
    event = ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}, call_id="c-late")
    late = await ctx.service.submit(event, principal="alice")
    assert late.status == "cancelled"
    assert late.decision is not None and late.decision.reason == WITHDRAWN_IN_FLIGHT
    stored = await ctx.store.get(late.id)
    assert stored.status == "cancelled" and stored.message is None
    assert await ctx.store.list_pending() == []
    posts = await ctx.redis.xrange(ctx.store.keys.outbox)
    assert [f for _, f in posts if f.get(b"id", f.get("id")) in (late.id, late.id.encode())] == []
    # The same call again (a client's retry) gets that request back, still cancelled.
    again = await ctx.service.submit(event, principal="alice")
    assert again.id == late.id and again.status == "cancelled"
    assert await ctx.service.cancel_call("c-late", principal="alice") is not None
    # The mark is alice's: bob's call with the same id is his own, and stays pending.
    bobs = await ctx.service.submit(event, principal="bob")
    assert bobs.is_pending and bobs.id != late.id


async def test_a_withdrawal_racing_the_create_leaves_nothing_approvable(ctx: BotContext) -> None:
    """cancel_call and the create it races, started together many times: whichever lands
    first, the request ends cancelled."""

    async def one(n: int) -> None:
        event = ApprovalEvent(tool_name="deploy", arguments={"n": n}, call_id=f"race-{n}")
        created, _ = await asyncio.gather(
            ctx.service.submit(event, principal="alice"),
            ctx.service.cancel_call(f"race-{n}", principal="alice", reason="cut off"),
        )
        assert (await ctx.store.get(created.id)).status == "cancelled", n

    await asyncio.gather(*(one(n) for n in range(40)))
    assert await ctx.store.list_pending() == []


# -- the property: never allow unasked, never a pending request past the budget --------------


async def _one_hook(
    redis_url: str,
    age: float,
    hook_timeout: float,
    before: float,
    after: float,
    on_timeout: Any,
) -> None:
    client = connect(redis_url, max_connections=8, client_name="approval-bot-test")
    keys = Keys(prefix=f"test-{uuid.uuid4().hex[:10]}")
    store = ApprovalStore(client, keys)
    service = ApprovalService(store, default_policy("C0APPROVALS"))
    waiter = Waiter(client, keys, store=store)
    await waiter.start()
    try:
        loop = asyncio.get_running_loop()
        budget = time_budget(hook_timeout) - age  # what `approval-bot hook` gives answer_hook
        end = loop.time() + budget
        hook_started = store.now()

        async def submit(event: ApprovalEvent) -> ApprovalRequest:
            # As the callers do: the deadline is what is left of the budget at the submit.
            config = ApprovalConfig(deadline_seconds=max(end - loop.time(), 0.05))
            await asyncio.sleep(before)  # on its way: cut off here, it never lands
            request = await service.submit(event, config)
            await asyncio.sleep(after)  # landed; the answer is slow to come back
            return request

        out = await answer_hook(
            "claude-code",
            claude(),
            submit,
            waiter.wait,
            timeout=max(budget, 0.05),
            on_timeout=on_timeout,
            **hook_parts(service),
        )
        specific = (out or {}).get("hookSpecificOutput", {})
        assert specific.get("permissionDecision") != "allow"  # nobody approved anything
        created = [e.request_id for e in await store.audit_entries() if e.event == "created"]
        if budget < MIN_ASK_SECONDS:
            assert created == []  # no time to ask: nothing asked
        assert len(created) <= 1
        allowance = withdraw_time(max(budget, 0.05)) + 0.5  # + the submit's own latency
        for request_id in created:
            request = await store.get(request_id)
            if specific.get("permissionDecision") == "defer":
                assert request.is_pending  # the agent comes back for it, by its id
                assert request_id in specific["permissionDecisionReason"]
                continue
            # Withdrawn, or at worst due when the hook's budget (+ allowance) is over.
            assert request.status == "cancelled" or (
                request.deadline_at is not None
                and request.deadline_at <= hook_started + timedelta(seconds=budget + allowance)
            ), (request.status, request.deadline_at, hook_started, budget)
    finally:
        await waiter.stop()
        await delete_prefix(client, keys)
        await client.aclose()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    age=st.sampled_from([0.0, 0.3, 0.55, 0.7, 0.79, 2.0, 600.0])
    | st.floats(min_value=0, max_value=1.2, allow_nan=False),
    hook_timeout=st.floats(min_value=1.0, max_value=1.5, allow_nan=False),
    before=st.sampled_from([0.0, 0.05, 0.3, 1.5]),
    after=st.sampled_from([0.0, 0.05, 0.3, 1.5]),
    on_timeout=st.sampled_from(["deny", "ask", "defer"]),
)
def test_the_hook_never_allows_unasked_nor_leaves_a_live_request_past_its_budget(
    redis_url: str, age: float, hook_timeout: float, before: float, after: float, on_timeout: Any
) -> None:
    """Over the agent's clock at the spawn (age), the hook timeout and a submit slowed before
    or after it lands. Slow by design (real time: up to ~1.2 s an example, 12 examples): the
    race is between real clocks."""
    asyncio.run(_one_hook(redis_url, age, hook_timeout, before, after, on_timeout))
