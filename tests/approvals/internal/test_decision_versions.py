"""Every decision is bound to the version of the arguments it was shown, and a session grant to
exactly what a quorum approved, on real Redis: the service, and the store's
scripts as the one point of truth when an edit lands between a decider's read and its write."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from approvals._internal.edits import current_version
from approvals._internal.grant_scopes import approved_call, call_hash
from approvals._internal.policy_file import parse_policy
from approvals._internal.service import Actor, ApprovalService
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals.errors import InvalidRequest
from approvals.models import ApprovalEvent, ApprovalRequest, Decision

ROUTES = {
    "default": {
        "channel": "C0APPROVALS",
        "reviewers": ["U0ANN", "U0BOB", "U0CAT"],
        "quorum": 2,
        "allow_for_session": True,
        "allow_tool_grants": True,
    }
}


class OvertakenStore(ApprovalStore):
    """A store whose next read is followed, once, by `overtake` (another replica's step landing
    between a decider's read of the request and its write)."""

    overtake: Callable[[], Awaitable[object]] | None = None

    async def get_many(self, request_ids: Any) -> dict[str, Any]:
        found = await super().get_many(request_ids)
        step, self.overtake = self.overtake, None
        if step is not None:
            await step()
        return found


@pytest.fixture
def service(redis: Redis, keys: Keys) -> ApprovalService:
    policy = parse_policy({"routes": json.loads(json.dumps(ROUTES))}, source="versions.yaml")
    return ApprovalService(OvertakenStore(redis, keys), policy)


def bash(command: str) -> ApprovalEvent:
    return ApprovalEvent(
        kind="command",
        tool_name="Bash",
        arguments={"command": command},
        command=command,
        session_id="s1",
        agent="claude-code",
    )


async def grants_of(service: ApprovalService) -> list[Any]:
    return await service.grants.list()


async def test_a_stale_approve_for_session_after_an_edit_records_nothing(
    service: ApprovalService,
) -> None:
    """The issue's probe: reviewer 1 edits; reviewer 2's "Approve for session" was drawn on
    the original ('' version). It completed the quorum for the edited call and granted the
    original arguments, which then ran with no vote at all."""
    req = await service.submit(bash("rm -rf build"), principal="agent-a")
    edited = {"command": "rm -rf build/cache"}
    await service.edit(req.id, Actor("U0ANN"), edited)
    result = await service.decide(
        req.id, "approve", Actor("U0BOB"), for_session=True, scope="call", version=""
    )
    assert result.status == "stale"
    after = await service.store.get(req.id)
    assert after.is_pending and [v.user for v in after.votes] == ["U0ANN"]
    assert await grants_of(service) == []
    events = [e.event for e in await service.store.audit_entries(request_id=req.id)]
    assert events == ["created", "edit"], "no vote, no decision, no grant audited"
    again = await service.submit(bash("rm -rf build"), principal="agent-a")
    assert again.status == "pending", "the original call is asked again"


async def test_approve_for_session_is_refused_while_an_edit_is_pending(
    service: ApprovalService,
) -> None:
    req = await service.submit(bash("rm -rf build"), principal="agent-a")
    await service.edit(req.id, Actor("U0ANN"), {"command": "rm -rf build/cache"})
    version = current_version(await service.store.get(req.id))
    for seen in (version, None):
        with pytest.raises(InvalidRequest, match="not offered for an edited call"):
            await service.decide(req.id, "approve", Actor("U0BOB"), for_session=True, version=seen)
    assert (await service.store.get(req.id)).is_pending
    # Approved as edited, it grants nothing, and the agent's own call is asked again.
    done = await service.decide(req.id, "approve", Actor("U0BOB"), version=version)
    assert done.status == "decided" and done.request.decision is not None
    assert done.request.decision.edited_arguments == {"command": "rm -rf build/cache"}
    assert not done.request.decision.for_session and await grants_of(service) == []
    assert (await service.submit(bash("rm -rf build"), principal="agent-a")).status == "pending"


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        pytest.param(None, "call", None, id="one-of-two-chose-session: no grant"),
        pytest.param("call", None, None, id="the-first-alone: no grant"),
        pytest.param("prefix", "call", "call", id="narrowest: call"),
        pytest.param("tool", "prefix", "prefix", id="narrowest: prefix"),
        pytest.param("tool", "tool", "tool", id="both: tool"),
    ],
)
async def test_a_grant_needs_a_quorum_of_session_votes_and_takes_the_narrowest_scope(
    service: ApprovalService, first: str | None, second: str | None, expected: str | None
) -> None:
    req = await service.submit(bash("npm test -- -k unit"), principal="agent-a")
    for who, scope in (("U0ANN", first), ("U0BOB", second)):
        result = await service.decide(
            req.id,
            "approve",
            Actor(who),
            for_session=scope is not None,
            scope=scope or "call",  # type: ignore[arg-type]
            version="",
        )
    assert result.status == "decided"
    decision = result.request.decision
    assert decision is not None and decision.outcome == "approve"
    assert (decision.for_session, decision.scope) == (expected is not None, expected)
    assert (await service.store.get(req.id)).decision == decision
    grants = await grants_of(service)
    assert [g.scope for g in grants] == ([expected] if expected else [])
    later = await service.submit(bash("npm test -- -k unit"), principal="agent-a")
    assert (later.status == "approved") == (expected is not None)


