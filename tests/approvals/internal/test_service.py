"""The approval service on real Redis: routing, who may decide, validation, CLI, deadlines, long
policy verdicts, votes racing an escalation, grants."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from approvals._internal.policy import Policy
from approvals._internal.policy_file import parse_policy
from approvals._internal.service import Actor, ApprovalService
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals.errors import InvalidRequest, NotAllowed
from approvals.models import MAX_TEXT, ApprovalConfig, ApprovalEvent, Sensitivity

POLICY: dict[str, Any] = {
    "routes": {
        "default": {"channel": "C0DEFAULT", "reviewers": ["U0ANN"]},
        "ops": {"channel": "C0OPS", "reviewers": ["U0ANN", "U0BOB"], "quorum": 2},
        "dbas": {"channel": "C0DBA", "reviewers": ["U0DBA", "S0DBA"], "allow_for_session": True},
        "security": {"channel": "G0SEC", "reviewers": ["S0SEC"], "quorum": 2},
        "open": {"channel": "C0OPEN"},
    },
    "sensitivity_routes": {"secret": "security"},
    "rules": [
        {
            "name": "prod-deploys",
            "action": "ask",
            "route": "ops",
            "match": {"tool": "deploy", "arguments": {"env": "^prod"}},
        },
        {"name": "databases", "action": "ask", "route": "dbas", "match": {"tool": "db_*"}},
        {"name": "one-is-enough", "action": "ask", "route": "ops", "quorum": 1,
         "match": {"tool": "restart"}},
        {"name": "anyone", "action": "ask", "route": "open", "match": {"tool": "lint"}},
        {"name": "reads", "action": "allow", "match": {"tool": ["read_*", "Bash"]}},
        {
            "name": "no-rm",
            "action": "deny",
            "reason": "never rm -rf",
            "match": {"arguments": {"command": "^rm -rf"}},
        },
    ],
}  # fmt: skip


def make_policy(**changes: Any) -> Policy:
    return parse_policy({**copy.deepcopy(POLICY), **changes}, source="test-policy.yaml")


@pytest.fixture
def service(store: ApprovalStore) -> ApprovalService:
    return ApprovalService(store, make_policy())


def event(tool: str = "deploy", **fields: Any) -> ApprovalEvent:
    return ApprovalEvent(tool_name=tool, arguments=fields.pop("arguments", {}), **fields)


# -- routing: (tool, arguments, sensitivity) → route, channel, reviewers, quorum, status ----

ROUTING = [
    pytest.param(
        "deploy", {"env": "prod-eu"}, "low",
        ("ops", "C0OPS", ("U0ANN", "U0BOB"), 2, "pending"), id="rule-route-quorum",
    ),
    pytest.param(
        "deploy", {"env": "staging"}, "low",
        ("default", "C0DEFAULT", ("U0ANN",), 1, "pending"), id="no-match-default-route",
    ),
    pytest.param(
        "db_migrate", {}, "low",
        ("dbas", "C0DBA", ("U0DBA", "S0DBA"), 1, "pending"), id="glob-and-group",
    ),
    pytest.param(
        "restart", {}, "low",
        ("ops", "C0OPS", ("U0ANN", "U0BOB"), 1, "pending"), id="rule-quorum-over-route",
    ),
    pytest.param(
        "deploy", {"env": "staging"}, "secret",
        ("security", "G0SEC", ("S0SEC",), 2, "pending"), id="secret-stricter-route",
    ),
    pytest.param(
        "restart", {}, "secret",
        ("security", "G0SEC", ("S0SEC",), 2, "pending"), id="secret-raises-rule-quorum",
    ),
    pytest.param(
        "lint", {}, "pii",
        ("open", "C0OPEN", (), 1, "pending"), id="pii-has-no-route-of-its-own",
    ),
    pytest.param(
        "read_file", {"path": "/etc/hosts"}, "low",
        ("default", None, (), 1, "approved"), id="allow-at-once",
    ),
    pytest.param(
        "Bash", {"command": "rm -rf /"}, "low",
        ("default", None, (), 1, "denied"), id="deny-beats-allow",
    ),
    pytest.param(
        "deploy", {"env": "prod", "command": "rm -rf /srv"}, "low",
        ("default", None, (), 1, "denied"), id="deny-beats-ask",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("tool", "arguments", "sensitivity", "expected"), ROUTING)
async def test_routing_per_rule(
    service: ApprovalService,
    store: ApprovalStore,
    tool: str,
    arguments: dict[str, Any],
    sensitivity: Sensitivity,
    expected: tuple[Any, ...],
) -> None:
    created = await service.submit(
        event(tool, arguments=arguments), ApprovalConfig(sensitivity=sensitivity)
    )
    stored = await store.get(created.id)
    for req in (created, stored):
        assert (req.route, req.channel, req.reviewers, req.quorum, req.status) == expected
    if stored.status == "pending":
        assert [r.id for r in await store.list_pending()] == [stored.id]
    assert stored.config.sensitivity == sensitivity


async def test_policy_answers_are_audited_with_the_rule_name(
    service: ApprovalService, store: ApprovalStore
) -> None:
    allowed = await service.submit(event("read_file", arguments={"path": "/x"}))
    denied = await service.submit(event("Bash", arguments={"command": "rm -rf /"}))
    assert allowed.decision is not None and allowed.decision.via == "policy"
    assert allowed.decision.decided_by == "policy:reads"
    assert denied.decision is not None and denied.decision.reason == "never rm -rf"
    assert denied.decision.decided_by == "policy:no-rm"
    trail = [(e.request_id, e.event, e.by, e.via) for e in await store.audit_entries()]
    assert (allowed.id, "approved", "policy:reads", "policy") in trail
    assert (denied.id, "denied", "policy:no-rm", "policy") in trail
    assert await store.list_pending() == []


async def test_route_deadline_beats_a_shorter_caller_deadline(store: ApprovalStore) -> None:
    routes = copy.deepcopy(POLICY["routes"])
    routes["default"] |= {"deadline_seconds": 600, "on_timeout": "approve"}
    service = ApprovalService(store, make_policy(routes=routes))
    req = await service.submit(event("deploy"), ApprovalConfig(deadline_seconds=1))
    assert req.deadline_at is not None
    assert (req.deadline_at - req.created_at).total_seconds() == pytest.approx(600, abs=1)


async def test_route_offers_approve_for_session(service: ApprovalService) -> None:
    offered = await service.submit(event("db_migrate", session_id="s1"))
    assert offered.config.allow_for_session
    plain = await service.submit(event("deploy", session_id="s1"))
    assert not plain.config.allow_for_session


# -- who may decide ----------------------------------------------------------------------


def membership_of(groups: dict[str, set[str]]) -> Callable[[str], Any]:
    asked: list[str] = []

    async def members(group: str) -> frozenset[str]:
        asked.append(group)
        return frozenset(groups.get(group, ()))

    members.asked = asked  # type: ignore[attr-defined]
    return members


MAY_DECIDE = [
    pytest.param("db_migrate", None, Actor("U0DBA"), None, id="listed-user"),
    pytest.param("db_migrate", None, Actor("U0GRP"), None, id="group-member"),
    pytest.param("db_migrate", None, Actor("U0EVE"), "not_reviewer", id="stranger"),
    pytest.param("db_migrate", "U0DBA", Actor("U0DBA"), "self", id="requester-reviewer"),
    pytest.param("db_migrate", "U0GRP", Actor("U0GRP"), "self", id="requester-in-group"),
    pytest.param("lint", None, Actor("U0EVE"), None, id="no-reviewers-anyone"),
    pytest.param("lint", "U0EVE", Actor("U0EVE"), "self", id="no-reviewers-not-self"),
    pytest.param("db_migrate", None, Actor("ops", via="cli"), None, id="cli-operator"),
    pytest.param("db_migrate", None, Actor("U0EVE", via="api"), "not_reviewer", id="api-user"),
]


@pytest.mark.parametrize(("tool", "requester", "actor", "expected"), MAY_DECIDE)
async def test_may_decide(
    store: ApprovalStore, tool: str, requester: str | None, actor: Actor, expected: str | None
) -> None:
    service = ApprovalService(
        store, make_policy(), membership=membership_of({"S0DBA": {"U0GRP"}, "S0SEC": {"U0EVE"}})
    )
    req = await service.submit(event(tool), requester=requester)
    assert await service.may_decide(req, actor) == expected


async def test_groups_without_a_membership_resolver_admit_nobody(store: ApprovalStore) -> None:
    service = ApprovalService(store, make_policy())
    req = await service.submit(event("db_migrate"))
    assert await service.may_decide(req, Actor("U0GRP")) == "not_reviewer"
    assert await service.may_decide(req, Actor("U0DBA")) is None


async def test_refused_decisions_change_nothing(store: ApprovalStore) -> None:
    members = membership_of({"S0DBA": {"U0GRP"}})
    service = ApprovalService(store, make_policy(), membership=members)
    req = await service.submit(event("db_migrate"), requester="U0DBA")
    with pytest.raises(NotAllowed) as refused:
        await service.decide(req.id, "approve", Actor("U0DBA"))
    assert refused.value.details == "self"
    with pytest.raises(NotAllowed) as refused:
        await service.decide(req.id, "deny", Actor("U0EVE"))
    assert refused.value.details == "not_reviewer"
    after = await store.get(req.id)
    assert after.status == "pending" and after.votes == ()
    assert members.asked == ["S0DBA"]  # type: ignore[attr-defined]
    result = await service.decide(req.id, "approve", Actor("U0GRP"))
    assert result.status == "decided" and result.request.status == "approved"


# -- validation of a decision ----------------------------------------------------------------

INVALID = [
    pytest.param(
        ApprovalConfig(kind="choice", options=("a", "b")), {}, "selection", id="choice-no-selection"
    ),
    pytest.param(
        ApprovalConfig(kind="choice", options=("a", "b")),
        {"selection": "c"},
        "selection",
        id="choice-unknown-selection",
    ),
    pytest.param(ApprovalConfig(), {"selection": "a"}, "selection", id="selection-not-choice"),
    pytest.param(ApprovalConfig(kind="input"), {}, "input", id="input-missing"),
    pytest.param(ApprovalConfig(kind="input"), {"input": "  \n"}, "input", id="input-blank"),
    pytest.param(ApprovalConfig(), {"for_session": True}, "for_session", id="session-not-offered"),
    pytest.param(
        ApprovalConfig(allow_for_session=True),
        {"for_session": True},
        "for_session",
        id="session-without-session-id",
    ),
]


@pytest.mark.parametrize(("config", "answer", "field"), INVALID)
@pytest.mark.parametrize("via", ["slack", "cli"])
async def test_decide_validation_errors(
    service: ApprovalService,
    store: ApprovalStore,
    config: ApprovalConfig,
    answer: dict[str, Any],
    field: str,
    via: str,
) -> None:
    req = await service.submit(event("deploy"), config)
    with pytest.raises(InvalidRequest) as invalid:
        await service.decide(req.id, "approve", Actor("U0ANN", via=via), **answer)
    assert invalid.value.details == field
    after = await store.get(req.id)
    assert after.status == "pending" and after.votes == ()


async def test_valid_answers_pass_through(service: ApprovalService, store: ApprovalStore) -> None:
    choice = await service.submit(event("deploy"), ApprovalConfig(kind="choice", options=("a",)))
    result = await service.decide(choice.id, "approve", Actor("U0ANN"), selection="a")
    assert result.request.decision is not None and result.request.decision.selection == "a"
    typed = await service.submit(event("deploy"), ApprovalConfig(kind="input"))
    denied = await service.decide(typed.id, "deny", Actor("U0ANN"), reason="no")
    assert denied.request.status == "denied", "a deny needs no typed answer"


# -- quorum, duplicates, CLI -----------------------------------------------------------------


async def test_quorum_counts_each_reviewer_once(
    service: ApprovalService, store: ApprovalStore
) -> None:
    req = await service.submit(event("deploy", arguments={"env": "prod"}))
    first = await service.decide(req.id, "approve", Actor("U0ANN"))
    assert (first.status, first.approvals, first.request.status) == ("recorded", 1, "pending")
    again = await service.decide(req.id, "approve", Actor("U0ANN"))
    assert (again.status, again.approvals) == ("duplicate", 1)
    second = await service.decide(req.id, "approve", Actor("U0BOB"))
    assert (second.status, second.request.status) == ("decided", "approved")
    late = await service.decide(req.id, "deny", Actor("U0BOB"))
    assert late.status == "closed" and late.request.status == "approved"
    assert [v.user for v in (await store.get(req.id)).votes] == ["U0ANN", "U0BOB"]


@pytest.mark.parametrize(
    ("outcome", "status"), [("approve", "approved"), ("deny", "denied")], ids=["approve", "deny"]
)
async def test_cli_decides_outright(
    service: ApprovalService, store: ApprovalStore, outcome: Any, status: str
) -> None:
    req = await service.submit(
        event("deploy", arguments={"env": "prod"}), ApprovalConfig(sensitivity="secret")
    )
    assert req.quorum == 2 and req.reviewers == ("S0SEC",)
    result = await service.decide(
        req.id, outcome, Actor("cli:ops", via="cli"), reason="break-glass"
    )
    assert result.status == "decided"
    after = await store.get(req.id)
    assert after.status == status and after.votes == ()
    assert after.decision is not None
    assert (after.decision.decided_by, after.decision.via) == ("cli:ops", "cli")
    again = await service.decide(req.id, "approve", Actor("cli:ops", via="cli"))
    assert again.status == "closed"
    audit = [e for e in await store.audit_entries(request_id=req.id) if e.event == status]
    assert [(e.by, e.via) for e in audit] == [("cli:ops", "cli")]


async def test_cli_grant_for_session(service: ApprovalService, store: ApprovalStore) -> None:
    req = await service.submit(event("db_migrate", session_id="s9"))
    await service.decide(req.id, "approve", Actor("cli:ops", via="cli"), for_session=True)
    later = await service.submit(event("db_migrate", session_id="s9"))
    assert later.status == "approved" and later.decision is not None
    assert (later.decision.decided_by, later.decision.via) == ("cli:ops", "grant")
    assert req.id in (later.decision.reason or "")


async def test_a_grant_revoked_after_its_lookup_decides_nothing(
    service: ApprovalService, store: ApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Revoked between the lookup and the create (another replica, `grant revoke`): the
    create script sees it gone, and the call is asked on Slack instead of approved."""
    req = await service.submit(event("db_migrate", session_id="s7"))
    await service.decide(req.id, "approve", Actor("cli:ops", via="cli"), for_session=True)
    find = service.grants.find

    async def find_then_revoke(*args: Any) -> Any:
        found = await find(*args)
        assert found is not None
        await service.grants.revoke(found.id, by="cli:ops")
        return found

    monkeypatch.setattr(service.grants, "find", find_then_revoke)
    raced = await service.submit(event("db_migrate", session_id="s7"))
    assert raced.status == "pending" and raced.decision is None
    assert (await store.get(raced.id)).status == "pending"
    assert raced.id in [r.id for r in await store.list_pending()]
    assert [e.event for e in await store.audit_entries(request_id=raced.id)] == ["created"]


