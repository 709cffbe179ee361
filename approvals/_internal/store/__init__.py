"""Internal: the Redis store — key names (`keys`), the client (`connection`), requests and their
Lua compare-and-set scripts (`store`, `lua/`), the work queues' consumer groups (`outbox`),
decision webhooks and their signing secrets (`webhooks`) and the waiters woken by pub/sub
(`waiting`). Agents use `approvals.ApprovalClient`, not these modules.

`ApprovalStore` is re-exported here; it is imported on first use, so importing
`approvals._internal.store.keys` alone stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from approvals._internal.store.store import ApprovalStore

__all__ = ["ApprovalStore"]


def __getattr__(name: str) -> Any:
    if name == "ApprovalStore":
        from approvals._internal.store.store import ApprovalStore

        return ApprovalStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
