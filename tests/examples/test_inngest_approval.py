"""`examples/inngest_approval.py`: the function runs in Inngest's own offline runner
(`inngest.experimental.mocked`), its approval step against the real bot API; the bot's real
signed webhook becomes the `approval/decided` event the function waits for."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import inngest
from inngest.experimental import mocked

from approvals.approval import approval_object
from approvals.client import SyncApprovalClient
from approvals.models import Decision
from bot.core.context import BotContext
from bot.workers.webhooks import WebhookWorker
from examples.inngest_approval import DECIDED, make_function, on_webhook
from tests.support.credentials import API_TOKEN
from tests.support.webhook_receiver import eventually


class RecordingInngest(mocked.Inngest):
    """Inngest's mock client, keeping what is sent."""

    def __init__(self) -> None:
        super().__init__(app_id="approval-recipes", is_production=False)
        self.sent: list[inngest.Event] = []

    def send_sync(self, events: Any, *, skip_middleware: bool = False) -> list[str]:
        self.sent += events if isinstance(events, list) else [events]
        return [e.id or "" for e in self.sent]


async def test_function_waits_for_the_decision_event_sent_by_the_webhook_receiver(
    ctx: BotContext,
    api_url: str,
    webhooks: WebhookWorker,
    serve_handler: Callable[..., Awaitable[str]],
    secret: str,
) -> None:
    client = RecordingInngest()

    async def handle(headers: dict[str, str], body: str) -> tuple[int, str]:
        return await asyncio.to_thread(on_webhook, client, secret, headers, body), ""

    url = await serve_handler(handle)
    approvals = SyncApprovalClient.from_env(
        {"APPROVALS_URL": api_url, "APPROVALS_TOKEN": API_TOKEN}
    )
    deployed: list[dict[str, Any]] = []
    fn = make_function(
        client,
        approvals,
        callback_url=url,
        deploy=lambda data: deployed.append(data) or "deployed",
    )
    trigger = inngest.Event(name="deploy/requested", data={"service": "billing"})
    try:
        # 1. the approval step runs for real; no decision in time → not deployed
        first = await asyncio.to_thread(
            mocked.trigger, fn, trigger, client, step_stubs={"wait-for-decision": mocked.Timeout}
        )
        assert first.status is mocked.Status.COMPLETED, first.error
        approval_id = first.output["approval_id"]
        assert first.output["result"] == "not deployed: no decision" and deployed == []
        pending = approval_object(await ctx.store.get(approval_id))
        assert pending["status"] == "pending"

        # 2. a reviewer approves; the bot's webhook reaches the receiver → one event
        await ctx.store.resolve(approval_id, Decision.approve(by="U0REVIEWER", via="cli"))
        await eventually(lambda: client.sent)
        (event,) = client.sent
        assert event.name == DECIDED and event.id == f"msg_{approval_id}"
        assert event.data["id"] == approval_id and event.data["status"] == "approved"

        # 3. the function, at the wait step, receives exactly that event → deployed
        resumed = await asyncio.to_thread(
            mocked.trigger,
            fn,
            trigger,
            client,
            step_stubs={"request-approval": pending, "wait-for-decision": event},
        )
        assert resumed.status is mocked.Status.COMPLETED, resumed.error
        assert resumed.output == {"approval_id": approval_id, "result": "deployed"}
        assert deployed == [{"service": "billing"}]

        # a denial event: not deployed
        denied = inngest.Event(name=DECIDED, data={**event.data, "status": "denied"})
        result = await asyncio.to_thread(
            mocked.trigger,
            fn,
            trigger,
            client,
            step_stubs={"request-approval": pending, "wait-for-decision": denied},
        )
        assert result.output["result"] == "not deployed: denied"
        assert len(deployed) == 1
        # a forged webhook is refused and sends nothing
        assert await handle({"webhook-id": "msg_x"}, "{}") == (401, "")
        assert len(client.sent) == 1
    finally:
        await asyncio.to_thread(approvals.close)
