"""Block Kit rendering: actions per kind, Slack's limits, masking, outcomes, modals, refusals."""

from __future__ import annotations

import html
import json
import string
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals.models import (
    ApprovalConfig,
    ApprovalEvent,
    ApprovalRequest,
    Decision,
    SlackMessage,
    Vote,
)
from bot.masking.masker import MASK
from bot.slack import action_ids as ids
from bot.slack.render import modals
from bot.slack.render import request_message as blocks

NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
GHP = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"


def make(
    *,
    kind: str = "approval",
    options: tuple[str, ...] | None = None,
    sensitivity: str = "low",
    allow_for_session: bool = False,
    arguments: dict[str, Any] | None = None,
    event: dict[str, Any] | None = None,
    **fields: Any,
) -> ApprovalRequest:
    config = ApprovalConfig(
        kind=kind, options=options, sensitivity=sensitivity, allow_for_session=allow_for_session
    )
    ev = ApprovalEvent(
        tool_name="deploy",
        arguments=arguments if arguments is not None else {"service": "web", "replicas": 3},
        agent="release-bot",
        session_id="sess-1",
        **(event or {}),
    )
    return ApprovalRequest(event=ev, config=config, **fields)


def unchecked_choice(options: list[str]) -> ApprovalRequest:
    """A choice request past the model's own limits (the renderer must still hold Slack's)."""
    req = make(kind="choice", options=("a", "b"))
    config = ApprovalConfig.model_construct(
        kind="choice",
        sensitivity="low",
        deadline_seconds=None,
        prompt=None,
        options=tuple(options),
        allow_for_session=False,
    )
    return req.model_copy(update={"config": config})


def action_blocks(msg: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in msg["blocks"] if b["type"] == "actions"]


def elements(msg: dict[str, Any]) -> list[dict[str, Any]]:
    (actions,) = action_blocks(msg)
    return list(actions["elements"])


def texts(msg: dict[str, Any]) -> str:
    """All mrkdwn / plain text of a message's blocks, joined."""
    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") in {"mrkdwn", "plain_text"}:
                out.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(msg["blocks"])
    return "\n".join(out)


def assert_slack_limits(msg: dict[str, Any]) -> None:
    assert 1 <= len(msg["blocks"]) <= 50
    assert isinstance(msg["text"], str) and msg["text"]
    for block in msg["blocks"]:
        if block["type"] == "section":
            assert len(block["text"]["text"]) <= 3000
        elif block["type"] == "header":
            assert len(block["text"]["text"]) <= 150
        elif block["type"] == "context":
            assert 1 <= len(block["elements"]) <= 10
        elif block["type"] == "actions":
            assert 1 <= len(block["elements"]) <= 25
            action_ids = [e["action_id"] for e in block["elements"]]
            assert len(set(action_ids)) == len(action_ids), "action ids must be unique per block"
            for e in block["elements"]:
                if e["type"] == "button":
                    assert len(e["text"]["text"]) <= 75
                    assert len(e["value"]) <= 2000
                else:
                    assert len(e["options"]) <= 100
                    assert all(len(o["text"]["text"]) <= 75 for o in e["options"])


# ---------------------------------------------------------------- actions by kind


def test_approval_has_approve_and_deny_carrying_only_the_id() -> None:
    req = make()
    msg = blocks.request_message(req, now=NOW)
    assert_slack_limits(msg)
    approve, deny = elements(msg)
    assert (approve["action_id"], approve["style"], approve["text"]["text"]) == (
        ids.APPROVE,
        "primary",
        "Approve",
    )
    assert (deny["action_id"], deny["style"]) == (ids.DENY, "danger")
    assert approve["value"] == deny["value"] == req.id
    assert action_blocks(msg)[0]["block_id"] == ids.ACTIONS_BLOCK


def test_approve_for_session_button_when_allowed() -> None:
    req = make(allow_for_session=True)
    got = [e["action_id"] for e in elements(blocks.request_message(req, now=NOW))]
    assert got == [ids.APPROVE, ids.APPROVE_SESSION, ids.DENY]
    assert ids.APPROVE_SESSION not in [
        e["action_id"] for e in elements(blocks.request_message(make(), now=NOW))
    ]


