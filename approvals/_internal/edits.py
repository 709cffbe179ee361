"""Approve with edits: which requests may be edited, checking an edit, and its version.

Internal to approval-bot (not a stable API).

A reviewer may replace a request's arguments before approving (kind `approval`, a route
with `allow_edits`, an agent that can run an edited call). The edit must be a JSON object
that passes the agent's `arguments_schema` when it sent one (JSON Schema, checked with
the `jsonschema` library: every draft, `$ref` included — not worth writing again). An
edit is a proposal: its `version` binds every vote, so a yes applies to exactly the
arguments shown (docs/ARCHITECTURE.md, "A yes applies to what was shown").
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError

from approvals.errors import InvalidRequest
from approvals.models import MAX_EVENT_BYTES, ApprovalRequest

#: Agents that cannot run an edited call: Codex's PreToolUse has no `updatedInput`, and the
#: OpenAI Agents SDK's `approve` runs the call as the model made it. No Edit button for them.
NO_EDIT_AGENTS = frozenset({"codex", "openai-agents"})
#: Event kinds whose arguments are what the agent runs (a permissions ask has none).
EDITABLE_KINDS = frozenset({"tool", "command", "file"})


def edits_offered(request: ApprovalRequest) -> bool:
    """Whether a reviewer may approve `request` with edited arguments."""
    return (
        request.config.kind == "approval"
        and request.config.allow_edits
        and request.event.kind in EDITABLE_KINDS
        and (request.event.agent or "") not in NO_EDIT_AGENTS
        # The Agents SDK adapter shows the SDK agent's name as `agent`; it marks its source.
        and str(request.metadata.get("source", "")) not in NO_EDIT_AGENTS
    )


def current_arguments(request: ApprovalRequest) -> dict[str, Any]:
    """What a vote on `request` approves now: the proposal's arguments, else the agent's."""
    return request.proposal.arguments if request.proposal else request.event.arguments


def current_version(request: ApprovalRequest) -> str:
    """The version votes are bound to: '' for the agent's own arguments."""
    return request.proposal.version if request.proposal else ""


def version_of(request: ApprovalRequest, arguments: dict[str, Any]) -> str:
    """The version of an edit: a hash of the request's fingerprint and the edited arguments."""
    canonical = json.dumps(
        [request.fingerprint, arguments],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def check_edit(request: ApprovalRequest, arguments: Any) -> dict[str, Any]:
    """`arguments` as an edit of `request`, or `InvalidRequest` saying what is wrong (its
    `details` is "arguments"): not offered, not a JSON object, too large, failing the
    agent's `arguments_schema`, or no change."""
    if not edits_offered(request):
        raise InvalidRequest("editing is not offered for this request", details="arguments")
    if not isinstance(arguments, dict):
        kind = "an array" if isinstance(arguments, list) else type(arguments).__name__
        raise InvalidRequest(
            f"the arguments must be a JSON object, not {kind}", details="arguments"
        )
    try:
        size = len(json.dumps(arguments, ensure_ascii=False, allow_nan=False).encode())
    except (TypeError, ValueError) as e:
        raise InvalidRequest("the arguments must be plain JSON", details="arguments") from e
    if size > MAX_EVENT_BYTES:
        raise InvalidRequest(
            f"the arguments are {size} bytes; the limit is {MAX_EVENT_BYTES}", details="arguments"
        )
    schema = request.event.arguments_schema
    if schema is not None:
        try:
            validator_class = jsonschema.validators.validator_for(schema)
            validator_class.check_schema(schema)
            error = jsonschema.exceptions.best_match(validator_class(schema).iter_errors(arguments))
        except SchemaError as e:
            raise InvalidRequest(
                "the agent's arguments_schema is not a valid JSON Schema; edits cannot be checked",
                details="arguments",
            ) from e
        if error is not None:
            raise InvalidRequest(schema_problem(error), details="arguments")
    if arguments == current_arguments(request):
        raise InvalidRequest(
            "nothing was changed; use Approve to approve the call as it is", details="arguments"
        )
    return arguments


def schema_problem(error: jsonschema.ValidationError) -> str:
    """What a failed schema check says: where, and which rule of the schema it broke — never
    the value itself (a restored masked value must not be echoed back to Slack)."""
    where = "/".join(str(p) for p in error.absolute_path) or "the arguments"
    rule = error.validator_value
    if error.validator == "type":
        text = f"must be of type {json.dumps(rule)}"
    elif error.validator in ("enum", "const"):
        text = f"must be {'one of ' if error.validator == 'enum' else ''}{json.dumps(rule)}"
    elif error.validator == "required":
        missing = [name for name in rule if isinstance(error.instance, dict)]
        missing = [name for name in missing if name not in error.instance]
        text = f"is missing required {', '.join(json.dumps(m) for m in missing)}"
    elif error.validator == "additionalProperties" and rule is False:
        text = "has properties the schema does not allow (additionalProperties)"
    else:
        text = f"does not satisfy the schema's {error.validator!r}: {json.dumps(rule, default=str)}"
    return f"{where}: {text}"[:500]
