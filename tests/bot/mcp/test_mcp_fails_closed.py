"""Property: whatever arguments an MCP client sends, `permission_prompt` answers with the deny
JSON Claude Code reads (never an allow nobody gave, never a protocol error), and
`request_approval` / `ask_human` answer "not approved". Through the SDK's in-process client,
on real Redis; no reviewer decides, so a well-formed call ends at its (short) wait budget."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from approvals._internal.policy_file import default_policy
from approvals._internal.service import ApprovalService
from approvals._internal.store.connection import connect
from approvals._internal.store.keys import Keys
from approvals._internal.store.store import ApprovalStore
from approvals._internal.store.waiting import Waiter
from approvals.client import ApprovalClient
from bot.core.context import BotContext
from bot.mcp.http import BotTransport
from bot.mcp.reviewer_wait import WaitOptions
from bot.mcp.server import ApprovalsServer, ServerOptions
from tests.support import delete_prefix

# No lone surrogates here: the SDK client cannot send them (test_mcp_server.py sends one
# on the wire, as a Node client would).
hostile_text = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=40),
    st.sampled_from(["", " ", "x" * 5000, "<!channel>", "Bash", "../../etc", "\u0000"]),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | hostile_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=4),
    max_leaves=12,
)
near_valid = st.fixed_dictionaries(
    {"tool_name": hostile_text, "input": st.dictionaries(hostile_text, json_values, max_size=4)},
    optional={"tool_use_id": json_values, "extra": json_values},
)
arguments = st.one_of(near_valid, st.dictionaries(hostile_text, json_values, max_size=5))


async def answers(redis_url: str, tool: str, args: dict[str, Any]) -> Any:
    keys = Keys(f"test-{uuid.uuid4().hex[:10]}")
    redis = connect(redis_url, max_connections=8, client_name="approval-bot-test")
    store = ApprovalStore(redis, keys)
    waiter = Waiter(redis, keys, store=store)
    ctx = BotContext(
        redis=redis,
        keys=keys,
        store=store,
        service=ApprovalService(store, default_policy("C0APPROVALS")),
        waiter=waiter,
    )
    wait = WaitOptions(progress_interval=0.02, max_wait=0.05)
    server = ApprovalsServer(
        lambda call: ApprovalClient(BotTransport(ctx)), ServerOptions(wait=wait)
    )
    try:
        async with Client(server.server) as client:
            return await client.call_tool(tool, args)
    finally:
        await waiter.stop()
        await delete_prefix(redis, keys)
        await redis.aclose()


FAST = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FAST
@given(args=arguments)
def test_permission_prompt_never_allows_what_nobody_approved(
    redis_url: str, args: dict[str, Any]
) -> None:
    result = asyncio.run(answers(redis_url, "permission_prompt", args))
    assert not result.is_error
    [content] = result.content
    payload = json.loads(content.text)
    assert payload["behavior"] == "deny", payload
    assert set(payload) == {"behavior", "message"} and payload["message"]


@FAST
@given(tool=st.sampled_from(["request_approval", "ask_human"]), args=arguments)
def test_request_approval_and_ask_human_never_say_yes_unasked(
    redis_url: str, tool: str, args: dict[str, Any]
) -> None:
    result = asyncio.run(answers(redis_url, tool, args))
    [content] = result.content
    payload = json.loads(content.text)
    assert payload.get("approved") is not True and payload.get("answered") is not True, payload