def test_choice_with_few_options_is_one_button_per_option() -> None:
    req = make(kind="choice", options=("blue", "green", "red"))
    msg = blocks.request_message(req, now=NOW)
    assert_slack_limits(msg)
    *choices, deny = elements(msg)
    assert [c["text"]["text"] for c in choices] == ["blue", "green", "red"]
    assert [ids.choice_index(c["action_id"]) for c in choices] == [0, 1, 2]
    assert all(ids.CHOOSE_PATTERN.match(c["action_id"]) for c in choices)
    assert all(c["value"] == req.id for c in choices)
    assert deny["action_id"] == ids.DENY


def test_choice_with_many_options_is_a_static_select() -> None:
    options = tuple(f"option {i}" for i in range(6))
    req = make(kind="choice", options=options)
    msg = blocks.request_message(req, now=NOW)
    assert_slack_limits(msg)
    select, deny = elements(msg)
    assert select["type"] == "static_select" and select["action_id"] == ids.CHOOSE_SELECT
    assert [o["value"] for o in select["options"]] == [str(i) for i in range(6)]
    assert [o["text"]["text"] for o in select["options"]] == list(options)
    assert deny["value"] == req.id


def test_150_options_are_capped_at_100_with_a_note() -> None:
    req = unchecked_choice([f"opt-{i}" for i in range(150)])
    msg = blocks.request_message(req, now=NOW)
    assert_slack_limits(msg)
    select, _ = elements(msg)
    assert len(select["options"]) == 100
    assert select["options"][-1]["value"] == "99"
    assert "Showing the first 100 of 150 options" in texts(msg)


def test_long_option_text_is_cut_to_75() -> None:
    req = unchecked_choice(["x" * 200, "short"])
    msg = blocks.request_message(req, now=NOW)
    assert_slack_limits(msg)
    first = elements(msg)[0]
    assert len(first["text"]["text"]) == 75 and first["text"]["text"].endswith("…")
    select_req = unchecked_choice(["y" * 200] + [f"o{i}" for i in range(9)])
    select = elements(blocks.request_message(select_req, now=NOW))[0]
    assert len(select["options"][0]["text"]["text"]) == 75


def test_input_has_respond_and_deny() -> None:
    req = make(kind="input")
    respond, deny = elements(blocks.request_message(req, now=NOW))
    assert respond["action_id"] == ids.RESPOND and respond["text"]["text"] == "Respond…"
    assert deny["action_id"] == ids.DENY
    assert respond["value"] == deny["value"] == req.id


def test_long_request_id_refused_rather_than_cut() -> None:
    req = make(id="apr_" + "x" * 2001)
    with pytest.raises(ValueError, match="2000"):
        blocks.request_message(req, now=NOW)


# ---------------------------------------------------------------- content and limits


def test_summary_shows_tool_agent_session_requester_route_badge() -> None:
    req = make(requester="U0ALICE", channel="C0OPS", route="ops", sensitivity="pii")
    msg = blocks.request_message(req, now=NOW)
    header = msg["blocks"][0]
    assert header["type"] == "header" and header["text"]["text"] == "🔐 Approval needed: deploy"
    text = texts(msg)
    for part in ("release-bot", "sess-1", "<@U0ALICE>", "ops", "<#C0OPS>", "PII", req.id):
        assert part in text
    assert '"service": "web"' in text and "```" in text
    assert "deploy" in msg["text"]


def test_requester_that_is_not_a_slack_user_is_plain_text() -> None:
    text = texts(blocks.request_message(make(requester="cli:alice"), now=NOW))
    assert "cli:alice" in text and "<@cli:alice>" not in text


def test_long_tool_name_header_fits() -> None:
    req = make(event={}).model_copy(
        update={"event": make().event.model_copy(update={"tool_name": "t" * 200})}
    )
    msg = blocks.request_message(req, now=NOW)
    assert_slack_limits(msg)
    assert len(msg["blocks"][0]["text"]["text"]) == 150


def test_long_arguments_are_truncated_with_a_note() -> None:
    req = make(arguments={f"k{i}": "v" * 500 for i in range(40)}, prompt="Deploy?")
    msg = blocks.request_message(req, now=NOW)
    assert_slack_limits(msg)
    (args,) = [b for b in msg["blocks"] if "*Arguments*" in b.get("text", {}).get("text", "")]
    body = args["text"]["text"]
    assert len(body) <= 3000 and len(body) > 2500
    assert f"(truncated; full arguments kept in the approval record {req.id})" in body
    assert body.count("```") == 2, "the code block must stay closed"


