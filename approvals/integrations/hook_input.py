"""Hook input nobody vouches for: bytes → the hook's JSON, or why it cannot be read; the deny.

Internal to approval-bot (not a stable API); agents import from `approvals`.

`read_hook_body` turns whatever arrives into a `HookBody` without ever raising (lone UTF-16
surrogates replaced by U+FFFD), `deny` gives the deny of each gated event's shape, and the
hook's time budget is here (`clamp_timeout`, `time_budget`, `withdraw_time`). What is denied,
what gets no decision, and why: docs/ARCHITECTURE.md, "Hook input".
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

#: The agent's hook timeout assumed when the caller does not give one (`approval-bot hook
#: --timeout`, `POST /hooks/…?timeout=`), in seconds: Claude Code's (and Codex's) own
#: default, so a hook configured without a timeout waits as long as the agent does. It must
#: never exceed the hook `timeout` it is installed with (`approval-bot setup` always writes
#: both; `bot.agents.install.bot_wait`).
DEFAULT_HOOK_TIMEOUT = 600.0
#: Longest safety margin kept before the hook's own timeout, in seconds.
MAX_MARGIN_SECONDS = 2.0
#: Below this much budget left (seconds), the hook does not ask at all: it answers its
#: `on_timeout` outcome at once and submits nothing. Why this figure: docs/ARCHITECTURE.md,
#: "Nothing left approvable that nobody waits on".
MIN_ASK_SECONDS = 0.25
#: The least time kept back, inside the budget, for withdrawing what the hook asked (a
#: request nobody waits on, or a submit cut off in flight): one round trip with room for a
#: loaded machine; a tenth of longer budgets, at most 1 s. It comes out of the budget, never
#: out of the margin kept before the agent's own timeout (`time_budget`).
WITHDRAW_SECONDS = 0.1
#: What an agent is told when the bot could not be reached at all.
UNREACHABLE_REASON = "the approval bot could not be reached (is it running? check APPROVALS_URL)"

#: The hook events the bot decides; every other event gets no decision.
GATED_EVENTS: frozenset[str] = frozenset({"PreToolUse", "PermissionRequest"})
#: The largest hook input read, in bytes. Events up to the store's limit
#: (`approvals.models.MAX_EVENT_BYTES`) fit with room for the hook's other fields.
MAX_HOOK_BODY_BYTES = 4 * 1024 * 1024
#: Timeouts are clamped into this range, never rejected.
MIN_HOOK_TIMEOUT_SECONDS = 1.0
MAX_HOOK_TIMEOUT_SECONDS = 24 * 3600.0
#: Python's own limit on the digits of an integer read from text.
MAX_INT_DIGITS = 4300

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: A `\uD800` to `\uDFFF` escape, the only way JSON text can carry a surrogate (UTF-8 cannot).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_PERMISSION_REQUEST = re.compile(rb'"hook_event_name"\s*:\s*"PermissionRequest"')
_PRE_TOOL_USE = re.compile(rb'"hook_event_name"\s*:\s*"PreToolUse"')

GatedEvent = Literal["PreToolUse", "PermissionRequest"]


class _Unreadable(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _Unreadable(f"{name} is not a JSON number")


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Unreadable(f"a number has more than {MAX_INT_DIGITS} digits")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Unreadable("a number is too large")
    return value


def clean_text(value: str) -> str:
    """`value` with each lone surrogate replaced by U+FFFD (paired ones are already joined)."""
    return _LONE_SURROGATE.sub("\ufffd", value) if _LONE_SURROGATE.search(value) else value


def clean_json(value: Any) -> Any:
    """A copy of parsed JSON with every string (keys too) passed through `clean_text`;
    iterative, so any depth the parser accepted is fine."""
    if isinstance(value, str):
        return clean_text(value)
    if not isinstance(value, dict | list):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, parent, slot = stack.pop()
        if isinstance(item, dict):
            out: Any = {}
            for k, v in item.items():
                key = clean_text(k)
                out[key] = None
                stack.append((v, out, key))
        elif isinstance(item, list):
            out = [None] * len(item)
            stack.extend((v, out, i) for i, v in enumerate(item))
        else:
            out = clean_text(item) if isinstance(item, str) else item
        parent[slot] = out
    return root[0]


def loads(data: bytes | str) -> Any:
    """Parse JSON as Node writes it: lone surrogates read (replaced), `NaN`/`Infinity`, numbers
    past 4,300 digits and nesting past the parser's limit refused (`ValueError`)."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        parsed = json.loads(
            text, parse_constant=_reject_constant, parse_int=_int, parse_float=_float
        )
    except RecursionError as e:
        raise _Unreadable("the JSON nests too deeply") from e
    except UnicodeDecodeError as e:
        raise _Unreadable("the body is not UTF-8") from e
    except _Unreadable:
        raise
    except ValueError as e:
        raise _Unreadable(f"the body is not JSON ({e})") from e
    # Without such an escape no string parsed can hold a surrogate: nothing to clean.
    return clean_json(parsed) if _SURROGATE_ESCAPE.search(text) else parsed