async def test_grant_never_skips_a_stricter_route(
    service: ApprovalService, store: ApprovalStore, redis: Redis
) -> None:
    # Granted on the lax `dbas` route; the same tool with a secret argument goes to `security`.
    req = await service.submit(event("db_query", session_id="s1"))
    await service.decide(req.id, "approve", Actor("U0DBA"), for_session=True)
    same_route = await service.submit(event("db_query", session_id="s1"))
    assert same_route.status == "approved" and same_route.decision is not None
    assert same_route.decision.via == "grant"
    stricter = await service.submit(
        event("db_query", session_id="s1"), ApprovalConfig(sensitivity="secret")
    )
    assert stricter.route == "security" and stricter.status == "pending"
    assert stricter.quorum == 2


async def test_grant_buckets_cannot_collide(store: ApprovalStore) -> None:
    keys = store.keys
    assert keys.grant_bucket("p", "a", None, "b:c") != keys.grant_bucket("p", "a:b", None, "c")
    assert keys.grant_bucket("p:a", "b", None, "c") != keys.grant_bucket("p", "a:b", None, "c")
    assert keys.grant_bucket(None, "a", None, "c") != keys.grant_bucket("None", "a", None, "c")


# -- deadlines (a controlled clock, no Slack) ------------------------------------------------


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


