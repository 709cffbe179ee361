"""Asking the agent on real Redis (`approvals/_internal/questions.py`): `ApprovalService.ask`
(who may, the version and the route round it is bound to, quorum routes, routes that turn it
off, bounds), the link `resolve.lua` leaves and `create.lua` takes, `answered.lua`, and a call
id used again after a question."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from approvals._internal import questions
from approvals._internal.policy_file import parse_policy
from approvals._internal.service import Actor, ApprovalService
from approvals._internal.store.keys import Keys
from approvals._internal.store.posting import Posting
from approvals._internal.store.store import ApprovalStore
from approvals.errors import InvalidRequest, NotAllowed
from approvals.models import (
    MAX_QUESTION,
    Answered,
    ApprovalConfig,
    ApprovalEvent,
    ApprovalRequest,
    CallContext,
    Decision,
    Question,
    SlackMessage,
    utcnow,
)

POLICY: dict[str, Any] = {
    "routes": {
        "default": {
            "channel": "C0DEFAULT", "reviewers": ["U0ANN", "U0BOB"], "deadline_seconds": 900,
        },
        "pair": {"channel": "C0PAIR", "reviewers": ["U0ANN", "U0BOB"], "quorum": 2},
        "quiet": {"channel": "C0QUIET", "reviewers": ["U0ANN"], "allow_questions": False},
        "later": {"channel": "C0LATER", "reviewers": ["U0CAROL"]},
        "early": {
            "channel": "C0EARLY", "reviewers": ["U0ANN"], "deadline_seconds": 60,
            "on_timeout": "escalate", "escalate_to": "later",
        },
    },
    "rules": [
        {"name": "pairs", "action": "ask", "route": "pair", "match": {"tool": "db_drop"}},
        {"name": "quiet", "action": "ask", "route": "quiet", "match": {"tool": "page"}},
        {"name": "early", "action": "ask", "route": "early", "match": {"tool": "restart"}},
        {"name": "reads", "action": "allow", "match": {"tool": "read_file"}},
    ],
    "principals": {"ci-agent": {"slack_user": "U0OWNER"}},
}  # fmt: skip
ANN = Actor("U0ANN")
BOB = Actor("U0BOB")


@pytest.fixture
def service(store: ApprovalStore) -> ApprovalService:
    return ApprovalService(store, parse_policy(json.loads(json.dumps(POLICY)), source="test"))


def call(tool: str = "deploy", reason: str | None = "Ship it", **fields: Any) -> ApprovalEvent:
    return ApprovalEvent(
        tool_name=tool,
        arguments=fields.pop("arguments", {"env": "prod"}),
        session_id=fields.pop("session_id", "sess-1"),
        context=CallContext(reason=reason) if reason else None,
        **fields,
    )


async def test_a_question_ends_the_request_asked_and_leaves_a_link(
    service: ApprovalService, redis: Redis, keys: Keys
) -> None:
    request = await service.submit(call(), principal="ci-agent")
    assert questions.offered(request)
    result = await service.ask(request.id, ANN, "  Which region?  ", version="")
    assert result.status == "decided"
    asked = result.request
    assert asked.status == "asked" and not asked.is_pending
    assert asked.decision is not None and asked.decision.outcome == "asked"
    assert asked.decision.question == "Which region?" and asked.decision.decided_by == "U0ANN"
    assert not asked.decision.approves
    # Out of the indexes, like any decision; audited with who asked and the question.
    assert await redis.zscore(keys.pending, request.id) is None
    assert await redis.zscore(keys.deadlines, request.id) is None
    (entry,) = [e for e in await service.store.audit_entries() if e.event == "asked"]
    assert (entry.by, entry.via, entry.reason, entry.status) == (
        "U0ANN",
        "slack",
        "Which region?",
        "asked",
    )
    # The link for the caller's retry: the question, who asked, for the route's deadline.
    link = keys.question("ci-agent", "sess-1", "deploy")
    left = Question.model_validate_json(await redis.get(link))
    assert (left.request_id, left.question, left.asked_by) == (request.id, "Which region?", "U0ANN")
    assert 890 <= await redis.ttl(link) <= 900
    # A second question, or a late decision, changes nothing.
    again = await service.ask(request.id, BOB, "And why now?", version="")
    assert again.status == "closed" and again.request.decision == asked.decision
    late = await service.decide(request.id, "approve", BOB, version="")
    assert late.status == "closed" and late.request.status == "asked"


async def test_the_retry_takes_the_question_once(
    service: ApprovalService, redis: Redis, keys: Keys
) -> None:
    first = await service.submit(call(), principal="ci-agent")
    await service.ask(first.id, ANN, "Which region?", version="")
    # Another caller, another session or another tool does not take it.
    for other in (
        service.submit(call(), principal="other-agent"),
        service.submit(call(session_id="sess-2"), principal="ci-agent"),
        service.submit(call("migrate"), principal="ci-agent"),
    ):
        assert (await other).answers is None
    retry = await service.submit(
        call(arguments={"env": "prod", "region": "eu"}, reason="EU only: the bug is there."),
        principal="ci-agent",
    )
    assert retry.answers is not None
    assert (retry.answers.request_id, retry.answers.question) == (first.id, "Which region?")
    stored = await service.store.get(retry.id)
    assert stored.answers == retry.answers and stored.is_pending
    assert await redis.get(keys.question("ci-agent", "sess-1", "deploy")) is None
    later = await service.submit(call(arguments={"env": "qa"}), principal="ci-agent")
    assert later.answers is None, "the link is taken once"


async def test_no_session_no_link(service: ApprovalService, redis: Redis, keys: Keys) -> None:
    request = await service.submit(call(session_id=None), principal="ci-agent")
    result = await service.ask(request.id, ANN, "Why?", version="")
    assert result.request.status == "asked"
    assert not [k async for k in redis.scan_iter(f"{keys.prefix}:asked:*")]


async def test_a_retry_decided_at_once_takes_the_link_too(
    service: ApprovalService, redis: Redis, keys: Keys
) -> None:
    request = await service.submit(call(), principal="ci-agent")
    await service.ask(request.id, ANN, "Why?", version="")
    key = keys.question("ci-agent", "sess-1", "deploy")
    assert await redis.exists(key)
    # A session grant answers the retry at once (as `ApprovalService.create` stores it): it
    # takes the question, so no later call is shown as its answer.
    retry = ApprovalRequest(event=call(), principal="ci-agent", channel="C0DEFAULT")
    allowed = await service.store.create(
        retry, decision=Decision.approve(by="U0ANN", via="grant"), question_link=key
    )
    assert allowed.request.status == "approved" and allowed.request.answers is not None
    assert not await redis.exists(key)
    assert (await service.store.get(retry.id)).answers == allowed.request.answers


async def test_who_may_ask_is_who_may_decide(service: ApprovalService) -> None:
    request = await service.submit(call(), principal="ci-agent")
    with pytest.raises(NotAllowed) as refused:
        await service.ask(request.id, Actor("U0MALLORY"), "Why?", version="")
    assert refused.value.details == "not_reviewer"
    with pytest.raises(NotAllowed) as own:
        await service.ask(request.id, Actor("U0OWNER"), "Why?", version="")
    assert own.value.details == "self"
    assert (await service.store.get(request.id)).is_pending


@pytest.mark.parametrize(
    ("question", "problem"),
    [("", "a question is needed"), ("   ", "a question is needed"),
     ("x" * (MAX_QUESTION + 1), f"longer than {MAX_QUESTION}")],
)  # fmt: skip
async def test_a_question_is_bounded(service: ApprovalService, question: str, problem: str) -> None:
    request = await service.submit(call(), principal="ci-agent")
    with pytest.raises(InvalidRequest, match=problem):
        await service.ask(request.id, ANN, question, version="")
    assert (await service.store.get(request.id)).is_pending
    ok = await service.ask(request.id, ANN, "y" * MAX_QUESTION, version="")
    assert ok.status == "decided"


async def test_only_yes_no_requests_on_routes_that_allow_it(service: ApprovalService) -> None:
    quiet = await service.submit(call("page"), principal="ci-agent")
    assert quiet.config.allow_questions is False and not questions.offered(quiet)
    choice = await service.submit(
        call(), ApprovalConfig(kind="choice", options=("eu", "us")), principal="ci-agent"
    )
    typed = await service.submit(call(), ApprovalConfig(kind="input"), principal="ci-agent")
    for request in (quiet, choice, typed):
        with pytest.raises(InvalidRequest, match="not offered"):
            await service.ask(request.id, ANN, "Why?", version="")
        assert (await service.store.get(request.id)).is_pending
    # A caller cannot turn it on (or off): the route's word.
    forced = await service.submit(
        call("page"), ApprovalConfig(allow_questions=True), principal="ci-agent"
    )
    assert forced.config.allow_questions is False
    kept = await service.submit(call(), ApprovalConfig(allow_questions=False), principal="x")
    assert kept.config.allow_questions is True


async def test_bound_to_the_version_shown(service: ApprovalService) -> None:
    request = await service.submit(call("db_drop", arguments={"db": "orders"}), principal="ci")
    await service.edit(request.id, ANN, {"db": "orders_old"})
    stale = await service.ask(request.id, BOB, "Why?", version="")
    assert stale.status == "stale" and stale.request.is_pending
    proposal = (await service.store.get(request.id)).proposal
    assert proposal is not None
    fresh = await service.ask(request.id, BOB, "Why the old one?", version=proposal.version)
    assert fresh.status == "decided" and fresh.request.status == "asked"


async def test_on_a_quorum_route_one_question_ends_it(service: ApprovalService) -> None:
    request = await service.submit(call("db_drop", arguments={"db": "orders"}), principal="ci")
    assert request.quorum == 2
    voted = await service.decide(request.id, "approve", ANN, version="")
    assert voted.status == "recorded"
    asked = await service.ask(request.id, BOB, "Is there a backup?", version="")
    assert asked.status == "decided" and asked.request.status == "asked"
    assert [v.user for v in asked.request.votes] == ["U0ANN"]  # the vote stays on the record


async def test_a_question_racing_an_escalation_is_checked_on_the_new_route(
    service: ApprovalService, store: ApprovalStore
) -> None:
    request = await service.submit(call("restart", arguments={"svc": "web"}), principal="ci")
    assert request.route == "early"
    # Escalated between the check and the script: the asker is no reviewer there.
    original = store.resolve

    async def escalate_first(*args: Any, **kwargs: Any) -> Any:
        current = await store.get(request.id)
        if current.escalations == 0:
            await store.escalate(
                current,
                route="later",
                channel="C0LATER",
                deadline_at=store.now() + timedelta(seconds=600),
                quorum=1,
                reviewers=["U0CAROL"],
            )
        return await original(*args, **kwargs)

    store.resolve = escalate_first  # type: ignore[method-assign]
    with pytest.raises(NotAllowed):
        await service.ask(request.id, ANN, "Why?", version="")
    assert (await store.get(request.id)).is_pending
    carol = await service.ask(request.id, Actor("U0CAROL"), "Why now?", version="")
    assert carol.request.status == "asked"


async def test_concurrent_questions_and_approvals_have_one_winner(
    service: ApprovalService,
) -> None:
    for _ in range(5):
        request = await service.submit(call(), principal="ci-agent")
        results = await asyncio.gather(
            service.ask(request.id, ANN, "Why?", version=""),
            service.decide(request.id, "approve", BOB, version=""),
            service.ask(request.id, BOB, "How?", version=""),
        )
        assert sorted(r.status for r in results).count("decided") == 1
        final = await service.store.get(request.id)
        assert final.status in ("asked", "approved")
        audited = [
            e
            for e in await service.store.audit_entries(request_id=request.id)
            if e.event in ("asked", "approved")
        ]
        assert len(audited) == 1


async def test_a_call_id_used_again_after_a_question(service: ApprovalService) -> None:
    """The same call id and reason is a replay (the asked request, its question); the same
    call id with a new reason (the answer) is a new request, taking the question."""
    first = await service.submit(
        call(call_id="turn-7:bash", reason="Clean the build"), principal="cx"
    )
    await service.ask(first.id, ANN, "Which build directory?", version="")
    replay = await service.submit(
        call(call_id="turn-7:bash", reason="Clean the build"), principal="cx"
    )
    assert replay.id == first.id and replay.status == "asked"
    answered = await service.submit(
        call(call_id="turn-7:bash", reason="build/ only, the one make writes."), principal="cx"
    )
    assert answered.id != first.id and answered.is_pending
    assert answered.answers is not None and answered.answers.request_id == first.id
    again = await service.submit(
        call(call_id="turn-7:bash", reason="build/ only, the one make writes."), principal="cx"
    )
    assert again.id == answered.id, "the new request is the call id's request now"


async def test_answered_marks_the_asked_request_once(
    service: ApprovalService, redis: Redis, keys: Keys
) -> None:
    posting = Posting(redis, keys)
    request = await service.submit(call(), principal="ci-agent")
    pending_mark = await posting.answered(request.id, Answered(request_id="apr_x"))
    assert pending_mark is False, "only an asked request is marked"
    await service.ask(request.id, ANN, "Why?", version="")
    before = await redis.xlen(keys.outbox)
    assert await posting.answered(request.id, Answered(request_id="apr_retry"))
    assert not await posting.answered(request.id, Answered(request_id="apr_other"))
    assert await redis.xlen(keys.outbox) == before + 1
    (_, fields), *_ = await redis.xrevrange(keys.outbox, count=1)
    assert fields["op"] == "answered" and fields["id"] == request.id
    assert fields["channel"] == "C0DEFAULT"
    stored = await service.store.get(request.id)
    assert stored.answered == Answered(request_id="apr_retry")
    assert await posting.answered("apr_gone", Answered(request_id="apr_retry")) is False


def test_the_thread_of_a_retry() -> None:
    """A retry goes in the thread of the question, on its first round and in that channel;
    a question asked on a reply points at the root of its thread."""
    root = SlackMessage(channel="C0DEFAULT", ts="1700000000.000100")
    asked = Question(
        request_id="apr_a", question="Why?", asked_by="U0ANN", asked_at=utcnow(), thread=root
    )
    retry = ApprovalRequest(event=call(), channel="C0DEFAULT", answers=asked)
    assert questions.thread_of(retry) == root
    assert questions.thread_of(retry.model_copy(update={"escalations": 1})) is None
    assert questions.thread_of(retry.model_copy(update={"channel": "C0OTHER"})) is None
    reply = retry.model_copy(update={"message": SlackMessage(channel="C0DEFAULT", ts="2.0")})
    link = Question.model_validate_json(questions.link_for(reply, "And?", "U0BOB", utcnow()))
    assert link.thread == root, "a reply's replies go under the same root"
    lone = ApprovalRequest(event=call(), channel="C0DEFAULT", message=root)
    assert questions.thread_root(lone) == root


def test_the_link_lives_as_long_as_the_route_gave_the_request() -> None:
    now = utcnow()
    request = ApprovalRequest(event=call(), created_at=now, deadline_at=now + timedelta(hours=2))
    assert questions.link_seconds(request) == 7200
    short = request.model_copy(update={"deadline_at": now + timedelta(seconds=5)})
    assert questions.link_seconds(short) == questions.MIN_LINK_SECONDS
    assert questions.link_seconds(request.model_copy(update={"deadline_at": None})) == 60


async def test_a_named_route_offers_questions_only_where_the_policys_own_does(
    store: ApprovalStore,
) -> None:
    policy = parse_policy(
        {
            "routes": {
                "default": {"channel": "C0DEFAULT", "allow_questions": False},
                "named": {"channel": "C0NAMED", "callers": ["ci-agent"]},
            }
        },
        source="test",
    )
    service = ApprovalService(store, policy)
    named = await service.submit(call(), principal="ci-agent", route="named")
    assert named.route == "named" and named.config.allow_questions is False
    with pytest.raises(InvalidRequest, match="not offered"):
        await service.ask(named.id, ANN, "Why?", version="")
    assert policy.routes["named"].allow_questions is True  # the default: on


async def test_concurrent_retries_one_takes_the_question(service: ApprovalService) -> None:
    for _ in range(5):
        first = await service.submit(call(), principal="ci-agent")
        await service.ask(first.id, ANN, "Which region?", version="")
        retries = await asyncio.gather(
            *(
                service.submit(call(arguments={"env": "prod", "n": n}), principal="ci-agent")
                for n in range(6)
            )
        )
        taken = [r for r in retries if r.answers is not None]
        assert len(taken) == 1 and taken[0].answers is not None
        assert taken[0].answers.request_id == first.id
        stored = await service.store.get_many([r.id for r in retries])
        assert sum(1 for r in stored.values() if r.answers is not None) == 1
