"""The agent HTTP API through the real aiohttp app, on real Redis."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from approvals._internal.policy_file import parse_policy
from approvals._internal.service import Actor, ApprovalService
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals.integrations.hook_input import MAX_HOOK_BODY_BYTES, time_budget
from approvals.models import MAX_EVENT_BYTES, ApprovalEvent
from bot.core.context import BotContext
from bot.http.agent_hooks import PROBLEM_HEADER
from bot.http.api import PARKING, add_routes, error_middleware
from bot.http.principals import derived_name
from bot.http.schemas import ApprovalObject
from tests.support import eventually
from tests.support.credentials import API_TOKEN, OTHER_API_TOKEN, UNKNOWN_API_TOKEN

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


async def make_client(ctx: BotContext) -> TestClient[web.Request, web.Application]:
    app = web.Application(middlewares=[error_middleware])
    add_routes(app, ctx)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
async def client(ctx: BotContext) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    c = await make_client(ctx)
    yield c
    await c.close()


Client = TestClient[web.Request, web.Application]


def as_file(body: Any) -> io.BytesIO:
    """A large JSON body as a file (aiohttp warns about large raw bodies)."""
    return io.BytesIO(json.dumps(body).encode())


async def error_of(resp: Any, status: int) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    body = await resp.json()
    assert set(body) == {"error"}
    assert {"code", "message"} <= set(body["error"])
    return body["error"]  # type: ignore[no-any-return]


async def create(client: Client, **body: Any) -> dict[str, Any]:
    payload = {"tool_name": "deploy", "arguments": {"env": "prod"}, **body}
    resp = await client.post("/v1/approvals", json=payload, headers=AUTH)
    assert resp.status == 201, await resp.text()
    return await resp.json()  # type: ignore[no-any-return]


# -- auth ----------------------------------------------------------------------------------------


async def test_missing_token_is_401(client: Client) -> None:
    resp = await client.post("/v1/approvals", json={"tool_name": "x", "arguments": {}})
    error = await error_of(resp, 401)
    assert error["code"] == "unauthorized"
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    resp = await client.get("/v1/approvals/x", headers={"Authorization": "Basic dGVzdA=="})
    assert (await error_of(resp, 401))["code"] == "unauthorized"


async def test_wrong_token_is_403_on_every_protected_route(client: Client) -> None:
    bad = {"Authorization": f"Bearer {UNKNOWN_API_TOKEN}"}
    for method, path in [
        ("POST", "/v1/approvals"),
        ("GET", "/v1/approvals/x"),
        ("POST", "/v1/approvals/x/cancel"),
    ]:
        resp = await client.request(method, path, json={}, headers=bad)
        assert (await error_of(resp, 403))["code"] == "forbidden", path
    # The hook answers bad credentials with a deny Claude Code reads, never a non-2xx.
    for headers, why in ((bad, "not valid"), ({}, "Bearer")):
        for event in ("PreToolUse", "PermissionRequest"):
            resp = await client.post("/hooks/claude-code", json=hook_body(event), headers=headers)
            assert resp.status == 200
            out = (await resp.json())["hookSpecificOutput"]
            reason = out.get("permissionDecisionReason") or out["decision"]["message"]
            assert out.get("permissionDecision", out.get("decision", {}).get("behavior")) == "deny"
            assert why in reason


async def test_any_configured_token_is_accepted(ctx: BotContext) -> None:
    ctx.api_tokens = (API_TOKEN, OTHER_API_TOKEN)
    c = await make_client(ctx)
    try:
        resp = await c.get(
            "/v1/approvals/unknown", headers={"Authorization": f"Bearer {OTHER_API_TOKEN}"}
        )
        assert (await error_of(resp, 404))["code"] == "not_found"
    finally:
        await c.close()


async def test_no_tokens_configured_disables_the_api(ctx: BotContext) -> None:
    ctx.api_tokens = ()
    c = await make_client(ctx)
    try:
        resp = await c.post(
            "/v1/approvals",
            json={"tool_name": "x", "arguments": {}},
            headers={"Authorization": f"Bearer {UNKNOWN_API_TOKEN}"},
        )
        error = await error_of(resp, 503)
        assert error["code"] == "api_disabled"
        assert "APPROVALS_API_TOKENS" in error["message"]
        assert (await c.get("/openapi.json")).status == 200  # the document stays readable
    finally:
        await c.close()


# -- validation ----------------------------------------------------------------------------------


async def test_malformed_json_is_400(client: Client) -> None:
    for body in (b"{not json", b'{"tool_name": NaN, "arguments": {}}', b"\xff\xfe", b""):
        resp = await client.post("/v1/approvals", data=body, headers=AUTH)
        assert (await error_of(resp, 400))["code"] == "invalid_json", body


async def test_unknown_fields_are_422_with_field_details(client: Client) -> None:
    resp = await client.post(
        "/v1/approvals", headers=AUTH, json={"tool_name": "x", "arguments": {}, "surprise": 1}
    )
    error = await error_of(resp, 422)
    assert error["code"] == "invalid_request"
    assert error["details"] == [
        {"loc": ["surprise"], "msg": "Extra inputs are not permitted", "type": "extra_forbidden"}
    ]


async def test_wrong_types_are_422(client: Client) -> None:
    resp = await client.post(
        "/v1/approvals",
        headers=AUTH,
        json={"tool_name": 5, "arguments": {}, "deadline_seconds": "soon", "kind": "maybe"},
    )
    error = await error_of(resp, 422)
    assert sorted(d["loc"][0] for d in error["details"]) == [
        "deadline_seconds",
        "kind",
        "tool_name",
    ]
    assert all(set(d) == {"loc", "msg", "type"} for d in error["details"])


async def test_an_arguments_schema_whose_checks_are_unbounded_is_422(
    client: Client, ctx: BotContext
) -> None:
    """`{"$ref": "#"}` recursed until Python gave up (a 500 at the first edit); a regular
    expression RE2 cannot run could not be checked in linear time. Each is refused when the
    request is created, naming the problem, and nothing is stored."""
    for schema, problem in (
        ({"$ref": "#"}, "loop"),
        ({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}, "loop"),
        ({"properties": {"k": {"pattern": "(?<=a)b"}}}, "linear time"),
        ({"$ref": "https://example.com/schema.json"}, "not within the schema"),
        ({"$ref": "#/$defs/missing"}, "points nowhere"),
        ({"type": "no-such-type"}, "not a valid JSON Schema"),
    ):
        resp = await client.post(
            "/v1/approvals",
            headers=AUTH,
            json={"tool_name": "deploy", "arguments": {"k": "x"}, "arguments_schema": schema},
        )
        error = await error_of(resp, 422)
        assert error["code"] == "invalid_request", schema
        assert problem in error["message"] and "arguments_schema" in error["message"], error
        assert [d["loc"] for d in error["details"]] == [["arguments_schema"]]
    assert await ctx.store.list_pending() == []
    recursive = {"type": "object", "properties": {"child": {"$ref": "#"}}}
    resp = await client.post(
        "/v1/approvals",
        headers=AUTH,
        json={"tool_name": "deploy", "arguments": {}, "arguments_schema": recursive},
    )
    assert resp.status in (200, 201, 202), await resp.text()  # recursion that reads deeper


async def test_arguments_must_be_an_object(client: Client) -> None:
    for arguments in (["a"], "a", None):
        resp = await client.post(
            "/v1/approvals", headers=AUTH, json={"tool_name": "x", "arguments": arguments}
        )
        error = await error_of(resp, 422)
        assert [d["loc"] for d in error["details"]] == [["arguments"]], arguments


async def test_choice_without_options_is_422(client: Client) -> None:
    resp = await client.post(
        "/v1/approvals", headers=AUTH, json={"tool_name": "x", "arguments": {}, "kind": "choice"}
    )
    error = await error_of(resp, 422)
    assert "options" in error["message"]


async def test_oversized_body_is_413(ctx: BotContext) -> None:
    ctx.max_body_bytes = 1000
    c = await make_client(ctx)
    try:
        big = {"tool_name": "x", "arguments": {"blob": "a" * 2000}}
        resp = await c.post("/v1/approvals", json=big, headers=AUTH)
        assert (await error_of(resp, 413))["code"] == "payload_too_large"

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the read is counted
            yield b'{"tool_name": "x", "arguments": {"blob": "'
            for _ in range(10):
                yield b"a" * 200
            yield b'"}}'

        resp = await c.post("/v1/approvals", data=chunks(), headers=AUTH)
        assert (await error_of(resp, 413))["code"] == "payload_too_large"
        assert await ctx.store.list_pending() == []
    finally:
        await c.close()


async def test_an_event_over_the_store_limit_is_413(client: Client) -> None:
    resp = await client.post(
        "/v1/approvals",
        headers=AUTH,
        data=as_file({"tool_name": "x", "arguments": {"blob": "a" * (MAX_EVENT_BYTES + 10)}}),
    )
    assert (await error_of(resp, 413))["code"] == "payload_too_large"


async def test_unknown_id_and_unknown_route_are_json_404(client: Client) -> None:
    resp = await client.get("/v1/approvals/apr_nope", headers=AUTH)
    assert (await error_of(resp, 404))["code"] == "not_found"
    resp = await client.get("/v1/nothing-here", headers=AUTH)
    assert (await error_of(resp, 404))["code"] == "not_found"
    resp = await client.delete("/v1/approvals", headers=AUTH)
    assert (await error_of(resp, 405))["code"] == "method_not_allowed"


async def test_store_outage_is_503_without_a_stack_trace(ctx: BotContext, keys: Keys) -> None:
    dead = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    store = ApprovalStore(dead, keys)
    ctx.store, ctx.service = store, ApprovalService(store, ctx.service.policy)
    c = await make_client(ctx)
    try:
        resp = await c.post("/v1/approvals", json={"tool_name": "x", "arguments": {}}, headers=AUTH)
        error = await error_of(resp, 503)
        assert error["code"] == "store_unavailable"
        assert "Traceback" not in await resp.text()
    finally:
        await c.close()
        await dead.aclose()


# -- the approval lifecycle ------------------------------------------------------------------------


async def test_create_get_decide_get(ctx: BotContext, client: Client) -> None:
    made = await create(
        client,
        kind="input",
        prompt="Deploy to prod?",
        session_id="s1",
        agent="ci-bot",
        metadata={"ticket": "OPS-1"},
        deadline_seconds=600,
    )
    assert made["status"] == "pending"
    assert ApprovalObject.model_validate(made).id == made["id"]
    assert (made["prompt"], made["kind"], made["metadata"]) == (
        "Deploy to prod?",
        "input",
        {"ticket": "OPS-1"},
    )
    assert made["decision"] is None and made["decided_by"] is None

    resp = await client.get(f"/v1/approvals/{made['id']}", headers=AUTH)
    assert resp.status == 200
    assert (await resp.json())["status"] == "pending"

    await ctx.service.decide(made["id"], "approve", Actor("U1"), input="ship it")
    got = await (await client.get(f"/v1/approvals/{made['id']}", headers=AUTH)).json()
    assert (got["status"], got["decision"], got["decided_by"], got["input"], got["via"]) == (
        "approved",
        "approve",
        "U1",
        "ship it",
        "slack",
    )
    assert got["decided_at"] is not None


async def test_create_is_idempotent_on_call_id(ctx: BotContext, client: Client) -> None:
    first = await create(client, call_id="call-42")
    resp = await client.post(
        "/v1/approvals",
        headers=AUTH,
        json={"tool_name": "deploy", "arguments": {"env": "prod"}, "call_id": "call-42"},
    )
    assert resp.status == 200
    again = await resp.json()
    assert again["id"] == first["id"]
    assert await ctx.redis.xlen(ctx.keys.outbox) == 1  # one Slack post queued, not two


async def test_cancel_pending_then_cancel_again_is_409(client: Client) -> None:
    made = await create(client)
    resp = await client.post(
        f"/v1/approvals/{made['id']}/cancel",
        headers=AUTH,
        json={"reason": "agent restarted"},
    )
    assert resp.status == 200
    body = await resp.json()
    # Attributed to the token's principal, never to a name in the body.
    assert (body["status"], body["reason"], body["decided_by"]) == (
        "cancelled",
        "agent restarted",
        derived_name(API_TOKEN),
    )
    resp = await client.post(f"/v1/approvals/{made['id']}/cancel", headers=AUTH)
    error = await error_of(resp, 409)
    assert error["code"] == "already_decided"
    assert error["details"]["status"] == "cancelled"


async def test_cancelling_a_decided_request_is_409(ctx: BotContext, client: Client) -> None:
    made = await create(client)
    await ctx.service.decide(made["id"], "deny", Actor("U2"), reason="no")
    resp = await client.post(f"/v1/approvals/{made['id']}/cancel", headers=AUTH)
    error = await error_of(resp, 409)
    assert error["details"] == {"status": "denied", "decided_by": "U2"}
    resp = await client.post("/v1/approvals/apr_missing/cancel", headers=AUTH)
    assert (await error_of(resp, 404))["code"] == "not_found"


async def test_cancel_a_call_id_withdraws_only_the_tokens_own_request(ctx: BotContext) -> None:
    """`POST /v1/calls/cancel`: for a create cut off in flight (its id never came back). A
    token finds only its own principal's call ids; another's is as unknown: nothing."""
    ctx.api_tokens = (API_TOKEN, OTHER_API_TOKEN)
    c = await make_client(ctx)
    try:
        first = {"Authorization": f"Bearer {API_TOKEN}"}
        second = {"Authorization": f"Bearer {OTHER_API_TOKEN}"}
        body = {"tool_name": "deploy", "arguments": {}, "call_id": "c-7"}
        made = await (await c.post("/v1/approvals", json=body, headers=first)).json()
        resp = await c.post("/v1/calls/cancel", json={"call_id": "c-7"}, headers=second)
        assert resp.status == 200 and await resp.json() == {"approval": None}
        assert (await ctx.store.get(made["id"])).status == "pending"
        resp = await c.post(
            "/v1/calls/cancel", json={"call_id": "c-7", "reason": "cut off"}, headers=first
        )
        found = (await resp.json())["approval"]
        assert (found["id"], found["status"], found["reason"]) == (
            made["id"],
            "cancelled",
            "cut off",
        )
        assert found["decided_by"] == derived_name(API_TOKEN)
        resp = await c.post("/v1/calls/cancel", json={"call_id": ""}, headers=first)
        assert (await error_of(resp, 422))["code"] == "invalid_request"
        resp = await c.post("/v1/calls/cancel", json={"call_id": "c-7"})
        await error_of(resp, 401)
    finally:
        await c.close()


async def test_long_poll_returns_on_the_decision(ctx: BotContext, client: Client) -> None:
    made = await create(client)

    async def decide_soon() -> None:
        await asyncio.sleep(0.2)
        await ctx.service.decide(made["id"], "approve", Actor("U1"))

    started = time.monotonic()
    decider = asyncio.create_task(decide_soon())
    resp = await client.get(f"/v1/approvals/{made['id']}?wait=20", headers=AUTH)
    elapsed = time.monotonic() - started
    await decider
    assert resp.status == 200
    assert (await resp.json())["status"] == "approved"
    assert 0.2 <= elapsed < 5


async def test_long_poll_ends_with_the_wait(client: Client) -> None:
    made = await create(client)
    started = time.monotonic()
    resp = await client.get(f"/v1/approvals/{made['id']}?wait=0.4", headers=AUTH)
    elapsed = time.monotonic() - started
    assert resp.status == 200
    assert (await resp.json())["status"] == "pending"
    assert 0.4 <= elapsed < 10  # ends with the wait (generous: a loaded machine is slow)


async def test_wait_is_capped(ctx: BotContext) -> None:
    ctx.max_wait_seconds = 0.3
    c = await make_client(ctx)
    try:
        made = await create(c)
        started = time.monotonic()
        resp = await c.get(f"/v1/approvals/{made['id']}?wait=30", headers=AUTH)
        assert (await resp.json())["status"] == "pending"
        assert time.monotonic() - started < 10  # capped at 0.3 s, not the 30 asked
        for bad in ("soon", "-1", "nan", "inf"):
            resp = await c.get(f"/v1/approvals/{made['id']}?wait={bad}", headers=AUTH)
            error = await error_of(resp, 422)
            assert error["details"][0]["loc"] == ["query", "wait"], bad
    finally:
        await c.close()


async def test_a_policy_rule_decides_at_once(ctx: BotContext, keys: Keys) -> None:
    policy = parse_policy(
        {
            "rules": [
                {
                    "name": "no prod deletes",
                    "match": {"tool": "delete_*"},
                    "action": "deny",
                    "reason": "never in prod",
                }
            ]
        },
        source="test policy",
        default_channel="C0APPROVALS",
    )
    ctx.service = ApprovalService(ctx.store, policy)
    c = await make_client(ctx)
    try:
        resp = await c.post(
            "/v1/approvals",
            headers=AUTH,
            json={"tool_name": "delete_db", "arguments": {"db": "main"}},
        )
        assert resp.status == 201
        body = await resp.json()
        assert (body["status"], body["decision"], body["reason"], body["via"]) == (
            "denied",
            "deny",
            "never in prod",
            "policy",
        )
        assert body["decided_by"] == "policy:no prod deletes"
        assert (await create(c))["status"] == "pending"  # other tools still ask
    finally:
        await c.close()


# -- the Claude Code http hook ---------------------------------------------------------------


def hook_body(event: str = "PreToolUse", **more: Any) -> dict[str, Any]:
    body = {
        "session_id": "abc123",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/work",
        "permission_mode": "default",
        "hook_event_name": event,
        "tool_name": "Bash",
        "tool_input": {"command": "terraform apply", "description": "Apply"},
        "tool_use_id": "toolu_01XYZ",
    }
    if event == "PermissionRequest":
        del body["tool_use_id"]
    body.update(more)
    return body


async def pending_id(ctx: BotContext) -> str:
    for _ in range(500):
        pending = await ctx.store.list_pending()
        if pending:
            return pending[0].id
        await asyncio.sleep(0.01)
    raise AssertionError("the hook never created a request")


async def test_hook_endpoint_withdraws_a_submit_its_budget_cut_off(
    ctx: BotContext, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The http hook shares the runner: a create that lands and then stalls past the budget
    is withdrawn by its call id, and the request's deadline is the hook's budget."""
    original = ctx.service.submit
    landed: list[str] = []

    async def lands_then_stalls(*args: Any, **kwargs: Any) -> Any:
        request = await original(*args, **kwargs)
        landed.append(request.id)
        await asyncio.Event().wait()

    monkeypatch.setattr(ctx.service, "submit", lands_then_stalls)
    resp = await client.post("/hooks/claude-code?timeout=3", json=hook_body(), headers=AUTH)
    assert resp.status == 200
    out = (await resp.json())["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny"
    (request_id,) = landed
    found = await ctx.store.get(request_id)
    assert found.status == "cancelled"
    assert found.deadline_at is not None and found.created_at is not None
    assert (found.deadline_at - found.created_at).total_seconds() <= time_budget(3) + 0.001


async def test_hook_blocks_until_approved(ctx: BotContext, client: Client) -> None:
    call = asyncio.create_task(
        client.post("/hooks/claude-code?timeout=30", json=hook_body(), headers=AUTH)
    )
    request_id = await pending_id(ctx)
    await asyncio.sleep(0.2)
    assert not call.done()  # still waiting for a reviewer
    request = await ctx.store.get(request_id)
    assert (request.event.agent, request.event.call_id, request.event.command) == (
        "claude-code",
        "toolu_01XYZ",
        "terraform apply",
    )
    assert request.metadata == {"hook_event_name": "PreToolUse", "permission_mode": "default"}
    await ctx.service.decide(request_id, "approve", Actor("U1"))
    resp = await asyncio.wait_for(call, 5)
    assert resp.status == 200
    assert await resp.json() == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": "Approved by <@U1>",
        }
    }


