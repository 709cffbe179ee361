"""Approve with edits in the domain: who may edit, checking an edit, and votes bound to the
version they were cast on (real Redis, concurrent edits and votes)."""

from __future__ import annotations

import asyncio

import pytest

from approvals._internal.edits import check_edit, edits_offered, version_of
from approvals._internal.policy_file import parse_policy
from approvals._internal.service import Actor, ApprovalService
from approvals._internal.store.store import ApprovalStore
from approvals.errors import InvalidRequest, NotAllowed
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest

ALICE, BOB, CAROL, DAN = (Actor(u) for u in ("U0ALICE", "U0BOB", "U0CAROL", "U0DAN"))


def request(**event: object) -> ApprovalRequest:
    config = ApprovalConfig(allow_edits=True)
    args = event.pop("arguments", {"env": "prod"})
    return ApprovalRequest(
        event=ApprovalEvent(tool_name="deploy", arguments=args, **event),  # type: ignore[arg-type]
        config=config,
    )


def service(store: ApprovalStore, quorum: int = 1, **route: object) -> ApprovalService:
    policy = parse_policy(
        {"routes": {"default": {"channel": "C0APPROVALS", "quorum": quorum, **route}}},
        source="test",
    )
    return ApprovalService(store, policy)


def test_edits_are_offered_only_where_the_agent_can_run_them() -> None:
    assert edits_offered(request())
    assert edits_offered(request(agent="claude-code"))
    assert not edits_offered(request(agent="codex"))
    assert not edits_offered(request().model_copy(update={"metadata": {"source": "openai-agents"}}))
    assert not edits_offered(request(kind="permissions"))
    choice = request().model_copy(update={"config": ApprovalConfig(kind="input", allow_edits=True)})
    assert not edits_offered(choice)
    assert not edits_offered(request().model_copy(update={"config": ApprovalConfig()}))


def test_check_edit_refuses_what_cannot_run() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"env": {"enum": ["prod", "staging"]}},
        "required": ["env"],
    }
    req = request(arguments_schema=schema)
    assert check_edit(req, {"env": "staging"}) == {"env": "staging"}
    for bad, expected in (
        ([1], "not an array"),
        ("x", "not str"),
        ({"env": "qa"}, 'env: must be one of ["prod", "staging"]'),
        ({}, 'missing required "env"'),
        ({"env": "prod"}, "nothing was changed"),
        ({"env": float("nan")}, "plain JSON"),
    ):
        with pytest.raises(InvalidRequest) as caught:
            check_edit(req, bad)
        assert expected in caught.value.message, (bad, caught.value.message)
    # A broken schema from the agent: no edit can be checked, so none is taken.
    broken = request(arguments_schema={"type": "no-such-type"})
    with pytest.raises(InvalidRequest, match="not a valid JSON Schema"):
        check_edit(broken, {"env": "staging"})
    # The value is never echoed (it may be a secret the modal showed masked).
    secretive = request(arguments_schema={"properties": {"k": {"pattern": "^x"}}})
    with pytest.raises(InvalidRequest) as caught:
        check_edit(secretive, {"k": "hunter2-very-secret"})
    assert "hunter2" not in caught.value.message


@pytest.mark.timeout(30)
def test_checking_an_edit_is_bounded_on_hostile_schemas() -> None:
    """A reviewer's edit was checked by Python's backtracking `re` (`^(a+)+$` on 40 characters
    is 2**40 steps: the bot stalled) and by jsonschema's all-pairs `uniqueItems`. Both now
    answer at once (RE2, canonical forms); the guard is the test's timeout."""
    hostile = request(
        arguments={"k": "aaaa"},
        arguments_schema={"properties": {"k": {"type": "string", "pattern": "^(a+)+$"}}},
    )
    assert check_edit(hostile, {"k": "a" * 5000}) == {"k": "a" * 5000}
    with pytest.raises(InvalidRequest, match="k: does not satisfy the schema's 'pattern'"):
        check_edit(hostile, {"k": "a" * 40 + "!"})
    keyed = request(
        arguments={"aa": 1},
        arguments_schema={"patternProperties": {"^(a+)+$": {"type": "integer"}},
                          "additionalProperties": False},
    )  # fmt: skip
    with pytest.raises(InvalidRequest, match="additionalProperties"):
        check_edit(keyed, {"a" * 40 + "!": 1})
    with pytest.raises(InvalidRequest, match="must be of type"):
        check_edit(keyed, {"a" * 40: "x"})
    unique = request(arguments={"items": []}, arguments_schema={
        "properties": {"items": {"type": "array", "uniqueItems": True}}})  # fmt: skip
    many = [{"n": i, "tag": [i, "x"]} for i in range(20_000)]
    assert check_edit(unique, {"items": many}) == {"items": many}
    with pytest.raises(InvalidRequest, match="uniqueItems"):
        check_edit(unique, {"items": [*many, {"tag": [7, "x"], "n": 7.0}]})
    assert check_edit(unique, {"items": [1, True, "1"]}) == {"items": [1, True, "1"]}


