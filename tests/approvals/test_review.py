"""The hook protocol: results, default allows, dispatch by kind, async refs, failing closed."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from approvals import review as hooks
from approvals.models import ApprovalEvent, Decision, EventKind
from approvals.review import (
    Allow,
    Async,
    AwaitResult,
    Deny,
    ReviewPlugin,
    ReviewPluginLike,
    ReviewResult,
    StaticPolicyPlugin,
    run_review,
    verdict_from_decision,
)

KINDS: list[EventKind] = ["tool", "command", "file", "permissions"]


def event(kind: EventKind = "tool", **fields: Any) -> ApprovalEvent:
    return ApprovalEvent(kind=kind, tool_name=fields.pop("tool_name", "deploy"), **fields)


class Recorder(ReviewPlugin):
    """Denies with the name of the callback that ran, recording what it was given."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    async def _answer(self, name: str, context: dict[str, Any], opts: Mapping[str, Any]) -> Deny:
        self.seen.append((name, context, dict(opts)))
        return Deny(name)

    async def review_tool(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return await self._answer("review_tool", context, opts)

    async def review_command(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return await self._answer("review_command", context, opts)

    async def review_file(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return await self._answer("review_file", context, opts)

    async def review_permissions(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return await self._answer("review_permissions", context, opts)


class AsyncHook(ReviewPlugin):
    """Returns an async ref, then answers `await_decision` with a scripted result."""

    def __init__(self, result: AwaitResult | Exception, delay: float = 0.0) -> None:
        self.result = result
        self.delay = delay
        self.awaited: list[tuple[Any, float | None]] = []

    async def review_tool(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return Async(ref=f"ref-{event.call_id}", metadata={"channel": "C1"})

    async def await_decision(self, ref: Any, timeout: float | None) -> AwaitResult:  # noqa: ASYNC109
        self.awaited.append((ref, timeout))
        await asyncio.sleep(self.delay)
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


@pytest.mark.parametrize("kind", KINDS)
async def test_base_hook_allows_every_kind(kind: EventKind) -> None:
    assert await run_review(ReviewPlugin(), event(kind), {}, 1.0) == Allow()


@pytest.mark.parametrize("kind", KINDS)
async def test_run_hook_dispatches_on_kind(kind: EventKind) -> None:
    hook = Recorder()
    verdict = await run_review(hook, event(kind), {"thread": "t1"}, 1.0, opts={"strict": True})
    assert verdict == Deny(f"review_{kind}")
    assert hook.seen == [(f"review_{kind}", {"thread": "t1"}, {"strict": True})]


async def test_unimplemented_callbacks_allow_for_a_duck_typed_hook() -> None:
    class OnlyTools:
        async def review_tool(
            self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
        ) -> ReviewResult:
            return Deny("tools are off")

    hook = OnlyTools()
    assert isinstance(hook, ReviewPluginLike)
    assert await run_review(hook, event("tool")) == Deny("tools are off")
    for kind in ("command", "file", "permissions"):
        assert await run_review(hook, event(kind)) == Allow()


async def test_sync_implementations_are_accepted_and_run_off_the_loop() -> None:
    loop_thread = threading.get_ident()

    class SyncHook:
        def __init__(self) -> None:
            self.threads: list[int] = []

        def prepare(self, event: ApprovalEvent, context: dict[str, Any]) -> dict[str, Any]:
            self.threads.append(threading.get_ident())
            return {**context, "who": "sync"}

        def review_tool(
            self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
        ) -> ReviewResult:
            self.threads.append(threading.get_ident())
            return Async(context["who"])

        def await_decision(self, ref: Any, timeout: float | None) -> AwaitResult:
            time.sleep(0.01)  # blocking is fine: this runs in a worker thread
            self.threads.append(threading.get_ident())
            return AwaitResult.decided(Deny(f"{ref} says no"))

    hook = SyncHook()
    assert await run_review(hook, event(), {}, 1.0) == Deny("sync says no")
    assert len(hook.threads) == 3
    assert loop_thread not in hook.threads


async def test_prepare_augments_the_context_the_review_sees() -> None:
    class Preparing(Recorder):
        async def prepare(self, event: ApprovalEvent, context: dict[str, Any]) -> dict[str, Any]:
            return {**context, "channel": "#approvals", "tool": event.tool_name}

    hook = Preparing()
    original = {"thread": "t1"}
    await run_review(hook, event(), original, 1.0)
    assert hook.seen[0][1] == {"thread": "t1", "channel": "#approvals", "tool": "deploy"}
    assert original == {"thread": "t1"}, "the caller's mapping is not mutated"


async def test_a_failing_prepare_denies_with_the_error() -> None:
    class Broken(Recorder):
        async def prepare(self, event: ApprovalEvent, context: dict[str, Any]) -> dict[str, Any]:
            raise RuntimeError("no channel configured")

    hook = Broken()
    assert await run_review(hook, event()) == Deny("no channel configured", cause="error")
    assert hook.seen == [], "no review after a failed prepare"


async def test_a_raising_review_denies_with_the_error_text() -> None:
    class Raising(ReviewPlugin):
        async def review_tool(
            self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
        ) -> ReviewResult:
            raise ConnectionError("slack unreachable")

    assert await run_review(Raising(), event()) == Deny("slack unreachable", cause="error")


async def test_an_unexpected_review_value_denies() -> None:
    class Sloppy:
        async def review_tool(self, event: Any, context: Any, opts: Any) -> Any:
            return True

    verdict = await run_review(Sloppy(), event())
    assert isinstance(verdict, Deny)
    assert verdict.cause == "error"
    assert "returned True" in verdict.reason


async def test_allow_options_pass_through_unchanged() -> None:
    granted = Allow(
        for_session=True,
        execpolicy_amendment=("git", "push"),
        grant_root="/srv/app",
        permissions={"network": {"enabled": True}},
        scope="session",
    )

    class Granting(ReviewPlugin):
        async def review_permissions(
            self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
        ) -> ReviewResult:
            return granted

    verdict = await run_review(Granting(), event("permissions", permissions={"network": {}}))
    assert verdict is granted


async def test_async_ref_is_awaited_with_the_timeout() -> None:
    decision = Decision.approve(by="U1", via="slack", input="v2.3.1")
    hook = AsyncHook(AwaitResult.decided(decision))
    verdict = await run_review(hook, event(call_id="c9"), {}, 12.5)
    assert verdict == Allow(decision=decision)
    assert isinstance(verdict, Allow) and verdict.decision is not None
    assert verdict.decision.input == "v2.3.1"
    assert hook.awaited == [("ref-c9", 12.5)]


async def test_awaited_denial_and_for_session_map_from_the_decision() -> None:
    denied = await run_review(AsyncHook(AwaitResult.decided(Decision.deny("too risky"))), event())
    assert isinstance(denied, Deny)
    assert (denied.reason, denied.cause) == ("too risky", "denied")
    session = await run_review(
        AsyncHook(AwaitResult.decided(Decision.approve(for_session=True))), event()
    )
    assert isinstance(session, Allow) and session.for_session is True


async def test_await_timeout_is_a_denial_approval_timeout() -> None:
    verdict = await run_review(AsyncHook(AwaitResult.timed_out()), event(), {}, 0.1)
    assert verdict == Deny("approval timeout", cause="timeout")


async def test_await_error_is_a_denial_carrying_the_error_text() -> None:
    verdict = await run_review(AsyncHook(AwaitResult.failed("redis is down")), event(), {}, 1.0)
    assert verdict == Deny("redis is down", cause="error")


async def test_await_raising_is_a_denial_carrying_the_error_text() -> None:
    verdict = await run_review(AsyncHook(OSError("connection reset")), event(), {}, 1.0)
    assert verdict == Deny("connection reset", cause="error")


async def test_awaited_error_decision_is_an_error_denial() -> None:
    failure = Decision.error("slack post failed")
    verdict = await run_review(AsyncHook(AwaitResult.decided(failure)), event(), {}, 1.0)
    assert verdict == Deny("slack post failed", cause="error", decision=failure)


async def test_an_await_that_ignores_its_timeout_is_cut_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hooks, "AWAIT_GRACE_SECONDS", 0.05)
    hook = AsyncHook(AwaitResult.decided(Decision.approve()), delay=30)
    started = time.monotonic()
    verdict = await run_review(hook, event(), {}, 0.05)
    assert verdict == Deny("approval timeout", cause="timeout")
    assert time.monotonic() - started < 5


async def test_async_without_await_decision_denies() -> None:
    class Forgetful(ReviewPlugin):
        async def review_tool(
            self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
        ) -> ReviewResult:
            return Async("r1")

    verdict = await run_review(Forgetful(), event(), {}, 1.0)
    assert isinstance(verdict, Deny) and verdict.cause == "error"
    assert "does not implement await_decision" in verdict.reason


async def test_await_result_with_no_decision_denies() -> None:
    verdict = await run_review(AsyncHook(AwaitResult(status="decision")), event(), {}, 1.0)
    assert isinstance(verdict, Deny) and verdict.cause == "error"


@pytest.mark.parametrize("kind", KINDS)
async def test_static_policy_hook(kind: EventKind) -> None:
    assert await run_review(StaticPolicyPlugin("allow"), event(kind)) == Allow()
    assert await run_review(StaticPolicyPlugin("deny", "frozen"), event(kind)) == Deny("frozen")
    assert await run_review(StaticPolicyPlugin("deny"), event(kind)) == Deny("denied by policy")


def test_static_policy_hook_rejects_other_decisions() -> None:
    with pytest.raises(ValueError, match="'allow' or 'deny'"):
        StaticPolicyPlugin("maybe")  # type: ignore[arg-type]


def test_results_are_plain_values() -> None:
    assert Allow() == Allow(for_session=False)
    assert Deny("x") != Deny("x", cause="timeout")
    assert Async("r").metadata == {}
    decision = Decision.deny()
    assert verdict_from_decision(decision) == Deny("denied by reviewer", decision=decision)
    assert isinstance(ReviewPlugin(), ReviewPluginLike)
    assert not isinstance(object(), ReviewPluginLike)
