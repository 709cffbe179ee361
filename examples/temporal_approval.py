"""Recipe: a Temporal workflow that asks for approval and waits for a signal, not a poll.

`request_approval` (an activity: workflows do no I/O) creates the approval with a
callback whose metadata names the workflow. The workflow then waits on
`approval_decided` — durable, for as long as it takes, with no worker busy. The
webhook receiver (`on_webhook`, in any web app next to a Temporal client)
verifies the bot's signature with `standardwebhooks` and signals the workflow.

    worker = Worker(client, task_queue="deploys", workflows=[DeployWorkflow],
                    activities=[ApprovalActivities(ApprovalClient.from_env(),
                                callback_url="https://app.example.com/webhooks/approval")
                                .request_approval])
    # in the webhook route:
    status = await on_webhook(client, os.environ["APPROVALS_WEBHOOK_SECRET"], headers, body)

Tests: `tests/examples/test_temporal_approval.py` — the activity runs in temporalio's
`ActivityEnvironment` and the receiver signals a stub client; the workflow itself is not
run there (temporalio's test server is a binary fetched at run time, not available offline).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from standardwebhooks import Webhook, WebhookVerificationError
from temporalio import activity, workflow
from temporalio.service import RPCError, RPCStatusCode

with workflow.unsafe.imports_passed_through():
    from approvals import ApprovalClient


@dataclass
class ApprovalAsk:
    tool_name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    workflow_id: str = ""


class ApprovalActivities:
    """Activities holding the (non-deterministic) client; register the bound methods."""

    def __init__(self, client: ApprovalClient, *, callback_url: str) -> None:
        self.client = client
        self.callback_url = callback_url

    @activity.defn(name="request_approval")
    async def request_approval(self, ask: ApprovalAsk) -> dict[str, Any]:
        approval = await self.client.request(
            ask.tool_name,
            ask.arguments,
            call_id=f"temporal:{ask.workflow_id}",  # a retried activity finds the same request
            callback={"url": self.callback_url, "metadata": {"workflow_id": ask.workflow_id}},
        )
        return approval.model_dump(mode="json")


@workflow.defn
class DeployWorkflow:
    def __init__(self) -> None:
        self.decision: dict[str, Any] | None = None

    @workflow.signal
    def approval_decided(self, approval: dict[str, Any]) -> None:
        if self.decision is None:  # the first delivery counts; redeliveries change nothing
            self.decision = approval

    @workflow.run
    async def run(self, service: str) -> str:
        ask = ApprovalAsk("deploy", {"service": service}, workflow.info().workflow_id)
        approval: dict[str, Any] = await workflow.execute_activity(
            "request_approval", ask, start_to_close_timeout=timedelta(seconds=30)
        )
        if approval["status"] == "pending":
            try:
                await workflow.wait_condition(
                    lambda: self.decision is not None, timeout=timedelta(hours=24)
                )
            except TimeoutError:
                return "not deployed: no decision"
            assert self.decision is not None
            approval = self.decision
        if approval["status"] != "approved":
            return f"not deployed: {approval['status']}"
        return f"deployed {service}"


class SignalsWorkflows(Protocol):
    """What `on_webhook` needs of `temporalio.client.Client`."""

    def get_workflow_handle(self, workflow_id: str) -> Any: ...


async def on_webhook(
    client: SignalsWorkflows, secret: str, headers: dict[str, str], body: str
) -> int:
    """Verify the webhook and signal the workflow its metadata names; the HTTP status."""
    try:
        payload = Webhook(secret).verify(body, headers)
    except WebhookVerificationError:
        return 401
    approval = payload["data"]
    workflow_id = ((approval.get("callback") or {}).get("metadata") or {}).get("workflow_id")
    if not workflow_id:
        return 400
    handle = client.get_workflow_handle(workflow_id)
    try:
        await handle.signal(DeployWorkflow.approval_decided, approval)
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:  # finished (or gone): nothing to resume
            return 200
        raise
    return 200
