"""The Python client for agents: `ApprovalClient` over Redis (in-process) or HTTP (a remote bot).

    async with ApprovalClient.from_env() as client:
        approval = await client.request_and_wait("deploy", {"env": "prod"}, timeout=600)
        if approval.approved: ...

Both transports return the same `Approval` (the HTTP API's approval object),
so code written against one runs unchanged on the other. A client is bound
to the event loop it is first used on; `SyncApprovalClient` (and
`from_env(threaded=True)`) runs it on a private loop in a thread, for sync
code and for callers on several loops (`require_approval` on sync tools).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from approvals._internal.transports import ThreadedTransport, Transport, transport_factory
from approvals.approval import Approval
from approvals.errors import AlreadyDecided, ApprovalError, ApprovalTimeout, InvalidRequest
from approvals.models import (
    ApprovalConfig,
    ApprovalEvent,
    CallContext,
    Decision,
    EventKind,
    GateRequest,
    clip_reason,
    normalize_config,
)
from approvals.review import TIMEOUT_REASON
from approvals.webhooks import Callback, as_callback

log = logging.getLogger(__name__)

#: How long past a request's deadline a waiting gate keeps waiting for the bot to expire it.
DEADLINE_GRACE_SECONDS = 30.0


class ApprovalClient:
    """Ask for approvals and wait for decisions, over any `Transport`.

    Also a `require_approval` handler: `require_approval(client)` gates a tool
    on this client (for sync tools use a `SyncApprovalClient`).
    """

    def __init__(self, transport: Transport, *, default_timeout: float | None = None) -> None:
        self.transport = transport
        #: How long `__call__` (the gate handler) waits; None: until the request's deadline.
        self.default_timeout = default_timeout

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, threaded: bool = False
    ) -> ApprovalClient:
        """A client configured by environment variables (`env`, default `os.environ`).

        `APPROVALS_URL` + `APPROVALS_TOKEN` → the bot's HTTP API; else `REDIS_URL`
        (+ `APPROVALS_PREFIX`, and `APPROVALS_POLICY_FILE` / `APPROVALS_DEFAULT_CHANNEL`
        / `APPROVALS_REVIEWERS` to route as the bot does) → Redis directly; neither →
        `ApprovalError` naming both. This is the one place outside `config/` that reads
        the environment: agents embed this library without the bot's config package.
        `threaded=True` runs the transport on a private loop (usable from any loop).
        """
        factory = transport_factory(env)
        return cls(ThreadedTransport(factory) if threaded else factory())

    async def __aenter__(self) -> ApprovalClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def submit(
        self,
        event: ApprovalEvent,
        config: bool | ApprovalConfig | dict[str, Any] | None = None,
        *,
        route: str | None = None,
        metadata: dict[str, Any] | None = None,
        callback: Callback | dict[str, Any] | None = None,
    ) -> Approval:
        """Ask for approval of `event`; a policy rule or a session grant may decide at once.
        With `callback` (`{url, events?, metadata?}`) the bot POSTs a signed webhook to the
        URL once the request is decided (the policy must allow its host)."""
        return await self.transport.request(
            event,
            normalize_config(config) if config is not None else None,
            route=route,
            metadata=metadata,
            callback=as_callback(callback),
        )

    async def request(
        self,
        tool_name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        config: bool | ApprovalConfig | dict[str, Any] | None = None,
        call_id: str | None = None,
        session_id: str | None = None,
        agent: str | None = None,
        route: str | None = None,
        metadata: dict[str, Any] | None = None,
        kind: EventKind = "tool",
        callback: Callback | dict[str, Any] | None = None,
        arguments_schema: dict[str, Any] | None = None,
        reason: str | None = None,
    ) -> Approval:
        """Ask for approval of one tool call (idempotent on `call_id`); `callback`: see
        `submit`; `arguments_schema`: a JSON Schema a reviewer's edit must pass; `reason`:
        why the call is made, shown to reviewers under the title (its last 2,000
        characters; not part of what the decision applies to)."""
        why = clip_reason(reason)
        try:
            event = ApprovalEvent(
                kind=kind,
                tool_name=tool_name,
                arguments=dict(arguments or {}),
                call_id=call_id,
                session_id=session_id,
                agent=agent,
                arguments_schema=arguments_schema,
                context=CallContext(reason=why) if why else None,
            )
        except ValidationError as e:
            raise InvalidRequest(f"invalid approval request: {e}", details=e.errors()) from e
        return await self.submit(event, config, route=route, metadata=metadata, callback=callback)

    async def get(self, request_id: str) -> Approval:
        return await self.transport.get(request_id)

    async def wait(self, request_id: str, timeout: float | None) -> Approval:  # noqa: ASYNC109
        """The request once decided; `ApprovalTimeout` if `timeout` seconds pass first."""
        return await self.transport.wait(request_id, timeout)

    async def request_and_wait(
        self,
        tool_name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None,  # noqa: ASYNC109
        **kwargs: Any,
    ) -> Approval:
        """`request`, then `wait` unless it was decided at once."""
        approval = await self.request(tool_name, arguments, **kwargs)
        if not approval.is_pending:
            return approval
        return await self.wait(approval.id, timeout)

    async def cancel(self, request_id: str, *, reason: str | None = None) -> Approval:
        """Withdraw a pending request; `AlreadyDecided` if it was decided meanwhile."""
        return await self.transport.cancel(request_id, reason=reason)

    async def cancel_call(self, call_id: str, *, reason: str | None = None) -> Approval | None:
        """Withdraw the request `call_id` made, if it made one: for a submit cut off in flight
        (it may have landed without this caller learning its id). The request as it stands
        afterwards (cancelled, or decided if a decision came first); None if there is none."""
        return await self.transport.cancel_call(call_id, reason=reason)

    async def withdraw(self, request_id: str, reason: str = TIMEOUT_REASON) -> Approval | None:
        """Best-effort cancel after the caller stopped waiting; returns the request if a
        decision raced in (so the caller can still use it), else None."""
        try:
            async with asyncio.timeout(2.0):
                await self.cancel(request_id, reason=reason)
        except AlreadyDecided as e:
            if isinstance(e.request, Approval):
                return e.request
            with contextlib.suppress(ApprovalError, TimeoutError):
                return await self.get(request_id)
        except (ApprovalError, TimeoutError) as e:
            log.warning("could not withdraw request id=%s error=%r", request_id, e)
        return None

    async def wait_or_withdraw(
        self,
        request_id: str,
        timeout: float | None,  # noqa: ASYNC109
        *,
        withdraw: bool = True,
    ) -> Approval | None:
        """Wait for the decision; when `timeout` passes first, withdraw the request (unless
        `withdraw` is false) and return a decision that raced in, else None (timed out)."""
        try:
            return await self.wait(request_id, timeout)
        except ApprovalTimeout:
            raced = await self.withdraw(request_id) if withdraw else None
            return raced if raced is not None and not raced.is_pending else None

    def wait_budget(self, approval: Approval) -> float | None:
        """How long a gate waits: `default_timeout`, else until the deadline (plus a grace)."""
        if self.default_timeout is not None:
            return self.default_timeout
        if approval.deadline_at is None:
            return None
        left = (approval.deadline_at - datetime.now(UTC)).total_seconds()
        return max(0.0, left) + DEADLINE_GRACE_SECONDS

    async def __call__(self, request: GateRequest) -> Decision:
        """`require_approval` handler: submit the gated call, wait, return the decision."""
        approval = await self.request(
            request.tool_name,
            request.arguments,
            config=request.config,
            call_id=request.call_id,
            reason=request.reason,
        )
        if approval.is_pending:
            decided = await self.wait_or_withdraw(approval.id, self.wait_budget(approval))
            if decided is None:
                return Decision.deny(TIMEOUT_REASON, by="timeout", via="timeout")
            approval = decided
        return approval.to_decision() or Decision.error(f"{approval.id} has no decision")


class SyncApprovalClient:
    """`ApprovalClient` for synchronous code: every call blocks; the work runs on a private
    event loop in a daemon thread. Also a sync `require_approval` handler."""

    def __init__(
        self, factory: Callable[[], Transport], *, default_timeout: float | None = None
    ) -> None:
        self._transport = ThreadedTransport(factory)
        #: The async client on the same transport, usable from any event loop.
        self.aio = ApprovalClient(self._transport, default_timeout=default_timeout)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SyncApprovalClient:
        """As `ApprovalClient.from_env` (the same variables)."""
        return cls(transport_factory(env))

    def __enter__(self) -> SyncApprovalClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._transport.close()

    def request(
        self, tool_name: str, arguments: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> Approval:
        return self._transport.run(self.aio.request(tool_name, arguments, **kwargs))

    def get(self, request_id: str) -> Approval:
        return self._transport.run(self.aio.get(request_id))

    def wait(self, request_id: str, timeout: float | None) -> Approval:
        return self._transport.run(self.aio.wait(request_id, timeout))

    def request_and_wait(
        self,
        tool_name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None,
        **kwargs: Any,
    ) -> Approval:
        return self._transport.run(
            self.aio.request_and_wait(tool_name, arguments, timeout=timeout, **kwargs)
        )

    def cancel(self, request_id: str, *, reason: str | None = None) -> Approval:
        return self._transport.run(self.aio.cancel(request_id, reason=reason))

    def __call__(self, request: GateRequest) -> Decision:
        """Sync `require_approval` handler (see `ApprovalClient.__call__`)."""
        return self._transport.run(self.aio(request))


__all__ = [
    "Approval",
    "ApprovalClient",
    "SyncApprovalClient",
]
