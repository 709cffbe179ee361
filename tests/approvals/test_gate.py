"""require_approval: approve / deny / error, canonical arguments, annotations, the TTY default."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from approvals import gate
from approvals._internal.terminal import NO_HANDLER_MESSAGE, TerminalApprover
from approvals.errors import InvalidRequest
from approvals.gate import (
    ApprovalFailed,
    Denied,
    GateRequest,
    ReviewFailed,
    ToolDenied,
    current_approval,
    merge_annotations,
    require_approval,
)
from approvals.models import MAX_EVENT_BYTES, ApprovalConfig, ApprovalEvent, Decision
from approvals.review import Async, AwaitResult, ReviewPlugin, ReviewResult, StaticPolicyPlugin


class Reviewer:
    """A sync handler that records every request and answers with `answer`."""

    def __init__(self, answer: Decision | Exception | object) -> None:
        self.answer = answer
        self.requests: list[GateRequest] = []

    def __call__(self, request: GateRequest) -> Decision:
        self.requests.append(request)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer  # type: ignore[return-value]


class AsyncReviewer(Reviewer):
    async def __call__(self, request: GateRequest) -> Decision:  # type: ignore[override]
        await asyncio.sleep(0)
        return super().__call__(request)


# --- approve ----------------------------------------------------------------


def test_sync_approve_runs_with_canonical_arguments_seen_by_the_reviewer() -> None:
    reviewer = Reviewer(Decision.approve(by="U1"))
    ran: list[tuple[Any, ...]] = []

    @require_approval(handler=reviewer)
    def deploy(env: str, replicas: int = 2, *tags: str, **extra: Any) -> str:
        ran.append((env, replicas, tags, extra))
        return f"deployed {env}"

    assert deploy("prod", 3, "a", "b", when=datetime(2030, 1, 2, tzinfo=UTC)) == "deployed prod"
    assert ran == [("prod", 3, ("a", "b"), {"when": datetime(2030, 1, 2, tzinfo=UTC)})]
    (request,) = reviewer.requests
    assert request.tool_name == "deploy"
    assert request.arguments == {
        "env": "prod",
        "replicas": 3,
        "tags": ["a", "b"],
        "when": "2030-01-02T00:00:00Z",
    }
    assert request.config == ApprovalConfig()
    assert request.prompt.startswith('Approve deploy(env="prod", replicas=3, tags=["a", "b"]')
    assert request.call_id.startswith("call_")


def test_defaults_are_applied_and_unknown_values_shown_as_repr() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "<Opaque 7>"

    reviewer = Reviewer(Decision.approve())

    @require_approval(reviewer)
    def copy(
        src: Path, obj: object, dst: str = "/tmp", flags: frozenset[str] = frozenset()
    ) -> None:
        return None

    copy(Path("/etc/hosts"), Opaque())
    assert reviewer.requests[0].arguments == {
        "src": "/etc/hosts",
        "obj": "<Opaque 7>",
        "dst": "/tmp",
        "flags": [],
    }
    assert reviewer.requests[0].prompt == (
        'Approve copy(src="/etc/hosts", obj="<Opaque 7>", dst="/tmp", flags=[])?'
    )


async def test_async_approve_with_input_reaches_the_function() -> None:
    reviewer = AsyncReviewer(Decision.approve(input="v2.3.1", by="U1", via="slack"))
    seen: list[Any] = []

    @require_approval(handler=reviewer, config={"kind": "input", "prompt": "Which version?"})
    async def release(service: str, approval: Decision | None = None) -> str:
        seen.append((approval, current_approval()))
        return f"{service}@{approval.input if approval else '?'}"

    assert await release("api") == "api@v2.3.1"
    approval, current = seen[0]
    assert approval is current
    assert approval is not None and approval.decided_by == "U1"
    assert reviewer.requests[0].arguments == {"service": "api"}, "approval is not an argument"
    assert reviewer.requests[0].prompt == "Which version?"
    assert current_approval() is None, "reset after the call"


def test_choice_selection_reaches_the_function_via_current_approval() -> None:
    reviewer = Reviewer(Decision.approve(selection="canary"))

    @require_approval(reviewer, config=ApprovalConfig(kind="choice", options=("canary", "all")))
    def rollout() -> str | None:
        decision = current_approval()
        return decision.selection if decision else None

    assert rollout() == "canary"
    assert reviewer.requests[0].config.options == ("canary", "all")


@pytest.mark.parametrize("selection", [None, "everyone"])
def test_choice_approval_without_a_valid_selection_is_an_error(selection: str | None) -> None:
    ran: list[bool] = []

    @require_approval(
        Reviewer(Decision.approve(selection=selection)),
        config={"kind": "choice", "options": ["canary", "all"]},
    )
    def rollout() -> None:
        ran.append(True)

    outcome = rollout()
    assert isinstance(outcome, ApprovalFailed)
    assert "not one of ['canary', 'all']" in outcome.message
    assert ran == []


def test_the_caller_cannot_forge_the_approval_argument() -> None:
    real = Decision.approve(by="U-reviewer")

    @require_approval(Reviewer(real))
    def act(approval: Decision | None = None) -> Decision | None:
        return approval

    forged = Decision.approve(by="attacker")
    assert act(forged) is real
    assert act(approval=forged) is real


def test_method_self_is_not_shown_to_the_reviewer() -> None:
    reviewer = Reviewer(Decision.approve())

    class Tools:
        @require_approval(reviewer)
        def wipe(self, disk: str) -> str:
            return f"wiped {disk}"

    assert Tools().wipe("sdb") == "wiped sdb"
    assert reviewer.requests[0].arguments == {"disk": "sdb"}


# --- deny and error ---------------------------------------------------------


def test_deny_does_not_run_and_returns_a_recoverable_denial() -> None:
    ran: list[bool] = []

    @require_approval(Reviewer(Decision.deny("prod is frozen", by="U2")))
    def deploy(env: str) -> str:
        ran.append(True)
        return "deployed"

    outcome = deploy("prod")
    assert isinstance(outcome, Denied)
    assert str(outcome) == "denied: prod is frozen"
    assert outcome.tool_name == "deploy"
    assert outcome.decision is not None and outcome.decision.decided_by == "U2"
    assert ran == []


async def test_async_deny_with_raise_mode_raises_tool_denied() -> None:
    ran: list[bool] = []

    @require_approval(AsyncReviewer(Decision.deny("no")), on_deny="raise")
    async def deploy() -> None:
        ran.append(True)

    with pytest.raises(ToolDenied, match=r"^no$") as info:
        await deploy()
    assert info.value.code == "denied"
    assert ran == []


def test_a_handler_raising_tool_denied_is_a_denial() -> None:
    @require_approval(Reviewer(ToolDenied("not on a Friday")))
    def deploy() -> str:
        return "deployed"

    outcome = deploy()
    assert isinstance(outcome, Denied)
    assert str(outcome) == "denied: not on a Friday"


def test_deny_without_reason_still_reads_well() -> None:
    @require_approval(Reviewer(Decision.deny()))
    def deploy() -> None:
        return None

    assert str(deploy()) == "denied: no reason given"


@pytest.mark.parametrize("on_deny", ["return", "raise"])
async def test_a_failing_handler_is_an_error_not_a_denial(on_deny: Any) -> None:
    ran: list[bool] = []

    @require_approval(AsyncReviewer(ConnectionError("slack unreachable")), on_deny=on_deny)
    async def deploy() -> None:
        ran.append(True)

    if on_deny == "raise":
        with pytest.raises(ReviewFailed, match="slack unreachable") as info:
            await deploy()
        assert not isinstance(info.value, ToolDenied)
    else:
        outcome = await deploy()
        assert isinstance(outcome, ApprovalFailed) and not isinstance(outcome, Denied)
        assert outcome.message == "slack unreachable"
        assert outcome.error_type == "ConnectionError"
        assert str(outcome) == "approval error: slack unreachable"
    assert ran == []


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (Decision.error("reviewer UI crashed"), "reviewer UI crashed"),
        (True, "returned bool, expected a Decision"),
        (None, "returned NoneType, expected a Decision"),
    ],
)
def test_error_decisions_and_bad_answers_are_errors(answer: object, fragment: str) -> None:
    @require_approval(Reviewer(answer))
    def deploy() -> None:
        return None

    outcome = deploy()
    assert isinstance(outcome, ApprovalFailed)
    assert fragment in outcome.message


async def test_a_timed_out_handler_is_denied_with_approval_timeout() -> None:
    async def slow(request: GateRequest) -> Decision:
        await asyncio.sleep(30)
        return Decision.approve()

    @require_approval(slow, timeout=0.05)
    async def deploy() -> None:
        return None

    outcome = await deploy()
    assert isinstance(outcome, Denied)
    assert outcome.reason == "approval timeout"


async def test_a_handler_raising_timeout_error_itself_is_an_error() -> None:
    async def broken(request: GateRequest) -> Decision:
        raise TimeoutError("upstream timed out")

    @require_approval(broken, timeout=30)
    async def deploy() -> None:
        return None

    outcome = await deploy()
    assert isinstance(outcome, ApprovalFailed)
    assert outcome.message == "upstream timed out"


# --- handler shapes and calling conventions ----------------------------------


def test_sync_function_with_an_async_handler() -> None:
    @require_approval(AsyncReviewer(Decision.approve(input="yes")))
    def act(approval: Decision | None = None) -> str | None:
        return approval.input if approval else None

    assert act() == "yes"


async def test_sync_function_with_an_async_handler_inside_a_running_loop() -> None:
    @require_approval(AsyncReviewer(Decision.deny("nope")))
    def act() -> str:
        return "ran"

    outcome = act()
    assert isinstance(outcome, Denied) and outcome.reason == "nope"


async def test_async_function_runs_a_sync_handler_off_the_loop() -> None:
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def handler(request: GateRequest) -> Decision:
        threads.append(threading.get_ident())
        return Decision.approve()

    @require_approval(handler)
    async def act() -> str:
        return "ran"

    assert await act() == "ran"
    assert threads and threads[0] != loop_thread


def test_positional_handler_form_and_wrapper_metadata() -> None:
    reviewer = Reviewer(Decision.approve())

    def deploy(env: str) -> str:
        """Deploy the app."""
        return env

    gated = require_approval(reviewer)(deploy)
    assert gated("qa") == "qa"
    assert gated.__name__ == "deploy"
    assert gated.__doc__ == "Deploy the app."
    assert gated.__wrapped__ is deploy
    assert gated.approval_config == ApprovalConfig()
    assert gated.annotations is None


@pytest.mark.parametrize("config", [False, None])
def test_no_gate_when_config_is_off(config: bool | None) -> None:
    reviewer = Reviewer(Decision.deny("never asked"))

    @require_approval(reviewer, config=config)
    def deploy(env: str) -> str:
        return env

    assert deploy("prod") == "prod"
    assert reviewer.requests == []
    assert deploy.approval_config is None


def test_custom_tool_name_and_invalid_configuration() -> None:
    reviewer = Reviewer(Decision.approve())

    @require_approval(reviewer, name="payments.refund")
    def refund(amount: int) -> int:
        return amount

    refund(5)
    assert reviewer.requests[0].tool_name == "payments.refund"
    with pytest.raises(InvalidRequest, match="invalid approval config"):
        require_approval(reviewer, config={"kind": "choice"})
    with pytest.raises(InvalidRequest, match="invalid tool name"):
        require_approval(reviewer, name="x" * 300)(refund)
    with pytest.raises(ValueError, match="on_deny"):
        require_approval(reviewer, on_deny="ignore")  # type: ignore[arg-type]


def test_a_bad_call_fails_like_the_function_would_without_asking() -> None:
    reviewer = Reviewer(Decision.approve())

    @require_approval(reviewer)
    def deploy(env: str) -> str:
        return env

    with pytest.raises(TypeError):
        deploy()  # type: ignore[call-arg]
    assert reviewer.requests == []


def test_forgetting_the_parentheses_fails_loudly() -> None:
    @require_approval  # type: ignore[arg-type]
    def deploy(env: str) -> str:
        return env

    with pytest.raises(TypeError, match="with parentheses"):
        deploy("prod")  # type: ignore[call-overload]


# --- hooks as handlers ---------------------------------------------------------


class SlackLike(ReviewPlugin):
    """An async hook: returns a ref, then reports a scripted await result."""

    def __init__(self, result: AwaitResult) -> None:
        self.result = result
        self.contexts: list[dict[str, Any]] = []
        self.events: list[ApprovalEvent] = []
        self.timeouts: list[float | None] = []

    async def review_tool(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        self.events.append(event)
        self.contexts.append(context)
        return Async(event.call_id)

    async def await_decision(self, ref: Any, timeout: float | None) -> AwaitResult:  # noqa: ASYNC109
        self.timeouts.append(timeout)
        return self.result


async def test_hook_handler_approve_passes_the_decision_through() -> None:
    hook = SlackLike(AwaitResult.decided(Decision.approve(input="ok", by="U1", via="slack")))

    @require_approval(hook, config={"kind": "input", "deadline_seconds": 60, "sensitivity": "pii"})
    async def act(n: int, approval: Decision | None = None) -> str | None:
        return approval.input if approval else None

    assert await act(3) == "ok"
    (event,) = hook.events
    assert (event.kind, event.tool_name, event.arguments) == ("tool", "act", {"n": 3})
    assert hook.contexts[0]["config"].sensitivity == "pii"
    assert hook.contexts[0]["prompt"] == "Approve act(n=3)?"
    assert hook.contexts[0]["call_id"] == event.call_id
    assert hook.timeouts == [60], "hooks wait for the config's deadline by default"


def test_hook_handler_from_sync_code_and_static_policy() -> None:
    @require_approval(StaticPolicyPlugin("deny", "read-only day"))
    def drop_table(name: str) -> str:
        return "dropped"

    @require_approval(StaticPolicyPlugin("allow"))
    def select(name: str) -> str:
        return "selected"

    outcome = drop_table("users")
    assert isinstance(outcome, Denied) and str(outcome) == "denied: read-only day"
    assert select("users") == "selected"


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (AwaitResult.timed_out(), Denied("act", "approval timeout")),
        (AwaitResult.failed("redis is down"), ApprovalFailed("act", "redis is down")),
    ],
)
async def test_hook_timeout_denies_and_hook_error_is_an_error(
    result: AwaitResult, expected: object
) -> None:
    @require_approval(SlackLike(result), timeout=5)
    async def act() -> str:
        return "ran"

    assert await act() == expected


async def test_hook_handler_rejects_an_oversized_payload() -> None:
    hook = SlackLike(AwaitResult.decided(Decision.approve()))

    @require_approval(hook)
    async def upload(blob: str) -> str:
        return "uploaded"

    outcome = await upload("x" * (MAX_EVENT_BYTES + 1))
    assert isinstance(outcome, ApprovalFailed)
    assert outcome.error_type == "PayloadTooLarge"
    assert hook.events == [], "nothing posted"


# --- annotations ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "sensitivity", "expected"),
    [
        (None, "low", None),
        ({}, "low", None),
        (None, "pii", {"destructiveHint": True}),
        (None, "secret", {"destructiveHint": True, "openWorldHint": True}),
        ({"readOnlyHint": True}, "low", {"readOnlyHint": True}),
        (
            {"destructiveHint": False, "title": "Lookup"},
            "secret",
            {"destructiveHint": False, "openWorldHint": True, "title": "Lookup"},
        ),
    ],
)
def test_merge_annotations(
    base: dict[str, Any] | None, sensitivity: Any, expected: dict[str, Any] | None
) -> None:
    assert merge_annotations(base, ApprovalConfig(sensitivity=sensitivity)) == expected


def test_merge_annotations_without_a_gate_keeps_the_callers() -> None:
    assert merge_annotations(None, None) is None
    assert merge_annotations({"idempotentHint": True}, None) == {"idempotentHint": True}


def test_decorated_function_exposes_config_and_annotations() -> None:
    @require_approval(
        Reviewer(Decision.approve()),
        config={"sensitivity": "secret"},
        annotations={"openWorldHint": False},
    )
    def rotate_key() -> None:
        return None

    assert rotate_key.approval_config == ApprovalConfig(sensitivity="secret")
    assert rotate_key.annotations == {"destructiveHint": True, "openWorldHint": False}


# --- the default handler ----------------------------------------------------------


def test_default_handler_without_a_tty_denies_naming_the_missing_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    ran: list[bool] = []

    @require_approval()
    def deploy() -> None:
        ran.append(True)

    outcome = deploy()
    assert isinstance(outcome, Denied)
    assert outcome.reason == NO_HANDLER_MESSAGE
    for needle in ("no approval handler configured", "handler=", "APPROVALS_URL", "REDIS_URL"):
        assert needle in str(outcome)
    assert ran == []


async def test_injected_no_tty_denies_from_async_code_too() -> None:
    handler = TerminalApprover(is_tty=lambda: False, input_fn=lambda _: "y")

    @require_approval(handler)
    async def deploy() -> None:
        return None

    outcome = await deploy()
    assert isinstance(outcome, Denied) and outcome.reason == NO_HANDLER_MESSAGE


def scripted(*answers: str) -> tuple[Callable[[str], str], list[str]]:
    prompts: list[str] = []
    queue = list(answers)

    def read(prompt: str) -> str:
        prompts.append(prompt)
        if not queue:
            raise EOFError
        return queue.pop(0)

    return read, prompts


@pytest.mark.parametrize(
    ("answers", "approved"),
    [(["y"], True), (["YES "], True), (["n"], False), ([""], False), ([], False)],
)
def test_tty_yes_no(answers: list[str], approved: bool) -> None:
    read, prompts = scripted(*answers)

    @require_approval(TerminalApprover(is_tty=lambda: True, input_fn=read))
    def deploy(env: str) -> str:
        return "deployed"

    outcome = deploy("prod")
    assert prompts[0] == 'Approve deploy(env="prod")? [y/N] '
    assert (outcome == "deployed") is approved
    if not approved:
        assert isinstance(outcome, Denied)


def test_tty_input_and_choice() -> None:
    read, prompts = scripted("y", "v1.2", "y", "2", "y", "canary", "y", "9")
    tty = TerminalApprover(is_tty=lambda: True, input_fn=read)

    @require_approval(tty, config={"kind": "input"})
    def release(approval: Decision | None = None) -> str | None:
        return approval.input if approval else None

    @require_approval(tty, config={"kind": "choice", "options": ["canary", "all"]})
    def rollout(approval: Decision | None = None) -> str | None:
        return approval.selection if approval else None

    assert release() == "v1.2"
    assert rollout() == "all"
    assert rollout() == "canary"
    outcome = rollout()
    assert isinstance(outcome, Denied) and "no valid option" in outcome.reason
    assert prompts[3] == "Choose one of 1) canary  2) all: "


def serialising_input(delay: float) -> tuple[Callable[[str], str], dict[str, Any]]:
    state: dict[str, Any] = {"active": 0, "max_active": 0, "prompts": []}
    guard = threading.Lock()

    def read(prompt: str) -> str:
        with guard:
            state["active"] += 1
            state["max_active"] = max(state["max_active"], state["active"])
            state["prompts"].append(prompt)
        time.sleep(delay)
        with guard:
            state["active"] -= 1
        return "y"

    return read, state


async def test_concurrent_async_prompts_are_serialised() -> None:
    read, state = serialising_input(0.02)
    tty = TerminalApprover(is_tty=lambda: True, input_fn=read)

    @require_approval(tty)
    async def act(i: int) -> int:
        return i

    results = await asyncio.gather(*(act(i) for i in range(6)))
    assert results == list(range(6))
    assert len(state["prompts"]) == 6
    assert state["max_active"] == 1, "two prompts were on the terminal at once"


def test_concurrent_sync_prompts_are_serialised() -> None:
    read, state = serialising_input(0.02)
    tty = TerminalApprover(is_tty=lambda: True, input_fn=read)

    @require_approval(tty)
    def act(i: int) -> int:
        return i

    results: list[int | Denied | ApprovalFailed] = []
    threads = [threading.Thread(target=lambda i=i: results.append(act(i))) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r for r in results if isinstance(r, int)) == list(range(6))
    assert state["max_active"] == 1, "two prompts were on the terminal at once"


async def test_sync_and_async_callers_share_the_terminal_one_at_a_time() -> None:
    read, state = serialising_input(0.02)
    tty = TerminalApprover(is_tty=lambda: True, input_fn=read)

    @require_approval(tty)
    def sync_act() -> str:
        return "sync"

    @require_approval(tty)
    async def async_act() -> str:
        return "async"

    results = await asyncio.gather(
        asyncio.to_thread(sync_act), async_act(), asyncio.to_thread(sync_act), async_act()
    )
    assert sorted(map(str, results)) == ["async", "async", "sync", "sync"]
    assert state["max_active"] == 1


def test_the_default_handler_is_a_terminal_approver() -> None:
    assert isinstance(gate.default_handler, TerminalApprover)


def test_a_reason_text_or_function_reaches_the_reviewer() -> None:
    """`require_approval(reason=)`: a text, or a function of the canonical arguments; the
    event a hook reviews carries it; a failing function leaves it out and the call is still
    reviewed (never run unreviewed, never refused for it)."""
    reviewer = Reviewer(Decision.approve(by="U1"))

    @require_approval(handler=reviewer, reason="nightly cleanup of stale previews")
    def prune(days: int) -> int:
        return days

    @require_approval(handler=reviewer, reason=lambda args: f"older than {args['days']} days")
    def prune_by(days: int) -> int:
        return days

    def broken(args: dict[str, Any]) -> str:
        raise KeyError("nope")

    @require_approval(handler=reviewer, reason=broken)
    def prune_broken(days: int) -> int:
        return days

    assert prune(7) == 7 and prune_by(30) == 30 and prune_broken(1) == 1
    first, second, third = reviewer.requests
    assert first.reason == "nightly cleanup of stale previews"
    event = second.event()
    assert second.reason == "older than 30 days"
    assert event.context is not None and event.context.reason == "older than 30 days"
    assert third.reason is None and third.event().context is None