CHAIN: dict[str, Any] = {
    "routes": {
        "default": {
            "channel": "C0A", "reviewers": ["U0A"], "deadline_seconds": 10,
            "on_timeout": "escalate", "escalate_to": "b",
        },
        "b": {
            "channel": "C0B", "reviewers": ["U0B1", "U0B2"], "quorum": 2, "deadline_seconds": 20,
            "on_timeout": "escalate", "escalate_to": "c",
        },
        "c": {"channel": "C0C", "deadline_seconds": 30, "on_timeout": "approve"},
    }
}  # fmt: skip


async def test_expire_due_walks_the_escalation_chain(redis: Redis, keys: Keys) -> None:
    clock = Clock()
    store = ApprovalStore(redis, keys, clock=clock)
    service = ApprovalService(store, parse_policy(copy.deepcopy(CHAIN), source="chain.yaml"))
    req = await service.submit(event("deploy"))
    assert (req.route, req.channel) == ("default", "C0A")
    assert await service.expire_due() == [], "nothing is due yet"
    clock.now += 11
    (step,) = await service.expire_due()
    assert step.action == "escalated"
    moved = await store.get(req.id)
    assert (moved.route, moved.channel, moved.reviewers, moved.quorum, moved.escalations) == (
        "b",
        "C0B",
        ("U0B1", "U0B2"),
        2,
        1,
    )
    assert moved.deadline_at == pytest.approx(
        store.now() + timedelta(seconds=20), abs=timedelta(milliseconds=1)
    )
    assert await service.may_decide(moved, Actor("U0A")) == "not_reviewer"
    clock.now += 21
    (step,) = await service.expire_due()
    assert step.action == "escalated" and (await store.get(req.id)).route == "c"
    clock.now += 31
    (step,) = await service.expire_due()
    assert step.action == "approved"
    done = await store.get(req.id)
    assert done.status == "approved" and done.decision is not None
    assert done.decision.via == "timeout"
    trail = [(e.event, e.reason) for e in await store.audit_entries(request_id=req.id)]
    assert ("escalated", "default -> b") in trail and ("escalated", "b -> c") in trail
    assert trail[-1][0] == "approved"


