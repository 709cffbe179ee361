"""Block Kit rendering of approval requests: the messages (pure: dicts out; modals:
`bot.slack.render.modals`).

Every string taken from a request is masked (`bot.masking.masker`), escaped for
mrkdwn (`&`, `<`, `>`, so an agent cannot ping `<!channel>`), and cut to
Slack's limits: 50 blocks, 3000 characters per section, 150 per header,
75 per button or option text, 2000 per button value.

The messages (`request_message`, `decided_message`, `escalated_note`) come back as
`bot.masking.masker.Masked`: drawn only from masked pieces and our own text, they leave for
Slack without being scanned again (every other payload is, by `bot.masking.masker.outbound`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from approvals._internal.edits import current_version, edits_offered
from approvals._internal.grant_scopes import offered, scope_options
from approvals._internal.questions import offered as questions_offered
from approvals._internal.slack_ids import CHANNEL_LETTERS, USER_LETTERS
from approvals.models import ApprovalRequest, default_prompt, utcnow
from bot.masking.masker import Masked, hidden_values, mask_arguments, mask_text
from bot.slack import action_ids as ids
from bot.slack.render import call_context, risk_lines
from bot.slack.render.edit_form import diff_lines
from bot.slack.render.text import clip as clip  # the text helpers, also imported from here
from bot.slack.render.text import clip_escaped as clip_escaped
from bot.slack.render.text import escape as escape

Block = dict[str, Any]
Message = dict[str, Any]

MAX_BLOCKS = 50
MAX_SECTION = 3000
MAX_HEADER = 150
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_OPTION_TEXT = 75
MAX_SELECT_OPTIONS = 100
#: Up to this many options are buttons; beyond, a static select.
MAX_OPTION_BUTTONS = 5
MAX_CONTEXT_TEXT = 2000
MAX_FALLBACK = 1000
DATE_FORMAT = "{date_short_pretty} {time}"

SENSITIVITY_BADGES = {
    "low": "🟢 low sensitivity",
    "pii": "🟠 PII",
    "secret": "🔴 secret (values hidden)",
}

#: `json.dumps(value, indent=2, ensure_ascii=False, default=str)`, its encoder made once.
_PRETTY_JSON = json.JSONEncoder(indent=2, ensure_ascii=False, default=str).encode
# Slack ids: a type letter, then upper-case letters and digits (at least one digit).
_USER_ID = re.compile(rf"^(?:slack:)?([{USER_LETTERS}](?=[A-Z0-9]*[0-9])[A-Z0-9]+)$")
_CHANNEL_ID = re.compile(rf"^(?:slack:)?([{CHANNEL_LETTERS}](?=[A-Z0-9]*[0-9])[A-Z0-9]+)$")


# ---------------------------------------------------------------- text helpers


def slack_date(when: datetime, fmt: str = DATE_FORMAT) -> str:
    """`<!date^EPOCH^FORMAT|fallback>`: shown in each reader's own time zone."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    t = when.astimezone(UTC)
    # strftime("%Y-%m-%d %H:%M UTC"), formatted directly: several times cheaper (two a cycle)
    fallback = f"{t.year:04d}-{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d} UTC"
    return f"<!date^{int(when.timestamp())}^{fmt}|{fallback}>"


def who(actor: str | None) -> str:
    """A Slack user id as a mention; anything else ("cli:alice", "policy:x", "system") as text."""
    if not actor:
        return "someone"
    match = _USER_ID.match(actor)
    if match:
        return f"<@{match.group(1)}>"
    return clip_escaped(mask_text(actor), 200)


def plain(name: str) -> str:
    """A name from credentials (an API principal) as text: never a mention, even when it
    looks like a Slack user id."""
    return clip_escaped(mask_text(name), 200)


def where(channel: str) -> str:
    """A Slack channel id as a channel link; a name as text."""
    match = _CHANNEL_ID.match(channel)
    return f"<#{match.group(1)}>" if match else clip_escaped(channel, 200)


def _plain(text: str, limit: int = MAX_SECTION) -> dict[str, Any]:
    return {"type": "plain_text", "text": clip(text, limit), "emoji": True}


def _mrkdwn(text: str, limit: int = MAX_SECTION) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text[:limit]}


def _section(text: str) -> Block:
    return {"type": "section", "text": _mrkdwn(text)}