def test_huge_everything_stays_within_limits() -> None:
    req = make(
        kind="choice",
        options=tuple(f"{i}" * 75 for i in range(1, 10)),
        arguments={"blob": "&<>" * 5000},
        event={"command": "echo " + "<&>" * 20000, "path": "/tmp/" + "p" * 4000, "cwd": "/" * 4000},
        prompt="<" * 3000,
        requester="U1",
        quorum=20,
        votes=tuple(Vote(user=f"U{i}", outcome="approve") for i in range(19)),
        deadline_at=NOW + timedelta(hours=1),
    )
    for msg in (blocks.request_message(req, now=NOW), blocks.escalated_note(req, "C9")):
        assert_slack_limits(msg)
    decided = req.model_copy(
        update={"status": "approved", "decision": Decision.approve(by="U1", input="&" * 3000)}
    )
    assert_slack_limits(blocks.decided_message(decided, now=NOW))


def test_mrkdwn_from_the_agent_is_escaped() -> None:
    req = make(prompt="<!channel> ship it & <@U999>?", arguments={"x": "<!here>"})
    dumped = json.dumps(blocks.request_message(req, now=NOW))
    assert "<!channel>" not in dumped and "<!here>" not in dumped and "<@U999>" not in dumped
    assert "&lt;!channel&gt; ship it &amp; &lt;@U999&gt;?" in dumped


def test_command_event_shows_the_command_and_file_event_the_path() -> None:
    cmd = make(event={"kind": "command", "command": "rm -rf /tmp/build"})
    assert "rm -rf /tmp/build" in texts(blocks.request_message(cmd, now=NOW))
    file = make(event={"kind": "file", "path": "/etc/hosts"})
    assert "/etc/hosts" in texts(blocks.request_message(file, now=NOW))


def test_a_code_fence_in_a_value_cannot_close_the_block() -> None:
    req = make(event={"kind": "command", "command": "echo ```\n*bold*"})
    (section,) = [
        b
        for b in blocks.request_message(req, now=NOW)["blocks"]
        if "*Command*" in b.get("text", {}).get("text", "")
    ]
    assert section["text"]["text"].count("```") == 2


def test_deadline_uses_slack_date_formatting() -> None:
    deadline = datetime(2030, 1, 2, 4, 0, tzinfo=UTC)
    text = texts(blocks.request_message(make(deadline_at=deadline), now=NOW))
    epoch = int(deadline.timestamp())
    assert f"Decide by <!date^{epoch}^{{date_short_pretty}} {{time}}|2030-01-02 04:00 UTC>" in text
    late = texts(blocks.request_message(make(deadline_at=deadline), now=deadline))
    assert "Deadline passed" in late


@settings(max_examples=300, deadline=None)
@given(
    when=st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(9998, 12, 31)),
    offset=st.integers(-14 * 60, 14 * 60),
)
def test_slack_date_fallback_is_strftimes(when: datetime, offset: int) -> None:
    """The fallback text is written without strftime; it reads exactly as strftime wrote it,
    from any time zone, and an unaware time is UTC."""
    aware = when.replace(tzinfo=timezone(timedelta(minutes=offset)))
    for moment in (aware, when):
        utc = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
        epoch = int(utc.timestamp())
        expected = utc.strftime("%Y-%m-%d %H:%M UTC")
        assert blocks.slack_date(moment) == f"<!date^{epoch}^{blocks.DATE_FORMAT}|{expected}>"


def test_quorum_progress_counts_each_reviewer_once() -> None:
    votes = (Vote(user="U1", outcome="approve"), Vote(user="U1", outcome="approve"))
    msg = blocks.request_message(make(quorum=2, votes=votes), now=NOW)
    assert "1 of 2 approvals: <@U1>" in texts(msg)
    assert "0 of 3 approvals" in texts(blocks.request_message(make(quorum=3), now=NOW))
    assert "approvals" not in texts(blocks.request_message(make(), now=NOW))


# ---------------------------------------------------------------- masking


