"""`SlackReviewPlugin`: the plugin protocol (docs/ARCHITECTURE.md) on an `ApprovalClient`.

Every review submits the event as an approval request and returns
`Async(ref=<request id>)` (or `Allow` / `Deny` at once when a policy rule or
a session grant decided it); `await_decision` waits for the reviewer.

    plugin = SlackReviewPlugin(ApprovalClient.from_env())
    verdict = await run_review(plugin, event, timeout=300)

    @require_approval(SlackReviewPlugin(client), config={"kind": "input"})
    async def deploy(env: str) -> str: ...
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from approvals._internal.questions import agent_text
from approvals.client import Approval, ApprovalClient, SyncApprovalClient
from approvals.errors import ApprovalError
from approvals.models import ApprovalConfig, ApprovalEvent, normalize_config
from approvals.review import (
    TIMEOUT_REASON,
    Allow,
    Async,
    AwaitResult,
    Deny,
    ReviewPlugin,
    ReviewResult,
    Verdict,
)

log = logging.getLogger(__name__)


def verdict_for(approval: Approval) -> Verdict:
    """The plugin verdict for a decided request: approved → `Allow` (with `for_session` and the
    reviewer's `Decision`), denied / cancelled / asked (the question in its reason) → `Deny`,
    expired → a timeout, error → an error."""
    decision = approval.to_decision()
    if approval.status == "approved":
        return Allow(for_session=approval.for_session, decision=decision)
    if approval.status == "expired":
        return Deny(approval.reason or TIMEOUT_REASON, cause="timeout", decision=decision)
    if approval.status == "error":
        return Deny(approval.reason or "approval error", cause="error", decision=decision)
    if approval.status == "cancelled":
        return Deny(approval.reason or "the request was cancelled", decision=decision)
    if approval.status == "asked":
        return Deny(agent_text(approval.question, approval.decided_by), decision=decision)
    return Deny(approval.reason or "denied by reviewer", decision=decision)


class SlackReviewPlugin(ReviewPlugin):
    """Asks reviewers (through the bot's Slack messages) for every event it reviews.

    `config`: the review config when the caller gives none (the gate passes the
    tool's own in `context["config"]`). `timeout`: how long `await_decision`
    waits when `run_review` passes no timeout (None: until decided).
    `agent` / `session_id` fill in what the event does not carry; `route` names the
    policy route to ask on (`opts["route"]` per call).
    `cancel_on_timeout`: withdraw a request nobody waits for any more, so its
    Slack message shows it as cancelled rather than keeping live buttons.
    """

    def __init__(
        self,
        client: ApprovalClient | SyncApprovalClient,
        *,
        config: bool | ApprovalConfig | dict[str, Any] | None = None,
        timeout: float | None = None,
        agent: str | None = None,
        session_id: str | None = None,
        route: str | None = None,
        cancel_on_timeout: bool = True,
    ) -> None:
        self.client = client.aio if isinstance(client, SyncApprovalClient) else client
        self.config = normalize_config(config) if config is not None else None
        self.timeout = timeout
        self.agent = agent
        self.session_id = session_id
        self.route = route
        self.cancel_on_timeout = cancel_on_timeout

    def __repr__(self) -> str:
        return f"SlackReviewPlugin({self.client.transport!r})"

    def _config(self, context: Mapping[str, Any], opts: Mapping[str, Any]) -> ApprovalConfig | None:
        for value in (context.get("config"), opts.get("config")):
            if value is not None:
                return normalize_config(value)
        return self.config

    async def _submit(
        self, event: ApprovalEvent, context: Mapping[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        fill: dict[str, Any] = {}
        call_id = event.call_id or context.get("call_id")
        if call_id and not event.call_id:
            fill["call_id"] = str(call_id)
        if self.session_id and not event.session_id:
            fill["session_id"] = self.session_id
        if self.agent and not event.agent:
            fill["agent"] = self.agent
        if fill:
            event = event.model_copy(update=fill)
        metadata = context.get("metadata")
        approval = await self.client.submit(
            event,
            self._config(context, opts),
            route=opts.get("route") or self.route,
            metadata=dict(metadata) if isinstance(metadata, Mapping) else None,
        )
        if not approval.is_pending:
            log.info("decided at once id=%s status=%s", approval.id, approval.status)
            return verdict_for(approval)
        return Async(
            ref=approval.id,
            metadata={
                "id": approval.id,
                "route": approval.route,
                "channel": approval.channel,
                "prompt": approval.prompt,
                "deadline_at": approval.deadline_at.isoformat() if approval.deadline_at else None,
            },
        )

    async def review_tool(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return await self._submit(event, context, opts)

    async def review_command(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return await self._submit(event, context, opts)

    async def review_file(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return await self._submit(event, context, opts)

    async def review_permissions(
        self, event: ApprovalEvent, context: dict[str, Any], opts: Mapping[str, Any]
    ) -> ReviewResult:
        return await self._submit(event, context, opts)

    async def await_decision(self, ref: Any, timeout: float | None) -> AwaitResult:  # noqa: ASYNC109
        """Wait for the reviewer: the verdict, a timeout, or an error."""
        request_id = str(ref)
        limit = timeout if timeout is not None else self.timeout
        try:
            approval = await self.client.wait_or_withdraw(
                request_id, limit, withdraw=self.cancel_on_timeout
            )
        except ApprovalError as e:
            log.warning("await failed id=%s error=%s", request_id, e.message)
            return AwaitResult.failed(e.message)
        if approval is None:
            return AwaitResult.timed_out()
        return AwaitResult.decided(verdict_for(approval))
