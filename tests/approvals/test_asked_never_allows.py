"""Fail closed: a request that ended `asked` (a reviewer's question instead of a decision) is
never an allow, on every surface that maps a status or a decision to allow/deny; and a status
or an outcome this code does not know (a newer bot's) reads as a deny, never an allow. Each
surface also carries the question to the agent in its own terms."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from approvals._internal.questions import agent_text
from approvals.approval import Approval
from approvals.gate import Asked, Denied, ToolDenied, require_approval
from approvals.integrations import langgraph, openai_agents
from approvals.integrations.coding_agents import output_for_request
from approvals.integrations.slack_review import verdict_for
from approvals.models import ApprovalEvent, ApprovalRequest, Decision, GateRequest
from approvals.review import Allow, Deny, verdict_from_decision
from bot.mcp.server import decision_payload, describe

QUESTION = "Which region — and is there a rollback plan?"


def asked_request() -> ApprovalRequest:
    return ApprovalRequest(
        event=ApprovalEvent(
            kind="command",
            tool_name="Bash",
            arguments={"command": "kubectl rollout restart deploy/web"},
            command="kubectl rollout restart deploy/web",
            session_id="sess-1",
        ),
        status="asked",
        decision=Decision.ask(QUESTION, by="U0ALICE"),
    )


def unknown_approval() -> Approval:
    """The approval object a newer bot sends with a status and a decision this code lacks."""
    data = Approval.from_request(asked_request()).model_dump(mode="json")
    data |= {"status": "deferred_to_owner", "decision": "defer", "question": None}
    return Approval.model_validate(data)


# -- every surface: (name, check) where check(approval) says "allowed?" and returns the text
# the agent reads (it must carry the question for an asked request).

Surface = Callable[[Approval], tuple[bool, str]]


def _hook(dialect: str, event: str) -> Surface:
    def check(approval: Approval) -> tuple[bool, str]:
        output = output_for_request(dialect, event, approval.to_request())  # type: ignore[arg-type]
        assert output is not None, "no output is an allow for Codex's PreToolUse"
        specific = output["hookSpecificOutput"]
        if event == "PreToolUse":
            return specific["permissionDecision"] == "allow", specific["permissionDecisionReason"]
        return specific["decision"]["behavior"] == "allow", specific["decision"]["message"]

    return check


def _approval(approval: Approval) -> tuple[bool, str]:
    return approval.approved, approval.describe()


def _decision(approval: Approval) -> tuple[bool, str]:
    decision = approval.to_decision()
    assert decision is not None
    return decision.approves, decision.question or ""


def _review(approval: Approval) -> tuple[bool, str]:
    decision = approval.to_decision()
    assert decision is not None
    verdict = verdict_from_decision(decision)
    return isinstance(verdict, Allow), verdict.reason if isinstance(verdict, Deny) else ""


def _slack_review(approval: Approval) -> tuple[bool, str]:
    verdict = verdict_for(approval)
    return isinstance(verdict, Allow), verdict.reason if isinstance(verdict, Deny) else ""


def _gate(approval: Approval) -> tuple[bool, str]:
    ran: list[str] = []

    @require_approval(lambda request: approval.to_decision())
    def restart(service: str) -> str:
        ran.append(service)
        return "restarted"

    result = restart("web")
    assert isinstance(result, Denied) == (not ran)
    return bool(ran), str(result)


def _openai_agents(approval: Approval) -> tuple[bool, str]:
    return False, openai_agents.rejection_message(approval)


def _langgraph(approval: Approval) -> tuple[bool, str]:
    answer = langgraph.answer_for(approval)
    json.dumps(answer)  # checkpointed: plain JSON
    return answer["approved"], json.dumps(answer, ensure_ascii=False)


def _mcp_request_approval(approval: Approval) -> tuple[bool, str]:
    payload = decision_payload(approval)
    return payload["approved"], json.dumps(payload, ensure_ascii=False)


def _mcp_text(approval: Approval) -> tuple[bool, str]:
    # permission_prompt and the proxy allow only `approval.approved`; both say `describe`.
    return approval.approved, describe(approval)


SURFACES: dict[str, Surface] = {
    "Approval.approved": _approval,
    "Decision.approves": _decision,
    "claude-code PreToolUse": _hook("claude-code", "PreToolUse"),
    "claude-code PermissionRequest": _hook("claude-code", "PermissionRequest"),
    "codex PreToolUse": _hook("codex", "PreToolUse"),
    "codex PermissionRequest": _hook("codex", "PermissionRequest"),
    "review.verdict_from_decision": _review,
    "SlackReviewPlugin.verdict_for": _slack_review,
    "require_approval": _gate,
    "openai-agents rejection": _openai_agents,
    "langgraph answer": _langgraph,
    "mcp request_approval": _mcp_request_approval,
    "mcp permission_prompt / proxy": _mcp_text,
}


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_an_asked_request_is_never_an_allow_and_carries_the_question(surface: str) -> None:
    allowed, text = SURFACES[surface](Approval.from_request(asked_request()))
    assert allowed is False
    if surface != "Decision.approves":
        assert QUESTION in text, text
    else:
        assert text == QUESTION


@pytest.mark.parametrize("surface", sorted(set(SURFACES) - {"Decision.approves"}))
def test_a_status_this_code_does_not_know_is_a_deny(surface: str) -> None:
    approval = unknown_approval()
    assert approval.status == "denied" and approval.decision == "deny"
    allowed, _text = SURFACES[surface](approval)
    assert allowed is False


def test_an_outcome_nobody_knows_never_runs_the_gated_function() -> None:
    """A handler's Decision with an outcome outside the model (built without validation, as
    a plugin could) is a deny, never a run."""
    odd = Decision.model_construct(outcome="maybe", reason=None, decided_by="U0X")
    ran: list[int] = []

    @require_approval(lambda request: odd)
    def step(n: int) -> int:
        ran.append(n)
        return n

    assert isinstance(step(1), Denied) and not ran
    assert not odd.approves
    assert isinstance(verdict_from_decision(odd), Deny)


def test_the_gate_returns_asked_with_the_question_or_raises() -> None:
    asked = Decision.ask(QUESTION, by="U0ALICE")

    @require_approval(lambda request: asked)
    def restart(service: str) -> str:
        raise AssertionError("ran")

    result = restart("web")
    assert isinstance(result, Asked) and isinstance(result, Denied)
    assert result.question == QUESTION and result.asked_by == "U0ALICE"
    assert str(result) == agent_text(QUESTION, "U0ALICE")
    assert result.decision is asked

    @require_approval(lambda request: asked, on_deny="raise")
    async def restart_async(service: str) -> str:
        raise AssertionError("ran")

    with pytest.raises(ToolDenied) as raised:
        asyncio.run(restart_async("web"))
    assert raised.value.decision is asked and QUESTION in raised.value.reason


def test_the_client_handler_returns_the_asked_decision() -> None:
    """`ApprovalClient` as a gate handler hands the approval object's decision over: an asked
    one becomes `Asked` (the question, who asked)."""
    approval = Approval.from_request(asked_request())
    decision = approval.to_decision()
    assert decision is not None and decision.outcome == "asked"
    request = GateRequest(
        tool_name="restart", config=asked_request().config, arguments={}, call_id="c", prompt="p"
    )
    from approvals.gate import _from_result

    result = _from_result(request, decision)
    assert isinstance(result, Asked) and result.question == QUESTION


def test_the_approval_object_carries_question_and_answers() -> None:
    approval = Approval.from_request(asked_request())
    data = approval.model_dump(mode="json")
    assert data["status"] == "asked" and data["decision"] == "asked"
    assert data["question"] == QUESTION and data["decided_by"] == "U0ALICE"
    assert data["answers"] is None
    assert approval.describe().startswith(f'asked by U0ALICE: "{QUESTION}"')
    back = Approval.model_validate_json(approval.model_dump_json())
    assert back == approval and back.to_request().decision == approval.to_decision()
