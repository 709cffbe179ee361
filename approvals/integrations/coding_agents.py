"""Claude Code and Codex hook JSON: hook input → `ApprovalEvent`, decision → hook output.

Pure translation plus one transport-agnostic runner (`answer_hook`), shared by the bot's
`POST /hooks/claude-code` endpoint and the `approval-bot hook …` commands. No path a client
sends is ever read here; `approval_context` (`CONTEXT_FIELD`) is read leniently.

    event              approved                         denied / expired / error / asked
    PreToolUse         permissionDecision "allow"       permissionDecision "deny"
                       (Codex: no output at all)        + permissionDecisionReason
    PermissionRequest  decision.behavior "allow"        decision.behavior "deny" + message

Only `approved` allows; every other status denies, a status this code does not know too.
The fields read, `asked`, typed input and `on_timeout` (deny, ask, defer): docs/ARCHITECTURE.md,
"Hook input" and "Hook output".
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from approvals._internal.file_changes import Original, compares, with_changes
from approvals._internal.grant_scopes import command_prefix
from approvals._internal.questions import agent_text
from approvals._internal.slack_ids import USER_ID
from approvals.errors import (
    ApprovalError,
    ApprovalTimeout,
    BotUnreachable,
    InvalidRequest,
    StoreUnavailable,
)

# The timing rules live with the hook input (no pydantic there: the command hook's light path).
from approvals.integrations.hook_input import DEFAULT_HOOK_TIMEOUT as DEFAULT_HOOK_TIMEOUT
from approvals.integrations.hook_input import MAX_MARGIN_SECONDS as MAX_MARGIN_SECONDS
from approvals.integrations.hook_input import MIN_ASK_SECONDS as MIN_ASK_SECONDS
from approvals.integrations.hook_input import UNREACHABLE_REASON
from approvals.integrations.hook_input import codex_reason as codex_reason
from approvals.integrations.hook_input import time_budget as time_budget
from approvals.integrations.hook_input import withdraw_time as withdraw_time
from approvals.models import (
    MAX_FILE_CHANGES,
    ApprovalEvent,
    ApprovalRequest,
    CallContext,
    EventKind,
    clip_reason,
    clip_request,
)

log = logging.getLogger(__name__)

Dialect = Literal["claude-code", "codex"]
HookEvent = Literal["PreToolUse", "PermissionRequest"]
OnTimeout = Literal["deny", "ask", "defer"]
ON_TIMEOUT: tuple[OnTimeout, ...] = ("deny", "ask", "defer")

DIALECTS: tuple[Dialect, ...] = ("claude-code", "codex")
#: Claude Code tools whose `tool_input` names the file they change.
CLAUDE_FILE_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})

_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.MULTILINE)

#: Deepest nesting of objects and arrays in a call's arguments (deeper cannot be stored).
MAX_JSON_DEPTH = 64

Submit = Callable[[ApprovalEvent], Awaitable[ApprovalRequest]]
Wait = Callable[[str, float], Awaitable[ApprovalRequest]]
Cancel = Callable[[str, str], Awaitable[ApprovalRequest]]
#: Withdraws the request a call id made, if it made one: `(call_id, reason)` → the request as
#: it stands afterwards, or None (for a submit cut off in flight, whose id never came back).
CancelCall = Callable[[str, str], Awaitable[ApprovalRequest | None]]
#: Told each problem of a hook call in one line of plain words (the command hook's stderr).
Report = Callable[[str], None]


# -- input ----------------------------------------------------------------------------------


class HookInput(BaseModel):
    """The hook JSON Claude Code and Codex send (stdin of a command hook, body of an http hook)."""

    model_config = ConfigDict(extra="allow")

    hook_event_name: HookEvent
    tool_name: str = Field(min_length=1, max_length=200)
    tool_input: dict[str, Any]
    session_id: str | None = Field(default=None, max_length=200)
    cwd: str | None = Field(default=None, max_length=4096)
    tool_use_id: str | None = Field(default=None, max_length=200)
    permission_mode: str | None = Field(default=None, max_length=100)
    transcript_path: str | None = None


def parse_hook_input(payload: Any) -> HookInput:
    """Validate hook JSON; `InvalidRequest` (with field details) when it is not usable."""
    if not isinstance(payload, Mapping):
        raise InvalidRequest(f"hook input must be a JSON object, not {type(payload).__name__}")
    try:
        return HookInput.model_validate(dict(payload))
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}" for err in e.errors()
        )
        raise InvalidRequest(f"invalid hook input: {problems}", details=error_details(e)) from e


def json_depth(value: Any) -> int:
    """How deeply objects and arrays nest in `value` (a scalar is 0)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth + 1)
            stack.extend(
                (v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def check_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """`InvalidRequest` when `value` nests deeper than `limit`."""
    if json_depth(value) > limit:
        raise InvalidRequest(f"the call's arguments nest deeper than {limit} levels")


def error_details(error: ValidationError) -> list[dict[str, Any]]:
    """A validation error's problems as plain JSON: `[{loc, msg, type}]`."""
    return [
        {
            "loc": [p if isinstance(p, int) else str(p) for p in err["loc"]],
            "msg": err["msg"],
            "type": err["type"],
        }
        for err in error.errors()
    ]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def derived_call_id(hook: HookInput) -> str | None:
    """A stable call id for a hook call without `tool_use_id` (Codex PermissionRequest): the
    session, the turn and a digest of the tool call, so a retried hook finds the same request.
    None without both a session and a turn (nothing stable to key on)."""
    turn = hook.model_extra.get("turn_id") if hook.model_extra else None
    if not hook.session_id or not isinstance(turn, str) or not turn:
        return None
    call = json.dumps(
        [hook.hook_event_name, hook.tool_name, hook.tool_input],
        sort_keys=True,
        ensure_ascii=True,
        separators=(",", ":"),
    )
    digest = hashlib.sha256(f"{hook.session_id}\0{turn}\0{call}".encode()).hexdigest()[:32]
    return f"hook:{digest}"


#: The hook JSON field that carries a call's context (see the module docstring):
#: `{"reason": str, "user_request": str, "files": [{"path", "exists", "text", "note"}]}`.
CONTEXT_FIELD = "approval_context"
#: The longest note kept about a file the command hook did not read.
_MAX_NOTE = 200


def read_context(payload: Any) -> tuple[CallContext | None, dict[str, Original]]:
    """(the call's context, the files as the agent's hook read them, by path) from the hook
    JSON's `approval_context`; never raises: anything malformed is left out."""
    raw = payload.get(CONTEXT_FIELD) if isinstance(payload, Mapping) else None
    if not isinstance(raw, Mapping):
        return None, {}
    reason = raw.get("reason")
    asked = raw.get("user_request")
    context = CallContext(
        reason=clip_reason(reason) if isinstance(reason, str) else None,
        user_request=clip_request(asked) if isinstance(asked, str) else None,
    )
    originals: dict[str, Original] = {}
    files = raw.get("files")
    for item in files[: MAX_FILE_CHANGES * 5] if isinstance(files, list) else []:
        if not isinstance(item, Mapping) or not isinstance(item.get("path"), str):
            continue
        text, note = item.get("text"), item.get("note")
        originals[item["path"]] = Original(
            exists=item.get("exists") is not False,
            text=text if isinstance(text, str) else None,
            note=note[:_MAX_NOTE] if isinstance(note, str) else None,
        )
    return (None if context.empty else context), originals


def _event(hook: HookInput, agent: Dialect, kind: EventKind, **fields: Any) -> ApprovalEvent:
    check_depth(hook.tool_input)
    try:
        event = ApprovalEvent(
            kind=kind,
            tool_name=hook.tool_name,
            arguments=hook.tool_input,
            call_id=hook.tool_use_id or derived_call_id(hook),
            session_id=hook.session_id or None,
            agent=agent,
            cwd=hook.cwd or None,
            **fields,
        )
    except ValidationError as e:
        raise InvalidRequest(f"invalid hook input: {e}", details=error_details(e)) from e
    context, originals = read_context(hook.model_extra or {})
    try:
        return with_changes(event.model_copy(update={"context": context}), originals)
    except Exception:  # the context explains a call; it never decides one
        log.warning("call context left out tool=%s", hook.tool_name, exc_info=True)
        return event


def event_from_claude(payload: Any) -> ApprovalEvent:
    """Claude Code hook input → the event to review.

    `Bash` is a command (`tool_input.command`); `Edit`, `Write`, `MultiEdit` and
    `NotebookEdit` are file changes (`tool_input.file_path`); anything else
    (MCP tools included) is a tool call. `tool_use_id` becomes the `call_id`,
    so a retried hook finds the same request."""
    hook = parse_hook_input(payload)
    if hook.tool_name == "Bash":
        return _event(hook, "claude-code", "command", command=_text(hook.tool_input.get("command")))
    if hook.tool_name in CLAUDE_FILE_TOOLS:
        path = _text(hook.tool_input.get("file_path")) or _text(
            hook.tool_input.get("notebook_path")
        )
        return _event(hook, "claude-code", "file", path=path)
    return _event(hook, "claude-code", "tool")


def event_from_codex(payload: Any) -> ApprovalEvent:
    """Codex hook input → the event to review.

    PermissionRequest carries no `tool_use_id`: its call id is derived from the
    session, the turn and the call (`derived_call_id`). `Bash` is a command
    (network approvals arrive as `Bash` too, with the command that wants the
    network); `apply_patch` is a file change (the first file its patch names);
    MCP tools (`mcp__server__tool`) are tool calls."""
    hook = parse_hook_input(payload)
    command = _text(hook.tool_input.get("command"))
    if hook.tool_name == "Bash":
        return _event(hook, "codex", "command", command=command)
    if hook.tool_name == "apply_patch":
        found = _PATCH_FILE.search(command or "")
        return _event(hook, "codex", "file", path=found.group(1).strip() if found else None)
    return _event(hook, "codex", "tool")


def event_from(dialect: Dialect, payload: Any) -> ApprovalEvent:
    if dialect == "claude-code":
        return event_from_claude(payload)
    if dialect == "codex":
        return event_from_codex(payload)
    raise InvalidRequest(f"unknown hook dialect {dialect!r}; use one of {', '.join(DIALECTS)}")


def hook_metadata(payload: Any) -> dict[str, Any]:
    """What the reviewer may want to know about the hook call, for the request's `metadata`."""
    hook = parse_hook_input(payload)
    meta: dict[str, Any] = {"hook_event_name": hook.hook_event_name}
    if hook.permission_mode:
        meta["permission_mode"] = hook.permission_mode
    return meta


# -- output ---------------------------------------------------------------------------------


class PreToolUseOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hookEventName: Literal["PreToolUse"] = "PreToolUse"  # the agents' wire names
    permissionDecision: Literal["allow", "deny", "ask", "defer"]
    permissionDecisionReason: str
    additionalContext: str | None = None
    #: Claude Code only: the tool input to run instead (a reviewer's edit).
    updatedInput: dict[str, Any] | None = None


class PermissionDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    behavior: Literal["allow", "deny"]
    message: str | None = None
    #: Claude Code only: the tool input to run instead (a reviewer's edit). Codex refuses the
    #: field (fails closed): never sent, and Codex requests are never offered editing.
    updatedInput: dict[str, Any] | None = None
    #: Claude Code only: permission rules to add (from the event's `permission_suggestions`),
    #: so it stops asking locally too. Codex refuses the field (fails closed): never sent.
    updatedPermissions: list[dict[str, Any]] | None = None


class PermissionRequestOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hookEventName: Literal["PermissionRequest"] = "PermissionRequest"
    decision: PermissionDecision


class HookOutput(BaseModel):
    """What the hook prints (command) or answers (http); no output at all (or `{}`, or only a
    `systemMessage`) means no decision."""

    model_config = ConfigDict(extra="forbid")

    hookSpecificOutput: PreToolUseOutput | PermissionRequestOutput | None = None
    systemMessage: str | None = None


def pre_tool_use_output(
    decision: Literal["allow", "deny", "ask", "defer"],
    reason: str,
    *,
    context: str | None = None,
    updated_input: dict[str, Any] | None = None,
) -> dict[str, Any]:
    out = HookOutput(
        hookSpecificOutput=PreToolUseOutput(
            permissionDecision=decision,
            permissionDecisionReason=reason,
            additionalContext=context,
            updatedInput=updated_input,
        )
    )
    return out.model_dump(exclude_none=True)


def permission_request_output(
    behavior: Literal["allow", "deny"],
    message: str | None = None,
    *,
    system_message: str | None = None,
    updated_permissions: list[dict[str, Any]] | None = None,
    updated_input: dict[str, Any] | None = None,
) -> dict[str, Any]:
    out = HookOutput(
        hookSpecificOutput=PermissionRequestOutput(
            decision=PermissionDecision(
                behavior=behavior,
                message=message,
                updatedPermissions=updated_permissions,
                updatedInput=updated_input,
            )
        ),
        systemMessage=system_message,
    )
    return out.model_dump(exclude_none=True)


def _who(decided_by: str | None) -> str:
    if not decided_by:
        return "a reviewer"
    return f"<@{decided_by}>" if USER_ID.fullmatch(decided_by) else decided_by


def decision_text(request: ApprovalRequest) -> str:
    """One line saying how the request ended, with the reviewer's reason, choice or input."""
    d = request.decision
    who = _who(d.decided_by if d else None)
    reason = d.reason if d else None
    if request.status == "approved":
        text = f"Approved by {who}"
        if d and d.selection:
            text += f" (choice: {d.selection})"
        if d and d.edited_arguments is not None:
            text += f", with the arguments edited by {_who(d.edited_by)}"
        if d and d.input:
            text += f": {d.input}"
        elif reason:
            text += f" ({reason})"
        return text
    if request.status == "denied":
        return f"Denied by {who}: {reason}" if reason else f"Denied by {who}"
    if request.status == "expired":
        return f"Approval request expired: {reason or 'approval timeout'}"
    if request.status == "cancelled":
        return f"Approval request was cancelled: {reason or 'cancelled'}"
    if request.status == "error":
        return f"Approval failed: {reason or 'reviewer-side error'}"
    if request.status == "asked":
        return agent_text(d.question if d else None, who)
    if request.status == "pending":
        return f"Approval request {request.id} is still pending"
    return f"Not approved ({request.status}){f': {reason}' if reason else ''}"


def _reviewer_note(request: ApprovalRequest) -> str | None:
    """The approval text when the reviewer typed or chose something the agent should see."""
    d = request.decision
    edited = d is not None and d.edited_arguments is not None
    return decision_text(request) if d and (d.input or d.selection or edited) else None


def session_permissions(request: ApprovalRequest, suggestions: Any) -> list[dict[str, Any]] | None:
    """For an approve-for-session, the one Claude Code `permission_suggestions` entry that
    allows exactly the chosen scope, turned into a session rule (`destination: session`); None
    when the approval was not for the session or no suggestion matches the scope (Claude Code
    then keeps asking locally, and the bot's grant answers)."""
    d = request.decision
    if d is None or not d.for_session or not isinstance(suggestions, list):
        return None
    tool = request.event.tool_name
    wanted: set[str | None]
    if d.scope == "tool":
        wanted = {None, ""}
    elif d.scope == "prefix":
        words = command_prefix(request.event.command)
        if words is None:
            return None
        text = " ".join(words)
        wanted = {f"{text}:*", f"{text} *"}
    else:
        command = request.event.command
        wanted = {command} if command else set()
    for suggestion in suggestions:
        if not isinstance(suggestion, dict) or suggestion.get("type") != "addRules":
            continue
        if suggestion.get("behavior", "allow") != "allow":
            continue
        rules = suggestion.get("rules")
        if not isinstance(rules, list) or len(rules) != 1 or not isinstance(rules[0], dict):
            continue
        rule = rules[0]
        if rule.get("toolName") == tool and rule.get("ruleContent") in wanted:
            return [
                {
                    "type": "addRules",
                    "rules": [dict(rule)],
                    "behavior": "allow",
                    "destination": "session",
                }
            ]
    return None


def output_for_request(
    dialect: Dialect,
    event: HookEvent,
    request: ApprovalRequest,
    suggestions: Any = None,
) -> dict[str, Any] | None:
    """The hook output for a request that is no longer pending. `suggestions`: the hook
    input's `permission_suggestions` (Claude Code PermissionRequest)."""
    text = decision_text(request)
    approved = request.status == "approved"
    edited = request.decision.edited_arguments if request.decision else None
    if approved and edited is not None and dialect != "claude-code":
        # This agent cannot run the edited call, and the original was not approved: a deny.
        refusal = f"{text}; this agent cannot run an edited call, so the original is denied"
        if event == "PreToolUse":
            return pre_tool_use_output("deny", refusal)
        return permission_request_output("deny", refusal)
    if event == "PreToolUse":
        if approved:
            if dialect == "codex":
                # Codex: no output is no objection (its own approval policy and sandbox then
                # apply); the reviewer's typed input or choice reaches it as a system message.
                note = _reviewer_note(request)
                return {"systemMessage": note} if note else None
            return pre_tool_use_output(
                "allow", text, context=_reviewer_note(request), updated_input=edited
            )
        return pre_tool_use_output("deny", text)
    if approved:
        updated = session_permissions(request, suggestions) if dialect == "claude-code" else None
        return permission_request_output(
            "allow",
            system_message=_reviewer_note(request),
            updated_permissions=updated,
            updated_input=edited,
        )
    return permission_request_output("deny", text)


def output_for_timeout(
    dialect: Dialect,
    event: HookEvent,
    on_timeout: OnTimeout,
    timeout: float,
    request_id: str | None = None,
    *,
    why: str | None = None,
) -> dict[str, Any] | None:
    """The hook output when no decision came within `timeout` seconds (`why`: another
    account of it, for the reason the agent reads)."""
    ref = f" (request {request_id})" if request_id else ""
    timeout = round(timeout, 1)
    said = why or f"No approval decision within {timeout:g} s{ref}"
    if on_timeout == "defer" and defers(dialect, event) and request_id:
        return pre_tool_use_output(
            "defer",
            f"Waiting for a reviewer in Slack{ref}; resume this session once they decide.",
        )
    if on_timeout == "ask":
        if dialect == "claude-code" and event == "PreToolUse":
            return pre_tool_use_output("ask", f"{said}; please decide here.")
        return None  # no decision: the agent's own approval flow takes over
    reason = f"{said}; denied by default."
    if event == "PreToolUse":
        return pre_tool_use_output("deny", reason)
    return permission_request_output("deny", reason)


def defers(dialect: Dialect, event: HookEvent) -> bool:
    """Whether the agent can take `defer`: only Claude Code's PreToolUse has it."""
    return dialect == "claude-code" and event == "PreToolUse"


def output_for_failure(event: HookEvent, message: str) -> dict[str, Any]:
    """Fail closed: the review could not happen, so the call does not run."""
    reason = f"Approval service error: {message}"
    if event == "PreToolUse":
        return pre_tool_use_output("deny", reason)
    return permission_request_output("deny", reason)


def for_dialect(dialect: Dialect, output: dict[str, Any] | None) -> dict[str, Any] | None:
    """The final touch per agent: Codex reasons without trailing punctuation."""
    if dialect != "codex" or output is None:
        return output
    specific = output.get("hookSpecificOutput")
    if isinstance(specific, dict):
        reason = specific.get("permissionDecisionReason")
        if isinstance(reason, str):
            specific["permissionDecisionReason"] = codex_reason(reason)
        decision = specific.get("decision")
        if isinstance(decision, dict) and isinstance(decision.get("message"), str):
            decision["message"] = codex_reason(decision["message"])
    return output


def failure_reason(error: BaseException) -> str:
    """What an agent is told when a review failed: the problem, never internals (addresses,
    tracebacks, exception types)."""
    if isinstance(error, BotUnreachable):
        return UNREACHABLE_REASON
    if isinstance(error, StoreUnavailable):
        return "the approval store is unavailable; try again"
    if isinstance(error, ApprovalError):
        return error.message
    if isinstance(error, TimeoutError):
        return "the approval service did not answer in time"
    return "internal error in the approval service (see the bot's log)"


# -- the runner -----------------------------------------------------------------------------


async def answer_hook(
    dialect: Dialect,
    payload: Any,
    submit: Submit,
    wait: Wait,
    *,
    timeout: float,  # noqa: ASYNC109 - a budget for submit + wait, each step told what is left
    on_timeout: OnTimeout = "deny",
    cancel: Cancel | None = None,
    cancel_call: CancelCall | None = None,
    report: Report | None = None,
) -> dict[str, Any] | None:
    """Review one hook call: submit it, wait, answer — all within `timeout` seconds (the
    hook's own timeout less a margin and what the agent's clock already ran: no step may
    outlast it). Returns the output JSON, or None for "print nothing". Input that is not hook
    JSON raises `InvalidRequest`; a call that cannot be reviewed and any failure to submit
    or wait deny (fail closed). A request nobody waits on any more is withdrawn, by id or by
    call id (docs/ARCHITECTURE.md, "Nothing left approvable that nobody waits on"). `report`
    (when given) is told every problem in one line of plain words."""
    tell: Report = report or (lambda line: None)
    if dialect not in DIALECTS:
        raise InvalidRequest(f"unknown hook dialect {dialect!r}; use one of {', '.join(DIALECTS)}")
    if on_timeout not in ON_TIMEOUT:
        on_timeout = "deny"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    # Withdrawing has to fit in the budget too: a share of it is kept back.
    reserve = withdraw_time(timeout) if cancel or cancel_call else 0.0
    named = payload.get("hook_event_name") if isinstance(payload, Mapping) else None
    try:
        hook = parse_hook_input(payload)
        if compares(hook.tool_name):  # a diff may compare two files: off the event loop
            event = await asyncio.to_thread(event_from, dialect, payload)
        else:
            event = event_from(dialect, payload)
        check_depth(event.arguments)
    except InvalidRequest as e:  # not reviewable: denied, nothing stored
        shape: HookEvent = "PermissionRequest" if named == "PermissionRequest" else "PreToolUse"
        log.info("hook input refused dialect=%s problem=%s", dialect, e.message)
        tell(f"{e.message}; denied")
        return output_for_failure(shape, e.message)
    hook_event = hook.hook_event_name
    if timeout < MIN_ASK_SECONDS:
        # Too little left to ask meaningfully: a submit now could land and be cut off before
        # its id comes back. Nothing is stored, nothing is posted.
        left = max(timeout, 0.0)
        log.info("hook out of time dialect=%s left=%.3f on_timeout=%s", dialect, left, on_timeout)
        tell(f"no time left to ask a reviewer ({left:.2f} s of the hook's budget); {on_timeout}")
        why = "No time left to ask a reviewer (the hook's timeout was all but spent)"
        return for_dialect(
            dialect, output_for_timeout(dialect, hook_event, on_timeout, timeout, why=why)
        )
    if event.call_id is None and cancel_call is not None:
        # No stable id to retry on (nothing to lose), but one to find the request by.
        event = event.model_copy(update={"call_id": f"hook:{uuid.uuid4().hex}"})
    request: ApprovalRequest | None = None
    submitted = False
    try:
        try:
            async with asyncio.timeout_at(deadline - reserve):
                request = await submit(event)
                submitted = True
                if request.is_pending:
                    remaining = deadline - reserve - loop.time()
                    if remaining <= 0:
                        raise ApprovalTimeout(f"no time left to wait for {request.id}")
                    request = await wait(request.id, remaining)
        except asyncio.CancelledError:
            # Nobody will read the answer; withdraw what may stand, within the fixed share.
            reason = "the hook was stopped before a decision; the call was not run"
            if not submitted:
                await _withdraw_call(dialect, event, cancel_call, reason, loop.time() + reserve)
            elif request is not None and request.is_pending and cancel is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(reserve):
                        await cancel(request.id, reason)
            raise
        except (TimeoutError, ApprovalTimeout):
            if not submitted:
                then = "the call was denied" if on_timeout != "ask" else f"{dialect} asked instead"
                request = await _withdraw_call(
                    dialect,
                    event,
                    cancel_call,
                    f"the submit was cut off at the hook's {round(timeout, 1):g} s; {then}",
                    deadline,
                    tell,
                )
            else:
                keep = on_timeout == "defer" and defers(dialect, hook_event)  # stays in Slack
                if request is not None and request.is_pending and not keep:
                    request = await _withdraw(
                        dialect, request, cancel, on_timeout, timeout, deadline, tell
                    )
            if request is None or request.status in ("pending", "cancelled"):
                # The id of a request we withdrew after a cut-off submit is not offered for a
                # defer: the agent is told no decision came, and the request is gone.
                request_id = request.id if request is not None and submitted else None
                log.info(
                    "hook timed out dialect=%s id=%s on_timeout=%s", dialect, request_id, on_timeout
                )
                tell(
                    f"no decision{f' on {request_id}' if request_id else ''} within "
                    f"{round(timeout, 1):g} s; {on_timeout}"
                )
                return for_dialect(
                    dialect,
                    output_for_timeout(dialect, hook_event, on_timeout, timeout, request_id),
                )
    except Exception as e:  # fail closed: never let an unreviewed call through
        landed = not isinstance(e, ApprovalError) or isinstance(e, StoreUnavailable)
        if not submitted and landed:
            # A submit whose answer was lost on the way back may still have landed; a refusal
            # (bad input, a call id already used for another call) stored nothing of ours.
            await _withdraw_call(
                dialect, event, cancel_call, "the submit failed; the call was denied", deadline
            )
        if isinstance(e, ApprovalError) and not isinstance(e, StoreUnavailable):
            log.info("hook review refused dialect=%s code=%s", dialect, e.code)
        else:
            log.exception("hook review failed dialect=%s tool=%s", dialect, hook.tool_name)
        # The agent reads `failure_reason` (no addresses); whoever runs the hook gets what
        # failed: an ApprovalError's message says it in plain words (the bot's address, its
        # refusal); anything else is named by its type only.
        detail = e.message if isinstance(e, ApprovalError) else failure_reason(e)
        tell(f"{detail}; denied")
        return for_dialect(dialect, output_for_failure(hook_event, failure_reason(e)))
    log.info("hook answered dialect=%s id=%s status=%s", dialect, request.id, request.status)
    suggestions = payload.get("permission_suggestions") if isinstance(payload, Mapping) else None
    return for_dialect(dialect, output_for_request(dialect, hook_event, request, suggestions))


async def _withdraw_call(
    dialect: Dialect,
    event: ApprovalEvent,
    cancel_call: CancelCall | None,
    reason: str,
    deadline: float,
    tell: Report | None = None,
) -> ApprovalRequest | None:
    """Withdraw whatever a cut-off submit of `event` made (giving up at `deadline`, loop
    time): the request as it stands afterwards, or None when there is none (or it could
    not be withdrawn: then its deadline, the end of the hook's budget, ends it)."""
    if cancel_call is None or event.call_id is None:
        return None
    try:
        async with asyncio.timeout_at(deadline):
            found = await cancel_call(event.call_id, reason)
    except Exception as e:
        log.warning("hook could not withdraw call error=%s", failure_reason(e))
        if tell is not None:
            why = e.message if isinstance(e, ApprovalError) else failure_reason(e)
            tell(
                "could not withdraw what the cut-off submit may have made (it expires at the "
                f"end of the hook's budget): {why}"
            )
        return None
    if found is not None:
        log.info("hook withdrew a cut-off submit dialect=%s id=%s", dialect, found.id)
    return found


async def _withdraw(
    dialect: Dialect,
    request: ApprovalRequest,
    cancel: Cancel | None,
    on_timeout: OnTimeout,
    waited: float,
    deadline: float,
    tell: Report,
) -> ApprovalRequest:
    """Cancel a request nobody decided in time (giving up at `deadline`, loop time); the
    request as it stands afterwards."""
    if cancel is None:
        return request
    then = "the call was denied" if on_timeout != "ask" else f"{dialect} asked its user instead"
    try:
        async with asyncio.timeout_at(deadline):
            return await cancel(request.id, f"no decision within {round(waited, 1):g} s; {then}")
    except Exception as e:
        log.warning("hook could not cancel id=%s error=%s", request.id, failure_reason(e))
        why = e.message if isinstance(e, ApprovalError) else failure_reason(e)
        tell(f"could not withdraw {request.id} (it stays pending until its deadline): {why}")
        return request
