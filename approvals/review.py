"""The review-plugin protocol (docs/ARCHITECTURE.md): review results, the `ReviewPlugin` base class
and `run_review`.

A review plugin reviews one `ApprovalEvent` and answers at once (`Allow` / `Deny`) or
later (`Async(ref)`, then `await_decision(ref, timeout)`). `run_review` drives a
plugin through one event and always ends in `Allow` or `Deny`: it fails closed,
so a plugin that raises, returns nonsense or never answers denies the call.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from approvals._internal.questions import agent_text
from approvals.models import ApprovalEvent, Decision

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Reason of the denial an await timeout turns into.
TIMEOUT_REASON = "approval timeout"
#: How long past its own timeout `run_review` lets `await_decision` run before giving up on it.
AWAIT_GRACE_SECONDS = 1.0


@dataclass(frozen=True)
class Allow:
    """Let the call go ahead, optionally widening what is granted.

    `for_session`: the same call needs no review again this session;
    `execpolicy_amendment`: command prefix to add to the exec policy;
    `grant_root`: a writable root granted for the session (file events);
    `permissions` + `scope`: the permissions granted and for how long (permissions events).
    `decision` is the reviewer's decision behind this allow, when there was one
    (it carries who, when, and any typed input or chosen selection).
    """

    for_session: bool = False
    execpolicy_amendment: tuple[str, ...] | None = None
    grant_root: str | None = None
    permissions: Mapping[str, Any] | None = None
    scope: str | None = None
    decision: Decision | None = None


DenyCause = Literal["denied", "timeout", "error"]


@dataclass(frozen=True)
class Deny:
    """Refuse the call. `cause` tells a reviewer's denial from a timeout or a failure."""

    reason: str
    cause: DenyCause = "denied"
    decision: Decision | None = None


@dataclass(frozen=True)
class Async:
    """The decision comes later: `run_review` calls `await_decision(ref, timeout)`."""

    ref: Any
    metadata: Mapping[str, Any] = field(default_factory=dict)


ReviewResult = Allow | Deny | Async
Verdict = Allow | Deny


@dataclass(frozen=True)
class AwaitResult:
    """What `await_decision` returns: a decision, a timeout, or an error with its text."""

    status: Literal["decision", "timeout", "error"]
    decision: Decision | Allow | Deny | None = None
    error: str | None = None

    @classmethod
    def decided(cls, decision: Decision | Allow | Deny) -> AwaitResult:
        return cls(status="decision", decision=decision)

    @classmethod
    def timed_out(cls) -> AwaitResult:
        return cls(status="timeout")

    @classmethod
    def failed(cls, error: str) -> AwaitResult:
        return cls(status="error", error=error)


