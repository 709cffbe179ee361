"""Recipe: an Inngest function that asks for approval and sleeps until the decision event.

The function creates the approval with a callback and then `step.wait_for_event`s
`approval/decided` matching its id — no process waits meanwhile. The webhook
receiver (`on_webhook`, mount it in your web app) verifies the bot's signature
with `standardwebhooks` and forwards the approval object as that event, using
the `webhook-id` as the event id so a redelivered webhook is de-duplicated by
Inngest.

    client = inngest.Inngest(app_id="deployer")
    deploy = make_function(client, SyncApprovalClient.from_env(),
                           callback_url="https://app.example.com/webhooks/approval")
    # in the webhook route:
    status = on_webhook(client, os.environ["APPROVALS_WEBHOOK_SECRET"], headers, body)

Tests: `tests/examples/test_inngest_approval.py` (Inngest's own `mocked` runner).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import inngest
from standardwebhooks import Webhook, WebhookVerificationError

from approvals import SyncApprovalClient

DECIDED = "approval/decided"


def make_function(
    client: inngest.Inngest,
    approvals: SyncApprovalClient,
    *,
    callback_url: str,
    deploy: Callable[[dict[str, Any]], str] = lambda data: f"deployed {data}",
    wait: datetime.timedelta = datetime.timedelta(hours=24),
) -> inngest.Function[Any]:
    @client.create_function(
        fn_id="deploy-with-approval", trigger=inngest.TriggerEvent(event="deploy/requested")
    )
    def deploy_with_approval(ctx: inngest.ContextSync) -> dict[str, Any]:
        def ask() -> dict[str, Any]:
            approval = approvals.request(
                "deploy",
                dict(ctx.event.data),
                call_id=f"inngest:{ctx.run_id}",  # a retried step finds the same request
                callback={"url": callback_url},
            )
            return approval.model_dump(mode="json")

        approval = ctx.step.run("request-approval", ask)
        if approval["status"] == "pending":
            event = ctx.step.wait_for_event(
                "wait-for-decision",
                event=DECIDED,
                if_exp=f"async.data.id == '{approval['id']}'",
                timeout=wait,
            )
            if event is None:
                return {"approval_id": approval["id"], "result": "not deployed: no decision"}
            approval = dict(event.data)
        if approval["status"] != "approved":
            return {"approval_id": approval["id"], "result": f"not deployed: {approval['status']}"}
        result = ctx.step.run("deploy", lambda: deploy(dict(ctx.event.data)))
        return {"approval_id": approval["id"], "result": result}

    return deploy_with_approval


def on_webhook(client: inngest.Inngest, secret: str, headers: dict[str, str], body: str) -> int:
    """Verify the webhook and send it on as an `approval/decided` event; the HTTP status to
    answer (401 is not retried by the bot; an exception here is a 500, which is)."""
    try:
        payload = Webhook(secret).verify(body, headers)
    except WebhookVerificationError:
        return 401
    webhook_id = {k.lower(): v for k, v in headers.items()}["webhook-id"]
    client.send_sync(inngest.Event(name=DECIDED, data=payload["data"], id=webhook_id))
    return 200
