"""The agent HTTP API's request and response models and its OpenAPI 3.1 document."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import models_json_schema

from approvals.approval import Approval
from approvals.approval import approval_json as approval_json  # the same, as JSON text
from approvals.approval import approval_object as approval_object  # the API's answer
from approvals.integrations.coding_agents import DEFAULT_HOOK_TIMEOUT, HookInput, HookOutput
from approvals.integrations.hook_input import MAX_HOOK_TIMEOUT_SECONDS, MIN_HOOK_TIMEOUT_SECONDS
from approvals.models import (
    MAX_DEADLINE_SECONDS,
    MAX_EVENT_BYTES,
    MAX_OPTION_LEN,
    MAX_OPTIONS,
    MAX_REASON,
    MAX_TEXT,
    ApprovalConfig,
    ApprovalEvent,
    CallContext,
    EventKind,
    Kind,
    Sensitivity,
)
from approvals.webhooks import Callback

# -- the models the handlers validate with (and the OpenAPI document is made of) ----------

Option = Annotated[str, Field(min_length=1, max_length=MAX_OPTION_LEN)]


class CreateApproval(BaseModel):
    """Body of `POST /v1/approvals`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    tool_name: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any]
    kind: Kind = "approval"
    sensitivity: Sensitivity = "low"
    prompt: str | None = Field(default=None, min_length=1, max_length=MAX_TEXT)
    options: list[Option] | None = Field(default=None, min_length=1, max_length=MAX_OPTIONS)
    deadline_seconds: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_SECONDS)
    allow_for_session: bool = False
    call_id: str | None = Field(default=None, min_length=1, max_length=200)
    session_id: str | None = Field(default=None, max_length=200)
    agent: str | None = Field(default=None, max_length=200)
    #: A policy route's name to ask on: one whose `callers` lists this principal (422 for
    #: another, or one the policy does not have); the policy's rules still win, and its own
    #: route stays the floor (docs/operating/security.md). Never a raw channel: channels come from
    # the
    #: policy.
    route: str | None = Field(default=None, min_length=1, max_length=100)
    metadata: dict[str, Any] = Field(default_factory=dict)
    event_kind: EventKind = "tool"
    command: str | None = Field(default=None, max_length=MAX_EVENT_BYTES)
    path: str | None = Field(default=None, max_length=4096)
    cwd: str | None = Field(default=None, max_length=4096)
    permissions: dict[str, Any] | None = None
    #: A Slack user id (`U…`/`W…`) to DM the outcome to once decided: told, never an actor.
    notify: str | None = Field(default=None, pattern=r"^[UW][A-Z0-9]{2,20}$")
    #: A JSON Schema the arguments satisfy: a reviewer's edit is checked against it.
    arguments_schema: dict[str, Any] | None = None
    #: A signed webhook to this URL once decided (the policy's callbacks.allowed_hosts).
    callback: Callback | None = None
    #: Why the agent makes this call, in its own words: shown to reviewers under the title
    #: (masked like everything else), never part of what the decision applies to.
    reason: str | None = Field(default=None, max_length=MAX_REASON)

    @model_validator(mode="after")
    def _consistent(self) -> CreateApproval:
        self.config()  # kind/options rules live in ApprovalConfig; a ValueError here is a 422
        return self

    def config(self) -> ApprovalConfig:
        return ApprovalConfig(
            kind=self.kind,
            sensitivity=self.sensitivity,
            prompt=self.prompt,
            options=tuple(self.options) if self.options else None,
            deadline_seconds=self.deadline_seconds,
            allow_for_session=self.allow_for_session,
        )

    def event(self) -> ApprovalEvent:
        reason = (self.reason or "").strip()
        return ApprovalEvent(
            kind=self.event_kind,
            tool_name=self.tool_name,
            arguments=self.arguments,
            call_id=self.call_id,
            session_id=self.session_id,
            agent=self.agent,
            cwd=self.cwd,
            command=self.command,
            path=self.path,
            permissions=self.permissions,
            arguments_schema=self.arguments_schema,
            context=CallContext(reason=reason) if reason else None,
        )


class CancelApproval(BaseModel):
    """Optional body of `POST /v1/approvals/{id}/cancel`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    reason: str | None = Field(default=None, max_length=MAX_TEXT)


class CancelCall(BaseModel):
    """Body of `POST /v1/calls/cancel`: withdraw the request the caller's `call_id` made."""

    model_config = ConfigDict(extra="forbid", strict=True)

    call_id: str = Field(min_length=1, max_length=200)
    reason: str | None = Field(default=None, max_length=MAX_TEXT)


class ApprovalObject(Approval):
    """The approval object as the API answers it (`approvals.approval.Approval`, no field of
    its own): every field present and no other, which is what the OpenAPI schema says."""

    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorResponse(BaseModel):
    """Every error: a stable `code`, a human `message`, and for 422 the fields at fault."""

    error: ErrorDetail


# -- OpenAPI --------------------------------------------------------------------------------


