"""Review findings on the service: long policy verdicts, votes racing an escalation, grants."""

from __future__ import annotations

from typing import Any

import pytest

from approvals.errors import InvalidRequest, NotAllowed
from approvals.models import MAX_TEXT, ApprovalConfig, ApprovalEvent
from approvals.policy_file import parse_policy
from approvals.service import Actor, ApprovalService
from approvals.store import ApprovalStore


def policy_of(rules: list[dict[str, Any]]) -> Any:
    return parse_policy(
        {"routes": {"default": {"channel": "C0DEFAULT"}}, "rules": rules}, source="review.yaml"
    )


async def test_many_matching_allow_rules_with_long_names_still_answer(
    store: ApprovalStore,
) -> None:
    names = [f"allow-reads-{i}-" + "x" * 80 for i in range(3)]  # valid names (<= 100 chars)
    rules = [{"name": n, "action": "allow", "match": {"tool": "read_*"}} for n in names]
    service = ApprovalService(store, policy_of(rules))
    req = await service.submit(ApprovalEvent(tool_name="read_file"))
    assert req.status == "approved"
    assert req.decision is not None and req.decision.decided_by is not None
    assert req.decision.decided_by.startswith(f"policy:{names[0]}")
    assert (await store.get(req.id)).status == "approved"


async def test_several_long_deny_reasons_still_deny(store: ApprovalStore) -> None:
    rules = [
        {"name": f"no-{i}", "action": "deny", "reason": f"{i} " + "r" * 2000, "match": {}}
        for i in range(2)
    ]
    service = ApprovalService(store, policy_of(rules))
    req = await service.submit(ApprovalEvent(tool_name="anything"))
    assert req.status == "denied"
    assert req.decision is not None and req.decision.reason is not None
    assert req.decision.reason.startswith("0 rrr") and len(req.decision.reason) <= MAX_TEXT


async def test_a_vote_racing_an_escalation_is_checked_against_the_new_route(
    store: ApprovalStore,
) -> None:
    """A reviewer of the first route clicks just as the deadline moves the request to a
    route they are not a reviewer of: their vote must not count there."""
    policy = parse_policy(
        {
            "routes": {
                "default": {
                    "channel": "C0FIRST",
                    "reviewers": ["U0ANN", "S0TEAM"],
                    "deadline_seconds": 60,
                    "on_timeout": "escalate",
                    "escalate_to": "oncall",
                },
                "oncall": {"channel": "C0ONCALL", "reviewers": ["U0BOSS"]},
            }
        },
        source="review.yaml",
    )
    holder: dict[str, ApprovalService] = {}

    async def members(group: str) -> frozenset[str]:
        # While the click is being checked, another replica's sweeper escalates the request.
        service = holder["service"]
        req = (await store.list_pending())[0]
        assert req.deadline_at is not None
        results = await service.expire_due(now=req.deadline_at)
        assert [r.action for r in results] == ["escalated"]
        return frozenset({"U0CAROL"})

    service = ApprovalService(store, policy, membership=members)
    holder["service"] = service
    req = await service.submit(ApprovalEvent(tool_name="deploy"))
    assert req.route == "default"
    with pytest.raises(NotAllowed):
        await service.decide(req.id, "approve", Actor("U0CAROL"))
    after = await store.get(req.id)
    assert (after.route, after.status, after.votes) == ("oncall", "pending", ())


@pytest.mark.parametrize(
    ("outcome", "field"), [("deny", "reason"), ("approve", "input"), ("approve", "reason")]
)
async def test_overlong_answers_are_invalid_requests_and_change_nothing(
    store: ApprovalStore, outcome: str, field: str
) -> None:
    service = ApprovalService(store, policy_of([]))
    req = await service.submit(ApprovalEvent(tool_name="deploy"), ApprovalConfig(kind="input"))
    answer = {"input": "ok", field: "x" * (MAX_TEXT + 1)}
    for actor in (Actor("U0ANN"), Actor("ops", via="cli")):
        with pytest.raises(InvalidRequest, match=field):
            await service.decide(req.id, outcome, actor, **answer)  # type: ignore[arg-type]
    after = await store.get(req.id)
    assert after.status == "pending" and after.votes == ()


async def test_a_session_grant_never_answers_a_question(store: ApprovalStore) -> None:
    """A grant says "this tool may run"; it cannot pick an option or type an answer, so a
    later `choice` / `input` call in the session is still asked."""
    policy = parse_policy(
        {"routes": {"default": {"channel": "C0DEF", "allow_for_session": True}}}, source="p.yaml"
    )
    service = ApprovalService(store, policy)
    first = await service.submit(ApprovalEvent(tool_name="pick", session_id="s1"))
    await service.decide(first.id, "approve", Actor("U0ANN"), for_session=True)
    plain = await service.submit(ApprovalEvent(tool_name="pick", session_id="s1"))
    assert plain.status == "approved" and plain.decision is not None
    assert plain.decision.via == "grant"
    for config in (ApprovalConfig(kind="choice", options=("a", "b")), ApprovalConfig(kind="input")):
        asked = await service.submit(ApprovalEvent(tool_name="pick", session_id="s1"), config)
        assert asked.status == "pending", config.kind