async def test_hook_denial_carries_the_reason(ctx: BotContext, client: Client) -> None:
    call = asyncio.create_task(client.post("/hooks/claude-code", json=hook_body(), headers=AUTH))
    request_id = await pending_id(ctx)
    await ctx.service.decide(request_id, "deny", Actor("U2"), reason="not during the freeze")
    resp = await asyncio.wait_for(call, 5)
    assert await resp.json() == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "Denied by <@U2>: not during the freeze",
        }
    }


async def test_codex_hook_endpoint_answers_in_codex_words(ctx: BotContext, client: Client) -> None:
    """`/hooks/codex` (what `approval-bot hook codex` forwards to): Codex's outputs — an
    approved PreToolUse is no output ({}), reasons never end in a full stop — and every
    problem is a deny in the same words, HTTP 200."""
    call = asyncio.create_task(client.post("/hooks/codex", json=hook_body(), headers=AUTH))
    await ctx.service.decide(await pending_id(ctx), "approve", Actor("U2"))
    resp = await asyncio.wait_for(call, 5)
    assert resp.status == 200 and await resp.json() == {}

    body = hook_body("PermissionRequest", turn_id="t-2")
    call = asyncio.create_task(client.post("/hooks/codex", json=body, headers=AUTH))
    await ctx.service.decide(await pending_id(ctx), "deny", Actor("U2"), reason="not now.")
    resp = await asyncio.wait_for(call, 5)
    assert await resp.json() == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": "Denied by <@U2>: not now"},
        }
    }
    bad = {"Authorization": f"Bearer {UNKNOWN_API_TOKEN}"}
    resp = await client.post("/hooks/codex", json=hook_body(), headers=bad)
    out = (await resp.json())["hookSpecificOutput"]
    assert resp.status == 200 and out["permissionDecision"] == "deny"
    assert "not valid" in out["permissionDecisionReason"]
    assert not out["permissionDecisionReason"].endswith(".")
    assert resp.headers[PROBLEM_HEADER].endswith("; denied")


