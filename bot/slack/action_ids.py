"""Slack action, callback and block ids and modal metadata, shared by renderer and listeners.

Every decision control carries the request id and the version of the arguments it was
drawn on (`control_value`: `<id>@<version>`, the id alone for the agent's own arguments);
a listener passes that version on, so a control drawn before a reviewer's edit records
nothing (docs/operating/security.md). Choice buttons need distinct
action ids inside one actions block, so each is `approval_choose:<index>`;
listeners register them with `CHOOSE_PATTERN` and read the index back with
`choice_index`. The static select (more than five options) uses one action id
and the option's `value` is the index as a string.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

APPROVE = "approval_approve"
DENY = "approval_deny"
APPROVE_SESSION = "approval_approve_session"
#: Approve for session with a wider scope (`approvals/_internal/grant_scopes.py`): a command
# prefix, the tool.
APPROVE_SESSION_PREFIX = "approval_approve_session_prefix"
APPROVE_SESSION_TOOL = "approval_approve_session_tool"
#: The grant scope each approve-for-session button stands for.
SESSION_SCOPES: dict[str, str] = {
    APPROVE_SESSION: "call",
    APPROVE_SESSION_PREFIX: "prefix",
    APPROVE_SESSION_TOOL: "tool",
}
#: Prefix of the per-option buttons: `approval_choose:0`, `approval_choose:1`, …
CHOOSE = "approval_choose"
CHOOSE_PATTERN = re.compile(r"^approval_choose:(\d{1,3})$")
#: The static select used when a choice has more than five options.
CHOOSE_SELECT = "approval_choose_select"
#: Opens the input modal for kind `input`.
RESPOND = "approval_respond"

#: Opens the Edit… modal (approve with edited arguments, `bot/slack/render/edit_form.py`).
EDIT = "approval_edit"

#: Opens the Ask the agent… modal (a question instead of a decision,
#: `approvals/_internal/questions.py`); its value names the version like every decision control.
ASK = "approval_ask"
ASK_MODAL = "approval_ask_modal"
QUESTION_BLOCK = "approval_question_block"
QUESTION_ACTION = "approval_question"

#: A digest row's button (bot/slack/render/digest_message.py): opens the review modal of one
# request.
REVIEW = "approval_review"
REVIEW_MODAL = "approval_review_modal"
REVIEW_DECISION_BLOCK = "approval_review_decision_block"
REVIEW_DECISION_ACTION = "approval_review_decision"
REVIEW_TEXT_BLOCK = "approval_review_text_block"
REVIEW_TEXT_ACTION = "approval_review_text"
#: The review modal's decision values (a choice's option `i` is `choose:<i>`).
REVIEW_APPROVE = "approve"
REVIEW_DENY = "deny"
REVIEW_RESPOND = "respond"
#: Ask the agent the question typed in the review modal's text field.
REVIEW_ASK = "ask"
REVIEW_CHOOSE = "choose:"

#: Opens the Details modal of a request (the agent's reason, the whole diffs:
#: `bot/slack/render/call_context.py`); value: the request id. It decides nothing, so it
#: carries no version and is not one of `BUTTON_ACTIONS`.
DETAILS = "approval_details"
DETAILS_MODAL = "approval_details_modal"

#: The slash command (`bot/slack/home.py`), as the manifests declare it.
SLASH_COMMAND = "/approvals"

#: block_id of the actions block in a request message.
ACTIONS_BLOCK = "approval_actions"

DENY_MODAL = "approval_deny_modal"
INPUT_MODAL = "approval_input_modal"
REASON_BLOCK = "approval_reason_block"
REASON_ACTION = "approval_reason"
INPUT_BLOCK = "approval_input_block"
INPUT_ACTION = "approval_input"
EDIT_MODAL = "approval_edit_modal"
EDIT_BLOCK = "approval_edit_block"
EDIT_ACTION = "approval_edit"
NOTE_BLOCK = "approval_note_block"
NOTE_ACTION = "approval_note"

#: Every plain action id a request message can carry (choice buttons match CHOOSE_PATTERN).
BUTTON_ACTIONS: frozenset[str] = frozenset(
    {
        APPROVE,
        DENY,
        APPROVE_SESSION,
        APPROVE_SESSION_PREFIX,
        APPROVE_SESSION_TOOL,
        CHOOSE_SELECT,
        RESPOND,
        EDIT,
        ASK,
    }
)


def control_value(request_id: str, version: str = "") -> str:
    """A decision control's value: the request id, and the version of the arguments it was
    drawn on when a reviewer edited them (`<id>@<version>`; ids never hold `@`)."""
    return f"{request_id}@{version}" if version else request_id


def read_control_value(value: str) -> tuple[str, str]:
    """(request id, version) from a control's value; version '' = the agent's own."""
    request_id, _, version = value.partition("@")
    return request_id, version


def review_value(request_id: str, escalations: int) -> str:
    """A digest row's Review button value: the request id and the route round it was listed
    for (`<id>@<round>`), so a click on the row of a request that moved on is refused."""
    return f"{request_id}@{escalations}"


def read_review_value(value: str) -> tuple[str, int | None]:
    """(request id, round) from a Review button's value; round None if unreadable."""
    request_id, _, raw = value.partition("@")
    canonical = raw.isascii() and raw.isdigit() and str(int(raw)) == raw
    return request_id, int(raw) if canonical else None


def choose_action_id(index: int) -> str:
    """The action id of the choice button for option `index`."""
    if index < 0:
        raise ValueError("option index must be >= 0")
    return f"{CHOOSE}:{index}"


def choice_index(action_id: str) -> int | None:
    """The option index of a choice button's action id, or None if it is not one."""
    match = CHOOSE_PATTERN.match(action_id)
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class Reply:
    """An ephemeral reply a control was clicked in (`/approvals`, `/approvals ID`): where to
    redraw it (its `response_url`), and whether it lists several requests."""

    url: str
    listed: bool = False


@dataclass(frozen=True, slots=True)
class ModalMetadata:
    """What a modal's `private_metadata` carries: the request id, the message it came from,
    the version of the arguments it was drawn on, and the ephemeral reply (if any) whose
    button opened it, to redraw once decided."""

    request_id: str
    channel: str | None = None
    ts: str | None = None
    version: str = ""
    reply: Reply | None = None


def encode_metadata(
    request_id: str,
    channel: str | None = None,
    ts: str | None = None,
    version: str = "",
    reply: Reply | None = None,
) -> str:
    """A modal's `private_metadata` (JSON; well under Slack's 3000 characters)."""
    data: dict[str, str] = {"id": request_id}
    if channel:
        data["channel"] = channel
    if ts:
        data["ts"] = ts
    if version:
        data["version"] = version
    if reply is not None:
        data["reply"] = reply.url
        if reply.listed:
            data["listed"] = "1"
    return json.dumps(data, separators=(",", ":"))


def decode_metadata(raw: str) -> ModalMetadata:
    """Read `private_metadata` back; a bare (non-JSON) string is taken as the request id."""
    try:
        data = json.loads(raw)
    except ValueError:
        return ModalMetadata(request_id=raw)
    if not isinstance(data, dict) or not isinstance(data.get("id"), str):
        return ModalMetadata(request_id=raw)
    channel = data.get("channel")
    ts = data.get("ts")
    version = data.get("version")
    reply = data.get("reply")
    return ModalMetadata(
        request_id=data["id"],
        channel=channel if isinstance(channel, str) else None,
        ts=ts if isinstance(ts, str) else None,
        version=version if isinstance(version, str) else "",
        reply=Reply(reply, data.get("listed") == "1") if isinstance(reply, str) else None,
    )