async def test_max_escalations_then_deny(redis: Redis, keys: Keys) -> None:
    clock = Clock()
    store = ApprovalStore(redis, keys, clock=clock)
    data = copy.deepcopy(CHAIN)
    data["routes"]["b"]["max_escalations"] = 1
    service = ApprovalService(store, parse_policy(data, source="chain.yaml"))
    req = await service.submit(event("deploy"))
    clock.now += 11
    assert [r.action for r in await service.expire_due()] == ["escalated"]
    clock.now += 21
    assert [r.action for r in await service.expire_due()] == ["expired"]
    done = await store.get(req.id)
    assert (done.status, done.route, done.escalations) == ("expired", "b", 1)
    assert done.decision is not None and done.decision.reason == "approval timeout"


async def test_decided_meanwhile_is_not_escalated(redis: Redis, keys: Keys) -> None:
    clock = Clock()
    store = ApprovalStore(redis, keys, clock=clock)
    service = ApprovalService(store, parse_policy(copy.deepcopy(CHAIN), source="chain.yaml"))
    req = await service.submit(event("deploy"))
    clock.now += 11
    await service.decide(req.id, "approve", Actor("U0A"))
    assert await service.expire_due() == []
    done = await store.get(req.id)
    assert (done.status, done.route, done.escalations) == ("approved", "default", 0)


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


