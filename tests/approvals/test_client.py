"""ApprovalClient over both transports (same scenario, same results), the sync facade,
require_approval on the client, and SlackReviewPlugin flows — on real Redis and a real API."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from approvals._internal.policy_file import parse_policy
from approvals._internal.service import ApprovalService
from approvals._internal.transports import (
    HttpTransport,
    RedisTransport,
    StdlibHttpTransport,
    error_from_response,
    request_body,
    transport_factory,
)
from approvals.client import Approval, ApprovalClient, SyncApprovalClient
from approvals.errors import (
    AlreadyDecided,
    ApprovalError,
    ApprovalTimeout,
    BotUnreachable,
    InvalidRequest,
    NotAllowed,
    NotFound,
    PayloadTooLarge,
    StoreUnavailable,
)
from approvals.gate import Denied, current_approval, require_approval
from approvals.integrations.slack_review import SlackReviewPlugin
from approvals.models import MAX_EVENT_BYTES, ApprovalConfig, ApprovalEvent, Decision
from approvals.review import Allow, Async, Deny, run_review
from bot.core.context import BotContext
from tests.support import REVIEWER, decide_next
from tests.support.credentials import API_TOKEN

POLICY = {
    "routes": {"default": {"channel": "C0APPROVALS", "allow_for_session": True}},
    "rules": [
        {"name": "no-rm", "match": {"tool": "rm_*"}, "action": "deny", "reason": "never delete"}
    ],
}


@pytest.fixture
def api_url(ctx: BotContext, api_url: str) -> str:
    """The shared API server (tests/conftest.py), with `ctx` under this file's policy."""
    ctx.service.policy = parse_policy(POLICY, source="test policy")
    return api_url


def redis_client(ctx: BotContext) -> ApprovalClient:
    return ApprovalClient(
        RedisTransport(ctx.redis, ctx.keys, policy=ctx.service.policy, owns_redis=False)
    )


@pytest.fixture
async def clients(ctx: BotContext, api_url: str) -> AsyncIterator[dict[str, ApprovalClient]]:
    made = {
        "redis": redis_client(ctx),
        "http": ApprovalClient(HttpTransport(api_url, API_TOKEN, poll_seconds=0.3)),
        # the command hook's: http.client on a thread per call, no aiohttp
        "stdlib": ApprovalClient(StdlibHttpTransport(api_url, API_TOKEN, poll_seconds=0.3)),
    }
    yield made
    for client in made.values():
        await client.aclose()


@pytest.fixture(params=["redis", "http", "stdlib"])
def client(request: pytest.FixtureRequest, clients: dict[str, ApprovalClient]) -> ApprovalClient:
    return clients[request.param]


def content(approval: Approval) -> dict[str, Any]:
    """What must match across transports: everything but ids, clock readings and identity
    (over HTTP the token's principal asks and withdraws; over Redis nobody is named)."""
    data = approval.model_dump(
        mode="json",
        exclude={"id", "created_at", "deadline_at", "decided_at", "call_id", "principal"},
    )
    if approval.status == "cancelled":
        data.pop("decided_by")
    data["votes"] = [{k: v for k, v in vote.items() if k != "at"} for vote in data["votes"]]
    return data