@dataclass(frozen=True)
class HookBody:
    """What arrived, as far as it can be read. `problem` is set when it cannot be reviewed."""

    payload: dict[str, Any] | None
    #: `hook_event_name` when the payload is an object naming one (any string).
    event: str | None
    problem: str | None = None
    #: The event's shape for a deny (PreToolUse unless the body says PermissionRequest).
    shape: GatedEvent = "PreToolUse"

    @property
    def ungated(self) -> bool:
        """An event the bot does not decide: answer with no decision at all."""
        return self.payload is not None and self.event is not None and not self.gated

    @property
    def gated(self) -> bool:
        return self.event in GATED_EVENTS


def _shape_from_bytes(data: bytes) -> GatedEvent:
    if _PERMISSION_REQUEST.search(data) and not _PRE_TOOL_USE.search(data):
        return "PermissionRequest"
    return "PreToolUse"


def too_large(head: bytes, size: int | None, limit: int = MAX_HOOK_BODY_BYTES) -> HookBody:
    """The body of a hook input over `limit` bytes (`head`: its first bytes)."""
    said = f"{size} bytes" if size is not None else "more than that"
    return HookBody(
        payload=None,
        event=None,
        problem=f"the hook input is {said}; the limit is {limit} bytes ({limit // 1048576} MiB)",
        shape=_shape_from_bytes(head),
    )


def read_hook_body(data: bytes, limit: int = MAX_HOOK_BODY_BYTES) -> HookBody:
    """Read a hook input; never raises."""
    if len(data) > limit:
        return too_large(data[:65536], len(data), limit)
    try:
        payload = loads(data)
    except ValueError as e:
        return HookBody(None, None, f"unreadable hook input: {e}", _shape_from_bytes(data))
    if not isinstance(payload, dict):
        kind = "null" if payload is None else type(payload).__name__
        return HookBody(None, None, f"hook input must be a JSON object, not {kind}")
    event = payload.get("hook_event_name")
    if not isinstance(event, str) or not event:
        return HookBody(payload, None, "hook input has no hook_event_name")
    shape: GatedEvent = "PermissionRequest" if event == "PermissionRequest" else "PreToolUse"
    return HookBody(payload, event, None, shape)


def deny(shape: GatedEvent, reason: str) -> dict[str, Any]:
    """The deny Claude Code and Codex read for `shape`, with `reason` shown to the agent."""
    reason = reason[:3000]
    if shape == "PermissionRequest":
        return {
            "hookSpecificOutput": {
                "hookEventName": "PermissionRequest",
                "decision": {"behavior": "deny", "message": reason},
            }
        }
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


def codex_reason(text: str) -> str:
    """A reason as Codex should get it: Codex appends ". Command: …" to a deny reason, so a
    reason ending in a full stop (or other closing punctuation) would read "…default.. Command"."""
    trimmed = text.rstrip().rstrip(".!;:,。")
    return trimmed if trimmed.strip() else text  # nothing but spaces and punctuation: as is


_UNITS = {"s": 1, "m": 60, "h": 3600}


def clamp_timeout(raw: object, default: float = DEFAULT_HOOK_TIMEOUT) -> float:
    """A hook timeout from a number or text (`90`, `90s`, `15m`, `1h`): clamped into range;
    unreadable → `default`. Never refused: a hook must answer whatever its settings say."""
    value = math.nan
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        value = float(raw)
    elif isinstance(raw, str):
        text = raw.strip().lower()
        scale = _UNITS.get(text[-1:], 0) if text else 0
        try:
            value = float(text[:-1]) * scale if scale else float(text)
        except ValueError:
            value = math.nan
    if math.isnan(value):
        return default
    return min(MAX_HOOK_TIMEOUT_SECONDS, max(MIN_HOOK_TIMEOUT_SECONDS, value))


def time_budget(hook_timeout: float) -> float:
    """How long to wait for a decision so the hook answers before the agent's `hook_timeout`
    (which would otherwise count as no decision): a margin of up to 2 s, a fifth of short ones."""
    margin = min(MAX_MARGIN_SECONDS, hook_timeout * 0.2)
    return max(0.05, hook_timeout - margin)


def withdraw_time(budget: float) -> float:
    """How much of `budget` is kept back for withdrawing: `WITHDRAW_SECONDS`, or a tenth of a
    longer budget up to 1 s (never more than half the budget)."""
    return min(max(WITHDRAW_SECONDS, min(1.0, budget * 0.1)), budget / 2)
