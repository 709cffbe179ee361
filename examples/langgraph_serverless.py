"""Recipe: a LangGraph agent that suspends at an approval and is resumed by the bot's webhook.

Nothing waits while the human decides. The first invocation runs the graph until
`interrupt()`, which the checkpointer saves; the process may then exit (a serverless
function, a CI job). When the request is decided, approval-bot POSTs the signed
approval object to `handler`, which verifies it (Standard Webhooks, with the
`standardwebhooks` package), finds the thread named in the callback metadata and
resumes it with `Command(resume=...)`.

    graph = build_graph(client, callback_url="https://fn.example.com/approval-webhook",
                        checkpointer=<a durable checkpointer: Postgres, Redis, ...>)
    start(graph, thread_id="t-42", command="terraform apply")   # returns at the interrupt
    handler = make_handler(graph, secret=os.environ["APPROVALS_WEBHOOK_SECRET"])
    # e.g. AWS Lambda: handler({"headers": {...}, "body": "..."}, context)

`APPROVALS_WEBHOOK_SECRET` is the principal's secret from
`approval-bot webhooks secret`. Tests: `tests/examples/test_langgraph_serverless.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NotRequired, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt
from standardwebhooks import Webhook, WebhookVerificationError

from approvals import SyncApprovalClient

log = logging.getLogger(__name__)


class State(TypedDict):
    command: str
    approval: NotRequired[dict[str, Any]]
    result: NotRequired[str]


def build_graph(
    client: SyncApprovalClient,
    *,
    callback_url: str,
    checkpointer: BaseCheckpointSaver[Any],
    run: Callable[[str], str] = lambda command: f"ran {command}",
) -> CompiledStateGraph[Any]:
    """ask (creates the approval, with the callback) → gate (interrupts until resumed)."""

    def ask(state: State, config: RunnableConfig) -> dict[str, Any]:
        thread_id = (config.get("configurable") or {})["thread_id"]
        approval = client.request(
            "shell",
            {"command": state["command"]},
            call_id=f"langgraph:{thread_id}",  # a re-run of this node finds the same request
            callback={"url": callback_url, "metadata": {"thread_id": thread_id}},
        )
        return {"approval": approval.model_dump(mode="json")}

    def gate(state: State) -> dict[str, Any]:
        approval = state["approval"]
        if approval["status"] == "pending":  # a policy rule may have decided already
            approval = interrupt({"approval_id": approval["id"]})
        if approval["status"] == "approved":
            return {"approval": approval, "result": run(state["command"])}
        return {"approval": approval, "result": f"not run: {approval['status']}"}

    graph = StateGraph(State)
    graph.add_node("ask", ask)
    graph.add_node("gate", gate)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", "gate")
    graph.add_edge("gate", END)
    return graph.compile(checkpointer=checkpointer)


def start(graph: CompiledStateGraph[Any], *, thread_id: str, command: str) -> dict[str, Any]:
    """Run until the approval gate (or the end, if a policy decided at once)."""
    return dict(graph.invoke({"command": command}, {"configurable": {"thread_id": thread_id}}))


def make_handler(
    graph: CompiledStateGraph[Any], *, secret: str
) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """A serverless handler: `{"headers", "body"}` in, `{"statusCode", "body"}` out.

    401 for a bad signature (not retried by the bot); 200 once the thread is resumed,
    or when it was already (a redelivery: the same `webhook-id` again); 5xx if resuming
    fails, so the bot retries."""
    webhook = Webhook(secret)

    def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
        body = event.get("body") or ""
        try:
            payload = webhook.verify(body, event.get("headers") or {})
        except WebhookVerificationError as e:
            return {"statusCode": 401, "body": f"bad signature: {e}"}
        approval = payload["data"]
        thread_id = (approval.get("callback") or {}).get("metadata", {}).get("thread_id")
        if not thread_id:
            return {"statusCode": 400, "body": "no thread_id in the callback metadata"}
        config = {"configurable": {"thread_id": thread_id}}
        if not graph.get_state(config).next:  # nothing waiting: resumed before (redelivery)
            return {"statusCode": 200, "body": "already resumed"}
        graph.invoke(Command(resume=approval), config)
        return {"statusCode": 200, "body": "resumed"}

    return handler
