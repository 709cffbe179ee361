"""`examples/temporal_approval.py`: the activity runs in temporalio's `ActivityEnvironment`
against the real bot API; the bot's real signed webhook reaches `on_webhook`, which signals
the workflow named in the callback metadata — here a stub client that records the signal.
The workflow itself is not run: temporalio's test server is a binary downloaded at run time,
which cannot be fetched offline."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import ActivityEnvironment

from approvals.client import ApprovalClient
from approvals.models import Decision
from bot.core.context import BotContext
from bot.workers.webhooks import WebhookWorker
from examples.temporal_approval import (
    ApprovalActivities,
    ApprovalAsk,
    DeployWorkflow,
    on_webhook,
)
from tests.support.credentials import API_TOKEN
from tests.support.webhook_receiver import eventually


@dataclass
class StubHandle:
    workflow_id: str
    client: StubTemporal

    async def signal(self, signal: Any, arg: Any) -> None:
        if self.workflow_id in self.client.finished:
            raise RPCError("workflow execution already completed", RPCStatusCode.NOT_FOUND, b"")
        self.client.signals.append((self.workflow_id, signal, arg))


@dataclass
class StubTemporal:
    """`temporalio.client.Client` as far as `on_webhook` uses it."""

    signals: list[tuple[str, Any, Any]] = field(default_factory=list)
    finished: set[str] = field(default_factory=set)

    def get_workflow_handle(self, workflow_id: str) -> StubHandle:
        return StubHandle(workflow_id, self)


async def test_activity_asks_with_a_callback_and_the_webhook_signals_the_workflow(
    ctx: BotContext,
    api_url: str,
    webhooks: WebhookWorker,
    serve_handler: Callable[..., Awaitable[str]],
    secret: str,
) -> None:
    temporal = StubTemporal()

    async def handle(headers: dict[str, str], body: str) -> tuple[int, str]:
        return await on_webhook(temporal, secret, headers, body), ""

    url = await serve_handler(handle)
    client = ApprovalClient.from_env({"APPROVALS_URL": api_url, "APPROVALS_TOKEN": API_TOKEN})
    activities = ApprovalActivities(client, callback_url=url)
    try:
        ask = ApprovalAsk("deploy", {"service": "billing"}, workflow_id="deploy-billing-1")
        approval = await ActivityEnvironment().run(activities.request_approval, ask)
        assert approval["status"] == "pending"
        again = await ActivityEnvironment().run(activities.request_approval, ask)
        assert again["id"] == approval["id"]  # a retried activity makes no second request
        request = await ctx.store.get(approval["id"])
        assert request.callback is not None
        assert request.callback.metadata == {"workflow_id": "deploy-billing-1"}

        await ctx.store.resolve(approval["id"], Decision.approve(by="U0REVIEWER", via="cli"))
        await eventually(lambda: temporal.signals)
        ((workflow_id, signal, data),) = temporal.signals
        assert workflow_id == "deploy-billing-1"
        assert signal is DeployWorkflow.approval_decided
        assert data["id"] == approval["id"] and data["status"] == "approved"

        # the signal handler keeps the first decision (a redelivered webhook changes nothing)
        wf = DeployWorkflow()
        wf.approval_decided(data)
        wf.approval_decided({**data, "status": "denied"})
        assert wf.decision is not None and wf.decision["status"] == "approved"

        # a finished workflow: the receiver answers 200 (nothing to retry)
        temporal.finished.add("deploy-billing-1")
        status, _ = await handle(*_signed_again(data, secret))
        assert status == 200
        # a forged webhook: 401, no signal
        status, _ = await handle({"webhook-id": "msg_x", "webhook-timestamp": "1"}, "{}")
        assert status == 401 and len(temporal.signals) == 1
    finally:
        await client.aclose()


def _signed_again(data: dict[str, Any], secret: str) -> tuple[dict[str, str], str]:
    import json
    from datetime import UTC, datetime

    from standardwebhooks import Webhook

    body = json.dumps({"type": "approval.decided", "data": data})
    now = datetime.now(UTC)
    headers = {
        "webhook-id": f"msg_{data['id']}",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(f"msg_{data['id']}", now, body),
    }
    return headers, body