def test_an_edit_against_a_schema_that_loops_is_refused_not_a_crash() -> None:
    """A request stored before schemas were checked at creation: its edit is refused."""
    looping = request(arguments_schema={"$ref": "#"})
    with pytest.raises(InvalidRequest, match="not a valid JSON Schema"):
        check_edit(looping, {"env": "staging"})


def test_versions_bind_the_request_and_the_edit() -> None:
    a, b = request(), request(arguments={"env": "dev"})
    assert version_of(a, {"env": "x"}) == version_of(a, {"env": "x"})
    assert version_of(a, {"env": "x"}) != version_of(a, {"env": "y"})
    assert version_of(a, {"env": "x"}) != version_of(b, {"env": "x"})


async def test_an_edit_on_quorum_one_approves_exactly_the_edit(store: ApprovalStore) -> None:
    svc = service(store)
    req = await svc.submit(ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}))
    result = await svc.edit(req.id, ALICE, {"env": "staging"}, note="staging first")
    assert result.status == "decided"
    d = result.request.decision
    assert d is not None and d.outcome == "approve"
    assert d.edited_arguments == {"env": "staging"} and d.edited_by == "U0ALICE"
    assert d.reason == "staging first"
    events = [e.event for e in await store.audit_entries(request_id=req.id)]
    assert events[-2:] == ["edit", "approved"]


async def test_edits_are_refused_to_non_reviewers_and_where_not_offered(
    store: ApprovalStore,
) -> None:
    svc = service(store, reviewers=["U0ALICE"])
    req = await svc.submit(ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}))
    with pytest.raises(NotAllowed):
        await svc.edit(req.id, BOB, {"env": "staging"})
    off = service(store, allow_edits=False)
    other = await off.submit(ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}))
    assert not other.config.allow_edits
    with pytest.raises(InvalidRequest, match="not offered"):
        await off.edit(other.id, ALICE, {"env": "staging"})
    assert (await store.get(req.id)).is_pending and (await store.get(other.id)).is_pending


async def test_quorum_votes_count_only_for_the_version_they_saw(store: ApprovalStore) -> None:
    svc = service(store, quorum=3)
    req = await svc.submit(ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}))
    assert (await svc.decide(req.id, "approve", ALICE, version="")).status == "recorded"
    first = await svc.edit(req.id, BOB, {"env": "staging"})
    assert first.status == "recorded"
    assert [v.user for v in first.request.votes] == ["U0BOB"], "the edit restarted the count"
    proposal = first.request.proposal
    assert proposal is not None
    # A vote for the agent's own arguments, or an edit of them, no longer counts.
    assert (await svc.decide(req.id, "approve", CAROL, version="")).status == "stale"
    assert (await svc.edit(req.id, CAROL, {"env": "dev"}, version="")).status == "stale"
    assert (await svc.decide(req.id, "approve", ALICE, version=proposal.version)).status == (
        "recorded"
    )
    done = await svc.decide(req.id, "approve", CAROL, version=proposal.version)
    assert done.status == "decided"
    d = done.request.decision
    assert d is not None and d.edited_arguments == {"env": "staging"} and d.edited_by == "U0BOB"


async def test_concurrent_edits_and_votes_never_approve_an_unseen_version(
    store: ApprovalStore,
) -> None:
    """Racing edits and votes: whatever wins, the approval is of one version, and every vote
    counted towards it was cast on that version."""
    for _ in range(10):
        svc = service(store, quorum=2)
        req = await svc.submit(ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}))
        await svc.edit(req.id, ALICE, {"env": "v1"})
        seen = (await store.get(req.id)).proposal
        assert seen is not None
        results = await asyncio.gather(
            svc.edit(req.id, BOB, {"env": "v2"}, version=seen.version),
            svc.decide(req.id, "approve", CAROL, version=seen.version),
            svc.edit(req.id, DAN, {"env": "v3"}, version=seen.version),
        )
        final = await store.get(req.id)
        statuses = sorted(r.status for r in results)
        if final.status == "approved":
            # Carol's vote landed first on v1: v1 is approved, both edits came too late.
            assert final.decision is not None
            assert final.decision.edited_arguments == {"env": "v1"}
            assert statuses == ["closed", "closed", "decided"]
        else:
            # An edit landed first: Carol's vote (for v1) and the other edit are stale.
            assert final.proposal is not None
            assert [v.user for v in final.votes] == [final.proposal.by]
            assert statuses == ["recorded", "stale", "stale"]