# -- planted-bug audit: each test fails when its bug is put back ----------------------


async def test_a_caller_never_turns_on_whole_tool_grants(store: ApprovalStore) -> None:
    """`allow_tool_grants` is the route's word: a caller's `true` (the Redis and in-process
    clients can send it; the HTTP schema does not take it) is dropped on a route that does not
    allow whole-tool grants, and a caller's `false` does not take it from a route that does."""
    routes = copy.deepcopy(POLICY["routes"]) | {
        "default": {"channel": "C0DEF", "reviewers": ["U0ANN"], "allow_for_session": True},
        "open": {"channel": "C0OPEN", "allow_for_session": True, "allow_tool_grants": True},
    }
    rules = [{"name": "open", "action": "ask", "route": "open", "match": {"tool": "lint"}}]
    service = ApprovalService(store, make_policy(routes=routes, rules=rules))
    asks = ApprovalConfig(allow_for_session=True, allow_tool_grants=True)
    strict = await service.submit(event("deploy", session_id="s1"), asks)
    assert not strict.config.allow_tool_grants
    assert not (await store.get(strict.id)).config.allow_tool_grants
    assert "tool" not in {o.scope for o in service.scope_options(strict)}
    with pytest.raises(InvalidRequest, match="scope 'tool' is not offered"):
        await service.decide(strict.id, "approve", Actor("U0ANN"), for_session=True, scope="tool")
    assert (await store.get(strict.id)).is_pending
    opened = await service.submit(event("lint", session_id="s1"), ApprovalConfig())
    assert opened.config.allow_tool_grants


