"""Ask the agent… on Slack (pure rendering): the Ask button (yes/no requests on routes that
allow it, bound to the version drawn, on the message, the App Home tab and `/approvals`), the
dialog, the review modal's option, the asked outcome line before and after the answer, the
question on the retry; escaped, masked, within Slack's limits, validated by `slack_sdk.models`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View

from approvals.models import (
    MAX_QUESTION,
    Answered,
    ApprovalConfig,
    ApprovalEvent,
    ApprovalRequest,
    CallContext,
    Decision,
    Proposal,
    Question,
    SlackMessage,
    utcnow,
)
from bot.slack import action_ids as ids
from bot.slack import home
from bot.slack.render import digest_message, modals
from bot.slack.render import request_message as rm
from tests.support.secret_corpus import FAKES

#: A GitHub token of the corpus (a reviewer pasting one into a question).
GITHUB_TOKEN = next(f.secret for f in FAKES if f.rule == "github_token")


def request(kind: str = "approval", questions: bool = True, **update: Any) -> ApprovalRequest:
    options = ("eu", "us") if kind == "choice" else None
    config = ApprovalConfig(kind=kind, options=options, allow_questions=questions)  # type: ignore[arg-type]
    event = ApprovalEvent(
        tool_name="deploy",
        arguments={"env": "prod"},
        session_id="sess-1",
        context=CallContext(reason="Ship the hotfix"),
    )
    req = ApprovalRequest(event=event, config=config, channel="C0OPS")
    return req.model_copy(update=update)


def valid_message(blocks: list[dict[str, Any]]) -> None:
    assert len(blocks) <= 50
    for block in blocks:
        Block.parse(block).validate_json()  # type: ignore[union-attr]
        assert len((block.get("text") or {}).get("text", "")) <= 3000


def buttons(blocks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        e["action_id"]: e
        for b in blocks
        if b["type"] == "actions"
        for e in b["elements"]
        if e["type"] == "button"
    }


def sections(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(b["text"]["text"] for b in blocks if b["type"] == "section")


def test_the_ask_button_on_yes_no_requests_bound_to_the_version() -> None:
    req = request()
    blocks = rm.request_message(req)["blocks"]
    valid_message(blocks)
    ask = buttons(blocks)[ids.ASK]
    assert ask["text"]["text"] == "Ask the agent…" and ask["value"] == req.id
    assert ids.ASK in ids.BUTTON_ACTIONS
    edited = req.model_copy(
        update={"proposal": Proposal(arguments={"env": "qa"}, by="U0ANN", version="v9")}
    )
    assert buttons(rm.request_message(edited)["blocks"])[ids.ASK]["value"] == f"{req.id}@v9"


@pytest.mark.parametrize(
    ("kind", "questions"), [("approval", False), ("choice", True), ("input", True)]
)
def test_no_ask_button_where_it_is_not_offered(kind: str, questions: bool) -> None:
    req = request(kind, questions)
    assert ids.ASK not in buttons(rm.request_message(req)["blocks"])
    assert ids.REVIEW_ASK not in {v for v, _ in modals.review_options(req)}


def test_the_ask_dialog() -> None:
    req = request(quorum=2, message=SlackMessage(channel="C0OPS", ts="1.2"))
    view = modals.ask_modal(req)
    View(**view).validate_json()
    assert view["callback_id"] == ids.ASK_MODAL
    meta = ids.decode_metadata(view["private_metadata"])
    assert (meta.request_id, meta.channel, meta.ts, meta.version) == (req.id, "C0OPS", "1.2", "")
    (question,) = [b for b in view["blocks"] if b.get("block_id") == ids.QUESTION_BLOCK]
    element = question["element"]
    assert element["action_id"] == ids.QUESTION_ACTION
    assert (element["min_length"], element["max_length"]) == (1, MAX_QUESTION)
    assert question["optional"] is False
    assert "It ends the request for every reviewer" in json.dumps(view)


def test_the_review_modal_offers_asking() -> None:
    req = request()
    assert (ids.REVIEW_ASK, "Ask the agent the question below") in modals.review_options(req)
    view = modals.review_modal(req)
    View(**view).validate_json()
    assert "your question to the agent" in json.dumps(view)


def test_the_asked_line_then_answered_in_the_thread() -> None:
    asked = request(status="asked", decision=Decision.ask("Which region?", by="U0ANN"))
    message = rm.message_for(asked)
    valid_message(message["blocks"])
    assert not buttons(message["blocks"])
    text = sections(message["blocks"])
    assert "❓ Asked by <@U0ANN> at <!date^" in text
    assert text.endswith("Which region? — the agent was asked to answer it and call again")
    assert message["text"].startswith("Asked by <@U0ANN>: ")
    answered = asked.model_copy(update={"answered": Answered(request_id="apr_retry")})
    assert sections(rm.message_for(answered)["blocks"]).endswith(
        "Which region? — answered in the thread"
    )
    # Everywhere the request shows later: a digest row, the recent list, a late click.
    row = digest_message._row(1, answered, 0, utcnow())
    Block.parse(row).validate_json()  # type: ignore[union-attr]
    assert "❓ Asked by <@U0ANN>" in row["text"]["text"] and "accessory" not in row
    assert "asked" in json.dumps(home.home_view(home.Lists([], [answered])))
    late = modals.refusal_text("already_decided", answered)
    assert late == "Already asked by <@U0ANN>: the agent was asked a question instead."


def test_the_retry_shows_the_question_and_its_answer() -> None:
    question = Question(
        request_id="apr_first",
        question="Which region?",
        asked_by="U0ANN",
        asked_at=utcnow(),
        thread=SlackMessage(channel="C0OPS", ts="1.2"),
    )
    retry = request(answers=question)
    blocks = rm.request_message(retry)["blocks"]
    valid_message(blocks)
    assert blocks[0]["type"] == "header"
    assert blocks[1]["text"]["text"].startswith("❓ *<@U0ANN> asked:* Which region?")
    assert "its answer is the *Why:* below" in blocks[1]["text"]["text"]
    assert blocks[2]["text"]["text"].startswith("*Why:* Ship the hotfix")
    silent = retry.model_copy(update={"event": retry.event.model_copy(update={"context": None})})
    assert "it gave no answer" in sections(rm.request_message(silent)["blocks"])
    # Where it waits for a reviewer: the Home tab and /approvals show the question too.
    view = home.home_view(home.Lists([retry], []))
    View(**view).validate_json()
    assert "❓ *<@U0ANN> asked:* Which region?" in json.dumps(view, ensure_ascii=False)
    assert "❓ *<@U0ANN> asked:* Which region?" in json.dumps(
        home.slash_list([retry]), ensure_ascii=False
    )


def test_questions_are_escaped_masked_and_fit() -> None:
    hostile = f"<!channel> & <@U0BOSS>: is {GITHUB_TOKEN} still valid? " + "&<>" * 700
    question = hostile[:MAX_QUESTION]
    asked = request(status="asked", decision=Decision.ask(question, by="U0ANN"))
    retry = request(
        answers=Question(request_id="a", question=question, asked_by="U0ANN", asked_at=utcnow())
    )
    for req in (asked, retry, asked.model_copy(update={"answered": Answered(request_id="r")})):
        message = rm.message_for(req)
        valid_message(message["blocks"])
        shown = json.dumps(message, ensure_ascii=False)
        assert "<!channel>" not in shown and "&lt;!channel&gt; &amp; &lt;@U0BOSS&gt;" in shown
        assert GITHUB_TOKEN not in shown and GITHUB_TOKEN[:12] not in shown
    # The argument values a secret request hides are hidden in the question too.
    secret = request(status="asked", decision=Decision.ask("Is prod-db-pass-7731 right?"))
    secret = secret.model_copy(
        update={
            "config": secret.config.model_copy(update={"sensitivity": "secret"}),
            "event": secret.event.model_copy(update={"arguments": {"pw": "prod-db-pass-7731"}}),
        }
    )
    assert "prod-db-pass-7731" not in json.dumps(rm.message_for(secret))


def test_the_ask_button_on_the_home_tab_and_in_slash_replies() -> None:
    req = request()
    view = home.home_view(home.Lists([req], []))
    View(**view).validate_json()
    asks = [
        e
        for b in view["blocks"]
        if b["type"] == "actions"
        for e in b["elements"]
        if e["action_id"] == ids.ASK
    ]
    assert [e["value"] for e in asks] == [req.id]
    listed = home.slash_list([req])
    valid_message(listed["blocks"])
    assert ids.ASK in buttons(listed["blocks"])
    one = home.slash_one(req)
    assert ids.ASK in buttons(one["blocks"])
