"""Block Kit rendering of a digest message: many requests of one channel, one row each (pure).

A row shows what fits on a line — tool, prompt, sensitivity, who asked,
deadline, quorum progress, whether a reviewer edited it, how many risks — masked and escaped as
in `bot.slack.render.request_message`. That is less than the request's own message shows, so a row's
only button is *Review…*: it opens the review modal with the request in full
(`bot.slack.render.modals.review_modal`), and the decision is made there. A decided row
shows its outcome and no button; a row whose request moved to another route
(escalation) says where. Slack's limits: 50 blocks a message (one row is one
block: `MAX_ROWS` rows plus a header, an intro and a footer), 3000 characters a
section, 2000 a button value.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from approvals._internal.store.digests import Digest
from approvals.models import ApprovalRequest, utcnow
from bot.slack import action_ids as ids
from bot.slack.render import risk_lines
from bot.slack.render.request_message import (
    MAX_BLOCKS,
    MAX_HEADER,
    MAX_SECTION,
    SENSITIVITY_BADGES,
    Block,
    Message,
    _button,
    _context,
    _outcome,
    _plain,
    _section,
    _view,
    clip_escaped,
    plain,
    quorum_progress,
    slack_date,
    where,
)

#: Rows one digest message holds: with the header, intro and footer, within 50 blocks.
MAX_ROWS = 45
assert MAX_ROWS + 3 <= MAX_BLOCKS
#: Characters of a row's prompt.
ROW_PROMPT = 300

INTRO = (
    "Many requests arrived at once for this channel, more than Slack lets a bot post one by "
    "one, so they are listed here. *Review…* shows a request in full; decide it there."
)


def _row(i: int, req: ApprovalRequest, escalations: int, now: datetime) -> Block:
    v = _view(req)
    head = f"*{i}.* *{clip_escaped(v.tool, 150)}* — {clip_escaped(v.prompt, ROW_PROMPT)}"
    ref = f"`{clip_escaped(req.id, 100)}`"
    if req.escalations != escalations:
        moved = f"⏫ Escalated to {where(req.channel or '')}; decide it there. {ref}"
        return _section(f"{head}\n{moved}"[-MAX_SECTION:])
    if not req.is_pending:
        line, _word = _outcome(v, now)
        return _section(f"{head}\n{ref} {line}"[:MAX_SECTION])
    about = [SENSITIVITY_BADGES.get(req.config.sensitivity, req.config.sensitivity)]
    if req.principal:
        about.append(f"asked by {plain(req.principal)}")
    if req.event.agent:
        about.append(f"agent {clip_escaped(req.event.agent, 100)}")
    if req.deadline_at:
        deadline = req.deadline_at
        if deadline.tzinfo is None:
            deadline = deadline.replace(tzinfo=UTC)
        about.append(f"⏰ by {slack_date(deadline)}")
    if req.quorum > 1:
        about.append(f"🗳️ {quorum_progress(req)}")
    if req.proposal is not None:
        about.append("✏️ arguments edited by a reviewer")
    risks = risk_lines.summary(req)  # the lines themselves are in its Review dialog
    if risks:
        about.append(risks)
    about.append(ref)
    text = f"{head}\n{' · '.join(about)}"
    block = _section(text[:MAX_SECTION])
    block["accessory"] = _button(
        "Review…", ids.REVIEW, ids.review_value(req.id, escalations), "primary"
    )
    return block


def digest_message(
    digest: Digest,
    requests: dict[str, ApprovalRequest],
    *,
    now: datetime | None = None,
) -> Message:
    """The digest's message as it should show now: one row per listed request."""
    now = now or utcnow()
    rows: list[Block] = []
    waiting = 0
    for i, row in enumerate(digest.rows[:MAX_ROWS], 1):
        req = requests.get(row.request_id)
        if req is None:
            text = f"*{i}.* `{clip_escaped(row.request_id, 100)}`: no longer in the record."
            block = _section(text)
        else:
            block = _row(i, req, row.escalations, now)
            waiting += "accessory" in block
        block["block_id"] = f"digest_row:{i}"
        rows.append(block)
    total = len(rows)
    if waiting:
        title = f"🔐 {waiting} of {total} approval requests waiting"
    else:
        title = f"✅ All {total} requests of this digest are decided"
    blocks: list[Block] = [
        {"type": "header", "text": _plain(title, MAX_HEADER)},
        _context(INTRO),
        *rows,
        _context(f"Updated {slack_date(now)}"),
    ]
    return {"text": title, "blocks": blocks[:MAX_BLOCKS]}


def waiting_rows(message: dict[str, Any]) -> list[str]:
    """The Review button values of a rendered digest (tests, the bench)."""
    values = []
    for block in message.get("blocks", []):
        accessory = block.get("accessory") or {}
        if accessory.get("action_id") == ids.REVIEW:
            values.append(str(accessory.get("value", "")))
    return values
