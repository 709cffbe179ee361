"""A request's risk hints: its shell command's and its file writes', merged once when the
request is made.

Internal to approval-bot (not a stable API). `draft_request` stores `request_risks(event)` on
the request (`ApprovalRequest.risks`), so every surface and the agent read the one list.
Merged in the order found (the command's first), each (code, text) once, at most
`MAX_RISKS_PER_CODE` lines per code plus one counting the rest (docs/ARCHITECTURE.md, "The
policy").
"""

from __future__ import annotations

from collections.abc import Iterable

from approvals._internal.file_risks import file_risks
from approvals._internal.shell.model import Analysis
from approvals._internal.shell.view import analysis_of, is_command_event
from approvals.models import MAX_RISK_TEXT, MAX_RISKS_PER_CODE, ApprovalEvent, RiskHint


def shell_analysis(event: ApprovalEvent) -> Analysis | None:
    """The event's parsed shell command (None for an event without one): parsed once and
    given to the policy (`Policy.evaluate(shell=…)`) and to `request_risks`."""
    return analysis_of(event) if is_command_event(event) else None


def written_paths(event: ApprovalEvent) -> list[str]:
    """The files a call writes, as far as the event tells: a kind `file` event's path and
    the files of its call context's diffs, each once."""
    paths: list[str] = []
    if event.kind == "file" and event.path:
        paths.append(event.path)
    if event.context is not None:
        paths += [change.path for change in event.context.files]
    return list(dict.fromkeys(paths))


def request_risks(event: ApprovalEvent, analysis: Analysis | None = None) -> tuple[RiskHint, ...]:
    """The risk hints of `event` (`analysis`: its shell command, parsed already)."""
    found: list[tuple[str, str]] = []
    if analysis is None:
        analysis = shell_analysis(event)
    if analysis is not None:
        found += [(risk.code, risk.text) for risk in analysis.risks]
    for path in written_paths(event):
        found += [(risk["code"], risk["text"]) for risk in file_risks(path, event.cwd)]
    return merge(found)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_RISK_TEXT else text[: MAX_RISK_TEXT - 1] + "…"


def merge(found: Iterable[tuple[str, str]]) -> tuple[RiskHint, ...]:
    """`found` as hints: each (code, text) once, in order; texts clipped; per code at most
    `MAX_RISKS_PER_CODE`, then one line counting the rest of that code."""
    kept: dict[tuple[str, str], None] = {}
    for code, text in found:
        kept.setdefault((code, _clip(text)), None)
    shown: list[RiskHint] = []
    per_code: dict[str, int] = {}
    for code, text in kept:
        n = per_code[code] = per_code.get(code, 0) + 1
        if n <= MAX_RISKS_PER_CODE:
            shown.append(RiskHint(code=code, text=text))
    for code, n in per_code.items():
        if n > MAX_RISKS_PER_CODE:
            rest = n - MAX_RISKS_PER_CODE
            # Right after the last shown line of its code.
            at = max(i for i, hint in enumerate(shown) if hint.code == code) + 1
            more = "one more like these" if rest == 1 else f"{rest:,} more like these"
            shown.insert(at, RiskHint(code=code, text=f"… and {more}"))
    return tuple(shown)
