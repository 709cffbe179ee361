"""Block Kit for a request's risk hints and the parsed view of its shell command (pure: dicts
out).

One line per stored risk (`ApprovalRequest.risks`: `⚠️ *recursive delete*: rm -r of build`)
and per simple command after unwrapping (`approvals._internal.shell.explain`), the latter
only when it says more than the command text. A few inline on the message, App Home and
`/approvals`, a count on a digest row, the rest in the Details modal. Masked as the rest of
the request, and also with what masking the command itself hides; a line that would still
show a piece of a secret is left out; under `secret` sensitivity only the risks' titles.
Limits and the reasons: docs/ARCHITECTURE.md, "Risk hints" and "Masking".
"""

from __future__ import annotations

from typing import Any, Protocol

from approvals._internal.shell import ParsedCommand, command_of, is_plain
from approvals._internal.shell.parse import MAX_BYTES
from approvals._internal.shell.view import CACHE_MAX_CHARS, lines_of, parsed
from approvals.models import ApprovalRequest
from bot.masking.masker import hidden_in, mask_text, shows_piece_of
from bot.slack.render.text import clip_escaped, escape

Block = dict[str, Any]


class _View(Protocol):
    """What of a request may be shown, masked once (`bot.slack.render.request_message._View`)."""

    @property
    def req(self) -> ApprovalRequest: ...

    @property
    def hide(self) -> tuple[str, ...]: ...

    def mask(self, text: str) -> str: ...


#: Risk lines shown on a message (the rest in the Details modal).
INLINE_RISKS = 5
#: Parsed-view lines shown under the command on a message.
INLINE_PARSED = 5
#: Risk lines shown in an App Home or `/approvals` row.
INLINE_HOME_RISKS = 3
#: The longest parsed-view line shown (a longer one is cut, whole lines are kept).
MAX_PARSED_LINE = 500
#: Parsed-view lines the Details modal shows at most.
MAX_DETAILS_PARSED = 300
#: Commands up to this long have their parsed view on the message (they are in the shell
#: model's parse cache: drawing the message again parses nothing); a longer one's is in the
#: Details modal only.
INLINE_PARSE_CHARS = CACHE_MAX_CHARS

#: How each risk code reads to a reviewer (a code not listed reads as itself).
TITLES = {
    "recursive_delete": "recursive delete",
    "force_push": "force push",
    "push_to_protected": "push to a protected branch",
    "history_rewrite": "history rewrite",
    "pipe_to_shell": "runs downloaded or piped code",
    "writes_outside_cwd": "writes outside the working directory",
    "writes_sensitive_path": "writes a sensitive path",
    "reads_credentials": "reads credentials",
    "permission_change": "permission change",
    "publish": "publishes",
    "infra_destroy": "destroys infrastructure",
    "database_drop": "drops data",
    "disk_tool": "disk tool",
    "privilege": "runs as another user",
    "unanalysable": "could not be analysed",
}
#: What stands for a line that would show a piece of a secret.
NOT_SHOWN = "(not shown: it would show part of a secret)"
#: What stands for the details of a risk under `secret` sensitivity.
SECRET_NOTE = "(details hidden: a secret request)"


def title(code: str) -> str:
    return TITLES.get(code, code.replace("_", " "))


def _command_text(req: ApprovalRequest) -> str:
    """The command as the message shows it (a command line, or an argv list's words)."""
    command = command_of(req.event)
    if command is None:
        return ""
    return command if isinstance(command, str) else " ".join(command)


def hide_with_command(req: ApprovalRequest, hide: tuple[str, ...]) -> tuple[str, ...]:
    """`hide` (the values the request hides) and what masking its command hides (cached by the
    masker). A command past the shell model's size cap is not analysed: nothing of it is
    drawn, nothing to add."""
    command = _command_text(req)
    if not command or len(command) > MAX_BYTES:
        return hide
    return (*hide, *hidden_in(command, hide=hide))


def _masked(text: str, hide: tuple[str, ...]) -> str | None:
    """`text` masked with `hide` (and the rules); None when it would still show a piece of a
    secret (cut short, or spelled out with other characters between its letters)."""
    shown = mask_text(text, hide=hide)
    return None if shows_piece_of(shown, hide) else shown


def risk_texts(req: ApprovalRequest, hide: tuple[str, ...]) -> list[tuple[str, str]]:
    """(title, what it touches) of each risk hint, masked (plain text): the title is the text's
    own opening when it starts with it (`writes outside the working directory`, `/etc/x`);
    under `secret` sensitivity each title once with a note instead."""
    if not req.risks:
        return []
    if req.config.sensitivity == "secret":
        titles = dict.fromkeys(title(h.code) for h in req.risks)
        return [(t, SECRET_NOTE) for t in titles]
    hide = hide_with_command(req, hide)
    out = []
    for hint in req.risks:
        name = title(hint.code)
        text = hint.text
        if text.lower().startswith(name.lower()):  # "writes outside the working directory: p"
            name, text = text[: len(name)], text[len(name) :].lstrip(" :")
        masked = _masked(text, hide)
        out.append((name, masked if masked is not None else NOT_SHOWN))
    return out


