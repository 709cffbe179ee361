"""Waiting for a reviewer on behalf of an MCP call: progress while waiting, withdrawal on cancel.

Both the approvals server (`bot/mcp/server.py`) and the proxy (`bot/mcp/proxy.py`)
hold an MCP request open while a person decides in Slack. `await_decision`
waits in slices of `progress_interval` seconds and sends an MCP progress
notification after each slice (clients that reset their timeout on progress
keep waiting; the spec: basic/utilities/progress). When the MCP client cancels
the call (`notifications/cancelled`, which the SDK turns into cancelling the
handler) or the connection goes away, the request is withdrawn through the
normal cancel path, so its Slack message says so. When the wait budget runs
out the request is withdrawn too, and a decision that raced in is still used.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from approvals.approval import Approval
from approvals.client import ApprovalClient
from approvals.errors import ApprovalTimeout, StoreUnavailable
from approvals.models import ApprovalEvent

log = logging.getLogger(__name__)

#: Seconds between progress notifications while a call waits for a reviewer.
DEFAULT_PROGRESS_INTERVAL = 10.0
#: How long withdrawing a request may take once the caller has gone.
WITHDRAW_SECONDS = 3.0

#: Sends one progress notification: (progress so far, human-readable message).
Progress = Callable[[float, str], Awaitable[None]]


@dataclass(frozen=True)
class WaitOptions:
    """How an MCP call waits: progress cadence and an optional cap on the whole wait."""

    progress_interval: float = DEFAULT_PROGRESS_INTERVAL
    #: Longest wait in seconds; None: until the request's deadline (plus the client's grace).
    max_wait: float | None = None


def waiting_message(approval: Approval) -> str:
    where = f" in {approval.channel}" if approval.channel else ""
    return f"Waiting for a reviewer{where} to decide {approval.id} ({approval.tool_name})"


async def await_decision(
    client: ApprovalClient,
    approval: Approval,
    progress: Progress,
    options: WaitOptions,
) -> Approval | None:
    """The request once decided; None when the wait ran out (the request is then withdrawn).

    Cancellation (the MCP client cancelled, or the connection closed) withdraws
    the request before it propagates. Errors from the approval service raise
    (callers turn them into a deny)."""
    if not approval.is_pending:
        return approval
    loop = asyncio.get_running_loop()
    budget = client.wait_budget(approval) if options.max_wait is None else options.max_wait
    end = None if budget is None else loop.time() + budget
    started = loop.time()
    message = waiting_message(approval)
    try:
        while True:
            left = None if end is None else end - loop.time()
            if left is not None and left <= 0:
                break
            slice_ = (
                options.progress_interval if left is None else min(left, options.progress_interval)
            )
            try:
                return await client.wait(approval.id, max(slice_, 0.01))
            except ApprovalTimeout:
                pass
            waited = loop.time() - started
            try:
                await progress(round(waited, 1), f"{message}: {waited:.0f} s so far")
            except Exception as e:  # a closed stream: the cancellation that follows withdraws
                log.debug("progress notification failed id=%s error=%r", approval.id, e)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await _withdraw(client, approval.id, "the MCP client cancelled the call")
        raise
    except Exception:  # the caller denies; a reviewer must not approve a call that will not run
        with anyio.CancelScope(shield=True):
            await _withdraw(client, approval.id, "the approval service failed while waiting")
        raise
    raced = None
    with anyio.CancelScope(shield=True):
        raced = await _withdraw(client, approval.id, "approval timeout")
    return raced if raced is not None and not raced.is_pending else None


async def submit_or_withdraw(
    client: ApprovalClient, event: ApprovalEvent, submit: Callable[[], Awaitable[Approval]]
) -> Approval:
    """`submit()` (which asks for `event`, whose call id is set); when it is cut off in flight
    (the MCP client cancelled, or its answer was lost: the store or the bot unreachable) the
    request may exist though its id never came back, so whatever the call id made is
    withdrawn (shielded, bounded) before the cancellation or the error goes on: a reviewer
    must not approve a call nobody waits for."""
    try:
        return await submit()
    except (anyio.get_cancelled_exc_class(), StoreUnavailable):
        if event.call_id is None:
            raise
        with anyio.CancelScope(shield=True):
            try:
                with anyio.fail_after(WITHDRAW_SECONDS):
                    await client.cancel_call(event.call_id, reason="the call was cut off")
            except Exception as e:
                log.warning("could not withdraw a cut-off submit error=%r", e)
        raise


async def _withdraw(client: ApprovalClient, request_id: str, reason: str) -> Approval | None:
    """Cancel `request_id` (best effort, bounded); a decision that won the race is returned."""
    try:
        with anyio.fail_after(WITHDRAW_SECONDS):
            raced = await client.withdraw(request_id, reason)
    except Exception as e:
        log.warning("could not withdraw id=%s error=%r", request_id, e)
        return None
    log.info("withdrew id=%s reason=%s raced=%s", request_id, reason, raced is not None)
    return raced
