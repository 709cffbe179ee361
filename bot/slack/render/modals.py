"""Block Kit modals (the Deny, Respond, Edit, Ask, Review and Details dialogs) and refusal
texts (pure: dicts out).

Strings from a request are masked and escaped as in `bot.slack.render.request_message`; a modal's
title, submit and close texts are cut to Slack's 24 characters.
"""

from __future__ import annotations

from typing import Any, Literal

from approvals._internal.edits import current_version
from approvals._internal.questions import offered as questions_offered
from approvals.models import MAX_QUESTION, ApprovalRequest
from bot.masking.masker import mask_text
from bot.slack import action_ids as ids
from bot.slack.render import call_context
from bot.slack.render.request_message import (
    MAX_OPTION_TEXT,
    MAX_SECTION,
    MAX_SELECT_OPTIONS,
    Block,
    _context,
    _plain,
    _section,
    _view,
    clip,
    clip_escaped,
    quorum_progress,
    request_blocks,
    where,
    who,
)

MAX_MODAL_TITLE = 24
RefusalKind = Literal[
    "already_decided",
    "not_reviewer",
    "self_approval",
    "already_voted",
    "not_found",
    "stale_option",
    "edited_since",
    "moved",
]


# ---------------------------------------------------------------- modals


def _modal(
    req: ApprovalRequest,
    callback_id: str,
    title: str,
    submit: str,
    blocks: list[Block],
    channel: str | None,
    ts: str | None,
    version: str = "",
    reply: ids.Reply | None = None,
) -> dict[str, Any]:
    if req.message:
        channel = channel or req.message.channel
        ts = ts or req.message.ts
    return {
        "type": "modal",
        "callback_id": callback_id,
        "private_metadata": ids.encode_metadata(req.id, channel, ts, version, reply),
        "title": _plain(title, MAX_MODAL_TITLE),
        "submit": _plain(submit, MAX_MODAL_TITLE),
        "close": _plain("Cancel", MAX_MODAL_TITLE),
        "blocks": blocks,
    }


def _text_input(block_id: str, action_id: str, label: str, *, optional: bool) -> Block:
    return {
        "type": "input",
        "block_id": block_id,
        "optional": optional,
        "label": _plain(label, 2000),
        "element": {
            "type": "plain_text_input",
            "action_id": action_id,
            "multiline": True,
            "max_length": MAX_SECTION,
        },
    }


def deny_modal(
    req: ApprovalRequest,
    *,
    channel: str | None = None,
    ts: str | None = None,
    reply: ids.Reply | None = None,
) -> dict[str, Any]:
    """The Deny dialog: an optional reason the agent is told. Bound to the version of the
    arguments it is drawn on, like every decision control."""
    v = _view(req)
    intro = clip_escaped(f"Deny {v.tool}?\n{v.prompt}", MAX_SECTION)
    reason = _text_input(ids.REASON_BLOCK, ids.REASON_ACTION, "Reason (optional)", optional=True)
    reason["hint"] = _plain("The agent is told this reason.", 2000)
    blocks = [_section(intro), reason]
    version = current_version(req)
    return _modal(req, ids.DENY_MODAL, "Deny request", "Deny", blocks, channel, ts, version, reply)


def input_modal(
    req: ApprovalRequest,
    *,
    channel: str | None = None,
    ts: str | None = None,
    reply: ids.Reply | None = None,
) -> dict[str, Any]:
    """The Respond dialog of kind `input`: the prompt and a required answer (bound to the
    version it is drawn on)."""
    v = _view(req)
    answer = _text_input(ids.INPUT_BLOCK, ids.INPUT_ACTION, "Your answer", optional=False)
    answer["element"]["min_length"] = 1
    blocks = [_section(clip_escaped(v.prompt, MAX_SECTION)), answer]
    version = current_version(req)
    return _modal(
        req, ids.INPUT_MODAL, "Respond to request", "Send", blocks, channel, ts, version, reply
    )