def _context(*elements: str) -> Block:
    return {"type": "context", "elements": [_mrkdwn(e, MAX_CONTEXT_TEXT) for e in elements[:10]]}


def _fence(raw: str) -> str:
    """Keep a value from closing its own code block."""
    return raw.replace("```", "`\u200b`\u200b`")


def _diff(lines: list[str]) -> str:
    """An edit's diff lines (masked by `bot.slack.render.edit_form.diff_lines`) as a code block."""
    return "```\n" + escape(_fence(clip("\n".join(lines) or "(no change)", 2000))) + "\n```"


def _code_section(title: str, raw: str, *, what: str, request_id: str) -> Block:
    head, tail = f"*{title}*\n```\n", "\n```"
    body = escape(_fence(raw))
    if len(head) + len(body) + len(tail) <= MAX_SECTION:
        return _section(head + body + tail)
    note = clip_escaped(
        f"\n(truncated; full {what} kept in the approval record {request_id})", MAX_CONTEXT_TEXT
    )
    budget = MAX_SECTION - len(head) - len(tail) - len(note)
    return _section(head + clip_escaped(_fence(raw), budget) + tail + note)


def _button(text: str, action_id: str, value: str, style: str | None = None) -> dict[str, Any]:
    if len(value) > MAX_BUTTON_VALUE:
        raise ValueError(f"button value of {len(value)} chars; the limit is {MAX_BUTTON_VALUE}")
    button: dict[str, Any] = {
        "type": "button",
        "text": _plain(text, MAX_BUTTON_TEXT),
        "action_id": action_id,
        "value": value,
    }
    if style:
        button["style"] = style
    return button


# ---------------------------------------------------------------- the masked view


@dataclass(frozen=True, slots=True)
class _View:
    """What of a request may be shown, masked once."""

    req: ApprovalRequest
    hide: tuple[str, ...]
    arguments: dict[str, Any]
    prompt: str

    def mask(self, text: str) -> str:
        return mask_text(text, hide=self.hide)

    @property
    def tool(self) -> str:
        return mask_text(self.req.event.tool_name)


def _view(req: ApprovalRequest) -> _View:
    sensitivity = req.config.sensitivity
    event = req.event
    permissions = event.permissions or {}
    hide = (*hidden_values(event.arguments, sensitivity), *hidden_values(permissions, sensitivity))
    arguments = mask_arguments(event.arguments, sensitivity)
    if req.prompt == default_prompt(event.tool_name, event.arguments):
        prompt = mask_text(default_prompt(event.tool_name, arguments), hide=hide)
    else:
        prompt = mask_text(req.prompt, hide=hide)
    return _View(req=req, hide=hide, arguments=arguments, prompt=prompt)


def _summary(v: _View) -> list[Block]:
    """Header, who asks, the prompt, command / file / arguments / permissions."""
    req, event = v.req, v.req.event
    blocks: list[Block] = [
        {"type": "header", "text": _plain(f"🔐 Approval needed: {v.tool}", MAX_HEADER)}
    ]
    blocks += _question_blocks(v)  # a retry: the reviewer's question its reason answers
    why = call_context.why_blocks(v)  # the agent's reason, under the title
    blocks += why
    hints = risk_lines.risk_blocks(v)  # one line per risk, beside the reason
    blocks += hints
    about = []
    if event.agent:
        about.append(f"*Agent:* {clip_escaped(mask_text(event.agent), 200)}")
    if event.session_id:
        about.append(f"*Session:* `{clip_escaped(mask_text(event.session_id), 200)}`")
    if req.principal:
        about.append(f"*Asked by:* {plain(req.principal)}")
    if req.requester:
        about.append(f"*Requested by:* {who(req.requester)}")
    route = f"*Route:* {clip_escaped(req.route, 100)}"
    if req.channel:
        route += f" → {where(req.channel)}"
    about += [route, SENSITIVITY_BADGES.get(req.config.sensitivity, req.config.sensitivity)]
    about.append(f"`{clip_escaped(req.id, 200)}`")
    blocks.append(_context(*about))
    blocks.append(_section(clip_escaped(v.prompt, MAX_SECTION)))
    if event.command:
        blocks.append(
            _code_section("Command", v.mask(event.command), what="command", request_id=req.id)
        )
    parsed = risk_lines.parsed_blocks(v)  # the simple commands behind it, when they differ
    blocks += parsed
    if event.path:
        blocks.append(_section(clip_escaped(f"File: {v.mask(event.path)}", MAX_SECTION)))
    if event.cwd:
        blocks.append(_context(f"*cwd:* `{clip_escaped(v.mask(event.cwd), 250)}`"))
    files = call_context.file_blocks(v)  # the diffs of the files it changes
    blocks += files
    call_context.with_details_button([*why, *hints, *files, *parsed], req.id)
    if v.arguments:
        text = _PRETTY_JSON(v.arguments)
        blocks.append(_code_section("Arguments", text, what="arguments", request_id=req.id))
    if event.permissions:
        perms = mask_arguments(event.permissions, req.config.sensitivity)
        text = _PRETTY_JSON(perms)
        blocks.append(_code_section("Permissions", text, what="permissions", request_id=req.id))
    return blocks