async def scenario(client: ApprovalClient, service: ApprovalService, tag: str) -> list[Any]:
    """Approve with input, deny with reason, policy deny, idempotent retry, timeout, cancel.
    Every request ends decided, so the scenario can run again on the same prefix."""
    out: list[Any] = []
    decider = asyncio.create_task(decide_next(service, "deploy", input="v1.2.3"))
    out.append(
        await client.request_and_wait(
            "deploy",
            {"env": "prod", "n": 3},
            config={"kind": "input"},
            call_id=f"a-{tag}",
            session_id="s1",
            agent="bot-7",
            metadata={"ticket": 42},
            timeout=10,
        )
    )
    await decider
    first = await client.request("migrate", {"db": "main"}, call_id=f"b-{tag}")
    again = await client.request("migrate", {"db": "main"}, call_id=f"b-{tag}")
    out.append(again.id == first.id)
    decider = asyncio.create_task(
        decide_next(service, "migrate", "deny", reason="not during the freeze")
    )
    out.append(await client.wait(first.id, 10))
    await decider
    out.append(await client.request("rm_tree", {"path": "/"}))  # policy: denied at once
    pending = await client.request("scale", {"to": 9})
    with pytest.raises(ApprovalTimeout):
        await client.wait(pending.id, 0.4)
    out.append(await client.get(pending.id))
    out.append(await client.cancel(pending.id, reason="no longer needed"))
    with pytest.raises(AlreadyDecided):
        await client.cancel(pending.id)
    with pytest.raises(NotFound):
        await client.get("apr_doesnotexist")
    with pytest.raises(PayloadTooLarge):
        await client.request("big", {"blob": "x" * (MAX_EVENT_BYTES + 1)})
    return out


async def test_both_transports_give_the_same_results(
    clients: dict[str, ApprovalClient], ctx: BotContext
) -> None:
    via_redis = await scenario(clients["redis"], ctx.service, "redis")
    via_http = await scenario(clients["http"], ctx.service, "http")
    via_stdlib = await scenario(clients["stdlib"], ctx.service, "stdlib")
    assert [content(x) if isinstance(x, Approval) else x for x in via_http] == [
        content(x) if isinstance(x, Approval) else x for x in via_redis
    ]
    assert [content(x) if isinstance(x, Approval) else x for x in via_stdlib] == [
        content(x) if isinstance(x, Approval) else x for x in via_redis
    ]
    approved, same_id, denied, policy_denied, pending, cancelled = via_http
    assert (approved.status, approved.input, approved.decided_by, approved.via) == (
        "approved",
        "v1.2.3",
        "U0REVIEWER",
        "slack",
    )
    assert approved.arguments == {"env": "prod", "n": 3}
    assert (approved.session_id, approved.agent, approved.metadata) == (
        "s1",
        "bot-7",
        {"ticket": 42},
    )
    assert approved.to_decision() == Decision(
        outcome="approve",
        input="v1.2.3",
        decided_by="U0REVIEWER",
        via="slack",
        decided_at=approved.decided_at,
    )
    assert same_id is True
    assert (denied.status, denied.reason) == ("denied", "not during the freeze")
    assert (policy_denied.status, policy_denied.reason) == ("denied", "never delete")
    assert pending.is_pending and pending.decision is None
    assert (cancelled.status, cancelled.reason) == ("cancelled", "no longer needed")


async def test_approval_round_trips_to_the_core_model(client: ApprovalClient) -> None:
    approval = await client.request(
        "tool_x",
        {"a": [1, 2]},
        config={"kind": "choice", "options": ["blue", "green"]},
        session_id="s9",
    )
    request = approval.to_request()
    assert Approval.from_request(request) == approval
    assert request.config.options == ("blue", "green")


async def test_long_poll_spans_several_polls_until_the_decision(
    clients: dict[str, ApprovalClient], ctx: BotContext
) -> None:
    client = clients["http"]  # polls every 0.3 s
    approval = await client.request("slow_tool", {})
    waiting = asyncio.create_task(client.wait(approval.id, 10))
    await asyncio.sleep(1.0)
    assert not waiting.done()
    await ctx.service.decide(approval.id, "approve", REVIEWER)
    decided = await asyncio.wait_for(waiting, 5)
    assert decided.approved and decided.decided_by == "U0REVIEWER"


@pytest.mark.parametrize("kind", [HttpTransport, StdlibHttpTransport])
async def test_http_errors_map_to_the_error_tree(api_url: str, kind: type[HttpTransport]) -> None:
    bad = ApprovalClient(kind(api_url, "wrong-token"))
    with pytest.raises(NotAllowed, match="not valid"):
        await bad.get("apr_x")
    await bad.aclose()
    gone = ApprovalClient(kind("http://127.0.0.1:1", "t"))
    with pytest.raises(
        BotUnreachable,
        match=r"^approval bot at http://127.0.0.1:1 is unreachable: cannot connect to "
        r"127.0.0.1:1 \(Connection refused\)$",
    ):
        await gone.request("x", {})
    await gone.aclose()
    assert "wrong-token" not in repr(bad.transport)


