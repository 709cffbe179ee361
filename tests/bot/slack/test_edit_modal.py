"""The Edit… modal's text, reading an edit back (masks kept or refused), and the diff (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals.models import ApprovalConfig, ApprovalEvent, ApprovalRequest, Proposal
from bot.masking.masker import MASK, outbound
from bot.slack import action_ids as ids
from bot.slack.render import modals
from bot.slack.render import request_message as blocks
from bot.slack.render.edit_form import (
    MAX_EDIT_TEXT,
    EditError,
    diff_lines,
    edit_text,
    read_edit,
)
from tests.support.credentials import OTHER_BOT_TOKEN

TOKEN = OTHER_BOT_TOKEN  # a bot token, in an argument


def request(arguments: dict[str, Any], **config: Any) -> ApprovalRequest:
    return ApprovalRequest(
        event=ApprovalEvent(tool_name="deploy", arguments=arguments),
        config=ApprovalConfig(allow_edits=True, **config),
    )


def test_the_modal_shows_the_arguments_masked_and_outbound_leaves_them_as_shown() -> None:
    req = request({"password": "hunter2!", "env": "prod", "headers": {"auth": TOKEN}})
    text = edit_text(req)
    assert text is not None
    assert "hunter2" not in text and TOKEN not in text and '"env": "prod"' in text
    view = modals.edit_modal(req, text)
    assert outbound(view) == view, "what the reviewer edits is exactly what was built"
    (field,) = [b for b in view["blocks"] if b.get("block_id") == ids.EDIT_BLOCK]
    assert field["element"]["initial_value"] == text
    assert field["element"]["multiline"] is True


def test_a_mask_left_as_shown_keeps_its_value_and_one_typed_over_is_replaced() -> None:
    args = {"password": "hunter2!", "env": "prod", "list": [TOKEN, "x"]}
    req = request(args)
    shown = json.loads(edit_text(req) or "")
    assert read_edit(req, json.dumps({**shown, "env": "dev"})) == {**args, "env": "dev"}
    replaced = read_edit(req, json.dumps({**shown, "password": "new-one"}))
    assert replaced["password"] == "new-one" and replaced["list"] == [TOKEN, "x"]
    for broken in (
        {**shown, "password": shown["password"] + "x"},  # changed in part
        {**shown, "moved": shown["password"]},  # moved elsewhere
        {**shown, "list": ["x", shown["list"][0]]},  # moved within a list
    ):
        with pytest.raises(EditError, match="masked"):
            read_edit(req, json.dumps(broken))


def test_a_secret_request_shows_every_value_masked_and_keeps_them() -> None:
    args = {"env": "prod", "n": 3, "ok": True}
    req = request(args, sensitivity="secret")
    shown = json.loads(edit_text(req) or "")
    assert all(MASK in v for v in shown.values())
    assert read_edit(req, json.dumps({**shown, "env": "dev"})) == {**args, "env": "dev"}


def test_edits_of_a_proposal_start_from_the_proposal() -> None:
    req = request({"env": "prod"}).model_copy(
        update={"proposal": Proposal(arguments={"env": "dev"}, by="U1", version="v1")}
    )
    assert json.loads(edit_text(req) or "") == {"env": "dev"}
    view = modals.edit_modal(req, edit_text(req) or "")
    assert ids.decode_metadata(view["private_metadata"]).version == "v1"


def test_too_long_to_edit_in_slack() -> None:
    assert edit_text(request({"blob": "x" * MAX_EDIT_TEXT})) is None


def test_the_diff_is_compact_and_masked() -> None:
    req = request({"env": "prod", "password": "hunter2!", "keep": 1, "gone": True})
    lines = diff_lines(
        req,
        req.event.arguments,
        {"env": "dev", "password": "other-secret", "keep": 1, "new": [1, 2]},
    )
    text = "\n".join(lines)
    assert '~ env: "prod" → "dev"' in lines
    assert "- gone: true" in lines and "+ new[0]: 1" in lines and "+ new[1]: 2" in lines
    assert "keep" not in text
    assert "hunter2" not in text and "other-secret" not in text
    many = diff_lines(req, {}, {f"k{i}": i for i in range(40)})
    assert len(many) == 12 and many[-1] == "… 29 more changes"


def test_the_message_offers_edit_and_binds_approve_to_the_version() -> None:
    req = request({"env": "prod"})
    elements = blocks.request_message(req)["blocks"][-1]["elements"]
    assert [e["action_id"] for e in elements] == [ids.APPROVE, ids.EDIT, ids.DENY]
    assert elements[0]["value"] == req.id
    proposed = req.model_copy(
        update={"proposal": Proposal(arguments={"env": "dev"}, by="U1", version="v1")}
    )
    elements = blocks.request_message(proposed)["blocks"][-1]["elements"]
    assert elements[0]["value"] == f"{req.id}@v1"
    assert ids.read_control_value(elements[0]["value"]) == (req.id, "v1")
    no_edits = req.model_copy(update={"config": ApprovalConfig()})
    ids_shown = [e["action_id"] for e in blocks.request_message(no_edits)["blocks"][-1]["elements"]]
    assert ids.EDIT not in ids_shown


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(
    original=st.dictionaries(st.sampled_from(["password", "token", "env", "x"]), _json, max_size=4),
    submitted=st.text(max_size=200) | _json.map(json.dumps),
)
def test_reading_an_edit_fails_closed(original: dict[str, Any], submitted: str) -> None:
    """Whatever the reviewer submits: an object of real values, or an `EditError` — never a
    mask passed on to the agent as if it were a value, never any other exception."""
    req = request(original)
    try:
        edited = read_edit(req, submitted)
    except EditError:
        return
    assert isinstance(edited, dict)
    assert MASK not in json.dumps(edited, ensure_ascii=False) or MASK in json.dumps(
        original, ensure_ascii=False
    )


@settings(max_examples=100, deadline=None)
@given(original=st.dictionaries(st.sampled_from(["password", "api_key", "env"]), _json, max_size=4))
def test_an_unchanged_modal_reads_back_as_the_original(original: dict[str, Any]) -> None:
    req = request(original)
    text = edit_text(req)
    if text is None:
        return
    assert read_edit(req, text) == json.loads(json.dumps(original))