def _question_blocks(v: _View) -> list[Block]:
    """On a retry that answers a reviewer's question (`ApprovalRequest.answers`): the question,
    masked; the agent's reason under it (*Why:*) is its answer."""
    asked = v.req.answers
    if asked is None:
        return []
    question = clip_escaped(v.mask(asked.question), 2000)
    answer = "its answer is the *Why:* below" if _has_reason(v.req) else "it gave no answer"
    text = (
        f"❓ *{who(asked.asked_by)} asked:* {question}\n"
        f"_The agent called again after the question ({answer}); "
        f"asked on `{clip_escaped(asked.request_id, 100)}`._"
    )
    return [_section(text)]


def _has_reason(req: ApprovalRequest) -> bool:
    context = req.event.context
    return context is not None and bool(context.reason)


def _approvals(req: ApprovalRequest) -> list[str]:
    seen: list[str] = []
    for vote in req.votes:
        if vote.outcome == "approve" and vote.user not in seen:
            seen.append(vote.user)
    return seen


def quorum_progress(req: ApprovalRequest) -> str:
    """`1 of 2 approvals: <@U1>` (each reviewer counted once)."""
    users = _approvals(req)
    text = f"{len(users)} of {req.quorum} approvals"
    return text + (": " + ", ".join(who(u) for u in users) if users else "")


def _finish(blocks: list[Block]) -> list[Block]:
    """At most 50 blocks, keeping the last (outcome or actions) block."""
    if len(blocks) <= MAX_BLOCKS:
        return blocks
    return [*blocks[: MAX_BLOCKS - 1], blocks[-1]]


def _fallback(head: str, v: _View) -> str:
    """Notification text: `head` (mrkdwn, ours) then the tool and prompt (escaped)."""
    return head + clip_escaped(f"{v.tool}: {v.prompt}", MAX_FALLBACK - len(head))


# ---------------------------------------------------------------- messages


