"""LangGraph: an `interrupt()` payload → an approval → `Command(resume=<answer>)`.

In a node (the graph needs a checkpointer):

    def deploy(state: State) -> dict:
        answer = request_approval("deploy", {"env": state["env"]}, config={"kind": "input"})
        if not answer["approved"]:
            return {"result": f"denied: {answer['reason']}"}
        return {"result": run_deploy(state["env"], note=answer["input"])}

Driving the graph:

    out = await graph.ainvoke(inputs, thread)
    while out.get("__interrupt__"):
        out = await graph.ainvoke(await approval_resume(client, out["__interrupt__"],
                                                       timeout=600), thread)

The answer is plain JSON (it is checkpointed): `approved`, `status`,
`reason`, `input`, `selection`, `for_session`, `decided_by`, `id`, and
`arguments` — what to run: a reviewer's edit (also in `edited_arguments`,
with `edited_by`) when they approved with edits, else the arguments asked about; and
`question`: with status `asked`, what a reviewer asked instead of deciding (`approved` is
false; answer it and ask again). Needs the `langgraph` extra.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from approvals.client import Approval, ApprovalClient
from approvals.errors import InvalidRequest
from approvals.models import ApprovalConfig, normalize_config
from approvals.review import TIMEOUT_REASON

try:
    from langgraph.types import Command, Interrupt, interrupt
except ImportError as e:  # pragma: no cover - depends on the extra
    raise ImportError(
        "approvals.integrations.langgraph needs LangGraph: pip install 'approval-bot[langgraph]'"
    ) from e

log = logging.getLogger(__name__)

#: Marks an interrupt payload made by `approval_payload`.
PAYLOAD_TYPE = "approval_request"


def approval_payload(
    tool_name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    config: bool | ApprovalConfig | dict[str, Any] | None = None,
    call_id: str | None = None,
) -> dict[str, Any]:
    """The `interrupt()` value asking for approval of one call (JSON, checkpoint-safe)."""
    cfg = normalize_config(config) if config is not None else None
    payload: dict[str, Any] = {
        "type": PAYLOAD_TYPE,
        "tool_name": tool_name,
        "arguments": dict(arguments or {}),
    }
    if cfg is not None:
        payload["config"] = cfg.model_dump(mode="json", exclude_defaults=True)
    if call_id:
        payload["call_id"] = call_id
    return payload


def request_approval(
    tool_name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    config: bool | ApprovalConfig | dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Inside a node: pause the graph for approval; on resume, the answer (see module doc)."""
    answer: dict[str, Any] = interrupt(approval_payload(tool_name, arguments, config=config))
    return answer


def approval_node(
    tool_name: str,
    *,
    arguments_key: str = "arguments",
    result_key: str = "approval",
    config: bool | ApprovalConfig | dict[str, Any] | None = None,
) -> Callable[[Any], dict[str, Any]]:
    """A ready-made node: asks approval for `tool_name` with `state[arguments_key]` and puts
    the answer in `state[result_key]`; route on `state[result_key]["approved"]` after it."""

    def node(state: Any) -> dict[str, Any]:
        arguments = state.get(arguments_key) or {}
        return {result_key: request_approval(tool_name, dict(arguments), config=config)}

    node.__name__ = f"approve_{tool_name}"
    return node


def answer_for(approval: Approval | None) -> dict[str, Any]:
    """The resume value for a decided request (None: no decision in time)."""
    if approval is None:
        return {
            "approved": False,
            "status": "timeout",
            "reason": TIMEOUT_REASON,
            "input": None,
            "selection": None,
            "for_session": False,
            "decided_by": None,
            "id": None,
            "arguments": None,
            "edited_arguments": None,
            "edited_by": None,
            "question": None,
        }
    return {
        "approved": approval.approved,
        "status": approval.status,
        "reason": approval.reason,
        "input": approval.input,
        "selection": approval.selection,
        "for_session": approval.for_session,
        "decided_by": approval.decided_by,
        "id": approval.id,
        # What to run: the reviewer's edit when they approved with edits, else as asked.
        "arguments": (
            approval.edited_arguments
            if approval.edited_arguments is not None
            else approval.arguments
        ),
        "edited_arguments": approval.edited_arguments,
        "edited_by": approval.edited_by,
        # Status `asked`: the reviewer's question (approved is false); answer it and ask again.
        "question": approval.question,
    }


async def _answer(
    client: ApprovalClient,
    value: Any,
    *,
    call_id: str | None,
    timeout: float | None,  # noqa: ASYNC109
    agent: str | None,
    session_id: str | None,
) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not isinstance(value.get("tool_name"), str):
        raise InvalidRequest(f"not an approval interrupt (no tool_name): {value!r:.200}")
    arguments = value.get("arguments") or {}
    if not isinstance(arguments, Mapping):
        raise InvalidRequest("an approval interrupt's arguments must be an object")
    approval = await client.request(
        value["tool_name"],
        dict(arguments),
        config=value.get("config"),
        call_id=value.get("call_id") or call_id,
        agent=agent,
        session_id=session_id,
        metadata={"source": "langgraph"},
    )
    if approval.is_pending:
        decided = await client.wait_or_withdraw(approval.id, timeout)
        if decided is None:
            return answer_for(None)
        approval = decided
    log.info("interrupt answered id=%s status=%s", approval.id, approval.status)
    return answer_for(approval)


async def approval_resume(
    client: ApprovalClient,
    interrupt_value: Interrupt[Any] | Sequence[Interrupt[Any]] | Mapping[str, Any],
    *,
    timeout: float | None,  # noqa: ASYNC109 - how long each approval may take
    agent: str | None = "langgraph",
    session_id: str | None = None,
) -> Command[Any]:
    """Ask for approval of an interrupt and return the `Command` that resumes the graph.

    `interrupt_value`: an `Interrupt`, the list in `out["__interrupt__"]` (all are asked
    together and resumed by interrupt id), or the payload itself. An `Interrupt`'s id
    makes the request idempotent, so a process resuming the same thread finds it again."""
    if isinstance(interrupt_value, Interrupt):
        interrupt_value = [interrupt_value]
    if isinstance(interrupt_value, Mapping):
        return Command(
            resume=await _answer(
                client,
                interrupt_value,
                call_id=None,
                timeout=timeout,
                agent=agent,
                session_id=session_id,
            )
        )
    pending = list(interrupt_value)
    if not pending:
        raise InvalidRequest("no interrupt to resume")
    answers = await asyncio.gather(
        *(
            _answer(
                client,
                item.value,
                call_id=f"langgraph:{item.id}",
                timeout=timeout,
                agent=agent,
                session_id=session_id,
            )
            for item in pending
        )
    )
    if len(pending) == 1:
        return Command(resume=answers[0])
    return Command(resume={item.id: answer for item, answer in zip(pending, answers, strict=True)})
