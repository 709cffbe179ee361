"""No secret reaches Slack: every surface rendered with every fake of the corpus in every field
an agent controls, as it leaves through `bot.masking.outbound`, shows no piece of it.

The same holds through the real app in `tests/e2e/test_no_leaks_flow.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from approvals.models import (
    ApprovalConfig,
    ApprovalEvent,
    ApprovalRequest,
    Decision,
    Proposal,
    Vote,
)
from bot import blocks, home, ids, modals
from bot import edits as bot_edits
from bot.masking import mask_text, outbound
from tests.support.secret_corpus import FAKES, Fake, leaked_piece

SHORT = 200  # tool_name, agent, session_id
OPTION = 75


def _short(fake: Fake, limit: int) -> str | None:
    """The fake as a short field: whole if it fits, else its bare secret if that is
    recognisable without its context (a token), else nothing."""
    if len(fake.text) <= limit and "\n" not in fake.text:
        return fake.text
    if len(fake.secret) <= limit and "\n" not in fake.secret:
        return fake.secret if mask_text(fake.secret) != fake.secret else None
    return None


def requests_for(fake: Fake) -> Iterator[ApprovalRequest]:
    """Requests carrying `fake` in every field an agent controls, in each state."""
    value = fake.as_value
    text = fake.text
    short = _short(fake, SHORT)
    event = ApprovalEvent(
        tool_name=short or "deploy",
        arguments={"plain": value, "deep": {"x": [{"y": value}]}, "n": 1},
        command=text,
        path=text[:4096],
        cwd=text[:4096],
        agent=short,
        session_id=short,
        permissions={"rules": [value]},
    )
    option = _short(fake, OPTION)
    configs = [ApprovalConfig(prompt=text), ApprovalConfig(kind="input")]
    if option:
        configs.append(ApprovalConfig(kind="choice", options=("keep", option)))
    for config in configs:
        pending = ApprovalRequest(event=event, config=config, requester=short, quorum=2)
        yield pending
        yield pending.model_copy(
            update={"votes": [Vote(user="U1", outcome="approve", reason=text)]}
        )
        for status, decision in (
            ("denied", Decision.deny(text, by=short or "U2")),
            (
                "approved",
                Decision.approve(
                    by="U2",
                    input=text if config.kind == "input" else None,
                    selection=option if config.kind == "choice" else None,
                ),
            ),
            ("error", Decision.error(text, by="slack")),
            ("cancelled", Decision.deny(text, by=short or "agent")),
        ):
            yield pending.model_copy(update={"status": status, "decision": decision})
        # Approve with edits: a proposal on the pending request, an approval of the edit.
        edited = {"plain": "changed", "added": value, "deep": {"x": [{"y": text}]}, "n": 2}
        proposal = Proposal(arguments=edited, by="U3", note=text, version="v1")
        yield pending.model_copy(update={"proposal": proposal, "votes": ()})
        approved = Decision.approve(by="U2").model_copy(
            update={"edited_arguments": edited, "edited_by": "U3"}
        )
        yield pending.model_copy(update={"status": "approved", "decision": approved})


def surfaces(req: ApprovalRequest) -> Iterator[tuple[str, Any]]:
    """Everything the bot can send to Slack about `req` in its state, as the dispatcher and
    the listeners build it."""
    yield "message", blocks.message_for(req)
    # Reminders and decision notices (`bot/reminders.py`) send the rendered fallback text.
    if req.is_pending:
        yield "reminder", {"text": f"⏰ Reminder: {blocks.request_message(req)['text']}"}
    else:
        yield "notice", {"text": f"Decided. {blocks.decided_message(req)['text']}"}
    # The App Home tab and /approvals show it too: waiting while pending, else recent.
    lists = home.Lists([req], []) if req.is_pending else home.Lists([], [req])
    yield "home", {"view": home.home_view(lists)}
    yield "slash one", home.slash_one(req)
    if req.is_pending:
        yield "slash list", home.slash_list([req])
    if not req.is_pending:
        yield "ephemeral already_decided", {"text": modals.refusal_text("already_decided", req)}
        return
    if req.votes:
        yield "ephemeral already_voted", {"text": modals.refusal_text("already_voted", req)}
        return
    yield "escalated_note", blocks.escalated_note(req, "C0OPS")
    yield "deny_modal", {"view": modals.deny_modal(req, channel="C1", ts="1.2")}
    yield "input_modal", {"view": modals.input_modal(req, channel="C1", ts="1.2")}
    text = bot_edits.edit_text(req)
    if text is not None:
        yield "edit_modal", {"view": modals.edit_modal(req, text, channel="C1", ts="1.2")}
    # A problem with an edit, masked as the listener masks it (even one naming a value).
    refused = str(req.event.arguments.get("plain"))
    problem = bot_edits.problem_text(req, f"plain: {refused} is not valid")
    yield "edit_errors", modals.modal_errors(ids.EDIT_BLOCK, problem)
    yield "ephemeral edited_since", {"text": modals.refusal_text("edited_since", req)}
    options = ", ".join(req.config.options or ())
    yield "ephemeral choose", {"text": f"That did not work: choose one of: {options}"}
    summary = blocks.request_message(req)["text"]
    yield "dm", {"text": f"Your review is needed in <#C1>. {summary}"}


@pytest.mark.parametrize("fake", FAKES, ids=lambda f: f.rule)
def test_no_surface_shows_any_piece_of_a_secret(fake: Fake) -> None:
    for req in requests_for(fake):
        for name, payload in surfaces(req):
            shown = json.dumps(outbound(payload), ensure_ascii=False)
            piece = leaked_piece(shown, fake.secret)
            assert piece is None, f"{fake.rule}: {piece!r} shown on {name} ({req.status})"