def _actions(v: _View) -> list[Block]:
    req = v.req
    # Every control names the version of the arguments it is drawn on (`ids.control_value`).
    value = ids.control_value(req.id, current_version(req))
    deny = _button("Deny", ids.DENY, value, "danger")
    blocks: list[Block] = []
    if req.config.kind == "choice":
        options = [mask_text(o) for o in req.config.options or ()]
        if len(options) <= MAX_OPTION_BUTTONS:
            elements = [_button(o, ids.choose_action_id(i), value) for i, o in enumerate(options)]
        else:
            shown = options[:MAX_SELECT_OPTIONS]
            elements = [
                {
                    "type": "static_select",
                    "action_id": ids.CHOOSE_SELECT,
                    "placeholder": _plain("Choose an option…", 150),
                    "options": [
                        {"text": _plain(o, MAX_OPTION_TEXT), "value": str(i)}
                        for i, o in enumerate(shown)
                    ],
                }
            ]
            if len(options) > len(shown):
                blocks.append(
                    _context(
                        f"Showing the first {len(shown)} of {len(options)} options; "
                        f"pick another with `approval-bot approve {escape(req.id)} --selection …`."
                    )
                )
        elements.append(deny)
    elif req.config.kind == "input":
        elements = [_button("Respond…", ids.RESPOND, value, "primary"), deny]
    else:
        approve = "Approve edited" if req.proposal else "Approve"
        elements = [_button(approve, ids.APPROVE, value, "primary")]
        if questions_offered(req):
            # A question instead of a decision: bound to the version drawn, like the rest.
            elements.append(_button("Ask the agent…", ids.ASK, value))
        if edits_offered(req):
            elements.append(_button("Edit…", ids.EDIT, value))
        # Session grants describe the agent's own call: not offered once it is edited.
        scopes = offered(req) if req.proposal is None else []
        if scopes:
            # The reviewer sees exactly what each session grant would allow, and for whom.
            who_for = f" for {plain(req.principal)}" if req.principal else ""
            session = clip_escaped(mask_text(req.event.session_id or ""), 100)
            lines = [f"*Approve for session* (`{session}`{who_for}, {_TTL_NOTE}) allows:"]
            if req.quorum > 1:
                lines[0] += (
                    f" — given only when {req.quorum} approvals choose it; then the narrowest "
                    "scope chosen"
                )
            for option in scopes:
                lines.append(f"• *{_SCOPE_BUTTONS[option.scope]}*: {_scope_text(option.label)}")
            blocks.append(_context("\n".join(lines)))
            for option in scopes:
                action = _SCOPE_ACTIONS[option.scope]
                elements.append(_button(_SCOPE_BUTTONS[option.scope], action, value))
        elements.append(deny)
    blocks.append({"type": "actions", "block_id": ids.ACTIONS_BLOCK, "elements": elements})
    return blocks


#: The approve-for-session buttons, one per grant scope.
_SCOPE_ACTIONS = {
    "call": ids.APPROVE_SESSION,
    "prefix": ids.APPROVE_SESSION_PREFIX,
    "tool": ids.APPROVE_SESSION_TOOL,
}
_SCOPE_BUTTONS = {
    "call": "Approve for session: this call",
    "prefix": "Approve for session: this command",
    "tool": "Approve for session: this tool",
}
_TTL_NOTE = "until the grant expires or is revoked"


def _scope_text(label: str) -> str:
    """A scope's label for mrkdwn: masked, escaped, its backquoted parts kept as code."""
    return clip_escaped(mask_text(label), 500)


def _granted(req: ApprovalRequest, scope: str | None) -> str:
    """What the approval granted, as shown to the reviewer when they chose it."""
    for option in scope_options(req, tool_grants=True):
        if option.scope == (scope or "call"):
            return _scope_text(option.label)
    return "this exact call"


def request_message(req: ApprovalRequest, *, now: datetime | None = None) -> Masked:
    """The interactive message for a pending request: summary, deadline, quorum, buttons."""
    v = _view(req)
    blocks = request_blocks(req, now=now, view=v) + _actions(v)
    text = _fallback("🔐 Approval needed: ", v)
    return Masked(text=text, blocks=_finish(blocks))


def request_blocks(
    req: ApprovalRequest, *, now: datetime | None = None, view: _View | None = None
) -> list[Block]:
    """What a pending request's message shows above its buttons: summary, deadline, quorum,
    a reviewer's edit. The review modal of a digest row shows exactly this
    (bot/slack/render/modals.py)."""
    now = now or utcnow()
    v = view or _view(req)
    blocks = _summary(v)
    status: list[str] = []
    if req.deadline_at:
        deadline = req.deadline_at
        if deadline.tzinfo is None:
            deadline = deadline.replace(tzinfo=UTC)
        label = "Deadline passed" if deadline <= now else "Decide by"
        status.append(f"⏰ {label} {slack_date(deadline)}")
    if req.quorum > 1:
        status.append(f"🗳️ {quorum_progress(req)}")
    if status:
        blocks.append(_context(*status))
    if req.proposal is not None:
        p = req.proposal
        restart = " — the votes restarted for this version" if req.quorum > 1 else ""
        lines = diff_lines(req, req.event.arguments, p.arguments)
        head = f"✏️ *Arguments edited by {who(p.by)}*{restart}:"
        if p.note:
            head += "\n> " + clip_escaped(v.mask(p.note), 500)
        blocks.append(_section(head + "\n" + _diff(lines)))
    return blocks


