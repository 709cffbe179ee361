"""The approvals error tree; every error the domain raises is one of these.

    ApprovalError
    ├── InvalidRequest        bad input: config, arguments, size (HTTP 422/413)
    │   └── PayloadTooLarge   a request over the size limit (HTTP 413)
    ├── NotFound              unknown request id (HTTP 404)
    ├── AlreadyDecided        a decision on a request that is no longer pending (HTTP 409)
    ├── NotAllowed            the actor may not decide this request (HTTP 403)
    ├── ApprovalTimeout       waiting ended before a decision
    └── StoreUnavailable      Redis could not be reached (HTTP 503)

Losing a compare-and-set race is *not* an exception: `ApprovalStore.resolve`
returns a `ResolveResult` whose `won` is false. `AlreadyDecided` is raised
only where a caller asked for a decision that can no longer happen and must
be told so (the CLI, the HTTP API).
"""

from __future__ import annotations

from typing import Any


class ApprovalError(Exception):
    """Base of every approvals error; `code` is a stable machine-readable name."""

    code = "approval_error"

    def __init__(self, message: str, *, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class InvalidRequest(ApprovalError):
    code = "invalid_request"


class PayloadTooLarge(InvalidRequest):
    code = "payload_too_large"


class NotFound(ApprovalError):
    code = "not_found"


class AlreadyDecided(ApprovalError):
    code = "already_decided"

    def __init__(self, message: str, *, request: Any = None) -> None:
        super().__init__(message)
        self.request = request


class NotAllowed(ApprovalError):
    code = "not_allowed"


class ApprovalTimeout(ApprovalError):
    code = "timeout"


class StoreUnavailable(ApprovalError):
    code = "store_unavailable"