def test_error_from_response_prefers_the_code_then_the_status() -> None:
    err = error_from_response(409, {"error": {"code": "already_decided", "message": "m"}}, "f")
    assert isinstance(err, AlreadyDecided) and err.message == "m"
    assert isinstance(
        error_from_response(422, {"error": {"code": "x", "message": "bad"}}, "f"), InvalidRequest
    )
    assert isinstance(error_from_response(503, None, "f"), StoreUnavailable)
    err = error_from_response(503, {"error": {"code": "api_disabled", "message": "off"}}, "f")
    assert type(err) is ApprovalError and err.message == "off"


def test_request_body_carries_the_event_and_config() -> None:
    event = ApprovalEvent(
        kind="command", tool_name="Bash", arguments={"command": "ls"}, command="ls", cwd="/srv"
    )
    body = request_body(
        event, ApprovalConfig(kind="input", allow_for_session=True), route="ops", metadata=None
    )
    assert body == {
        "tool_name": "Bash",
        "arguments": {"command": "ls"},
        "kind": "input",
        "sensitivity": "low",
        "route": "ops",
        "event_kind": "command",
        "command": "ls",
        "cwd": "/srv",
        "allow_for_session": True,
    }


async def test_a_transport_refuses_another_event_loop(client: ApprovalClient) -> None:
    approval = await client.request("tool_y", {})
    with pytest.raises(ApprovalError, match="another event loop"):
        await asyncio.to_thread(asyncio.run, client.get(approval.id))


# -- from_env ------------------------------------------------------------------------------


async def test_from_env_picks_the_transport(redis_url: str, keys: Any) -> None:
    with pytest.raises(ApprovalError, match=r"APPROVALS_URL.*REDIS_URL"):
        ApprovalClient.from_env({})
    with pytest.raises(InvalidRequest, match="APPROVALS_TOKEN"):
        ApprovalClient.from_env({"APPROVALS_URL": "http://bot:3000"})
    with pytest.raises(InvalidRequest, match="http"):
        ApprovalClient.from_env({"APPROVALS_URL": "bot:3000", "APPROVALS_TOKEN": API_TOKEN})
    http = ApprovalClient.from_env(
        {"APPROVALS_URL": "http://bot:3000/", "APPROVALS_TOKEN": API_TOKEN, "REDIS_URL": redis_url}
    )
    assert isinstance(http.transport, HttpTransport) and http.transport.url == "http://bot:3000"
    await http.aclose()
    env = {
        "REDIS_URL": redis_url,
        "APPROVALS_PREFIX": keys.prefix,
        "APPROVALS_DEFAULT_CHANNEL": "C0TEAM",
        "APPROVALS_REVIEWERS": "U0ANN, S0OPS",
    }
    async with ApprovalClient.from_env(env) as client:
        assert isinstance(client.transport, RedisTransport)
        approval = await client.request("tool_z", {"k": 1})
        stored = await client.transport.service.store.get(approval.id)
        assert stored.channel == "C0TEAM" and stored.reviewers == ("U0ANN", "S0OPS")
        assert client.transport.service.store.keys.prefix == keys.prefix
    assert callable(transport_factory(env))
    # threaded=True: one client, usable from this loop and from another thread's loop.
    shared = ApprovalClient.from_env(env, threaded=True)
    try:
        made = await shared.request("tool_threaded", {})
        seen = await asyncio.to_thread(asyncio.run, shared.get(made.id))
        assert seen == made
    finally:
        await shared.aclose()


# -- the sync facade and require_approval -------------------------------------------------------


