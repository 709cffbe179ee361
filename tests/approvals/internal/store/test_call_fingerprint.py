"""A reused `call_id` is bound to everything the decision applies to: each field of the
request's fingerprint (`ApprovalRequest.fingerprint`) changed on its own makes the reuse a
`CallIdConflict`, never the decision made on the first request (on real Redis)."""

from __future__ import annotations

from typing import Any

import pytest

from approvals._internal.store.store import ApprovalStore
from approvals.errors import CallIdConflict
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest, Decision

BASE_EVENT: dict[str, Any] = {
    "kind": "command",
    "tool_name": "Bash",
    "arguments": {"command": "make deploy"},
    "session_id": "sess-1",
    "agent": "claude-code",
    "cwd": "/home/dev/project",
    "command": "make deploy",
    "path": "/home/dev/project/Makefile",
    "permissions": {"mode": "acceptEdits"},
}
BASE_CONFIG: dict[str, Any] = {
    "kind": "choice",
    "options": ("staging", "prod"),
    "prompt": "Deploy?",
}
BASE_REQUEST: dict[str, Any] = {"principal": "agent-a", "requested_route": "ops"}

#: Every field the fingerprint covers, with another value for it. The event's other fields
#: (`call_id`, `arguments_schema`) and the config's (`sensitivity`, the deadline, what the
#: route allows reviewers) say how a call is reviewed, not what is approved.
CHANGES: dict[str, tuple[str, str, Any]] = {
    "tool": ("event", "tool_name", "Shell"),
    "arguments": ("event", "arguments", {"command": "make deploy", "force": True}),
    "kind": ("event", "kind", "tool"),
    "command": ("event", "command", "make deploy FORCE=1"),
    "path": ("event", "path", "/etc/passwd"),
    "cwd": ("event", "cwd", "/srv/production"),
    "permissions": ("event", "permissions", {"mode": "bypassPermissions"}),
    "session": ("event", "session_id", "sess-2"),
    "agent": ("event", "agent", "codex"),
    "answer kind": ("config", "kind", "input"),
    "answer options": ("config", "options", ("staging", "prod", "dr")),
    "answer prompt": ("config", "prompt", "Deploy to every region?"),
    "route": ("request", "requested_route", "default"),
}
#: `context` explains a call (the agent's reason, diffs): a retry with a reworded reason is
#: the same call.
NOT_FINGERPRINTED_EVENT = {"call_id", "arguments_schema", "context"}
NOT_FINGERPRINTED_CONFIG = {
    "sensitivity",
    "deadline_seconds",
    "allow_for_session",
    "allow_tool_grants",
    "allow_edits",
    # What the route offers the reviewer (set from the route, never by the caller).
    "allow_questions",
}


def make(**changed: dict[str, Any]) -> ApprovalRequest:
    event = {**BASE_EVENT, "call_id": "call-1", **changed.get("event", {})}
    config = {**BASE_CONFIG, **changed.get("config", {})}
    if config["kind"] != "choice":
        config.pop("options")
    return ApprovalRequest(
        event=ApprovalEvent(**event),
        config=ApprovalConfig(**config),
        **{**BASE_REQUEST, **changed.get("request", {})},
    )


def test_every_event_and_config_field_is_fingerprinted_or_deliberately_not() -> None:
    """A field added to the event or config must be added to the fingerprint (and to
    CHANGES) or named here as not changing what is approved."""
    event_fields = {field for part, field, _ in CHANGES.values() if part == "event"}
    config_fields = {field for part, field, _ in CHANGES.values() if part == "config"}
    assert set(ApprovalEvent.model_fields) == event_fields | NOT_FINGERPRINTED_EVENT
    assert set(ApprovalConfig.model_fields) == config_fields | NOT_FINGERPRINTED_CONFIG


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_each_field_changes_the_fingerprint(name: str) -> None:
    part, field, value = CHANGES[name]
    assert make(**{part: {field: value}}).fingerprint != make().fingerprint


@pytest.mark.parametrize("name", sorted(CHANGES))
async def test_a_reused_call_id_with_one_field_changed_is_a_conflict(
    store: ApprovalStore, name: str
) -> None:
    first = (await store.create(make())).request
    await store.resolve(first.id, Decision.approve(by="U0REVIEWER"))
    again = await store.create(make())
    assert again.request.id == first.id and again.request.status == "approved"
    part, field, value = CHANGES[name]
    with pytest.raises(CallIdConflict):
        await store.create(make(**{part: {field: value}}))


async def test_another_principal_reusing_the_call_id_gets_a_request_of_its_own(
    store: ApprovalStore,
) -> None:
    first = (await store.create(make())).request
    await store.resolve(first.id, Decision.approve(by="U0REVIEWER"))
    other = await store.create(make(request={"principal": "agent-b"}))
    assert other.created and other.request.id != first.id
    assert other.request.status == "pending"
