"""Block Kit for a call's context: the agent's reason (*Why:*), the user's request and the diffs
of the files it changes (pure: dicts out). The risk hints, the files' among them, are the
request's own, drawn by `bot.slack.render.risk_lines`.

On a request's message (`context_blocks`, drawn by `bot.slack.render.request_message`) they
are collapsed: the reason and the request to `COLLAPSED_LINES` lines, each file's diff to its
first `INLINE_DIFF_LINES` lines, at most `INLINE_FILES` files; a *Details* button (an
accessory of the first of these sections, so it adds no block, carrying only the request id
and deciding nothing) opens the Details modal (`details_blocks`, in
`bot.slack.render.modals.details_modal`) with all of it, the diffs split into code sections
of whole lines within the modal's 100 blocks of 3,000 characters.

Everything is masked as the rest of the message is (`_View.mask`: the rules and the values a
request hides), the diff as one text, and escaped; under `secret` sensitivity no diff line is
shown, only the counts. Paths are shown relative to the event's `cwd` when under it.
"""

from __future__ import annotations

import posixpath
from typing import Any, Protocol

from approvals.models import ApprovalRequest, CallContext, FileChange
from bot.masking.masker import mask_lines
from bot.slack import action_ids as ids
from bot.slack.render import risk_lines
from bot.slack.render.text import clip_escaped, escape

Block = dict[str, Any]


class _View(Protocol):
    """What of a request may be shown, masked once (`bot.slack.render.request_message._View`)."""

    @property
    def req(self) -> ApprovalRequest: ...

    @property
    def hide(self) -> tuple[str, ...]: ...

    @property
    def prompt(self) -> str: ...

    @property
    def tool(self) -> str: ...

    def mask(self, text: str) -> str: ...


#: Lines of the reason and of the request shown on a message before "…".
COLLAPSED_LINES = 3
#: Characters of each shown on a message.
COLLAPSED_CHARS = 400
#: Files shown on a message (the rest are counted; all are in the Details modal).
INLINE_FILES = 3
#: Diff lines shown per file on a message.
INLINE_DIFF_LINES = 12
#: Characters of one file's diff shown on a message (whole lines).
INLINE_DIFF_CHARS = 1500
#: A modal's block limit, and the blocks kept for its closing note.
MAX_MODAL_BLOCKS = 100

#: The minus sign (U+2212) of the `+N -M` counts, as typeset.
MINUS = "\u2212"
_ACTIONS = {
    "edit": "Edit",
    "write": "Write",
    "create": "Create",
    "delete": "Delete",
    "notebook": "Notebook edit",
    "patch": "Patch",
    "move": "Move",
}
_BASIS = {
    "file": "against the file as the agent's hook read it",
    "call": "from the call's arguments (line numbers count from the edit)",
    "patch": "as the call's patch gives it",
}


def display_path(path: str, cwd: str | None) -> str:
    """`path` relative to `cwd` when it lies under it (read lexically), else as given."""
    if cwd and posixpath.isabs(cwd) and posixpath.isabs(path):
        root = posixpath.normpath(cwd)
        full = posixpath.normpath(path)
        if full.startswith(root.rstrip("/") + "/"):
            return posixpath.relpath(full, root)
    return path


def counts(change: FileChange) -> str:
    return f"+{change.added} {MINUS}{change.removed}"


def collapse(text: str, lines: int = COLLAPSED_LINES, chars: int = COLLAPSED_CHARS) -> str:
    """The first `lines` lines and `chars` characters of `text`, "…" when cut."""
    kept = text.strip().splitlines()
    short = "\n".join(kept[:lines])
    if len(short) > chars:
        short = short[: chars - 1].rstrip() + "…"
    elif len(kept) > lines:
        short += " …"
    return short


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.splitlines())


def _has_context(context: CallContext | None) -> bool:
    return context is not None and not context.empty


def _diff_hide(v: _View) -> tuple[str, ...]:
    """The values a request hides, and the lines of its multi-line ones (a diff prefixes each
    line, so a hidden value spread over lines is looked for line by line too)."""
    extra = [
        line.strip()
        for value in v.hide
        if "\n" in value
        for line in value.splitlines()
        if len(line.strip()) >= 8
    ]
    return (*v.hide, *extra)


def masked_diff(v: _View, change: FileChange, most: int | None = None) -> list[str]:
    """A file's diff lines (its first `most`), masked as one text (a secret over several lines
    is found whole; a private key cut off at the last line shown is masked to its end); none
    under `secret` sensitivity."""
    if not change.diff or v.req.config.sensitivity == "secret":
        return []
    lines = change.diff.split("\n", most)[:most] if most is not None else change.diff.split("\n")
    prefixes = [line[:1] if line[:1] in ("+", "-", " ") else "" for line in lines]
    texts = [line[len(p) :] for line, p in zip(lines, prefixes, strict=True)]
    return mask_lines(texts, prefixes, hide=_diff_hide(v))


#: The longest escaped diff line shown (a longer one is named, not cut: it could not fit a
#: section whole).
MAX_SHOWN_LINE = 2900


def _escaped(lines: list[str]) -> list[str]:
    """Diff lines as they go in a code block: fenced off, escaped for mrkdwn; a line too long
    for a section is replaced by a note saying so."""
    out = []
    for line in lines:
        shown = escape(line.replace("```", "`\u200b`\u200b`"))
        if len(shown) > MAX_SHOWN_LINE:
            shown = f"{line[:1]}(a line of {len(line):,} characters: not shown)"
        out.append(shown)
    return out