def ask_modal(
    req: ApprovalRequest,
    *,
    channel: str | None = None,
    ts: str | None = None,
    reply: ids.Reply | None = None,
) -> dict[str, Any]:
    """The Ask the agent… dialog: a required question (at most `MAX_QUESTION` characters). The
    request ends `asked` (the call does not run); the agent is told the question and answers
    it when it calls again, in this message's thread. Bound to the version it is drawn on."""
    v = _view(req)
    quorum = " It ends the request for every reviewer." if req.quorum > 1 else ""
    intro = clip_escaped(
        f"Ask the agent about {v.tool} instead of deciding: the call is not run now; the "
        f"agent is told your question and answers it when it calls again (posted in this "
        f"message's thread).{quorum}\n{v.prompt}",
        MAX_SECTION,
    )
    question = _text_input(ids.QUESTION_BLOCK, ids.QUESTION_ACTION, "Question", optional=False)
    question["element"]["min_length"] = 1
    question["element"]["max_length"] = MAX_QUESTION
    question["hint"] = _plain("The agent is told this question.", 2000)
    blocks = [_section(intro), question]
    version = current_version(req)
    return _modal(req, ids.ASK_MODAL, "Ask the agent", "Ask", blocks, channel, ts, version, reply)


def edit_modal(
    req: ApprovalRequest,
    text: str,
    *,
    channel: str | None = None,
    ts: str | None = None,
    reply: ids.Reply | None = None,
) -> dict[str, Any]:
    """The Edit… dialog: the arguments as JSON (`text`, masked:
    `bot.slack.render.edit_form.edit_text`) to
    change, and an optional note. Submitting approves the edited call (or, on a quorum
    route, proposes it: the votes restart)."""
    v = _view(req)
    restart = " Earlier votes are dropped: the reviewers vote again." if req.quorum > 1 else ""
    intro = clip_escaped(
        f"Edit the arguments of {v.tool}, then approve the edited call.{restart}\n"
        "Masked values (••••••) keep their real value if left exactly as shown.",
        MAX_SECTION,
    )
    arguments = _text_input(ids.EDIT_BLOCK, ids.EDIT_ACTION, "Arguments (JSON)", optional=False)
    arguments["element"]["initial_value"] = text
    note = _text_input(ids.NOTE_BLOCK, ids.NOTE_ACTION, "Note (optional)", optional=True)
    note["hint"] = _plain("Shown with the edit; the agent is told it too.", 2000)
    blocks = [_section(intro), arguments, note]
    title = "Approve with edits" if req.quorum <= 1 else "Propose an edit"
    submit = "Approve edited" if req.quorum <= 1 else "Propose"
    version = current_version(req)
    return _modal(req, ids.EDIT_MODAL, title, submit, blocks, channel, ts, version, reply)


def review_options(req: ApprovalRequest) -> list[tuple[str, str]]:
    """(value, label) of the review modal's decisions for this request's kind."""
    if req.config.kind == "choice":
        options = [mask_text(o) for o in req.config.options or ()][: MAX_SELECT_OPTIONS - 1]
        chosen = [(f"{ids.REVIEW_CHOOSE}{i}", f"Choose: {o}") for i, o in enumerate(options)]
        return [*chosen, (ids.REVIEW_DENY, "Deny")]
    if req.config.kind == "input":
        return [(ids.REVIEW_RESPOND, "Respond with the answer below"), (ids.REVIEW_DENY, "Deny")]
    approve = "Approve edited" if req.proposal else "Approve"
    decisions = [(ids.REVIEW_APPROVE, approve), (ids.REVIEW_DENY, "Deny")]
    if questions_offered(req):
        decisions.append((ids.REVIEW_ASK, "Ask the agent the question below"))
    return decisions