def test_secret_sensitivity_hides_every_argument_value_everywhere() -> None:
    secret_value = "acct-7781-XYZ"
    req = make(
        sensitivity="secret",
        arguments={"account": secret_value, "amount": 98765},
        event={"command": f"pay --to {secret_value}"},
        requester="U1",
    )
    for rendered in (
        blocks.request_message(req, now=NOW),
        modals.deny_modal(req),
        modals.input_modal(req),
        blocks.decided_message(
            req.model_copy(
                update={
                    "status": "denied",
                    "decision": Decision.deny(f"no to {secret_value}", by="U2"),
                }
            ),
            now=NOW,
        ),
    ):
        dumped = json.dumps(rendered, ensure_ascii=False)
        assert secret_value not in dumped and "98765" not in dumped
        assert MASK in dumped
    assert '"account": "••••••(8-15 chars)"' in texts(blocks.request_message(req, now=NOW))


def test_custom_prompt_at_secret_sensitivity_is_scrubbed() -> None:
    req = make(
        sensitivity="secret",
        arguments={"iban": "DE8937040044053201300"},
        prompt="Send to DE8937040044053201300?",
    )
    dumped = json.dumps(blocks.request_message(req, now=NOW))
    assert "DE8937040044053201300" not in dumped


def test_token_like_values_are_masked_at_low_sensitivity() -> None:
    req = make(
        arguments={
            "env": {"GITHUB_TOKEN": "plain-but-named", "NOTE": f"use {GHP}"},
            "password": "hunter22",
        },
        event={"kind": "command", "command": f"git push https://x:{GHP}@github.com/o/r"},
        prompt=f"Push with {GHP} and password=hunter22?",
    )
    msg = blocks.request_message(req, now=NOW)
    dumped = json.dumps(msg, ensure_ascii=False)
    for secret in (GHP, "plain-but-named", "hunter22"):
        assert secret not in dumped
    assert "git push" in dumped and "NOTE" in dumped


def test_default_prompt_is_rebuilt_from_masked_arguments() -> None:
    req = make(arguments={"service": "web", "api_key": "k3y-v4lu3"})
    msg = blocks.request_message(req, now=NOW)
    assert "k3y-v4lu3" not in json.dumps(msg)
    assert 'Approve deploy(service="web", api_key="••••••(8-15 chars)")?' in texts(msg)


# ---------------------------------------------------------------- decided messages


def decided(status: str, decision: Decision | None, **fields: Any) -> ApprovalRequest:
    return make(**fields).model_copy(update={"status": status, "decision": decision})


def test_approved_message_has_no_actions_and_names_the_approver() -> None:
    d = Decision.approve(by="U1", via="slack")
    msg = blocks.decided_message(decided("approved", d), now=NOW)
    assert_slack_limits(msg)
    assert action_blocks(msg) == []
    at = blocks.slack_date(d.decided_at)
    assert f"✅ Approved by <@U1> at {at}" in texts(msg)
    assert msg["text"].startswith("Approved by <@U1>")


def test_denied_message_shows_the_reason() -> None:
    msg = blocks.decided_message(decided("denied", Decision.deny("too risky <now>", by="U2")))
    assert action_blocks(msg) == []
    text = texts(msg)
    assert "❌ Denied by <@U2> at <!date^" in text and ": too risky &lt;now&gt;" in text


def test_input_and_selection_are_shown_masked() -> None:
    msg = blocks.decided_message(
        decided("approved", Decision.approve(by="U1", input=f"use {GHP} please"), kind="input")
    )
    text = texts(msg)
    assert "*Input*" in text and "please" in text and GHP not in json.dumps(msg)
    choice = decided(
        "approved",
        Decision.approve(by="U1", selection="green"),
        kind="choice",
        options=("blue", "green"),
    )
    assert "Selection: green" in texts(blocks.decided_message(choice))


def test_for_session_approval_says_so() -> None:
    msg = blocks.decided_message(decided("approved", Decision.approve(by="U1", for_session=True)))
    assert "for the rest of this session" in texts(msg)