def _code(escaped: list[str]) -> str:
    return "```\n" + "\n".join(escaped) + "\n```"


def _fit(escaped: list[str], room: int, most: int | None = None) -> list[str]:
    """The first of `escaped` whose code block fits `room` characters (and `most` lines)."""
    kept: list[str] = []
    used = 8  # the fences
    for line in escaped[:most]:
        if used + len(line) + 1 > room:
            break
        kept.append(line)
        used += len(line) + 1
    return kept


def _file_head(v: _View, change: FileChange) -> str:
    """`*Edit* `src/app.py` (+3 -1)` and the summary: mrkdwn, masked, escaped."""
    event = v.req.event
    shown = display_path(change.path, event.cwd)
    head = (
        f"*{_ACTIONS.get(change.action, 'Change')}* "
        f"`{clip_escaped(v.mask(shown), 300)}` ({counts(change)})"
    )
    notes = []
    if change.summary:
        notes.append(clip_escaped(v.mask(change.summary), 400))
    if v.req.config.sensitivity == "secret" and change.diff:
        notes.append("lines hidden: a secret request")
    if notes:
        head += " — _" + "; ".join(notes) + "_"
    return head


def _details_button(req_id: str) -> dict[str, object]:
    """Opens the Details modal: carries only the request id; decides nothing."""
    return {
        "type": "button",
        "text": {"type": "plain_text", "text": "Details", "emoji": True},
        "action_id": ids.DETAILS,
        "value": req_id,
    }


def why_text(v: _View, *, collapsed: bool) -> str | None:
    """`*Why:* …` and `*The user asked:* …` (mrkdwn), or None without either."""
    context = v.req.event.context
    if context is None or not (context.reason or context.user_request):
        return None
    parts = []
    if context.reason:
        text = v.mask(context.reason)
        text = collapse(text) if collapsed else text
        parts.append("*Why:* " + clip_escaped(text, 1400 if collapsed else 2600))
    if context.user_request:
        text = v.mask(context.user_request)
        text = collapse(text, 2, 300) if collapsed else text
        parts.append("*The user asked:*\n" + _quote(clip_escaped(text, 900 if collapsed else 2600)))
    return "\n".join(parts)


def why_blocks(v: _View) -> list[Block]:
    """The *Why:* section under a message's title (the Details button as its accessory)."""
    text = why_text(v, collapsed=True)
    if text is None:
        return []
    return [{"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}]


def file_blocks(v: _View) -> list[Block]:
    """The files a call changes, as a message shows them: the first `INLINE_FILES`, each its
    head and first diff lines; "N more" for the rest."""
    context = v.req.event.context
    if context is None or not context.files:
        return []
    blocks: list[Block] = []
    for change in context.files[:INLINE_FILES]:
        text = _file_head(v, change)
        lines = _escaped(masked_diff(v, change, INLINE_DIFF_LINES))
        if lines:
            room = min(INLINE_DIFF_CHARS, 3000 - len(text) - 60)
            kept = _fit(lines, room, INLINE_DIFF_LINES)
            more = change.diff.count("\n") + 1 - len(kept) + change.omitted
            if kept:
                text += "\n" + _code(kept)
            if more:
                text += f"\n_… {more:,} more diff lines: *Details*_"
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}})
    rest = len(context.files) - INLINE_FILES + context.more_files
    if rest > 0:
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"… and {rest} more files: *Details*"}],
            }
        )
    return blocks


def with_details_button(blocks: list[Block], req_id: str) -> list[Block]:
    """`blocks` with the Details button as the accessory of the first section among them."""
    for block in blocks:
        if block.get("type") == "section" and "accessory" not in block:
            block["accessory"] = _details_button(req_id)
            break
    return blocks


def details_blocks(v: _View) -> list[Block]:
    """The Details modal's body: the whole reason and request, each file's head and its whole
    diff in code sections of whole lines; at most `MAX_MODAL_BLOCKS`, with a closing note
    on what did not fit."""
    blocks: list[Block] = [
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": clip_escaped(f"{v.tool}: {v.prompt}", 3000),
            },
        }
    ]
    why = why_text(v, collapsed=False)
    if why:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": why[:3000]}})
    # Every risk line and the whole parsed view (`bot.slack.render.risk_lines`).
    blocks += risk_lines.details_blocks(v, MAX_MODAL_BLOCKS // 4)
    context = v.req.event.context
    files = context.files if context else ()
    left_out = 0
    budget = MAX_MODAL_BLOCKS - 1  # one kept for the closing note
    for change in files:
        if len(blocks) >= budget:
            left_out += change.added + change.removed
            continue
        head = _file_head(v, change) + "\n_" + _BASIS[change.basis] + "_"
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": head[:3000]}})
        lines = _escaped(masked_diff(v, change))
        while lines:
            if len(blocks) >= budget:
                left_out += len(lines)
                break
            chunk = _fit(lines, 3000)
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _code(chunk)}})
            lines = lines[len(chunk) :]
        left_out += change.omitted
    notes = []
    if context is not None and context.more_files:
        notes.append(f"{context.more_files} more files changed (not kept with the request)")
    if left_out:
        notes.append(f"{left_out:,} more diff lines not shown")
    if notes:
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": "… " + "; ".join(notes)}]}
        )
    return blocks[:MAX_MODAL_BLOCKS]