class OvertakenStore(ApprovalStore):
    """A sweeper's store whose read of a due request is overtaken, once, by `overtake` (another
    replica's sweeper acting on the same request between this read and this decision)."""

    overtake: Callable[[], Any] | None = None

    async def get_many(self, request_ids: Any) -> dict[str, Any]:
        found = await super().get_many(request_ids)
        step, self.overtake = self.overtake, None
        if step is not None:
            await step()
        return found


@pytest.mark.parametrize("on_timeout", ["deny", "approve"])
async def test_a_sweeper_holding_an_old_deadline_decides_nothing(
    redis: Redis, keys: Keys, on_timeout: str
) -> None:
    """Two replicas sweep with different policies (one reloaded before the other): one moves
    the request on to route b with a new deadline while the other, which read it before,
    would deny (or approve) it on its old route. Its decision is conditional on the deadline
    it read."""
    clock = Clock()
    escalating = ApprovalService(
        ApprovalStore(redis, keys, clock=clock), parse_policy(copy.deepcopy(CHAIN), source="a")
    )
    reloaded = copy.deepcopy(CHAIN)
    reloaded["routes"]["default"] = {
        "channel": "C0A", "reviewers": ["U0A"], "deadline_seconds": 10, "on_timeout": on_timeout
    }  # fmt: skip
    late_store = OvertakenStore(redis, keys, clock=clock)
    late = ApprovalService(late_store, parse_policy(reloaded, source="b"))
    req = await escalating.submit(event("deploy"))
    clock.now += 11

    async def escalate_first() -> None:
        (step,) = await escalating.expire_due()
        assert step.action == "escalated"

    late_store.overtake = escalate_first
    (result,) = await late.expire_due()
    assert result.action == "skipped"
    moved = await escalating.store.get(req.id)
    assert (moved.status, moved.route, moved.escalations) == ("pending", "b", 1)