@pytest.mark.parametrize(
    ("status", "decision", "expected"),
    [
        ("expired", None, "⌛ Expired at <!date^"),
        ("expired", Decision.deny("approval timeout", by="system"), "approval timeout"),
        ("cancelled", Decision.deny("agent gave up", by="cli:alice"), "🚫 Withdrawn by cli:alice"),
        ("error", Decision.error("channel_not_found"), "⚠️ Error: channel_not_found"),
        ("approved", Decision.approve(by="policy:safe-reads"), "Approved by policy:safe-reads"),
    ],
)
def test_other_outcomes(status: str, decision: Decision | None, expected: str) -> None:
    msg = blocks.decided_message(decided(status, decision), now=NOW)
    assert_slack_limits(msg)
    assert action_blocks(msg) == []
    assert expected in texts(msg)
    assert "<@policy" not in texts(msg) and "<@cli" not in texts(msg)


def test_expired_without_decision_uses_now() -> None:
    text = texts(blocks.decided_message(decided("expired", None), now=NOW))
    assert f"<!date^{int(NOW.timestamp())}^" in text


def test_decided_quorum_shows_votes() -> None:
    votes = (Vote(user="U1", outcome="approve"), Vote(user="U2", outcome="deny"))
    msg = blocks.decided_message(
        decided("denied", Decision.deny(by="U2"), quorum=2, votes=votes), now=NOW
    )
    assert "1 of 2 approvals: <@U1>" in texts(msg) and "<@U2> ❌" in texts(msg)


def test_message_for_picks_by_status() -> None:
    pending = make()
    assert action_blocks(blocks.message_for(pending, now=NOW))
    done = decided("approved", Decision.approve(by="U1"))
    assert blocks.message_for(done, now=NOW) == blocks.decided_message(done, now=NOW)


def test_escalated_note_points_to_the_new_channel_without_buttons() -> None:
    msg = blocks.escalated_note(make(), "C0ESCAL", now=NOW)
    assert_slack_limits(msg)
    assert action_blocks(msg) == []
    assert "⏫ Escalated to <#C0ESCAL>" in texts(msg)


# ---------------------------------------------------------------- modals and refusals


def test_deny_modal() -> None:
    req = make(message=SlackMessage(channel="C1", ts="123.456"))
    view = modals.deny_modal(req)
    assert view["type"] == "modal" and view["callback_id"] == ids.DENY_MODAL
    meta = ids.decode_metadata(view["private_metadata"])
    assert (meta.request_id, meta.channel, meta.ts) == (req.id, "C1", "123.456")
    assert view["submit"]["text"] == "Deny" and view["close"]["text"] == "Cancel"
    assert len(view["title"]["text"]) <= 24
    (reason,) = [b for b in view["blocks"] if b["type"] == "input"]
    assert reason["block_id"] == ids.REASON_BLOCK and reason["optional"] is True
    element = reason["element"]
    assert element["action_id"] == ids.REASON_ACTION
    assert element["multiline"] is True and element["max_length"] == 3000


def test_input_modal() -> None:
    req = make(kind="input", prompt="Which tag should ship?")
    view = modals.input_modal(req, channel="C2", ts="9.9")
    assert view["callback_id"] == ids.INPUT_MODAL and view["submit"]["text"] == "Send"
    assert len(view["title"]["text"]) <= 24
    assert ids.decode_metadata(view["private_metadata"]).channel == "C2"
    assert "Which tag should ship?" in texts({"blocks": view["blocks"]})
    (answer,) = [b for b in view["blocks"] if b["type"] == "input"]
    assert answer["block_id"] == ids.INPUT_BLOCK and answer["optional"] is False
    assert answer["element"]["action_id"] == ids.INPUT_ACTION


def test_modal_errors() -> None:
    assert modals.modal_errors(ids.INPUT_BLOCK, "Please type an answer.") == {
        "response_action": "errors",
        "errors": {ids.INPUT_BLOCK: "Please type an answer."},
    }


def test_refusal_texts() -> None:
    done = decided("approved", Decision.approve(by="U1"))
    assert modals.refusal_text("already_decided", done) == "Already approved by <@U1>."
    denied = decided("denied", Decision.deny("nope", by="U2"))
    assert modals.refusal_text("already_decided", denied) == "Already denied by <@U2>: nope."
    assert "expired" in modals.refusal_text("already_decided", decided("expired", None))
    leaky = decided(
        "denied",
        Decision.deny("no, hunter2-hunter2 is the prod password", by="U2"),
        sensitivity="secret",
        arguments={"db_password_hint": "hunter2-hunter2"},
    )
    assert "hunter2-hunter2" not in modals.refusal_text("already_decided", leaky)
    assert modals.refusal_text("not_reviewer", done) == (
        "You are not one of the reviewers for this request."
    )
    assert modals.refusal_text("self_approval", done) == (
        "You asked for this; someone else has to decide."
    )
    voted = make(quorum=2, votes=(Vote(user="U1", outcome="approve"),))
    assert "already voted" in modals.refusal_text("already_voted", voted)
    assert "1 of 2 approvals" in modals.refusal_text("already_voted", voted)
    assert "no longer exists" in modals.refusal_text("not_found")


