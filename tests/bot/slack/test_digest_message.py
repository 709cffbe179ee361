"""Digest messages and the review modal (pure rendering): Slack's limits at the most rows,
one Review… button per waiting row and none on decided or moved rows, masking, and the
modal showing the request as its own message would."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from approvals._internal.store.digests import Digest, Row
from approvals.models import (
    ApprovalConfig,
    ApprovalEvent,
    ApprovalRequest,
    Decision,
    Proposal,
    SlackMessage,
)
from bot.masking.masker import MASK
from bot.slack import action_ids as ids
from bot.slack.render import modals
from bot.slack.render import request_message as blocks
from bot.slack.render.digest_message import MAX_ROWS, digest_message, waiting_rows
from tests.support.slack_emulator import _block_errors

NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"


def make(i: int = 0, **fields: Any) -> ApprovalRequest:
    kind = fields.pop("kind", "approval")
    options = fields.pop("options", None)
    sensitivity = fields.pop("sensitivity", "low")
    arguments = fields.pop("arguments", {"service": f"web-{i}", "replicas": 3})
    event = ApprovalEvent(tool_name="deploy", arguments=arguments, agent="release-bot")
    config = ApprovalConfig(kind=kind, options=options, sensitivity=sensitivity)
    fields.setdefault("channel", "C0APPROVALS")
    return ApprovalRequest(event=event, config=config, **fields)


def digest_of(requests: list[ApprovalRequest], rounds: dict[str, int] | None = None) -> Digest:
    rounds = rounds or {}
    return Digest(
        digest_id="dg_test",
        channel="C0APPROVALS",
        rows=tuple(Row(r.id, rounds.get(r.id, 0)) for r in requests),
        version=1,
        drawn=0,
        message=None,
    )


def test_the_most_rows_fit_slacks_limits_even_with_long_prompts() -> None:
    requests = [make(i, prompt="p" * 5000 + "<!channel>") for i in range(MAX_ROWS)]
    message = digest_message(digest_of(requests), {r.id: r for r in requests}, now=NOW)
    assert _block_errors(message["blocks"], 50) == []
    assert len(waiting_rows(message)) == MAX_ROWS
    assert "<!channel>" not in json.dumps(message)
    assert message["text"].startswith(f"🔐 {MAX_ROWS} of {MAX_ROWS}")


def test_each_waiting_row_has_one_review_button_naming_request_and_round() -> None:
    waiting, approved, moved = make(1), make(2), make(3, escalations=1, channel="C0OPS")
    approved = approved.model_copy(
        update={"status": "approved", "decision": Decision.approve(by="U0ALICE", via="slack")}
    )
    requests = [waiting, approved, moved]
    message = digest_message(digest_of(requests), {r.id: r for r in requests}, now=NOW)
    assert waiting_rows(message) == [ids.review_value(waiting.id, 0)]
    text = json.dumps(message["blocks"])
    assert "Approved by <@U0ALICE>" in text
    assert "Escalated to <#C0OPS>" in text
    assert all(approved.id in text for approved in requests)
    assert ids.read_review_value(waiting_rows(message)[0]) == (waiting.id, 0)


def test_a_request_gone_from_the_record_is_a_plain_line() -> None:
    kept, gone = make(1), make(2)
    message = digest_message(digest_of([kept, gone]), {kept.id: kept}, now=NOW)
    assert waiting_rows(message) == [ids.review_value(kept.id, 0)]
    assert "no longer in the record" in json.dumps(message)


def test_all_decided_says_so() -> None:
    requests = [
        make(i).model_copy(update={"status": "denied", "decision": Decision.deny("no", by="U1")})
        for i in range(3)
    ]
    message = digest_message(digest_of(requests), {r.id: r for r in requests}, now=NOW)
    assert message["blocks"][0]["text"]["text"].startswith("✅ All 3")
    assert waiting_rows(message) == []


def test_rows_and_modal_mask_secrets() -> None:
    secret = make(1, sensitivity="secret", arguments={"password": "hunter22", "host": "db"})
    tokened = make(2, arguments={"note": f"use {GHP}"})
    requests = [secret, tokened]
    message = digest_message(digest_of(requests), {r.id: r for r in requests}, now=NOW)
    for view in (message, modals.review_modal(secret), modals.review_modal(tokened)):
        text = json.dumps(view)
        assert "hunter22" not in text and GHP not in text
    assert MASK in json.dumps(modals.review_modal(tokened), ensure_ascii=False)


def test_review_modal_shows_what_the_message_shows_and_binds_the_version() -> None:
    base = make(1)
    edited = base.model_copy(
        update={"proposal": Proposal(arguments={"service": "api"}, by="U0BOB", version="v123")}
    )
    modal = modals.review_modal(edited, channel="C0APPROVALS", ts="1.2")
    message = blocks.request_message(edited, now=NOW)
    shown = [b for b in message["blocks"] if b.get("type") != "actions"]
    # The request part is the message's, block for block (the deadline line aside, none here).
    assert modal["blocks"][: len(shown)] == shown
    meta = ids.decode_metadata(modal["private_metadata"])
    assert (meta.request_id, meta.channel, meta.ts, meta.version) == (
        edited.id,
        "C0APPROVALS",
        "1.2",
        "v123",
    )
    values = [o["value"] for o in _decision(modal)["element"]["options"]]
    assert values == [ids.REVIEW_APPROVE, ids.REVIEW_DENY]
    assert _block_errors(modal["blocks"], 100) == []


def test_review_modal_offers_each_choice_and_an_answer_for_input() -> None:
    choice = make(1, kind="choice", options=("blue", "green"))
    values = [o["value"] for o in _decision(modals.review_modal(choice))["element"]["options"]]
    assert values == ["choose:0", "choose:1", ids.REVIEW_DENY]
    asked = make(2, kind="input")
    values = [o["value"] for o in _decision(modals.review_modal(asked))["element"]["options"]]
    assert values == [ids.REVIEW_RESPOND, ids.REVIEW_DENY]


def test_a_modal_of_a_posted_request_keeps_the_message_it_came_from() -> None:
    req = make(1, message=SlackMessage(channel="C0APPROVALS", ts="9.9"))
    meta = ids.decode_metadata(modals.review_modal(req)["private_metadata"])
    assert (meta.channel, meta.ts) == ("C0APPROVALS", "9.9")


@settings(max_examples=80, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="@"), max_size=30), st.integers(0, 99))
def test_property_a_review_value_reads_back_its_request_and_round(rid: str, round_: int) -> None:
    assert ids.read_review_value(ids.review_value(rid, round_)) == (rid, round_)


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=40))
@example("apr_x@007")
@example("apr_x@\u0660")
def test_property_a_hostile_review_value_names_no_round_it_does_not_spell(value: str) -> None:
    request_id, round_ = ids.read_review_value(value)
    assert "@" not in request_id
    # A round only when spelled as the renderer spells it (no "007", no Arabic-Indic digits).
    if round_ is not None:
        assert value == ids.review_value(request_id, round_)


def _decision(modal: dict[str, Any]) -> dict[str, Any]:
    (block,) = [b for b in modal["blocks"] if b.get("block_id") == ids.REVIEW_DECISION_BLOCK]
    return block