async def test_a_deny_decides_whatever_the_session_votes(service: ApprovalService) -> None:
    req = await service.submit(bash("npm test"), principal="agent-a")
    await service.decide(req.id, "approve", Actor("U0ANN"), for_session=True, version="")
    result = await service.decide(req.id, "deny", Actor("U0BOB"), version="")
    assert result.request.status == "denied" and await grants_of(service) == []


@pytest.mark.parametrize("version", ["", None], ids=["version-shown", "version-read"])
@pytest.mark.parametrize("via", ["slack", "cli"])
async def test_an_edit_landing_between_the_read_and_the_write_is_never_approved_unseen(
    service: ApprovalService, via: str, version: str | None
) -> None:
    """Two replicas: a decider reads the request (the agent's own arguments), another
    replica's edit lands, then the decider writes. The script sees the version changed and
    records nothing: the version check is inside the compare-and-set, not only in Python
    (with the version the decider was shown, or, for a trusted caller, the one it read)."""
    req = await service.submit(bash("rm -rf build"), principal="agent-a")
    store = service.store
    assert isinstance(store, OvertakenStore)

    async def edit_meanwhile() -> None:
        await service.edit(req.id, Actor("U0CAT"), {"command": "rm -rf build/cache"})

    store.overtake = edit_meanwhile
    who = Actor("U0ANN") if via == "slack" else Actor("cli:ops", via="cli")
    result = await service.decide(req.id, "approve", who, version=version)
    assert result.status == "stale"
    after = await store.get(req.id)
    assert after.is_pending and after.proposal is not None
    assert [v.user for v in after.votes] == ["U0CAT"]


async def test_the_cli_decides_only_the_version_it_names(service: ApprovalService) -> None:
    req = await service.submit(bash("rm -rf build"), principal="agent-a")
    await service.edit(req.id, Actor("U0ANN"), {"command": "rm -rf build/cache"})
    cli = Actor("cli:ops", via="cli")
    assert (await service.decide(req.id, "approve", cli, version="")).status == "stale"
    assert (await service.store.get(req.id)).is_pending
    version = current_version(await service.store.get(req.id))
    done = await service.decide(req.id, "approve", cli, version=version)
    assert done.status == "decided" and done.request.decision is not None
    assert done.request.decision.edited_arguments == {"command": "rm -rf build/cache"}


async def test_the_store_resolves_only_the_version_expected(service: ApprovalService) -> None:
    req = await service.submit(bash("ls"), principal="agent-a")
    await service.edit(req.id, Actor("U0ANN"), {"command": "ls -la"})
    stale = await service.store.resolve(
        req.id, Decision.approve(by="cli:ops", via="cli"), expected_version=""
    )
    assert stale.stale and not stale.won and stale.request.is_pending
    entries = [e.event for e in await service.store.audit_entries(request_id=req.id)]
    assert "approved" not in entries


def test_a_grant_covers_the_call_approved_the_edit_if_any() -> None:
    event = bash("rm -rf build")
    plain = ApprovalRequest(event=event, decision=Decision.approve(by="U0ANN"))
    assert approved_call(plain) == event
    edit = Decision.approve(by="U0ANN").model_copy(
        update={"edited_arguments": {"command": "rm -rf build/cache"}}
    )
    edited = approved_call(ApprovalRequest(event=event, decision=edit))
    assert edited is not None and call_hash(edited) == call_hash(bash("rm -rf build/cache"))
    assert call_hash(edited) != call_hash(event)
    # An edit that drops the command the agent would run cannot be told as a call: no grant.
    lost = edit.model_copy(update={"edited_arguments": {"cmd": "ls"}})
    assert approved_call(ApprovalRequest(event=event, decision=lost)) is None
