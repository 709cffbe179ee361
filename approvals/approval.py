"""`Approval`: the approval object — an approval request as agents see it.

Defined once, here: the HTTP API answers with it (`approval_object`), its OpenAPI schema is
generated from it (`bot/http/schemas.py`), the CLI prints it as JSON, and every transport returns
it, so code written against one runs unchanged on the other.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from approvals.errors import AlreadyDecided
from approvals.models import (
    ApprovalConfig,
    ApprovalEvent,
    ApprovalRequest,
    Decision,
    Kind,
    Outcome,
    RiskHint,
    Sensitivity,
    Status,
    Vote,
)
from approvals.webhooks import Callback

log = logging.getLogger(__name__)

_STATUSES = frozenset(get_args(Status))
_OUTCOMES = frozenset(get_args(Outcome))


class Approval(BaseModel):
    """An approval request as agents see it: the HTTP API's approval object, on both transports.

    Reading ignores fields it does not know (a newer bot may send more), and reads a status or
    a decision it does not know as `denied` / `deny` (fail closed: a newer bot's new ending is
    never an approval here); the OpenAPI schema lists every field as present in a response.
    """

    model_config = ConfigDict(
        extra="ignore", frozen=True, json_schema_serialization_defaults_required=True
    )

    id: str
    status: Status
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    kind: Kind = "approval"
    sensitivity: Sensitivity = "low"
    options: list[str] | None = None
    prompt: str = ""
    call_id: str | None = None
    session_id: str | None = None
    agent: str | None = None
    #: Who asked (the API token's principal).
    principal: str | None = None
    route: str = "default"
    channel: str | None = None
    created_at: datetime
    deadline_at: datetime | None = None
    decision: Outcome | None = None
    reason: str | None = None
    input: str | None = None
    selection: str | None = None
    for_session: bool = False
    decided_by: str | None = None
    decided_at: datetime | None = None
    via: str | None = None
    #: Approved with edits: the arguments the agent is to run instead of `arguments`.
    edited_arguments: dict[str, Any] | None = None
    #: Who edited them.
    edited_by: str | None = None
    votes: list[Vote] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    #: Where the signed decision webhook goes (None: no webhook).
    callback: Callback | None = None
    #: What the call was found to risk, one `{code, text}` each, as reviewers are shown it.
    risks: list[RiskHint] = Field(
        default_factory=list,
        description="Risk hints found when the request was made, one {code, text} each, as "
        "reviewers see them: the shell command's (recursive_delete, pipe_to_shell, "
        "unanalysable, …) and file writes outside cwd or to sensitive paths. The codes are "
        "listed in docs/operating/shell-commands.md; a newer bot may add codes.",
    )
    #: Status `asked`: the reviewer's question (`decided_by` asked it). The call was not run;
    #: answer it in the reason of the retried call.
    question: str | None = None
    #: A retried call that answers a reviewer's question: the id of the request it was asked
    #: on (the retry is posted in that request's Slack thread).
    answers: str | None = None

    @field_validator("status", mode="before")
    @classmethod
    def _known_status(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in _STATUSES:
            log.warning("unknown approval status %r read as denied", value[:50])
            return "denied"
        return value

    @field_validator("decision", mode="before")
    @classmethod
    def _known_decision(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in _OUTCOMES:
            log.warning("unknown decision %r read as deny", value[:50])
            return "deny"
        return value

    @classmethod
    def from_request(cls, request: ApprovalRequest) -> Approval:
        """The approval object of a stored request (the one place its fields are mapped)."""
        d = request.decision
        return cls(
            id=request.id,
            status=request.status,
            tool_name=request.event.tool_name,
            arguments=request.event.arguments,
            kind=request.config.kind,
            sensitivity=request.config.sensitivity,
            options=list(request.config.options) if request.config.options else None,
            prompt=request.prompt,
            call_id=request.event.call_id,
            session_id=request.event.session_id,
            agent=request.event.agent,
            principal=request.principal,
            route=request.route,
            channel=request.channel,
            created_at=request.created_at,
            deadline_at=request.deadline_at,
            decision=d.outcome if d else None,
            reason=d.reason if d else None,
            input=d.input if d else None,
            selection=d.selection if d else None,
            for_session=d.for_session if d else False,
            decided_by=d.decided_by if d else None,
            decided_at=d.decided_at if d else None,
            via=d.via if d else None,
            edited_arguments=d.edited_arguments if d else None,
            edited_by=d.edited_by if d else None,
            votes=list(request.votes),
            metadata=request.metadata,
            callback=request.callback,
            risks=list(request.risks),
            question=d.question if d else None,
            answers=request.answers.request_id if request.answers else None,
        )

    @property
    def is_pending(self) -> bool:
        return self.status == "pending"

    @property
    def approved(self) -> bool:
        return self.status == "approved"

    def to_decision(self) -> Decision | None:
        """The reviewer's `Decision` (None while pending)."""
        if self.decision is None:
            return None
        return Decision(
            outcome=self.decision,
            reason=self.reason,
            input=self.input,
            selection=self.selection,
            for_session=self.for_session,
            decided_by=self.decided_by,
            decided_at=self.decided_at or datetime.now(UTC),
            via=self.via or "api",
            edited_arguments=self.edited_arguments,
            edited_by=self.edited_by,
            question=self.question,
        )

    def to_request(self) -> ApprovalRequest:
        """This approval as an `ApprovalRequest` (for code written against the core's model);
        what the approval object does not carry (reviewers, quorum, message) is left default."""
        return ApprovalRequest(
            id=self.id,
            status=self.status,
            prompt=self.prompt,
            route=self.route,
            channel=self.channel,
            created_at=self.created_at,
            deadline_at=self.deadline_at,
            event=ApprovalEvent(
                tool_name=self.tool_name,
                arguments=self.arguments,
                call_id=self.call_id,
                session_id=self.session_id,
                agent=self.agent,
            ),
            config=ApprovalConfig(
                kind=self.kind,
                sensitivity=self.sensitivity,
                options=tuple(self.options) if self.options else None,
            ),
            decision=self.to_decision(),
            principal=self.principal,
            votes=tuple(self.votes),
            metadata=self.metadata,
            risks=tuple(self.risks),
        )

    def describe(self) -> str:
        """One line: `approved by U1 (input: …)`, `denied by U2: reason`, `asked by U3: "…"`,
        `pending`."""
        text: str = self.status
        if self.decided_by:
            text += f" by {self.decided_by}"
        if self.question:
            text += f': "{self.question}" (answer it in the reason of the retried call)'
        if self.input:
            text += f" (input: {self.input})"
        if self.selection:
            text += f" (selection: {self.selection})"
        if self.for_session:
            text += " (for this session)"
        if self.edited_arguments is not None:
            text += f" (with arguments edited by {self.edited_by or 'a reviewer'})"
        if self.reason and self.status != "approved":
            text += f": {self.reason}"
        return text


def already_decided(approval: Approval | ApprovalRequest) -> AlreadyDecided:
    """The error for acting on a request that is no longer pending: "already approved by U1"."""
    if isinstance(approval, ApprovalRequest):
        approval = Approval.from_request(approval)
    by = f" by {approval.decided_by}" if approval.decided_by else ""
    return AlreadyDecided(f"{approval.id} is already {approval.status}{by}", request=approval)


def approval_object(request: ApprovalRequest) -> dict[str, Any]:
    """The approval object of `request` as JSON data (what the HTTP API answers)."""
    return Approval.from_request(request).model_dump(mode="json")


def approval_json(request: ApprovalRequest) -> str:
    """`approval_object(request)` as JSON text, written by pydantic's serialiser rather than
    as a dict through `json.dumps` (what the HTTP API answers; the same data: a test
    compares the two). Measured (callgrind): 208k → 120k instructions for a decided request."""
    return Approval.from_request(request).model_dump_json()
