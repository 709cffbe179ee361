"""The approval object, defined once (`approvals.approval.Approval`): built from a stored request,
dumped as the API's JSON, read back unchanged; the API's schema is the same fields."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from approvals.approval import Approval, approval_json, approval_object
from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest, Decision, Vote
from bot.http.schemas import ApprovalObject, openapi_document


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
        {
            "user": "U1",
            "outcome": "approve",
            "at": "2026-01-02T03:04:05Z",
            "reason": None,
            "scope": None,
        }
    ]
    assert Approval.model_validate(data).to_request().decision == request.decision


def test_the_api_schema_is_derived_from_the_same_fields() -> None:
    assert ApprovalObject.model_fields.keys() == Approval.model_fields.keys()
    schema = openapi_document()["components"]["schemas"]["ApprovalObject"]
    assert set(schema["properties"]) == set(schema["required"]) == set(Approval.model_fields)
    assert schema["additionalProperties"] is False


_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
_values = st.recursive(
    _leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON data, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b and type(a) is type(b))


@settings(max_examples=200)
@given(
    arguments=st.dictionaries(st.text(), _values, max_size=5),
    metadata=st.dictionaries(st.text(), _values, max_size=3),
    reason=st.none() | st.text(max_size=200),
    decided=st.booleans(),
)
def test_the_json_text_is_the_approval_object(
    arguments: dict[str, Any], metadata: dict[str, Any], reason: str | None, decided: bool
) -> None:
    """What the HTTP API sends (`approval_json`, pydantic's serialiser) reads back as exactly
    the approval object (`approval_object` through `json.dumps`), whatever the arguments
    hold: big integers, NaN and infinities, any text."""
    request = ApprovalRequest(
        event=ApprovalEvent(tool_name="deploy", arguments=arguments, agent="a\u2028b"),
        metadata=metadata,
        status="denied" if decided else "pending",
        decision=Decision.deny(reason, by="U1") if decided else None,
    )
    sent = json.loads(approval_json(request))
    assert _same(sent, json.loads(json.dumps(approval_object(request))))