def parsed_texts(
    req: ApprovalRequest, hide: tuple[str, ...], *, most_chars: int | None = None
) -> list[str] | None:
    """The parsed view, one masked line per simple command (plain text, each within
    `MAX_PARSED_LINE`); empty when the request has no shell command, under `secret`
    sensitivity, or when it says no more than the command text (`_as_written`). None for a
    command longer than `most_chars`: not parsed here (the message and App Home leave a
    long command's parsed view to the Details modal, so drawing them never parses one)."""
    if req.config.sensitivity == "secret":
        return []
    command = command_of(req.event)
    if command is None:
        return []
    if most_chars is not None and len(_command_text(req)) > most_chars:
        return None
    found = parsed(command)
    if _as_written(command, found):
        return []
    lines = lines_of(found)
    hide = hide_with_command(req, hide)
    out = []
    for line in lines[:MAX_DETAILS_PARSED]:
        masked = _masked(line, hide)
        shown = masked if masked is not None else NOT_SHOWN
        if len(shown) > MAX_PARSED_LINE:
            shown = shown[: MAX_PARSED_LINE - 1] + "…"
        out.append(shown)
    if len(lines) > MAX_DETAILS_PARSED:
        out.append(f"… {len(lines) - MAX_DETAILS_PARSED:,} more commands")
    return out


def risk_lines(v: _View) -> list[str]:
    """One mrkdwn line per risk hint: `⚠️ *title*: text`, masked and escaped."""
    lines = []
    for name, text in risk_texts(v.req, v.hide):
        if text == SECRET_NOTE:
            lines.append(f"⚠️ *{escape(name)}* _{escape(text)}_")
        else:
            lines.append(f"⚠️ *{escape(name)}*" + (f": {clip_escaped(text, 400)}" if text else ""))
    return lines


def parsed_lines(v: _View, *, most_chars: int | None = None) -> list[str] | None:
    """The parsed view's lines, escaped for a code block (None: a command too long to parse
    here, see `parsed_texts`)."""
    texts = parsed_texts(v.req, v.hide, most_chars=most_chars)
    if texts is None:
        return None
    return [escape(line.replace("```", "`\u200b`\u200b`")) for line in texts]


def _as_written(command: str | tuple[str, ...], found: ParsedCommand) -> bool:
    """Whether the parsed view of `command` (`found`) would say no more than its text: every
    simple command plain (`is_plain`: no wrapper, redirection, substitution, …) with its words
    as written (no quotes, escapes or expansions: `ls -la src && git status` yes, `rm '-rf' b`
    no)."""
    if not found.analysable or found.assignments or found.functions:
        return False
    for c in found.commands:
        if not is_plain(c):
            return False
        words = [c.program or "", *(w.text for w in c.words)]
        written = c.source.split() if isinstance(command, str) else list(command)
        if written != words:
            return False
    return True


def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def risk_blocks(v: _View) -> list[Block]:
    """The message's risk lines: the first `INLINE_RISKS`, "N more" for the rest."""
    lines = risk_lines(v)
    if not lines:
        return []
    shown = lines[:INLINE_RISKS]
    if len(lines) > INLINE_RISKS:
        shown.append(f"_… {len(lines) - INLINE_RISKS} more risks: *Details*_")
    return [_section(_fit_lines(shown, 3000))]


def parsed_blocks(v: _View) -> list[Block]:
    """The message's parsed view under the command: the first `INLINE_PARSED` lines; for a
    command longer than `INLINE_PARSE_CHARS`, a pointer to the Details modal."""
    lines = parsed_lines(v, most_chars=INLINE_PARSE_CHARS)
    head = "*As the shell runs it:*\n"
    if lines is None:
        size = len(_command_text(v.req))
        return [_section(f"{head}_a command of {size:,} characters: in *Details*_")]
    if not lines:
        return []
    shown = lines[:INLINE_PARSED]
    more = len(lines) - len(shown)
    tail = f"\n_… {more:,} more: *Details*_" if more else ""
    body = _fit_lines(shown, 3000 - len(head) - len(tail) - 8)
    return [_section(head + "```\n" + body + "\n```" + tail)]


def _fit_lines(lines: list[str], room: int) -> str:
    """`lines` joined, as many whole lines as fit `room` characters (at least the first, cut)."""
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > room:
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(kept) if kept else lines[0][:room]


def details_blocks(v: _View, budget: int) -> list[Block]:
    """The Details modal's risk lines and whole parsed view, within `budget` blocks."""
    blocks: list[Block] = []
    lines = risk_lines(v)
    while lines and len(blocks) < budget:
        text = _fit_lines(lines, 3000)
        blocks.append(_section(text))
        lines = lines[text.count("\n") + 1 :]
    parsed = parsed_lines(v) or []
    head = "*As the shell runs it:*\n"
    while parsed and len(blocks) < budget:
        body = _fit_lines(parsed, 3000 - len(head) - 8)
        blocks.append(_section(head + "```\n" + body + "\n```"))
        parsed = parsed[body.count("\n") + 1 :]
        head = ""
    return blocks


def home_text(v: _View) -> str:
    """An App Home or `/approvals` row's risk lines (mrkdwn, each on its own line)."""
    lines = risk_lines(v)
    shown = lines[:INLINE_HOME_RISKS]
    if len(lines) > INLINE_HOME_RISKS:
        shown.append(f"_… {len(lines) - INLINE_HOME_RISKS} more risks: *Details*_")
    return "".join("\n" + line for line in shown)


def summary(req: ApprovalRequest) -> str | None:
    """A digest row's one mention: `⚠️ 2 risks: recursive delete, force push` (titles only)."""
    if not req.risks:
        return None
    titles = list(dict.fromkeys(title(h.code) for h in req.risks))
    n = len(req.risks)
    names = ", ".join(titles[:3]) + (", …" if len(titles) > 3 else "")
    return f"⚠️ {n} risk{'s' if n != 1 else ''}: {escape(names)}"
