"""approval-bot's Python library: what agents import.

    from approvals import ApprovalClient, require_approval

    async with ApprovalClient.from_env() as client:
        approval = await client.request_and_wait("deploy", {"env": "prod"}, timeout=600)

Every public name is listed in `__all__` and importable from here; the modules
that define them may move. Names are imported on first use, so `import approvals`
stays cheap (no Redis, aiohttp or pydantic until something needs them). The
subpackages `approvals._internal.store` and the modules marked "Internal" are not a stable
API; `approvals.integrations` holds the adapters for optional frameworks
(OpenAI Agents SDK, LangGraph), imported from there because they need extras.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from approvals.approval import Approval
    from approvals.client import ApprovalClient, SyncApprovalClient
    from approvals.errors import (
        AlreadyDecided,
        ApprovalError,
        ApprovalTimeout,
        InvalidRequest,
        NotAllowed,
        NotFound,
        PayloadTooLarge,
        StoreUnavailable,
    )
    from approvals.gate import (
        ApprovalFailed,
        Denied,
        ReviewFailed,
        ToolDenied,
        current_approval,
        require_approval,
    )
    from approvals.integrations.coding_agents import answer_hook
    from approvals.integrations.hook_input import time_budget
    from approvals.integrations.slack_review import SlackApprovalHook
    from approvals.models import (
        ApprovalConfig,
        ApprovalEvent,
        ApprovalRequest,
        Decision,
        EventKind,
        GateRequest,
        Kind,
        Sensitivity,
        Status,
    )
    from approvals.review import (
        Allow,
        Async,
        AwaitResult,
        Deny,
        Hook,
        HookLike,
        ReviewResult,
        StaticPolicyHook,
        Verdict,
        run_hook,
    )
    from approvals.webhooks import Callback

#: Where each public name is defined (read on first access of the name).
_SOURCES: dict[str, str] = {
    "Approval": "approvals.approval",
    "Callback": "approvals.webhooks",
    "ApprovalClient": "approvals.client",
    "SyncApprovalClient": "approvals.client",
    "AlreadyDecided": "approvals.errors",
    "ApprovalError": "approvals.errors",
    "ApprovalTimeout": "approvals.errors",
    "InvalidRequest": "approvals.errors",
    "NotAllowed": "approvals.errors",
    "NotFound": "approvals.errors",
    "PayloadTooLarge": "approvals.errors",
    "StoreUnavailable": "approvals.errors",
    "ApprovalFailed": "approvals.gate",
    "Denied": "approvals.gate",
    "GateRequest": "approvals.models",
    "ReviewFailed": "approvals.gate",
    "ToolDenied": "approvals.gate",
    "current_approval": "approvals.gate",
    "require_approval": "approvals.gate",
    "Allow": "approvals.review",
    "Async": "approvals.review",
    "AwaitResult": "approvals.review",
    "Deny": "approvals.review",
    "Hook": "approvals.review",
    "HookLike": "approvals.review",
    "ReviewResult": "approvals.review",
    "StaticPolicyHook": "approvals.review",
    "Verdict": "approvals.review",
    "run_hook": "approvals.review",
    "SlackApprovalHook": "approvals.integrations.slack_review",
    "answer_hook": "approvals.integrations.coding_agents",
    "time_budget": "approvals.integrations.hook_input",
    "ApprovalConfig": "approvals.models",
    "ApprovalEvent": "approvals.models",
    "ApprovalRequest": "approvals.models",
    "Decision": "approvals.models",
    "EventKind": "approvals.models",
    "Kind": "approvals.models",
    "Sensitivity": "approvals.models",
    "Status": "approvals.models",
}

__all__ = [
    "Allow",
    "AlreadyDecided",
    "Approval",
    "ApprovalClient",
    "ApprovalConfig",
    "ApprovalError",
    "ApprovalEvent",
    "ApprovalFailed",
    "ApprovalRequest",
    "ApprovalTimeout",
    "Async",
    "AwaitResult",
    "Callback",
    "Decision",
    "Denied",
    "Deny",
    "EventKind",
    "GateRequest",
    "Hook",
    "HookLike",
    "InvalidRequest",
    "Kind",
    "NotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "ReviewFailed",
    "ReviewResult",
    "Sensitivity",
    "SlackApprovalHook",
    "StaticPolicyHook",
    "Status",
    "StoreUnavailable",
    "SyncApprovalClient",
    "ToolDenied",
    "Verdict",
    "answer_hook",
    "current_approval",
    "require_approval",
    "run_hook",
    "time_budget",
]


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'approvals' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
