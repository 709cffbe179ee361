"""Approve with edits in Slack: the arguments as the reviewer sees them, reading an edit back,
and the compact diff shown on the message (pure: no I/O).

The modal shows the arguments masked exactly as every Slack surface masks them
(`bot.masking.masker`), and `outbound` leaves that text unchanged, so what the reviewer
edits is what `shown_arguments` returns. Reading the edit back (`read_edit`), a
masked value left exactly as shown, at the same place, keeps its real value; a
value the reviewer typed over is theirs; a mask changed in part, or moved, is an
error (it would otherwise reach the agent as bullets).
"""

from __future__ import annotations

import json
from typing import Any

from approvals._internal.edits import current_arguments
from approvals.models import ApprovalRequest
from bot.masking.masker import (
    MASK,
    hidden_values,
    mask_arguments,
    mask_text,
    mask_value,
    outbound,
)

#: A plain-text input holds at most this many characters (Block Kit).
MAX_EDIT_TEXT = 3000
#: Diff lines shown on a message before "… N more".
MAX_DIFF_LINES = 12
_MAX_DIFF_VALUE = 80


class EditError(ValueError):
    """An edit that cannot be read: the message is shown under the input in the modal."""


class _Missing:
    pass


_MISSING = _Missing()


def _hide(request: ApprovalRequest, *trees: Any) -> tuple[str, ...]:
    sensitivity = request.config.sensitivity
    found: list[str] = []
    for tree in trees:
        if isinstance(tree, dict):
            found += hidden_values(tree, sensitivity)
    return tuple(found)


def _mask_leaves(value: Any, hide: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return {k: _mask_leaves(v, hide) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_leaves(v, hide) for v in value]
    if isinstance(value, str) and hide:
        return mask_text(value, hide=hide)
    return value


def _masked(request: ApprovalRequest, arguments: dict[str, Any], hide: tuple[str, ...]) -> Any:
    shown = _mask_leaves(mask_arguments(arguments, request.config.sensitivity), hide)
    text = json.dumps(shown, indent=2, ensure_ascii=False, default=str)
    if outbound(text) != text:  # a rule sees more in the whole text: show every value masked
        return mask_value(arguments)
    return shown


def shown_arguments(request: ApprovalRequest) -> Any:
    """The arguments a reviewer edits (the current proposal's, else the agent's), masked."""
    arguments = current_arguments(request)
    return _masked(request, arguments, _hide(request, request.event.arguments, arguments))


def edit_text(request: ApprovalRequest) -> str | None:
    """The modal's initial JSON text; None when it is too long to edit in Slack."""
    text = json.dumps(shown_arguments(request), indent=2, ensure_ascii=False, default=str)
    return text if len(text) <= MAX_EDIT_TEXT else None


def read_edit(request: ApprovalRequest, text: str) -> dict[str, Any]:
    """The reviewer's edit as real arguments, or `EditError`: not JSON, not an object, or a
    mask changed in part. Masked values left as shown take back their real values."""
    try:
        submitted = json.loads(text)
    except ValueError as e:
        raise EditError(f"Not valid JSON: {e}") from e
    if not isinstance(submitted, dict):
        kind = "an array" if isinstance(submitted, list) else "a single value"
        raise EditError(f"The arguments must be a JSON object ({{…}}), not {kind}.")
    restored = _restore(submitted, shown_arguments(request), current_arguments(request))
    assert isinstance(restored, dict)
    return restored


def _restore(submitted: Any, shown: Any, original: Any) -> Any:
    if isinstance(submitted, dict):
        shown_d = shown if isinstance(shown, dict) else {}
        orig_d = original if isinstance(original, dict) else {}
        # Masked keys: the shown dict was built from the original in the same order.
        keys = dict(zip(shown_d, orig_d, strict=False)) if len(shown_d) == len(orig_d) else {}
        out: dict[str, Any] = {}
        for key, value in submitted.items():
            if MASK in key and key not in keys:
                raise EditError("A masked name (••••••) was changed; leave it exactly as shown.")
            real = str(keys.get(key, key))
            out[real] = _restore(value, shown_d.get(key, _MISSING), orig_d.get(real, _MISSING))
        return out
    if isinstance(submitted, list):
        shown_l = shown if isinstance(shown, list) else []
        orig_l = original if isinstance(original, list) else []
        return [
            _restore(
                v,
                shown_l[i] if i < len(shown_l) else _MISSING,
                orig_l[i] if i < len(orig_l) else _MISSING,
            )
            for i, v in enumerate(submitted)
        ]
    if isinstance(submitted, str) and MASK in submitted:
        if submitted == shown and not isinstance(original, _Missing):
            return original
        raise EditError(
            "A masked value (••••••) was changed or moved: leave it exactly as shown to keep "
            "it, or replace it whole."
        )
    return submitted


def problem_text(request: ApprovalRequest, message: str, edited: Any = None) -> str:
    """An edit's problem as shown in the modal: masked with every value known to be secret
    in the request's arguments and in the edit."""
    hide = _hide(request, request.event.arguments, current_arguments(request), edited)
    return mask_text(message, hide=hide)


# ---------------------------------------------------------------- the diff


def _flat(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flat(v, f"{path}.{k}" if path else str(k), out)
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            _flat(v, f"{path}[{i}]", out)
    elif path:  # the empty top-level object has no leaf to show
        out[path] = value


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _MAX_DIFF_VALUE else text[: _MAX_DIFF_VALUE - 1] + "…"


def diff_lines(
    request: ApprovalRequest, before: dict[str, Any], after: dict[str, Any]
) -> list[str]:
    """What an edit changed, masked, one line per leaf: `~ path: old → new`, `+ path: new`,
    `- path: old`; at most `MAX_DIFF_LINES` lines, then `… N more changes`."""
    hide = _hide(request, before, after)
    old: dict[str, Any] = {}
    new: dict[str, Any] = {}
    _flat(_masked(request, before, hide), "", old)
    _flat(_masked(request, after, hide), "", new)
    raw_old: dict[str, Any] = {}
    raw_new: dict[str, Any] = {}
    _flat(before, "", raw_old)
    _flat(after, "", raw_new)
    lines: list[str] = []
    for path in list(dict.fromkeys([*raw_old, *raw_new])):
        name = mask_text(path, hide=hide)
        if path not in raw_new:
            lines.append(f"- {name}: {_short(old.get(path, MASK))}")
        elif path not in raw_old:
            lines.append(f"+ {name}: {_short(new.get(path, MASK))}")
        elif raw_old[path] != raw_new[path]:
            lines.append(f"~ {name}: {_short(old.get(path, MASK))} → {_short(new.get(path, MASK))}")
    if len(lines) > MAX_DIFF_LINES:
        more = len(lines) - MAX_DIFF_LINES + 1
        lines = [*lines[: MAX_DIFF_LINES - 1], f"… {more} more changes"]
    return lines
