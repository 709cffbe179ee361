"""approval-bot's Python library: what agents import.

    from approvals import ApprovalClient, require_approval

    async with ApprovalClient.from_env() as client:
        approval = await client.request_and_wait("deploy", {"env": "prod"}, timeout=600)

Every public name is in `__all__`, importable from here, and defined in a public module:
`client` (the clients), `gate` (`require_approval` and its results), `approval` (the approval
object), `models` (what a request says and how it is reviewed), `errors`, `review` (the
review-plugin protocol), `webhooks` (a decision webhook's request), and `integrations` (hook
JSON, OpenAI Agents SDK, LangGraph: imported from there, the frameworks need extras).
`approvals._internal` is the server's domain, run by the bot and the Redis transport: not a
stable API. Names are imported on first use, so `import approvals` stays cheap.
"""

from __future__ import annotations

import importlib
import warnings
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
        Asked,
        Denied,
        ReviewFailed,
        ToolDenied,
        current_approval,
        require_approval,
    )
    from approvals.integrations.slack_review import SlackReviewPlugin
    from approvals.models import (
        ApprovalConfig,
        ApprovalEvent,
        Decision,
        GateRequest,
        Kind,
        Sensitivity,
        Status,
    )
    from approvals.review import (
        Allow,
        Async,
        Deny,
        ReviewPlugin,
        ReviewResult,
        run_review,
    )
    from approvals.webhooks import Callback

#: Where each public name is defined (read on first access of the name).
_SOURCES: dict[str, str] = {
    "Approval": "approvals.approval",
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
    "Asked": "approvals.gate",
    "Denied": "approvals.gate",
    "ReviewFailed": "approvals.gate",
    "ToolDenied": "approvals.gate",
    "current_approval": "approvals.gate",
    "require_approval": "approvals.gate",
    "SlackReviewPlugin": "approvals.integrations.slack_review",
    "ApprovalConfig": "approvals.models",
    "ApprovalEvent": "approvals.models",
    "Decision": "approvals.models",
    "GateRequest": "approvals.models",
    "Kind": "approvals.models",
    "Sensitivity": "approvals.models",
    "Status": "approvals.models",
    "Allow": "approvals.review",
    "Async": "approvals.review",
    "Deny": "approvals.review",
    "ReviewPlugin": "approvals.review",
    "ReviewResult": "approvals.review",
    "run_review": "approvals.review",
    "Callback": "approvals.webhooks",
}

#: Names of 0.1.0 that still resolve, with a DeprecationWarning: old name → (module, name).
_RENAMED: dict[str, tuple[str, str]] = {
    "Hook": ("approvals.review", "ReviewPlugin"),
    "HookLike": ("approvals.review", "ReviewPluginLike"),
    "StaticPolicyHook": ("approvals.review", "StaticPolicyPlugin"),
    "run_hook": ("approvals.review", "run_review"),
    "SlackApprovalHook": ("approvals.integrations.slack_review", "SlackReviewPlugin"),
    "AwaitResult": ("approvals.review", "AwaitResult"),
    "Verdict": ("approvals.review", "Verdict"),
    "EventKind": ("approvals.models", "EventKind"),
    "ApprovalRequest": ("approvals.models", "ApprovalRequest"),
    "answer_hook": ("approvals.integrations.coding_agents", "answer_hook"),
    "time_budget": ("approvals.integrations.hook_input", "time_budget"),
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
    "ApprovalTimeout",
    "Asked",
    "Async",
    "Callback",
    "Decision",
    "Denied",
    "Deny",
    "GateRequest",
    "InvalidRequest",
    "Kind",
    "NotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "ReviewFailed",
    "ReviewPlugin",
    "ReviewResult",
    "Sensitivity",
    "SlackReviewPlugin",
    "Status",
    "StoreUnavailable",
    "SyncApprovalClient",
    "ToolDenied",
    "current_approval",
    "require_approval",
    "run_review",
]


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is not None:
        value = getattr(importlib.import_module(source), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if name in _RENAMED:
        module, new = _RENAMED[name]
        warnings.warn(
            f"approvals.{name} is deprecated: use {module}.{new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), new)
    raise AttributeError(f"module 'approvals' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
