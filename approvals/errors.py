"""The approvals error tree; every error the domain raises is one of these.

    ApprovalError
    ├── InvalidRequest        bad input: config, arguments, size (HTTP 422/413)
    │   └── PayloadTooLarge   a request over the size limit (HTTP 413)
    ├── NotFound              unknown request id (HTTP 404)
    ├── AlreadyDecided        a decision on a request that is no longer pending (HTTP 409)
    ├── CallIdConflict        a reused call_id with different content (HTTP 409)
    ├── NotAllowed            the actor may not decide this request (HTTP 403)
    ├── ApprovalTimeout       waiting ended before a decision (HTTP 504)
    └── StoreUnavailable      Redis could not be reached (HTTP 503)
        └── BotUnreachable    the bot's HTTP API could not be reached (an agent-side error)

Losing a compare-and-set race is *not* an exception: `ApprovalStore.resolve`
returns a `ResolveResult` whose `won` is false. `AlreadyDecided` is raised
only where a caller asked for a decision that can no longer happen and must
be told so (the CLI, the HTTP API). `HTTP_STATUS` below is the one status table: the
API answers with it and the HTTP client reads it back.
"""

from __future__ import annotations

import os
import socket
import sys
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


class CallIdConflict(ApprovalError):
    """A `call_id` seen before, for a request with a different fingerprint: never the old
    request (its decision applies to what was shown then)."""

    code = "call_id_conflict"


class NotAllowed(ApprovalError):
    code = "not_allowed"


class ApprovalTimeout(ApprovalError):
    code = "timeout"


class StoreUnavailable(ApprovalError):
    code = "store_unavailable"


class BotUnreachable(StoreUnavailable):
    """Raised by the HTTP transport when the bot does not answer at all (connection refused,
    no route, timeout): the store may be fine, the agent cannot get to it."""

    code = "bot_unreachable"


#: The HTTP status the API answers each error with (most specific class first); any other
#: `ApprovalError` is a 400. The HTTP client reads these statuses back as the same classes.
HTTP_STATUS: tuple[tuple[type[ApprovalError], int], ...] = (
    (PayloadTooLarge, 413),
    (InvalidRequest, 422),
    (NotFound, 404),
    (CallIdConflict, 409),  # before AlreadyDecided: a bare 409 reads back as AlreadyDecided
    (AlreadyDecided, 409),
    (NotAllowed, 403),
    (StoreUnavailable, 503),
    (ApprovalTimeout, 504),
)
#: Statuses that come from HTTP itself (a body that is not JSON, no bearer token, a proxy's
#: gateway errors, which win over the table: a bare 504 is a proxy's), read back as the
#: error they amount to.
_HTTP_ONLY_STATUS: dict[int, type[ApprovalError]] = {
    400: InvalidRequest,
    401: NotAllowed,
    502: StoreUnavailable,
    504: StoreUnavailable,
}
_BY_STATUS: dict[int, type[ApprovalError]] = {
    **{status: cls for cls, status in HTTP_STATUS},
    **_HTTP_ONLY_STATUS,
}
_BY_CODE: dict[str, type[ApprovalError]] = {
    cls.code: cls
    for cls in (
        CallIdConflict,
        InvalidRequest,
        PayloadTooLarge,
        NotFound,
        AlreadyDecided,
        NotAllowed,
        ApprovalTimeout,
        StoreUnavailable,
    )
}


def http_status(error: ApprovalError) -> int:
    """The HTTP status `error` is answered with."""
    return next((status for cls, status in HTTP_STATUS if isinstance(error, cls)), 400)


def error_class(code: str, status: int) -> type[ApprovalError]:
    """The error an HTTP error answer stands for: by its `code`, else by its status."""
    return _BY_CODE.get(code) or _BY_STATUS.get(status, ApprovalError)


def plain(error: BaseException, where: str = "") -> str:
    """Why an HTTP call failed, in plain words (no reprs): `cannot connect to HOST:PORT
    (Connection refused)`, `no answer within the time allowed`, … (`where`: the HOST:PORT
    called, for errors that do not say it themselves)."""
    aiohttp = sys.modules.get("aiohttp")  # only its own errors are aiohttp's
    if aiohttp is not None and isinstance(error, aiohttp.ClientConnectorError):
        where, error = f"{error.host}:{error.port}", error.os_error
    if isinstance(error, TimeoutError):
        return "no answer within the time allowed"
    if isinstance(error, OSError) and where:
        number = error.errno
        if number and number > 0 and not isinstance(error, socket.gaierror):
            reason = os.strerror(number)  # asyncio's own text repeats the address as a tuple
        else:
            reason = error.strerror or str(error) or "no connection"
        return f"cannot connect to {where} ({reason})"
    if aiohttp is not None and isinstance(error, aiohttp.ServerDisconnectedError):
        return "the connection was closed before an answer came"
    client = sys.modules.get("http.client")
    if client is not None and isinstance(error, client.RemoteDisconnected):
        return "the connection was closed before an answer came"
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__
