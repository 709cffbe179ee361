"""Folding several hooks' (or policy rules') outputs for one call into one outcome.

Internal to approval-bot (not a stable API); agents import from `approvals`.
The rules in context: docs/ARCHITECTURE.md, "In-process review".

Precedence is `deny > ask > allow`; the legacy `block` counts as `deny` and
`approve` as `allow`; with no decision anywhere the result is `none`. Only
the reasons given at the winning rank are kept, joined by a blank line. The
first output with `continue: false` halts, and its `stopReason` is the one
reported. Additional contexts and system messages are kept, in order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from approvals.errors import InvalidRequest

log = logging.getLogger(__name__)

HookDecision = Literal["allow", "ask", "deny", "block", "approve"]
MergedDecision = Literal["allow", "ask", "deny", "none"]

#: Rank of each decision spelling; higher is stricter.
_RANK: dict[str | None, int] = {
    None: 0,
    "allow": 1,
    "approve": 1,
    "ask": 2,
    "deny": 3,
    "block": 3,
}
_BY_RANK: dict[int, MergedDecision] = {0: "none", 1: "allow", 2: "ask", 3: "deny"}

REASON_SEPARATOR = "\n\n"


class RuleOutcome(BaseModel):
    """One rule's (or one hook's) outcome, before merging. Takes Claude Code's camelCase names or
    snake_case ones.

    Fields the merge does not use are ignored, so a raw hook JSON object can
    be validated as is.
    """

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    decision: HookDecision | None = None
    reason: str | None = None
    continue_: bool = Field(default=True, alias="continue")
    stop_reason: str | None = Field(default=None, alias="stopReason")
    additional_context: str | None = Field(default=None, alias="additionalContext")
    system_message: str | None = Field(default=None, alias="systemMessage")


class MergedOutcome(BaseModel):
    """The one outcome of every output that matched a call."""

    model_config = ConfigDict(frozen=True)

    decision: MergedDecision = "none"
    #: The winning rank's reasons joined by a blank line; None when it gave none.
    reason: str | None = None
    #: True when some output said `continue: false`.
    stop: bool = False
    #: The first halting output's `stopReason`.
    stop_reason: str | None = None
    additional_context: tuple[str, ...] = ()
    system_messages: tuple[str, ...] = ()


def _coerce(output: RuleOutcome | Mapping[str, Any]) -> RuleOutcome:
    if isinstance(output, RuleOutcome):
        return output
    try:
        return RuleOutcome.model_validate(output)
    except ValidationError as e:
        raise InvalidRequest(f"invalid hook output: {e}", details=e.errors()) from e


def merge_outcomes(outputs: Iterable[RuleOutcome | Mapping[str, Any]]) -> MergedOutcome:
    """Fold `outputs` (in hook order) into one `MergedOutcome`; nothing given → `none`."""
    best = 0
    reasons: dict[int, list[str]] = {}
    stop = False
    stop_reason: str | None = None
    contexts: list[str] = []
    messages: list[str] = []

    for raw in outputs:
        out = _coerce(raw)
        rank = _RANK[out.decision]
        best = max(best, rank)
        if rank and out.reason:
            reasons.setdefault(rank, []).append(out.reason)
        if not out.continue_ and not stop:
            stop = True
            stop_reason = out.stop_reason
        if out.additional_context:
            contexts.append(out.additional_context)
        if out.system_message:
            messages.append(out.system_message)

    winning = reasons.get(best)
    merged = MergedOutcome(
        decision=_BY_RANK[best],
        reason=REASON_SEPARATOR.join(winning) if winning else None,
        stop=stop,
        stop_reason=stop_reason,
        additional_context=tuple(contexts),
        system_messages=tuple(messages),
    )
    log.debug("merged hook outputs decision=%s stop=%s", merged.decision, merged.stop)
    return merged