async def test_hook_approval_input_reaches_claude(ctx: BotContext, client: Client) -> None:
    call = asyncio.create_task(client.post("/hooks/claude-code", json=hook_body(), headers=AUTH))
    request_id = await pending_id(ctx)
    await ctx.service.decide(request_id, "approve", Actor("U1"), input="staging workspace only")
    out = await (await asyncio.wait_for(call, 5)).json()
    text = "Approved by <@U1>: staging workspace only"
    assert out == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": text,
            "additionalContext": text,
        }
    }


async def test_hook_timeout_gives_the_configured_outcome_in_time(
    ctx: BotContext, client: Client
) -> None:
    started = time.monotonic()
    resp = await client.post("/hooks/claude-code?timeout=2", json=hook_body(), headers=AUTH)
    elapsed = time.monotonic() - started
    out = await resp.json()
    assert elapsed < 2.0  # the budget is 1.6 s: 0.4 s to spare on a loaded machine
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "No approval decision within" in out["hookSpecificOutput"]["permissionDecisionReason"]
    (created,) = [e for e in await ctx.store.audit_entries() if e.event == "created"]
    assert (await ctx.store.get(created.request_id)).status == "cancelled"

    started = time.monotonic()
    resp = await client.post(
        "/hooks/claude-code?timeout=2&on_timeout=ask",
        json=hook_body(tool_use_id="toolu_02"),
        headers=AUTH,
    )
    assert time.monotonic() - started < 2.0
    assert (await resp.json())["hookSpecificOutput"]["permissionDecision"] == "ask"