@runtime_checkable
class ReviewPluginLike(Protocol):
    """The least a plugin must have: `review_tool`. Every other callback is optional.

    Each callback may be `async def` (preferred) or a plain `def`; plain ones
    are run in a worker thread by `run_review`, so they may block.
    """

    def review_tool(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult | Awaitable[ReviewResult]: ...


class ReviewPlugin:
    """Base class for plugins: every review allows and `prepare` keeps the context.

    Override the callbacks you need with `async def`. A review plugin that returns
    `Async` must also override `await_decision`.
    """

    async def prepare(self, event: ApprovalEvent, context: dict[str, Any]) -> dict[str, Any]:
        """Augment the context before review (default: unchanged). Raise to fail the review."""
        return context

    async def review_tool(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return Allow()

    async def review_command(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return Allow()

    async def review_file(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return Allow()

    async def review_permissions(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return Allow()

    async def await_decision(self, ref: Any, timeout: float | None) -> AwaitResult:  # noqa: ASYNC109
        """Wait up to `timeout` seconds for the decision behind `ref`."""
        return AwaitResult.failed(
            f"{type(self).__name__} returned an async ref but does not implement await_decision"
        )


class StaticPolicyPlugin(ReviewPlugin):
    """Always allows, or always denies with `reason`, whatever the event."""

    def __init__(self, decision: Literal["allow", "deny"], reason: str | None = None) -> None:
        if decision not in ("allow", "deny"):
            raise ValueError(f"StaticPolicyPlugin takes 'allow' or 'deny', not {decision!r}")
        self.decision = decision
        self.reason = reason

    def _verdict(self) -> Verdict:
        if self.decision == "allow":
            return Allow()
        return Deny(self.reason or "denied by policy")

    async def review_tool(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return self._verdict()

    async def review_command(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return self._verdict()

    async def review_file(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return self._verdict()

    async def review_permissions(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return self._verdict()

    def __repr__(self) -> str:
        return f"StaticPolicyPlugin({self.decision!r}, reason={self.reason!r})"


_REVIEW_METHOD = {
    "tool": "review_tool",
    "command": "review_command",
    "file": "review_file",
    "permissions": "review_permissions",
}


async def call_maybe_async(fn: Callable[..., Any], *args: Any) -> Any:
    """Call `fn`: await it if async, else run it in a worker thread; await what it returns."""
    if is_async_callable(fn):
        result = fn(*args)
    else:
        result = await asyncio.to_thread(fn, *args)
    if inspect.isawaitable(result):
        result = await result
    return result


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """True for `async def` functions and objects whose `__call__` is `async def`."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 — an object with `async def __call__`
    )


def verdict_from_decision(decision: Decision) -> Verdict:
    """Map a reviewer's `Decision` to `Allow` / `Deny`: only `approve` allows; `asked` is a deny
    carrying the reviewer's question; an `error` (or unknown) decision is a failed review."""
    if decision.outcome == "approve":
        return Allow(for_session=decision.for_session, decision=decision)
    if decision.outcome == "deny":
        return Deny(decision.reason or "denied by reviewer", decision=decision)
    if decision.outcome == "asked":  # a reviewer's question: a deny the agent can answer
        return Deny(agent_text(decision.question, decision.decided_by), decision=decision)
    return Deny(decision.reason or "approval error", cause="error", decision=decision)


def _plugin_name(plugin: object) -> str:
    return type(plugin).__name__


async def run_review(
    plugin: ReviewPluginLike,
    event: ApprovalEvent,
    context: Mapping[str, Any] | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 — the plugin protocol's own argument
    *,
    opts: Mapping[str, Any] | None = None,
) -> Verdict:
    """Run one plugin on one event to a final `Allow` or `Deny`.

    Calls `prepare`, the review callback for `event.kind` (missing → allow),
    and for an `Async` ref `await_decision(ref, timeout)`. A timeout becomes
    `Deny("approval timeout", cause="timeout")`; an await error, a raising
    callback or an unexpected return value becomes a `Deny` carrying the
    error text with `cause="error"`.
    """
    name = _plugin_name(plugin)
    ctx: dict[str, Any] = dict(context or {})
    try:
        prepare = getattr(plugin, "prepare", None)
        if prepare is not None:
            prepared = await call_maybe_async(prepare, event, ctx)
            if prepared is not None:
                ctx = dict(prepared)
        method = getattr(plugin, _REVIEW_METHOD[event.kind], None)
        if method is None:
            return Allow()
        result = await call_maybe_async(method, event, ctx, dict(opts or {}))
    except Exception as e:
        log.warning("review plugin failed plugin=%s kind=%s error=%r", name, event.kind, e)
        return Deny(_error_text(e), cause="error")

    if isinstance(result, Allow | Deny):
        return result
    if not isinstance(result, Async):
        log.warning("review plugin returned an unexpected value plugin=%s value=%r", name, result)
        return Deny(f"{name} returned {result!r}, expected Allow, Deny or Async", cause="error")
    return await _await(plugin, name, result, timeout)


async def _await(plugin: object, name: str, pending: Async, wait: float | None) -> Verdict:
    await_decision = getattr(plugin, "await_decision", None)
    if await_decision is None:
        return Deny(f"{name} returned an async ref but has no await_decision", cause="error")
    log.debug(
        "review plugin awaiting decision plugin=%s ref=%r timeout=%s", name, pending.ref, wait
    )
    limit = None if wait is None else wait + AWAIT_GRACE_SECONDS
    try:
        outcome = await asyncio.wait_for(call_maybe_async(await_decision, pending.ref, wait), limit)
    except TimeoutError:
        log.info("review plugin await overran its timeout plugin=%s ref=%r", name, pending.ref)
        return Deny(TIMEOUT_REASON, cause="timeout")
    except Exception as e:
        log.warning("review plugin await failed plugin=%s ref=%r error=%r", name, pending.ref, e)
        return Deny(_error_text(e), cause="error")

    if not isinstance(outcome, AwaitResult):
        return Deny(
            f"{name}.await_decision returned {outcome!r}, expected AwaitResult",
            cause="error",
        )
    if outcome.status == "timeout":
        return Deny(TIMEOUT_REASON, cause="timeout")
    if outcome.status == "error":
        return Deny(outcome.error or "approval error", cause="error")
    decided = outcome.decision
    if isinstance(decided, Decision):
        return verdict_from_decision(decided)
    if isinstance(decided, Allow | Deny):
        return decided
    return Deny(f"{name}.await_decision reported a decision but gave none", cause="error")


def _error_text(e: BaseException) -> str:
    text = str(e)
    return text if text else type(e).__name__
