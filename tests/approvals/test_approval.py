"""The approval object, defined once (`approvals.approval.Approval`): built from a stored request,
dumped as the API's JSON, read back unchanged; the API's schema is the same fields."""

from __future__ import annotations

from datetime import UTC, datetime

from approvals.approval import Approval, approval_object
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest, Decision, Vote
from bot.schemas import ApprovalObject, openapi_document


def decided_request() -> ApprovalRequest:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    return ApprovalRequest(
        event=ApprovalEvent(tool_name="deploy", arguments={"env": "prod"}, call_id="c1"),
        config=ApprovalConfig(kind="choice", options=("full", "partial")),
        status="approved",
        decision=Decision.approve(by="U1", selection="full"),
        votes=(Vote(user="U1", outcome="approve", at=at),),
        metadata={"ticket": "OPS-1"},
    )


def test_the_json_is_every_field_and_reads_back_the_same() -> None:
    request = decided_request()
    data = approval_object(request)
    assert set(data) == set(Approval.model_fields)
    assert Approval.model_validate(data) == Approval.from_request(request)
    assert data["selection"] == "full" and data["options"] == ["full", "partial"]
    assert data["votes"] == [
        {"user": "U1", "outcome": "approve", "at": "2026-01-02T03:04:05Z", "reason": None}
    ]
    assert Approval.model_validate(data).to_request().decision == request.decision


def test_the_api_schema_is_derived_from_the_same_fields() -> None:
    assert ApprovalObject.model_fields.keys() == Approval.model_fields.keys()
    schema = openapi_document()["components"]["schemas"]["ApprovalObject"]
    assert set(schema["properties"]) == set(schema["required"]) == set(Approval.model_fields)
    assert schema["additionalProperties"] is False