async def test_permission_request_shapes(ctx: BotContext, client: Client) -> None:
    call = asyncio.create_task(
        client.post("/hooks/claude-code", json=hook_body("PermissionRequest"), headers=AUTH)
    )
    request_id = await pending_id(ctx)
    await ctx.service.decide(request_id, "deny", Actor("U3"), reason="use plan mode")
    resp = await asyncio.wait_for(call, 5)
    assert await resp.json() == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": "Denied by <@U3>: use plan mode"},
        }
    }

    call = asyncio.create_task(
        client.post("/hooks/claude-code", json=hook_body("PermissionRequest"), headers=AUTH)
    )
    request_id = await pending_id(ctx)
    await ctx.service.decide(request_id, "approve", Actor("U3"))
    resp = await asyncio.wait_for(call, 5)
    assert await resp.json() == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "allow"},
        }
    }

    # on_timeout=ask on PermissionRequest: no decision, `{}`, Claude asks its user
    resp = await client.post(
        "/hooks/claude-code?timeout=1&on_timeout=ask",
        json=hook_body("PermissionRequest"),
        headers=AUTH,
    )
    assert resp.status == 200
    assert await resp.json() == {}


async def test_hook_denies_bad_input_and_clamps_parameters(ctx: BotContext, client: Client) -> None:
    resp = await client.post("/hooks/claude-code", json=hook_body(tool_input=["ls"]), headers=AUTH)
    assert resp.status == 200
    out = (await resp.json())["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny" and "tool_input" in out["permissionDecisionReason"]
    # Timeouts are clamped (0 → 1 s), an unreadable one is the 600 s default; an unknown
    # on_timeout is deny: none is refused. The request's deadline is the hook's budget for
    # that timeout (when it stops waiting), never later.
    cases = (("timeout=0", 1), ("timeout=abc", 600), ("on_timeout=allow", 600))
    for n, (query, timeout) in enumerate(cases):
        deadline = time_budget(timeout)
        body = hook_body(tool_use_id=f"toolu_clamp_{n}")
        call = asyncio.create_task(
            client.post(f"/hooks/claude-code?{query}", json=body, headers=AUTH)
        )
        request_id = await pending_id(ctx)
        found = await ctx.store.get(request_id)
        assert found.deadline_at is not None
        given = (found.deadline_at - found.created_at).total_seconds()
        assert deadline - 1 < given <= deadline + 0.001, query  # + rounding to ms
        await ctx.service.decide(request_id, "deny", Actor("U1"), reason="no")
        resp = await asyncio.wait_for(call, 5)
        assert resp.status == 200
        assert (await resp.json())["hookSpecificOutput"]["permissionDecision"] == "deny"


async def test_openapi_document_describes_the_routes(client: Client) -> None:
    resp = await client.get("/openapi.json")
    doc = await resp.json()
    assert doc["openapi"].startswith("3.")
    assert set(doc["paths"]) == {
        "/v1/approvals",
        "/v1/approvals/{id}",
        "/v1/approvals/{id}/cancel",
        "/v1/calls/cancel",
        "/hooks/claude-code",
        "/hooks/codex",
        "/openapi.json",
    }
    schemas = doc["components"]["schemas"]
    assert set(schemas["ApprovalObject"]["required"]) == set(ApprovalObject.model_fields)
    assert schemas["CreateApproval"]["additionalProperties"] is False
    assert "#/components/schemas/ErrorResponse" in str(doc["paths"]["/v1/approvals"])


# -- review findings: bodies the API cannot take, and hooks that must still answer --------------


async def test_deeply_nested_arguments_are_422_not_500(client: Client) -> None:
    nested: dict[str, Any] = {}
    cur = nested
    for _ in range(300):
        cur["a"] = {}
        cur = cur["a"]
    resp = await client.post(
        "/v1/approvals", headers=AUTH, json={"tool_name": "x", "arguments": nested}
    )
    error = await error_of(resp, 422)
    assert error["code"] == "invalid_request" and "nested" in error["message"]


async def test_hook_denies_a_call_too_large_to_review(ctx: BotContext, client: Client) -> None:
    """Claude Code treats a non-2xx http hook answer as a non-blocking error and runs the tool:
    a call the bot cannot review is denied with a 200, shaped for its event, naming the limit."""
    over = MAX_HOOK_BODY_BYTES + 10
    big = hook_body(tool_name="Write", tool_input={"file_path": "/a", "content": "x" * over})
    resp = await client.post("/hooks/claude-code", data=as_file(big), headers=AUTH)
    assert resp.status == 200, await resp.text()
    out = (await resp.json())["hookSpecificOutput"]
    assert (out["hookEventName"], out["permissionDecision"]) == ("PreToolUse", "deny")
    assert f"the limit is {MAX_HOOK_BODY_BYTES} bytes (4 MiB)" in out["permissionDecisionReason"]

    asked = hook_body("PermissionRequest", tool_input={"command": "x" * over})
    resp = await client.post("/hooks/claude-code", data=as_file(asked), headers=AUTH)
    assert resp.status == 200, await resp.text()
    out = (await resp.json())["hookSpecificOutput"]
    assert out["hookEventName"] == "PermissionRequest"
    assert out["decision"]["behavior"] == "deny"
    assert await ctx.store.list_pending() == []


async def test_hook_accepts_a_one_mib_write_and_keeps_it_whole(
    ctx: BotContext, client: Client
) -> None:
    content = "line of a large file\n" * (1024 * 1024 // 21 + 1)  # just over 1 MiB
    body = hook_body(
        tool_name="Write", tool_input={"file_path": "/srv/big.txt", "content": content}
    )
    call = asyncio.create_task(client.post("/hooks/claude-code", data=as_file(body), headers=AUTH))
    request_id = await pending_id(ctx)
    stored = await ctx.store.get(request_id)
    assert stored.event.arguments["content"] == content  # the store keeps it all
    await ctx.service.decide(request_id, "approve", Actor("U1"))
    resp = await asyncio.wait_for(call, 10)
    assert (await resp.json())["hookSpecificOutput"]["permissionDecision"] == "allow"


async def test_hook_denies_a_command_over_the_event_limit(ctx: BotContext, client: Client) -> None:
    huge = hook_body(tool_input={"command": "echo " + "a" * MAX_EVENT_BYTES})
    resp = await client.post("/hooks/claude-code", data=as_file(huge), headers=AUTH)
    assert resp.status == 200, await resp.text()
    out = (await resp.json())["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny"
    assert await ctx.store.list_pending() == []


async def test_hook_denies_input_too_deep_to_store(ctx: BotContext, client: Client) -> None:
    nested: dict[str, Any] = {}
    cur = nested
    for _ in range(300):
        cur["a"] = {}
        cur = cur["a"]
    resp = await client.post("/hooks/claude-code", json=hook_body(tool_input=nested), headers=AUTH)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert await ctx.store.list_pending() == []


# -- parked long-polls: connections, drain ------------------------------------------------------


async def _parked_ctx(redis_url: str, keys: Keys, name: str) -> BotContext:
    """A context whose Redis clients are named, as the bot's are: the API's pool (64) and the
    Waiter's own client (2)."""
    from approvals._internal.policy_file import default_policy
    from approvals._internal.store.connection import connect
    from approvals._internal.store.waiting import Waiter

    api_redis = connect(redis_url, max_connections=64, client_name=name)
    waiter_redis = connect(redis_url, max_connections=2, client_name=f"{name}-waiter")
    store = ApprovalStore(api_redis, keys)
    waiter = Waiter(waiter_redis, keys, store=ApprovalStore(waiter_redis, keys))
    await waiter.start()
    return BotContext(
        redis=api_redis,
        keys=keys,
        store=store,
        service=ApprovalService(store, default_policy("C0APPROVALS")),
        waiter=waiter,
        api_tokens=(API_TOKEN,),
    )


async def _clients(redis: Redis, name: str) -> int:
    return sum(1 for c in await redis.client_list() if c.get("name") == name)


async def test_parked_long_polls_hold_no_redis_connection_of_their_own(
    redis_url: str, keys: Keys, redis: Redis
) -> None:
    """Redis connections stay constant in the number of parked `?wait=` long-polls: 1 parked
    and 400 arriving at once use the same connections (their reads are batched on the
    Waiter's two, not spread over the API's pool of 64), and every one of them still wakes
    with its own decision."""
    import aiohttp

    name = f"api-{keys.prefix}"
    ctx = await _parked_ctx(redis_url, keys, name)
    client = await make_client(ctx)
    unlimited = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    polls: dict[str, asyncio.Task[Any]] = {}
    try:
        principal = derived_name(API_TOKEN)
        creator = ApprovalService(ApprovalStore(redis, keys), ctx.service.policy)
        created = await asyncio.gather(
            *(
                creator.create(
                    ApprovalEvent(tool_name="deploy", arguments={"n": i}), principal=principal
                )
                for i in range(401)
            )
        )
        ids = [c.request.id for c in created]

        async def park(rid: str) -> Any:
            url = client.make_url(f"/v1/approvals/{rid}?wait=30")
            async with unlimited.get(url, headers=AUTH) as resp:
                assert resp.status == 200, await resp.text()
                return await resp.json()

        def parked() -> float:
            value = ctx.metrics.registry.get_sample_value(
                "approvals_long_polls_parked", {"via": "api"}
            )
            return value or 0.0

        polls[ids[0]] = asyncio.create_task(park(ids[0]))
        # Parked = watched *and* read (the gauge): the Waiter's reading connection is open then.
        await eventually(lambda: parked() == 1, what="one long-poll parked")
        one = (await _clients(redis, name), await _clients(redis, f"{name}-waiter"))
        for rid in ids[1:]:
            polls[rid] = asyncio.create_task(park(rid))
        await eventually(lambda: parked() == 401, within=30, what="401 parked")
        many = (await _clients(redis, name), await _clients(redis, f"{name}-waiter"))
        assert many[1] == one[1] <= 2, f"the Waiter's connections: {one[1]} → {many[1]}"
        assert many[0] == one[0], f"the API's connections: {one[0]} → {many[0]} (pool of 64)"
        for i, rid in enumerate(ids):
            await ctx.service.decide(rid, "approve" if i % 2 else "deny", Actor("U1"))
        results = await asyncio.gather(*polls.values())
        for i, (rid, got) in enumerate(zip(polls, results, strict=True)):
            assert got["id"] == rid
            assert got["status"] == ("approved" if i % 2 else "denied")
        assert ctx.waiter.waiting == 0
        assert await _clients(redis, f"{name}-waiter") <= 2  # pub/sub + reads, for 401 wakes
    finally:
        for task in polls.values():  # on a failure: no socket left open for a later test
            task.cancel()
        await asyncio.gather(*polls.values(), return_exceptions=True)
        await unlimited.close()
        await client.close()
        await ctx.waiter.stop()
        await ctx.waiter.redis.aclose()
        await ctx.redis.aclose()


async def test_draining_answers_parked_long_polls_503_and_leaves_nothing_parked(
    ctx: BotContext, client: Client
) -> None:
    """A drain (what `Bot.drain` does: set `draining`, interrupt the Waiter) answers every
    parked long-poll with 503 `shutting_down` at once, and any long-poll after it too."""
    from bot.core.shutdown import Drained

    made = [await create(client, arguments={"n": i}) for i in range(5)]
    polls = [
        asyncio.create_task(client.get(f"/v1/approvals/{m['id']}?wait=30", headers=AUTH))
        for m in made
    ]
    await eventually(lambda: ctx.waiter.waiting == 5, what="five long-polls parked")
    ctx.draining.set()
    assert ctx.waiter.interrupt(Drained) == 5
    for resp in await asyncio.wait_for(asyncio.gather(*polls), 10):
        assert (await error_of(resp, 503))["code"] == "shutting_down"
        assert resp.headers["Retry-After"] == "1"
    assert ctx.waiter.waiting == 0
    resp = await client.get(f"/v1/approvals/{made[0]['id']}?wait=30", headers=AUTH)
    assert (await error_of(resp, 503))["code"] == "shutting_down"
    resp = await client.get(f"/v1/approvals/{made[0]['id']}", headers=AUTH)
    assert resp.status == 200 and (await resp.json())["status"] == "pending"


# -- a parked long-poll's footprint: frames, the client going away --------------------------------


async def test_a_parked_long_poll_holds_no_frame_of_ours_and_still_maps_its_errors(
    ctx: BotContext, client: Client
) -> None:
    """A parked long-poll is detached from aiohttp (bot/http/parked.py): no task, no coroutine frame
    of the handler is left while it waits (every frame on a parked await chain is held for as
    long as it waits). Its errors still answer as JSON."""
    made = await create(client)
    poll = asyncio.create_task(client.get(f"/v1/approvals/{made['id']}?wait=30", headers=AUTH))
    await eventually(lambda: client.app[PARKING].parked == 1, what="the long-poll parked")
    assert ctx.waiter.waiting == 1
    chains = []
    for task in asyncio.all_tasks():
        coro: Any = task.get_coro()
        chain = []
        while coro is not None and hasattr(coro, "cr_code"):
            chain.append(coro.cr_code)
            coro = coro.cr_await
        if any(code.co_name == "get" and code.co_filename.endswith("api.py") for code in chain):
            chains.append(chain)
    assert chains == [], "no parked handler"
    await ctx.service.decide(made["id"], "approve", Actor("U1"))
    resp = await poll
    assert (await resp.json())["status"] == "approved"
    assert ctx.waiter.waiting == 0
    # The errors of the route are still the API's JSON errors (`http_error`).
    resp = await client.get(f"/v1/approvals/{made['id']}?wait=5")
    assert (await error_of(resp, 401))["code"] == "unauthorized"
    resp = await client.get("/v1/approvals/apr_nosuchrequest?wait=5", headers=AUTH)
    assert (await error_of(resp, 404))["code"] == "not_found"
    resp = await client.get(f"/v1/approvals/{made['id']}?wait=5&wait=x", headers=AUTH)
    assert resp.status == 200, "the first value counts, as request.query has it"
    resp = await client.get(f"/v1/approvals/{made['id']}?wait=%2D1", headers=AUTH)
    assert (await error_of(resp, 422))["details"][0]["loc"] == ["query", "wait"]
    assert ctx.waiter.waiting == 0


async def test_a_long_poll_whose_client_goes_away_leaves_nothing_parked(
    make_bot: Any, slack: Any
) -> None:
    """In `serve` aiohttp does not cancel a handler when its client disconnects
    (`handler_cancellation` is off, unlike aiohttp's test server): the Waiter notices the
    closed transport and ends the watch, so the gauge, the Waiter's registry and the
    connection's memory are released long before the wait (30 s here) would end."""
    bot = await make_bot()
    assert bot.ctx is not None
    base = f"http://127.0.0.1:{bot.port}"
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{base}/v1/approvals", json={"tool_name": "deploy", "arguments": {}}, headers=AUTH
        ) as resp:
            assert resp.status == 201
            rids = [(await resp.json())["id"]]
        async with http.post(
            f"{base}/v1/approvals",
            json={"tool_name": "deploy", "arguments": {"n": 2}},
            headers=AUTH,
        ) as resp:
            rids.append((await resp.json())["id"])
    # Two raw connections park a long-poll each; one goes away, the other stays.
    conns = []
    for rid in rids:
        reader, writer = await asyncio.open_connection("127.0.0.1", bot.port)
        writer.write(
            f"GET /v1/approvals/{rid}?wait=30 HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: {AUTH['Authorization']}\r\n\r\n".encode()
        )
        await writer.drain()
        conns.append((reader, writer))
    try:
        await _one_goes_away(bot, rids, conns)
    finally:
        for _, writer in conns:
            writer.close()


async def _one_goes_away(
    bot: Any, rids: list[str], conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
) -> None:
    from tests.bot.ops.test_metrics import scrape, total

    ctx = bot.ctx

    def parked(n: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return total(await scrape(bot), "approvals_long_polls_parked", via="api") == n

        return check

    # A watch counts in `waiting` from before its read; the gauge once the read found the
    # request pending: both parked is both.
    await eventually(lambda: ctx.waiter.waiting == 2, what="two long-polls watched")
    await eventually(parked(2), what="two long-polls parked")
    gone = conns[0][1]
    gone.close()
    await gone.wait_closed()
    await eventually(lambda: ctx.waiter.waiting == 1, within=20, what="the gone one released")
    await eventually(parked(1), what="the gauge back to one")
    # The other one is still parked and still wakes on the decision.
    await ctx.service.decide(rids[1], "approve", Actor("U1"))
    reader, writer = conns[1]
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 200")
    length = int(
        next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[
            1
        ]
    )
    assert json.loads(await reader.readexactly(length))["status"] == "approved"
    writer.close()
    await writer.wait_closed()
    assert ctx.waiter.waiting == 0
    assert total(await scrape(bot), "approvals_long_polls_parked", via="api") == 0


async def test_a_reason_is_shown_to_reviewers_and_bounded(client: Client, ctx: BotContext) -> None:
    made = await create(client, reason="  The cache is stale after the schema change.  ")
    stored = await ctx.store.get(made["id"])
    assert stored.event.context is not None
    assert stored.event.context.reason == "The cache is stale after the schema change."
    assert made["reason"] is None  # the approval object's reason is the decision's
    blank = await create(client, reason="   ")
    assert (await ctx.store.get(blank["id"])).event.context is None
    resp = await client.post(
        "/v1/approvals",
        json={"tool_name": "deploy", "arguments": {}, "reason": "x" * 2001},
        headers=AUTH,
    )
    error = await error_of(resp, 422)
    assert "reason" in json.dumps(error)