def _json(ref: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": ref}}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document, its schemas generated from the models the handlers use."""
    refs, top = models_json_schema(
        [
            (CreateApproval, "validation"),
            (CancelApproval, "validation"),
            (CancelCall, "validation"),
            (ApprovalObject, "serialization"),
            (ErrorResponse, "serialization"),
            (HookInput, "validation"),
            (HookOutput, "serialization"),
        ],
        ref_template="#/components/schemas/{model}",
    )
    ref = {model: refs[(model, mode)] for model, mode in refs}
    error = {"description": "error", "content": _json(ref[ErrorResponse])}

    def errors(*codes: int) -> dict[str, Any]:
        return {str(c): error for c in (400, 401, 403, 503, *codes)}

    approval = {"description": "the approval object", "content": _json(ref[ApprovalObject])}
    id_param = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
    secured: list[dict[str, list[str]]] = [{"bearerAuth": []}]

    def hook_path(operation: str, summary: str) -> dict[str, Any]:
        return {
            "post": {
                "operationId": operation,
                "summary": summary,
                "security": secured,
                "parameters": [
                    {
                        "name": "timeout",
                        "in": "query",
                        "required": False,
                        "description": (
                            "the hook's timeout in settings.json, seconds (default "
                            f"{DEFAULT_HOOK_TIMEOUT:g}; clamped to "
                            f"{MIN_HOOK_TIMEOUT_SECONDS:g}..{MAX_HOOK_TIMEOUT_SECONDS:g})"
                        ),
                        "schema": {"type": "number"},
                    },
                    {
                        "name": "on_timeout",
                        "in": "query",
                        "required": False,
                        "schema": {
                            "type": "string",
                            "enum": ["deny", "ask", "defer"],
                            "default": "deny",
                        },
                    },
                ],
                "requestBody": {"required": True, "content": _json(ref[HookInput])},
                # Always 200: Claude Code runs the tool when an http hook answers non-2xx, so
                # bad credentials, bad input and failures are a deny; `{}` is no decision.
                "responses": {
                    "200": {"description": "the hook output", "content": _json(ref[HookOutput])},
                },
            }
        }

    paths = {
        "/v1/approvals": {
            "post": {
                "operationId": "createApproval",
                "summary": "Ask for an approval",
                "security": secured,
                "requestBody": {"required": True, "content": _json(ref[CreateApproval])},
                "responses": {
                    "201": approval,
                    "200": {
                        **approval,
                        "description": ("an approval created earlier with the same call_id"),
                    },
                    **errors(409, 413, 422),
                },
            }
        },
        "/v1/approvals/{id}": {
            "get": {
                "operationId": "getApproval",
                "summary": "Read (or long-poll) an approval",
                "security": secured,
                "parameters": [
                    id_param,
                    {
                        "name": "wait",
                        "in": "query",
                        "required": False,
                        "description": "seconds to wait while pending (capped by the server)",
                        "schema": {"type": "number", "minimum": 0, "maximum": 86400},
                    },
                ],
                "responses": {"200": approval, **errors(404, 422)},
            }
        },
        "/v1/approvals/{id}/cancel": {
            "post": {
                "operationId": "cancelApproval",
                "summary": "Withdraw a pending approval",
                "security": secured,
                "parameters": [id_param],
                "requestBody": {"required": False, "content": _json(ref[CancelApproval])},
                "responses": {"200": approval, **errors(404, 409, 413, 422)},
            }
        },
        "/v1/calls/cancel": {
            "post": {
                "operationId": "cancelCall",
                "summary": "Withdraw the approval a call_id made, if it made one",
                "description": (
                    "For a caller whose create was cut off in flight (it may have landed "
                    "without the caller learning its id). Only the token's own principal's "
                    "call ids are looked at. `approval` is the request as it stands "
                    "afterwards (cancelled, or decided if a decision came first), or null "
                    "when the call_id made none."
                ),
                "security": secured,
                "requestBody": {"required": True, "content": _json(ref[CancelCall])},
                "responses": {
                    "200": {
                        "description": "the request the call_id made, or null",
                        "content": _json(
                            {
                                "type": "object",
                                "required": ["approval"],
                                "properties": {
                                    "approval": {"anyOf": [ref[ApprovalObject], {"type": "null"}]}
                                },
                            }
                        ),
                    },
                    **errors(413, 422),
                },
            }
        },
        "/hooks/claude-code": hook_path("claudeCodeHook", "Claude Code http hook"),
        "/hooks/codex": hook_path(
            "codexHook", "Codex hook JSON (what `approval-bot hook codex` passes on)"
        ),
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "responses": {
                    "200": {"description": "OpenAPI 3.1", "content": _json({"type": "object"})}
                },
            }
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "approval-bot",
            "version": "1",
            "description": "Slack approvals for AI agents: the agent-facing HTTP API.",
        },
        "paths": paths,
        "components": {
            "schemas": top.get("$defs", {}),
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }
