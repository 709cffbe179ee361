"""A reviewer's question through the agent HTTP API: `status: asked` with the `question`, as the
long-poll answers it; the caller's retry (same session and tool, its answer as `reason`)
carries `answers`; the OpenAPI document names the status and both fields."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from approvals._internal.service import Actor
from bot.core.context import BotContext
from tests.bot.http.test_api import AUTH, create, make_client

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def client(ctx: BotContext) -> AsyncIterator[Client]:
    c = await make_client(ctx)
    yield c
    await c.close()


async def test_asked_then_answered_through_the_api(client: Client, ctx: BotContext) -> None:
    first = await create(client, session_id="sess-api", reason="Roll the fleet")
    assert first["status"] == "pending" and first["question"] is None

    # A long-poll parked on the request is answered by the question.
    waiting = asyncio.ensure_future(
        client.get(f"/v1/approvals/{first['id']}?wait=10", headers=AUTH)
    )
    await asyncio.sleep(0.1)
    await ctx.service.ask(first["id"], Actor("U0ANN"), "Which fleet: blue or green?")
    resp = await asyncio.wait_for(waiting, 10)
    assert resp.status == 200
    asked = await resp.json()
    assert asked["status"] == "asked" and asked["decision"] == "asked"
    assert asked["question"] == "Which fleet: blue or green?" and asked["decided_by"] == "U0ANN"
    assert asked["reason"] is None
    # The retry: same session and tool, the answer as its reason.
    retry = await create(
        client,
        arguments={"env": "prod", "fleet": "green"},
        session_id="sess-api",
        reason="Green: blue still serves the canary.",
    )
    assert retry["status"] == "pending" and retry["answers"] == first["id"]
    resp = await client.get(f"/v1/approvals/{retry['id']}", headers=AUTH)
    assert (await resp.json())["answers"] == first["id"]


async def test_the_openapi_document_names_asked_and_the_question(client: Client) -> None:
    resp = await client.get("/openapi.json")
    document = await resp.json()
    text = str(document)
    schemas = document["components"]["schemas"]
    (approval,) = [s for name, s in schemas.items() if name in ("Approval", "ApprovalObject")]
    assert {"question", "answers"} <= set(approval["properties"])
    assert "asked" in text