def _outcome(v: _View, now: datetime) -> tuple[str, str]:
    """(mrkdwn outcome line, fallback word) for a request that is no longer pending."""
    req, d = v.req, v.req.decision
    at = slack_date(d.decided_at if d else now)
    by = f" by {who(d.decided_by)}" if d and d.decided_by else ""
    reason = v.mask(d.reason) if d and d.reason else ""
    if req.status == "error":
        room = MAX_SECTION - len(at) - 20
        return f"⚠️ Error: {clip_escaped(reason or 'unknown error', room)} ({at})", "Error"
    if req.status == "approved":
        line, word = f"✅ Approved{by} at {at}", "Approved"
        if d and d.for_session:
            line += f" (for the rest of this session: {_granted(req, d.scope)})"
    elif req.status == "denied":
        line, word = f"❌ Denied{by} at {at}", "Denied"
    elif req.status == "expired":
        line, word = f"⌛ Expired at {at}", "Expired"
    elif req.status == "cancelled":
        # Withdrawn by the agent's principal (from its token), named as text, never a mention.
        by = f" by {plain(d.decided_by)}" if d and d.decided_by else ""
        line, word = f"🚫 Withdrawn{by} at {at}", "Withdrawn"
    elif req.status == "asked":
        return _asked_line(v, by, at), "Asked"
    else:
        line, word = "⏳ Waiting for a decision", "Pending"
    if reason:
        line += ": " + clip_escaped(reason, MAX_SECTION - len(line) - 2)
    return line, word


def _asked_line(v: _View, by: str, at: str) -> str:
    """`❓ Asked by <@U> at …: <question> — answered in the thread` (the question masked)."""
    req, d = v.req, v.req.decision
    if req.answered is not None:
        tail = " — answered in the thread" if req.answered.in_thread else " — answered"
    else:
        tail = " — the agent was asked to answer it and call again"
    head = f"❓ Asked{by} at {at}: "
    room = MAX_SECTION - len(head) - len(tail)
    question = clip_escaped(v.mask(d.question or "") if d else "", min(room, 2500))
    return head + question + tail


def decided_message(req: ApprovalRequest, *, now: datetime | None = None) -> Masked:
    """The message after approve / deny / expiry / cancel / error: outcome, no buttons."""
    now = now or utcnow()
    v = _view(req)
    d = req.decision
    line, word = _outcome(v, now)
    blocks = [*_summary(v), _section(line)]
    if d and d.selection:
        selection = clip_escaped(f"Selection: {mask_text(d.selection)}", MAX_SECTION)
        blocks.append(_section(selection))
    if d and d.input:
        blocks.append(_code_section("Input", v.mask(d.input), what="input", request_id=req.id))
    if d and d.edited_arguments is not None and req.status == "approved":
        lines = diff_lines(req, req.event.arguments, d.edited_arguments)
        head = f"✏️ *Approved with edits by {who(d.edited_by)}* (the agent runs the edited call):"
        blocks.append(_section(head + "\n" + _diff(lines)))
    meta = []
    if req.quorum > 1 or req.votes:
        marks = {"approve": "✅", "deny": "❌"}
        votes = ", ".join(f"{who(x.user)} {marks[x.outcome]}" for x in req.votes) or "none"
        meta.append(f"🗳️ {quorum_progress(req)} · votes: {votes}")
    if d:
        meta.append(f"via {clip_escaped(d.via, 50)}")
    if meta:
        blocks.append(_context(*meta))
    if d and d.decided_by:
        by = f" by {plain(d.decided_by) if req.status == 'cancelled' else who(d.decided_by)}"
    else:
        by = ""
    return Masked(text=_fallback(f"{word}{by}: ", v), blocks=_finish(blocks))


def message_for(req: ApprovalRequest, *, now: datetime | None = None) -> Masked:
    """The message a request should show now: interactive while pending, else its outcome."""
    return request_message(req, now=now) if req.is_pending else decided_message(req, now=now)


def escalated_note(req: ApprovalRequest, to_channel: str, *, now: datetime | None = None) -> Masked:
    """The old message of a request that moved to another route: where it went, no buttons."""
    now = now or utcnow()
    v = _view(req)
    line = f"⏫ Escalated to {where(to_channel)} at {slack_date(now)}; the decision is made there."
    blocks = [*_summary(v), _section(line)]
    return Masked(text=_fallback(f"Escalated to {where(to_channel)}: ", v), blocks=_finish(blocks))