async def test_sync_client_and_sync_gated_tool(redis_url: str, ctx: BotContext) -> None:
    def factory() -> RedisTransport:
        return RedisTransport.from_url(redis_url, prefix=ctx.keys.prefix)

    sync = SyncApprovalClient(factory)
    try:
        ran: list[str] = []

        @require_approval(sync, config={"kind": "input"})
        def deploy(env: str) -> str:
            decision = current_approval()
            ran.append(env)
            return f"deployed {env} {decision.input if decision else None}"

        call = asyncio.create_task(asyncio.to_thread(deploy, "prod"))
        await decide_next(ctx.service, "deploy", input="go")
        assert await call == "deployed prod go"
        assert ran == ["prod"]

        @require_approval(SlackReviewPlugin(sync))
        def drop(table: str) -> str:
            return "dropped"

        call = asyncio.create_task(asyncio.to_thread(drop, "users"))
        await decide_next(ctx.service, "drop", "deny", reason="prod data")
        outcome = await call
        assert isinstance(outcome, Denied) and str(outcome) == "denied: prod data"

        blocking = asyncio.create_task(
            asyncio.to_thread(sync.request_and_wait, "sync_tool", {"a": 1}, timeout=10)
        )
        await decide_next(ctx.service, "sync_tool")
        assert (await blocking).approved
        # The async side of the facade works on this (another) loop too.
        assert (await sync.aio.request("tool_on_loop", {})).is_pending
    finally:
        await asyncio.to_thread(sync.close)


async def test_require_approval_on_the_client_for_async_tools(
    client: ApprovalClient, ctx: BotContext
) -> None:
    @require_approval(client, config={"kind": "choice", "options": ["eu", "us"]})
    async def launch(region_hint: str, approval: Decision | None = None) -> str:
        assert approval is not None
        return f"launched in {approval.selection}"

    call = asyncio.create_task(launch("any"))
    await decide_next(ctx.service, "launch", selection="eu")
    assert await call == "launched in eu"

    client.default_timeout = 0.3
    try:
        outcome = await launch("any")
    finally:
        client.default_timeout = None
    assert isinstance(outcome, Denied) and outcome.reason == "approval timeout"
    cancelled = [e for e in await ctx.store.audit_entries() if e.event == "cancelled"]
    assert cancelled and cancelled[-1].reason == "approval timeout"


# -- SlackReviewPlugin ------------------------------------------------------------------------


async def test_hook_approve_returns_allow_with_the_decision(
    client: ApprovalClient, ctx: BotContext
) -> None:
    hook = SlackReviewPlugin(client, config={"kind": "input"}, agent="agent-1")
    event = ApprovalEvent(tool_name="hook_deploy", arguments={"env": "prod"}, call_id="c-1")
    review = await hook.review_tool(event, {}, {})
    assert isinstance(review, Async) and review.ref.startswith("apr_")
    assert review.metadata["channel"] == "C0APPROVALS"
    decider = asyncio.create_task(decide_next(ctx.service, "hook_deploy", input="at 5pm"))
    verdict = await run_review(hook, event, timeout=10)  # the same request (same call_id)
    await decider
    assert isinstance(verdict, Allow) and not verdict.for_session
    assert verdict.decision is not None and verdict.decision.input == "at 5pm"
    stored = await ctx.store.get(review.ref)
    assert stored.event.agent == "agent-1" and stored.config.kind == "input"


async def test_hook_deny_carries_the_reason(client: ApprovalClient, ctx: BotContext) -> None:
    hook = SlackReviewPlugin(client)
    event = ApprovalEvent(
        kind="command", tool_name="Bash", arguments={"command": "rm -rf x"}, command="rm -rf x"
    )
    decider = asyncio.create_task(decide_next(ctx.service, "Bash", "deny", reason="too broad"))
    verdict = await run_review(hook, event, timeout=10)
    await decider
    assert isinstance(verdict, Deny)
    assert (verdict.reason, verdict.cause) == ("too broad", "denied")
    assert verdict.decision is not None and verdict.decision.decided_by == "U0REVIEWER"


