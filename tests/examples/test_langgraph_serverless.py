"""`examples/langgraph_serverless.py`: a LangGraph thread suspended at an approval is resumed
by the bot's real signed webhook through the serverless handler (no network: loopback only)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from langgraph.checkpoint.memory import InMemorySaver

from approvals._internal.store.webhooks import Deliveries
from approvals.client import SyncApprovalClient
from approvals.models import Decision
from bot.core.context import BotContext
from bot.workers.webhooks import WebhookWorker
from examples.langgraph_serverless import build_graph, make_handler, start
from tests.support.credentials import API_TOKEN
from tests.support.webhook_receiver import eventually


async def test_thread_resumes_on_approve_and_deny_and_ignores_redelivery_and_forgery(
    ctx: BotContext,
    api_url: str,
    webhooks: WebhookWorker,
    serve_handler: Callable[..., Awaitable[str]],
    secret: str,
) -> None:
    ran: list[str] = []
    client = SyncApprovalClient.from_env({"APPROVALS_URL": api_url, "APPROVALS_TOKEN": API_TOKEN})
    box: dict[str, Any] = {}

    async def handle(headers: dict[str, str], body: str) -> tuple[int, str]:
        answer = await asyncio.to_thread(box["handler"], {"headers": headers, "body": body}, None)
        return answer["statusCode"], answer["body"]

    url = await serve_handler(handle)
    graph = build_graph(
        client,
        callback_url=url,
        checkpointer=InMemorySaver(),
        run=lambda command: ran.append(command) or f"ran {command}",
    )
    box["handler"] = make_handler(graph, secret=secret)
    try:
        # the function returns at the interrupt: nothing is waiting any more
        out = await asyncio.to_thread(start, graph, thread_id="t-1", command="terraform apply")
        assert "result" not in out and out["approval"]["status"] == "pending"
        approval_id = out["approval"]["id"]
        request = await ctx.store.get(approval_id)
        assert request.callback is not None
        assert request.callback.metadata == {"thread_id": "t-1"}
        assert ran == []

        await ctx.store.resolve(approval_id, Decision.approve(by="U0REVIEWER", via="cli"))
        config = {"configurable": {"thread_id": "t-1"}}
        state = await eventually(
            lambda: (s := graph.get_state(config)).values.get("result") and s  # type: ignore[arg-type]
        )
        assert state.values["result"] == "ran terraform apply"
        assert state.values["approval"]["decided_by"] == "U0REVIEWER"
        assert ran == ["terraform apply"]

        # a redelivery (same webhook-id) finds nothing waiting: 200, and it does not run again
        deliveries = Deliveries(ctx.redis, ctx.keys)
        # The graph resumes inside the handler, before the bot has the 200: retried before the
        # first attempt is recorded, the retry would meet that attempt still in flight and be
        # settled by it (delivered), never attempted a second time.
        await eventually(lambda: _attempts(deliveries, approval_id, 1))
        await deliveries.retry(approval_id)
        await eventually(lambda: _attempts(deliveries, approval_id, 2))
        assert ran == ["terraform apply"]

        # a forged call is refused (401: the bot would not retry it)
        async with aiohttp.ClientSession() as http:
            forged = {
                "webhook-id": "msg_x",
                "webhook-timestamp": "1",
                "webhook-signature": "v1,AA==",
            }
            async with http.post(url, data="{}", headers=forged) as resp:
                assert resp.status == 401

        # denied: the command does not run
        out = await asyncio.to_thread(start, graph, thread_id="t-2", command="rm -rf /")
        await ctx.store.resolve(out["approval"]["id"], Decision.deny("no", by="U0REVIEWER"))
        config2 = {"configurable": {"thread_id": "t-2"}}
        state = await eventually(
            lambda: (s := graph.get_state(config2)).values.get("result") and s  # type: ignore[arg-type]
        )
        assert state.values["result"] == "not run: denied"
        assert ran == ["terraform apply"]
    finally:
        await asyncio.to_thread(client.close)


async def _attempts(deliveries: Deliveries, request_id: str, count: int) -> bool:
    delivery = await deliveries.get(request_id)
    return delivery is not None and delivery.status == "delivered" and delivery.attempts >= count