def review_modal(
    req: ApprovalRequest, *, channel: str | None = None, ts: str | None = None
) -> dict[str, Any]:
    """The review dialog of a digest row: the request exactly as its own message would show
    it (masked), a decision, and an answer or reason. It is bound to the version of the
    arguments shown: an edit made meanwhile turns the decision away (`edited_since`)."""
    blocks = request_blocks(req)
    blocks.append(
        _context(
            "To edit the arguments or approve for the session, use "
            f"`/approvals {clip_escaped(req.id, 100)}`."
        )
    )
    decision: Block = {
        "type": "input",
        "block_id": ids.REVIEW_DECISION_BLOCK,
        "label": _plain("Decision", 2000),
        "element": {
            "type": "static_select",
            "action_id": ids.REVIEW_DECISION_ACTION,
            "placeholder": _plain("Choose…", 150),
            "options": [
                {"text": _plain(label, MAX_OPTION_TEXT), "value": value}
                for value, label in review_options(req)
            ],
        },
    }
    if req.config.kind == "input":
        label = "Your answer (needed to respond; the reason if you deny)"
    elif questions_offered(req):
        label = "Reason if you deny, or your question to the agent (optional; it is told it)"
    else:
        label = "Reason (optional; the agent is told it if you deny)"
    text = _text_input(ids.REVIEW_TEXT_BLOCK, ids.REVIEW_TEXT_ACTION, label, optional=True)
    blocks += [decision, text]
    # A modal holds 100 blocks; the request's part is at most a dozen.
    return _modal(
        req,
        ids.REVIEW_MODAL,
        "Review request",
        "Submit",
        blocks,
        channel,
        ts,
        current_version(req),
    )


def details_modal(req: ApprovalRequest) -> dict[str, Any]:
    """The Details dialog of a request: the agent's whole reason, the user's request and every
    file's whole diff (`bot.slack.render.call_context.details_blocks`), masked; nothing to
    submit (it decides nothing, so it is bound to no version)."""
    return {
        "type": "modal",
        "callback_id": ids.DETAILS_MODAL,
        "private_metadata": ids.encode_metadata(req.id),
        "title": _plain("Request details", MAX_MODAL_TITLE),
        "close": _plain("Close", MAX_MODAL_TITLE),
        "blocks": call_context.details_blocks(_view(req)),
    }


def modal_errors(block_id: str, message: str) -> dict[str, Any]:
    """A `view_submission` answer that shows `message` under the input `block_id`."""
    return {"response_action": "errors", "errors": {block_id: clip(message, 150)}}


# ---------------------------------------------------------------- refusals


def refusal_text(kind: RefusalKind, req: ApprovalRequest | None = None) -> str:
    """The ephemeral explanation for a click that changed nothing."""
    if kind == "not_reviewer":
        return "You are not one of the reviewers for this request."
    if kind == "self_approval":
        return "You asked for this; someone else has to decide."
    if kind == "not_found" or req is None:
        return "This approval request no longer exists (it may have expired from the record)."
    if kind == "stale_option":
        return "That option is not one this request offers; nothing was recorded."
    if kind == "edited_since":
        return (
            "This request changed since what you clicked was drawn (a reviewer edited the "
            "arguments); nothing was recorded. The message has been redrawn: look at it and "
            "decide again."
        )
    if kind == "moved":
        return (
            f"This request was escalated to {where(req.channel or '')}; decide it there "
            "(this list no longer does)."
        )
    if kind == "already_voted":
        progress = f" ({quorum_progress(req)})" if req.quorum > 1 else ""
        return f"You have already voted on this request{progress}."
    if kind != "already_decided":
        raise ValueError(f"unknown refusal kind {kind!r}")
    d = req.decision
    by = f" by {who(d.decided_by)}" if d and d.decided_by else ""
    hide = _view(req).hide
    reason = f": {clip_escaped(mask_text(d.reason, hide=hide), 500)}" if d and d.reason else ""
    texts = {
        "approved": f"Already approved{by}.",
        "denied": f"Already denied{by}{reason}.",
        "expired": "This request has expired; nothing was changed.",
        "cancelled": f"This request was cancelled{by}.",
        "error": f"This request ended with an error{reason}.",
        "asked": f"Already asked{by}: the agent was asked a question instead.",
        "pending": "This request is still waiting for a decision.",
    }
    return texts.get(req.status, f"This request already ended ({req.status}).")