async def test_hook_approve_for_session(client: ApprovalClient, ctx: BotContext) -> None:
    hook = SlackReviewPlugin(client, session_id="sess-1")
    event = ApprovalEvent(tool_name="read_logs", arguments={"svc": "api"})
    decider = asyncio.create_task(decide_next(ctx.service, "read_logs", for_session=True))
    verdict = await run_review(hook, event, timeout=10)
    await decider
    assert isinstance(verdict, Allow) and verdict.for_session is True
    # The grant decides the next identical call at once, without a review.
    again = await hook.review_tool(event, {}, {})
    assert isinstance(again, Allow) and again.for_session
    assert again.decision is not None and again.decision.via == "grant"


async def test_hook_timeout_denies_and_withdraws_the_request(
    client: ApprovalClient, ctx: BotContext
) -> None:
    hook = SlackReviewPlugin(client)
    event = ApprovalEvent(tool_name="never_answered", arguments={})
    verdict = await run_review(hook, event, timeout=0.5)
    assert verdict == Deny("approval timeout", cause="timeout")
    entries = [e for e in await ctx.store.audit_entries() if e.event == "cancelled"]
    assert len(entries) == 1 and entries[0].reason == "approval timeout"


async def test_hook_policy_decides_at_once(client: ApprovalClient) -> None:
    hook = SlackReviewPlugin(client)
    review = await hook.review_tool(ApprovalEvent(tool_name="rm_all", arguments={}), {}, {})
    assert isinstance(review, Deny) and review.reason == "never delete"


async def test_hook_as_gate_handler_passes_the_tool_config(
    client: ApprovalClient, ctx: BotContext
) -> None:
    @require_approval(SlackReviewPlugin(client), config={"kind": "input", "prompt": "Ship it?"})
    async def ship(version: str) -> str:
        decision = current_approval()
        return f"shipped {version} note={decision.input if decision else None}"

    call = asyncio.create_task(ship("2.0"))
    found = await decide_next(ctx.service, "ship", input="LGTM")
    assert await call == "shipped 2.0 note=LGTM"
    assert found.prompt == "Ship it?" and found.event.call_id is not None


async def test_hook_await_error_is_an_error_not_a_denial(client: ApprovalClient) -> None:
    hook = SlackReviewPlugin(client)
    result = await hook.await_decision("apr_unknown", 1)
    assert result.status == "error" and "no approval request" in (result.error or "")


def test_threaded_transport_stops_its_thread_when_the_factory_fails() -> None:
    def broken() -> RedisTransport:
        raise ValueError("no transport")

    before = {t.name for t in threading.enumerate()}
    with pytest.raises(ValueError, match="no transport"):
        SyncApprovalClient(broken)
    assert "approvals-client" not in {t.name for t in threading.enumerate()} - before


async def test_cancel_call_withdraws_what_a_call_id_made(client: ApprovalClient) -> None:
    """Every transport: a submit cut off in flight is withdrawn by its call id (None when
    the call id made nothing)."""
    assert await client.cancel_call("never-made", reason="cut off") is None
    made = await client.request("deploy", {"env": "prod"}, call_id="cut-1")
    assert made.is_pending
    found = await client.cancel_call("cut-1", reason="cut off")
    assert found is not None
    assert (found.id, found.status, found.reason) == (made.id, "cancelled", "cut off")
    assert (await client.get(made.id)).status == "cancelled"


async def test_a_reason_reaches_the_request_over_every_transport(
    client: ApprovalClient, ctx: BotContext
) -> None:
    """`request(..., reason=)`: shown to reviewers (the event's context), over Redis, aiohttp
    and http.client alike; its end is kept, cut between words; not part of the fingerprint,
    so a retry with other words is the same request."""
    call_id = f"call-{uuid.uuid4().hex}"
    reason = "Rotating the key because the old one leaked in a CI log. " * 60
    made = await client.request("rotate_key", {"name": "ci"}, call_id=call_id, reason=reason)
    stored = await ctx.store.get(made.id)
    assert stored.event.context is not None and stored.event.context.reason is not None
    kept = stored.event.context.reason
    assert kept.startswith("…") and kept.endswith("in a CI log.") and len(kept) <= 2000
    again = await client.request("rotate_key", {"name": "ci"}, call_id=call_id, reason="other")
    assert again.id == made.id
    await client.cancel(made.id)