# ---------------------------------------------------------------- ids


def test_choice_action_ids_round_trip() -> None:
    assert ids.choose_action_id(3) == "approval_choose:3"
    assert ids.choice_index("approval_choose:3") == 3
    assert ids.choice_index(ids.APPROVE) is None
    assert ids.choice_index(ids.CHOOSE_SELECT) is None
    with pytest.raises(ValueError):
        ids.choose_action_id(-1)


def test_metadata_round_trip_and_bare_ids() -> None:
    raw = ids.encode_metadata("apr_1", "C1", "1.2")
    assert ids.decode_metadata(raw) == ids.ModalMetadata("apr_1", "C1", "1.2")
    assert ids.decode_metadata("apr_2") == ids.ModalMetadata("apr_2")
    assert ids.decode_metadata('["x"]') == ids.ModalMetadata('["x"]')


def test_every_control_names_the_version_it_is_drawn_on() -> None:
    """Every button of a message (and a select's block, through its Deny)
    reads back as (request id, the version of the arguments it was drawn on); the Deny and
    Respond dialogs carry it too."""
    from approvals.models import Proposal

    session = make(allow_for_session=True, event={"kind": "command", "command": "npm test"})
    edited = make().model_copy(
        update={
            "proposal": Proposal(arguments={"service": "api"}, by="U0ANN", version="v9"),
            "quorum": 2,
        }
    )
    many = make(kind="choice", options=tuple(f"o{i}" for i in range(8)))
    cases = [
        (session, ""),
        (edited, "v9"),
        (make(kind="choice", options=("a", "b")), ""),
        (many, ""),
        (make(kind="input"), ""),
    ]
    for req, version in cases:
        controls = elements(blocks.request_message(req))
        buttons = [el for el in controls if el["type"] == "button"]
        assert buttons, req.config.kind
        for el in buttons:
            assert ids.read_control_value(el["value"]) == (req.id, version), el["action_id"]
    assert ids.APPROVE_SESSION in {
        el["action_id"] for el in elements(blocks.request_message(session))
    }
    assert ids.APPROVE_SESSION not in {
        el["action_id"] for el in elements(blocks.request_message(edited))
    }
    for modal in (modals.deny_modal(edited), modals.input_modal(make(kind="input"))):
        meta = ids.decode_metadata(modal["private_metadata"])
        assert meta.version == ("v9" if modal["callback_id"] == ids.DENY_MODAL else "")
    reply = ids.Reply("https://hooks.slack.com/actions/T1/1/x", listed=True)
    meta = ids.decode_metadata(modals.deny_modal(edited, reply=reply)["private_metadata"])
    assert (meta.request_id, meta.version, meta.reply) == (edited.id, "v9", reply)


# ---------------------------------------------------------------- property
# ---------------------------------------------------------------- property

_secret = st.text(string.ascii_letters + string.digits + " <>&\"'\n", min_size=6, max_size=30).map(
    lambda s: "Q7z" + s
)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(_secret, min_size=1, max_size=4), kind=st.sampled_from(["approval", "input"])
)
def test_property_secret_values_never_rendered(values: list[str], kind: str) -> None:
    args: dict[str, Any] = {f"a{i}": v for i, v in enumerate(values)}
    args["nested"] = {"list": values}
    req = make(
        kind=kind,
        sensitivity="secret",
        arguments=args,
        prompt="Really? " + " / ".join(values),
        event={"kind": "command", "command": "run " + " ".join(values)},
    )
    done = req.model_copy(
        update={"status": "denied", "decision": Decision.deny("because " + values[0], by="U1")}
    )
    for msg in (blocks.request_message(req, now=NOW), blocks.decided_message(done, now=NOW)):
        shown = html.unescape(texts(msg) + "\n" + msg["text"])
        for value in values:
            assert value not in shown
