"""OpenAI Agents SDK: tools with `needs_approval=True` → approvals → `state.approve` / `reject`.

    result = await Runner.run(agent, "deploy to prod")
    while result.interruptions:
        state = await resolve_interruptions(result, client, timeout=600)
        result = await Runner.run(agent, state)

Each interruption becomes one approval request (tool name + parsed
arguments); they are all posted first, then waited for together. Approve →
`state.approve(item)` (approve-for-session → `always_approve=True`: the
tool needs no approval again in this run); deny, expiry or timeout →
`state.reject(item, rejection_message="denied: <reason>")`, which the model
reads as the tool's result; a reviewer's question (status `asked`) is such a rejection whose
message carries the question and asks the model to answer it and call again. Needs the
`openai-agents` extra.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from approvals._internal.questions import agent_text
from approvals.client import Approval, ApprovalClient
from approvals.models import ApprovalConfig
from approvals.review import TIMEOUT_REASON

try:
    from agents import RunState, ToolApprovalItem
except ImportError as e:  # pragma: no cover - depends on the extra
    raise ImportError(
        "approvals.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'approval-bot[openai-agents]'"
    ) from e

log = logging.getLogger(__name__)

#: A review config per tool name (or one for all): `needs_approval` tools default to yes/no.
ConfigFor = Callable[[str], ApprovalConfig | dict[str, Any] | None]


def parse_arguments(raw: str | None) -> dict[str, Any]:
    """The tool call's arguments as the reviewer should see them (a JSON object)."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"raw_arguments": raw}
    return value if isinstance(value, dict) else {"arguments": value}


def rejection_message(approval: Approval | None) -> str:
    """What the model reads instead of the tool's output: "denied: <reason>"."""
    if approval is None:
        return f"denied: {TIMEOUT_REASON}"
    if approval.status == "expired":
        return f"denied: {approval.reason or TIMEOUT_REASON}"
    if approval.status == "error":
        return f"approval error: {approval.reason or 'the review failed'}"
    if approval.status == "asked":  # the reviewer's question: the model answers and retries
        return f"denied: {agent_text(approval.question, approval.decided_by)}"
    if approval.approved and approval.edited_arguments is not None:
        return "denied: the reviewer approved edited arguments, which this agent cannot run"
    return f"denied: {approval.reason or approval.status}"


async def _review(
    client: ApprovalClient,
    item: ToolApprovalItem,
    *,
    timeout: float | None,  # noqa: ASYNC109
    config: ApprovalConfig | dict[str, Any] | None,
    agent: str | None,
    session_id: str | None,
    run_id: str | None,
) -> Approval | None:
    tool = item.name or "tool"
    call_id = f"openai-agents:{run_id}:{item.call_id}" if run_id and item.call_id else None
    approval = await client.request(
        tool,
        parse_arguments(item.arguments),
        config=config,
        call_id=call_id,
        session_id=session_id,
        agent=agent or getattr(item.agent, "name", None),
        metadata={"source": "openai-agents", "tool_call_id": item.call_id},
    )
    if not approval.is_pending:
        return approval
    return await client.wait_or_withdraw(approval.id, timeout)


async def resolve_interruptions(
    result: Any,
    client: ApprovalClient,
    *,
    timeout: float | None,  # noqa: ASYNC109 - how long each approval may take
    agent: str | None = None,
    session_id: str | None = None,
    config: ApprovalConfig | dict[str, Any] | Mapping[str, Any] | ConfigFor | None = None,
    run_id: str | None = None,
    state: RunState[Any, Any] | None = None,
) -> RunState[Any, Any]:
    """Ask for approval of every interruption in `result` (a `RunResult`), apply the decisions
    to its `RunState` and return the state, ready for `Runner.run(agent, state)`.

    `config`: one review config for all tools, a mapping tool name → config, or a
    function of the tool name. `agent`: shown to reviewers (default: the SDK agent's
    name). `run_id`: makes each request idempotent on (run_id, tool call id), so a
    process resuming the same run finds the same requests. `state`: the state to
    apply to, when you already called `result.to_state()`."""
    state = state if state is not None else result.to_state()
    items: list[ToolApprovalItem] = list(result.interruptions)

    def config_for(tool: str) -> ApprovalConfig | dict[str, Any] | None:
        if callable(config):
            return config(tool)
        if isinstance(config, Mapping) and not _is_config_dict(config):
            return config.get(tool)
        return config  # type: ignore[return-value]

    outcomes = await asyncio.gather(
        *(
            _review(
                client,
                item,
                timeout=timeout,
                config=config_for(item.name or "tool"),
                agent=agent,
                session_id=session_id,
                run_id=run_id,
            )
            for item in items
        )
    )
    for item, approval in zip(items, outcomes, strict=True):
        # The SDK's approve runs the call as the model made it: an approval of edited
        # arguments (never offered for these requests) does not approve that call.
        if approval is not None and approval.approved and approval.edited_arguments is None:
            state.approve(item, always_approve=approval.for_session)
        else:
            state.reject(item, rejection_message=rejection_message(approval))
        log.info(
            "interruption resolved tool=%s call_id=%s status=%s",
            item.name,
            item.call_id,
            approval.status if approval else "timeout",
        )
    return state


def _is_config_dict(value: Mapping[str, Any]) -> bool:
    return bool(set(value) & set(ApprovalConfig.model_fields))
