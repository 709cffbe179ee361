"""The approvals domain models: configs, reviewed events, requests, decisions.

Everything stored in Redis or sent over HTTP is one of these pydantic models,
serialised with `model_dump_json` and read back with `model_validate_json`.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from approvals.errors import InvalidRequest, PayloadTooLarge
from approvals.webhooks import Callback

#: A request with no deadline of its own expires after this long.
DEFAULT_DEADLINE_SECONDS = 24 * 3600

Kind = Literal["approval", "choice", "input"]
Sensitivity = Literal["low", "pii", "secret"]
EventKind = Literal["tool", "command", "file", "permissions"]
#: `asked`: a reviewer asked the agent a question instead of deciding (a deny-kind end:
#: the call does not run; the agent answers in its retry, `approvals/_internal/questions.py`).
Status = Literal["pending", "approved", "denied", "expired", "cancelled", "error", "asked"]
Outcome = Literal["approve", "deny", "error", "asked"]
#: What an approve-for-session grant allows (`approvals/_internal/grant_scopes.py`).
GrantScope = Literal["call", "prefix", "tool"]

TERMINAL_STATUSES: frozenset[str] = frozenset(
    {"approved", "denied", "expired", "cancelled", "error", "asked"}
)

#: The largest serialised event (tool arguments included) the store accepts: 2 MiB, so a
#: 1 MiB file write (escaped as JSON) is reviewed, not refused. Slack shows it truncated.
MAX_EVENT_BYTES = 2 * 1024 * 1024
#: Longest free text a reviewer or caller may attach (reason, input, prompt).
MAX_TEXT = 3000
#: Slack shows at most this many characters on a button.
MAX_OPTION_LEN = 75
MAX_OPTIONS = 100
#: Upper bound on a request's deadline: one week.
MAX_DEADLINE_SECONDS = 7 * 24 * 3600
#: A request keeps at most this many risk hints per code (the rest are counted in one more
#: line of that code: `approvals/_internal/risk_hints.py`).
MAX_RISKS_PER_CODE = 5
#: The longest risk hint text kept.
MAX_RISK_TEXT = 300
#: The longest question a reviewer may ask the agent ("Ask the agent…").
MAX_QUESTION = 2000
#: The longest agent's reason kept with a request (the text before the tool call; its end).
MAX_REASON = 2000
#: The longest user's request kept with a request (the latest prompt of the session; its start).
MAX_USER_REQUEST = 2000
#: At most this many files' changes are kept with a request (the rest are counted only).
MAX_FILE_CHANGES = 20
#: The unified diff text kept per request, all files together (whole lines; past it, the
#: lines left out are counted): what the Details modal can show, 100 blocks of 3,000.
MAX_DIFF_TEXT = 200_000

_STRICT = ConfigDict(extra="forbid", str_strip_whitespace=False)


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    """A request id: short, URL-safe, unguessable (it is a capability in links)."""
    return "apr_" + secrets.token_urlsafe(12)


class ApprovalConfig(BaseModel):
    """How a gated call is reviewed (docs/ARCHITECTURE.md, "In-process review")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind = "approval"
    sensitivity: Sensitivity = "low"
    deadline_seconds: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_SECONDS)
    prompt: str | None = Field(default=None, min_length=1, max_length=MAX_TEXT)
    options: tuple[str, ...] | None = None
    allow_for_session: bool = False
    #: With `allow_for_session`: may the reviewer grant every call of the tool? Set from the
    #: route (`allow_tool_grants`), never by a caller.
    allow_tool_grants: bool = False
    #: May a reviewer approve with edited arguments? Set from the route (`allow_edits`),
    #: never by a caller.
    allow_edits: bool = False
    #: May a reviewer ask the agent a question instead of deciding ("Ask the agent…", on
    #: kind `approval`)? Set from the route (`allow_questions`), never by a caller.
    allow_questions: bool = False

    @field_validator("options")
    @classmethod
    def _check_options(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        if not 1 <= len(value) <= MAX_OPTIONS:
            raise ValueError(f"options must hold 1 to {MAX_OPTIONS} entries")
        for option in value:
            if not option.strip() or len(option) > MAX_OPTION_LEN:
                raise ValueError(f"each option must be 1 to {MAX_OPTION_LEN} characters")
        if len(set(value)) != len(value):
            raise ValueError("options must be unique")
        return value

    @model_validator(mode="after")
    def _options_match_kind(self) -> ApprovalConfig:
        if self.kind == "choice" and not self.options:
            raise ValueError("kind 'choice' needs a non-empty 'options' list")
        if self.kind != "choice" and self.options:
            raise ValueError(f"'options' only applies to kind 'choice', not {self.kind!r}")
        return self


def normalize_config(value: bool | ApprovalConfig | dict[str, Any] | None) -> ApprovalConfig | None:
    """`True` → the default config; a config (or its dict form) as is; `False`/`None` → no gate."""
    if value is None or value is False:
        return None
    if value is True:
        return ApprovalConfig()
    if isinstance(value, ApprovalConfig):
        return value
    if isinstance(value, dict):
        try:
            return ApprovalConfig.model_validate(value)
        except ValidationError as e:
            raise InvalidRequest(f"invalid approval config: {e}", details=e.errors()) from e
    raise InvalidRequest(
        f"require_approval takes True, False, None or an ApprovalConfig, not {type(value).__name__}"
    )


FileAction = Literal["edit", "write", "create", "delete", "notebook", "patch", "move"]
#: What a file's diff is made against (`FileChange.basis`).
DiffBasis = Literal["file", "call", "patch"]


class FileChange(BaseModel):
    """What a call does to one file, as reviewers are shown it
    (`approvals/_internal/file_changes.py`): a unified diff (hunks of whole lines, no
    `---`/`+++` header), its `added` and `removed` line counts,
    or a one-line `summary` when no line diff is shown (binary, too large, a deletion)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(max_length=4096)
    action: FileAction = "edit"
    diff: str = Field(default="", max_length=MAX_DIFF_TEXT)
    added: int = Field(default=0, ge=0)
    removed: int = Field(default=0, ge=0)
    #: Diff lines left out of `diff` (it is kept to whole lines within `MAX_DIFF_TEXT`).
    omitted: int = Field(default=0, ge=0)
    summary: str | None = Field(default=None, max_length=500)
    #: What the diff was made against: `file` the file as the agent's command hook read it
    #: (real line numbers), `call` the call's arguments alone (line numbers count from the
    #: edit), `patch` a diff or patch the call carries.
    basis: DiffBasis = "call"


class CallContext(BaseModel):
    """Why the agent makes a call and what it changes: shown to reviewers, never part of what a
    decision applies to (`ApprovalRequest.fingerprint`): a retried call with a reworded reason
    is the same call."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The agent's own words before the call (the command hook reads them from the
    #: session's transcript; an integration may send its own).
    reason: str | None = Field(default=None, max_length=MAX_REASON)
    #: The user's latest request in the session.
    user_request: str | None = Field(default=None, max_length=MAX_USER_REQUEST)
    files: tuple[FileChange, ...] = Field(default=(), max_length=MAX_FILE_CHANGES)
    #: Files the call changes beyond `MAX_FILE_CHANGES` (counted, not kept).
    more_files: int = Field(default=0, ge=0)

    @property
    def empty(self) -> bool:
        return not (self.reason or self.user_request or self.files)


def clip_reason(text: str | None, limit: int = MAX_REASON) -> str | None:
    """An agent's reason as kept: stripped, its end within `limit` characters (the words right
    before the call matter most), None when empty. A cut never leaves part of a word (a token
    cut in two is no longer recognisable as one, and masking could not hide it) nor the body
    of a private key whose header it cut off."""
    text = (text or "").strip()
    if not text:
        return None
    if len(text) <= limit:
        return text
    cut = len(text) - (limit - 1)
    head, tail = text[:cut], text[cut:]
    opened = head.rfind("-----BEGIN")
    if opened != -1 and head.find("-----END", opened) == -1:
        # The cut is inside a key: leave out the rest of it, through its END line.
        end = tail.find("-----END")
        line_end = tail.find("\n", end) if end != -1 else -1
        tail = tail[line_end:] if line_end != -1 else ""
    else:
        space = next((i for i, ch in enumerate(tail) if ch.isspace()), None)
        tail = tail[space:] if space is not None else ""
    # A space after the mark: the kept text starts a word, as it did in the whole text (a
    # masking rule that wants a boundary before a key or a URL still finds one).
    tail = tail.lstrip()
    return "… " + tail if tail else "…"


def clip_request(text: str | None, limit: int = MAX_USER_REQUEST) -> str | None:
    """A user's request as kept: stripped, its start within `limit` characters, None when
    empty; cut between words (see `clip_reason`)."""
    text = (text or "").strip()
    if not text:
        return None
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = max((i for i, ch in enumerate(head) if ch.isspace()), default=None)
    return (head[:space] if space is not None else "").rstrip() + "…"


class ApprovalEvent(BaseModel):
    """What an agent is about to do: a tool call, a command, a file write or a permission ask."""

    model_config = _STRICT

    kind: EventKind = "tool"
    tool_name: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)
    call_id: str | None = Field(default=None, min_length=1, max_length=200)
    session_id: str | None = Field(default=None, max_length=200)
    agent: str | None = Field(default=None, max_length=200)
    cwd: str | None = Field(default=None, max_length=4096)
    command: str | None = Field(default=None, max_length=MAX_EVENT_BYTES)
    path: str | None = Field(default=None, max_length=4096)
    permissions: dict[str, Any] | None = None
    #: A JSON Schema the arguments must satisfy; a reviewer's edit is checked against it.
    arguments_schema: dict[str, Any] | None = None
    #: Why the agent makes the call and the changes it makes to files: shown to reviewers,
    #: never part of the fingerprint.
    context: CallContext | None = None

    @field_validator("arguments", mode="before")
    @classmethod
    def _arguments_object(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"arguments must be a JSON object, not {type(value).__name__}")
        return value


#: `json.dumps(value, default=str, ensure_ascii=False)` with its encoder made once (`dumps`
#: makes one per call when given options: most of a short value's cost).
_VALUE_JSON = json.JSONEncoder(default=str, ensure_ascii=False).encode
#: A request's fingerprint text (made once: `json.dumps` with options builds one per call).
_CANONICAL_JSON = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str
).encode


def default_prompt(tool_name: str, arguments: dict[str, Any]) -> str:
    """`Approve <tool>(<args>)?` rendered from the parsed arguments."""
    args = ", ".join(f"{k}={_VALUE_JSON(v)}" for k, v in arguments.items())
    prompt = f"Approve {tool_name}({args})?"
    if len(prompt) > MAX_TEXT:
        prompt = prompt[: MAX_TEXT - 5] + "…)?"
    return prompt


class Decision(BaseModel):
    """How a request ended: approve (with input / selection / for_session), deny, error, or
    asked (a reviewer's `question` to the agent: never an approval)."""

    model_config = _STRICT

    outcome: Outcome
    reason: str | None = Field(default=None, max_length=MAX_TEXT)
    input: str | None = Field(default=None, max_length=MAX_TEXT)
    selection: str | None = Field(default=None, max_length=MAX_OPTION_LEN)
    for_session: bool = False
    #: With `for_session`: the scope of the grant the reviewer chose.
    scope: GrantScope | None = None
    decided_by: str | None = Field(default=None, max_length=200)
    decided_at: datetime = Field(default_factory=utcnow)
    via: str = Field(default="api", max_length=50)
    #: An approval of edited arguments: exactly what the agent is to run instead.
    edited_arguments: dict[str, Any] | None = None
    #: Who edited them (may differ from `decided_by` on a quorum route).
    edited_by: str | None = Field(default=None, max_length=200)
    #: With `edited_arguments`, set by `require_approval` for the function it runs: the
    #: arguments of the call as the agent made it (never stored).
    original_arguments: dict[str, Any] | None = None
    #: Outcome `asked`: what the reviewer asks the agent (it answers in its retry).
    question: str | None = Field(default=None, max_length=MAX_QUESTION)

    @classmethod
    def approve(
        cls,
        *,
        by: str | None = None,
        via: str = "api",
        input: str | None = None,
        selection: str | None = None,
        for_session: bool = False,
        scope: GrantScope | None = None,
    ) -> Decision:
        return cls(
            outcome="approve",
            decided_by=by,
            via=via,
            input=input,
            selection=selection,
            for_session=for_session,
            scope=(scope or "call") if for_session else None,
        )

    @classmethod
    def deny(
        cls, reason: str | None = None, *, by: str | None = None, via: str = "api"
    ) -> Decision:
        return cls(outcome="deny", reason=reason, decided_by=by, via=via)

    @classmethod
    def error(cls, reason: str, *, by: str | None = None, via: str = "system") -> Decision:
        return cls(outcome="error", reason=reason[:MAX_TEXT], decided_by=by, via=via)

    @classmethod
    def ask(cls, question: str, *, by: str | None = None, via: str = "slack") -> Decision:
        """A reviewer's question to the agent instead of a decision (status `asked`)."""
        return cls(outcome="asked", question=question, decided_by=by, via=via)

    @property
    def approves(self) -> bool:
        """Whether the call may run: only an explicit `approve` (anything else denies)."""
        return self.outcome == "approve"


class Vote(BaseModel):
    """One reviewer's vote towards a quorum."""

    model_config = ConfigDict(**_STRICT, json_schema_serialization_defaults_required=True)

    user: str
    outcome: Literal["approve", "deny"]
    at: datetime = Field(default_factory=utcnow)
    reason: str | None = None
    #: An approval for the session: the grant scope this reviewer chose (a grant is given
    #: only when a quorum of the approving votes chose one: the narrowest chosen).
    scope: GrantScope | None = None


class Proposal(BaseModel):
    """A reviewer's edit of a request's arguments: what the votes now approve."""

    model_config = _STRICT

    arguments: dict[str, Any]
    by: str = Field(max_length=200)
    at: datetime = Field(default_factory=utcnow)
    note: str | None = Field(default=None, max_length=MAX_TEXT)
    #: Which version the votes are for: a hash of the request's fingerprint and `arguments`.
    version: str


class SlackMessage(BaseModel):
    """Where a request's Slack message was posted."""

    model_config = _STRICT

    channel: str
    ts: str


class RouteFloor(BaseModel):
    """What a request asked on a route its caller named keeps of the route the policy itself
    chose (`approvals/_internal/policy.py` `Policy.evaluate`): the caller's route may make
    the request stricter, never laxer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The route the policy would have asked on.
    route: str = Field(max_length=100)
    #: The fewest approvals any route the request moves to may ask for.
    quorum: int = Field(default=1, ge=1, le=20)
    #: Whether a deadline may approve it: only when both routes approve on timeout.
    approve_on_timeout: bool = False


class RiskHint(BaseModel):
    """One risk a call was found to carry, as reviewers and the agent see it: a stable `code`
    (policy rules match on it: `risks: [code, …]`) and one line of `text` naming what it
    touches (`recursive_delete`: "rm -r of build"). Found once, when the request is made
    (`approvals/_internal/risk_hints.py`): the shell command's risks
    (`approvals/_internal/shell/risks.py`) and the file writes' (`file_risks.py`)."""

    # Read leniently: a newer bot may add fields (the approval object carries these).
    model_config = ConfigDict(extra="ignore", frozen=True)

    code: str = Field(max_length=200)
    #: At most `MAX_RISK_TEXT` characters as made here; read up to 2,000 (a newer bot's).
    text: str = Field(max_length=2000)


class Question(BaseModel):
    """The question a retried call answers: a reviewer asked it on an earlier request of the
    same caller, session and tool (`approvals/_internal/questions.py`). Stored on the retry
    (`ApprovalRequest.answers`), taken from the link the question left (`Keys.question`)."""

    model_config = _STRICT

    #: The request the reviewer asked on (it ended `asked`).
    request_id: str = Field(max_length=100)
    question: str = Field(max_length=MAX_QUESTION)
    asked_by: str | None = Field(default=None, max_length=200)
    asked_at: datetime
    #: The Slack thread to post the retry in: the root message of the asked request's thread
    #: (None: it had no message of its own, e.g. a digest row).
    thread: SlackMessage | None = None


class Answered(BaseModel):
    """On an asked request: the retry that answered its question, once posted in its thread."""

    model_config = _STRICT

    request_id: str = Field(max_length=100)
    in_thread: bool = True


class ApprovalRequest(BaseModel):
    """A gated call awaiting (or past) review, as stored in Redis."""

    model_config = _STRICT

    id: str = Field(default_factory=new_id)
    event: ApprovalEvent
    config: ApprovalConfig = Field(default_factory=ApprovalConfig)
    prompt: str = ""
    route: str = "default"
    channel: str | None = None
    reviewers: tuple[str, ...] = ()
    requester: str | None = None
    quorum: int = Field(default=1, ge=1, le=20)
    created_at: datetime = Field(default_factory=utcnow)
    deadline_at: datetime | None = None
    status: Status = "pending"
    decision: Decision | None = None
    votes: tuple[Vote, ...] = ()
    escalations: int = 0
    message: SlackMessage | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    #: Where to POST the signed approval object once decided (`approvals/webhooks.py`).
    callback: Callback | None = None
    #: Who asked: the API token's principal (None: a trusted in-process or Redis caller).
    principal: str | None = Field(default=None, max_length=64)
    #: The route the caller asked for (a policy route name), if any.
    requested_route: str | None = Field(default=None, max_length=100)
    #: Set when the request is asked on the route its caller named instead of the policy's.
    floor: RouteFloor | None = None
    #: A reviewer's edit awaiting the quorum's votes (`approvals/_internal/edits.py`).
    proposal: Proposal | None = None
    #: A Slack user id the caller asked to be told the outcome (a DM); never an actor.
    notify: str | None = Field(default=None, pattern=r"^[UW][A-Z0-9]{2,20}$")
    #: The call's risk hints, found when the request was made (`draft_request`); what every
    #: surface shows, and the approval object's `risks`. Empty for calls without a shell
    #: command or a file write, and for requests stored before risks were kept.
    risks: tuple[RiskHint, ...] = ()
    #: A retry that answers a reviewer's question (its reason is the answer): the question,
    #: and where to post it (in the asked request's thread). Set by `create.lua`.
    answers: Question | None = None
    #: An asked request whose question a retry answered in its thread (`answered.lua`).
    answered: Answered | None = None

    @model_validator(mode="after")
    def _fill_prompt(self) -> ApprovalRequest:
        if not self.prompt:
            self.prompt = self.config.prompt or default_prompt(
                self.event.tool_name, self.event.arguments
            )
        return self

    @property
    def is_pending(self) -> bool:
        return self.status == "pending"

    @property
    def fingerprint(self) -> str:
        """What a decision on this request applies to, as a hash: the tool, its canonical
        arguments, the event kind and every other field the reviewer is shown, the session,
        the principal, and what kind of answer is asked for. A reused `call_id` must match it.
        The event's `context` (the agent's reason, the user's request, the diffs drawn from
        the arguments) is not in it: it explains the call, it does not change what is done."""
        e, c = self.event, self.config
        content = {
            "tool": e.tool_name,
            "arguments": e.arguments,
            "kind": e.kind,
            "command": e.command,
            "path": e.path,
            "cwd": e.cwd,
            "permissions": e.permissions,
            "session": e.session_id,
            "agent": e.agent,
            "principal": self.principal,
            "route": self.requested_route,
            "answer": [c.kind, list(c.options or ()), c.prompt],
        }
        return hashlib.sha256(_CANONICAL_JSON(content).encode()).hexdigest()


def check_event_size(event: ApprovalEvent) -> int:
    """Raise `PayloadTooLarge` when the serialised event passes `MAX_EVENT_BYTES`."""
    size = len(event.model_dump_json().encode())
    if size > MAX_EVENT_BYTES:
        raise PayloadTooLarge(
            f"request is {size} bytes; the limit is {MAX_EVENT_BYTES} bytes (2 MiB)"
        )
    return size


@dataclass(frozen=True)
class GateRequest:
    """What a handler reviews: the tool, its config, its canonical arguments and the prompt."""

    tool_name: str
    config: ApprovalConfig
    arguments: dict[str, Any]
    call_id: str
    prompt: str
    #: Why the call is made, for reviewers (`require_approval(reason=)`).
    reason: str | None = None

    def event(self) -> ApprovalEvent:
        """This call as the `ApprovalEvent` a hook reviews."""
        reason = clip_reason(self.reason)
        return ApprovalEvent(
            kind="tool",
            tool_name=self.tool_name,
            arguments=self.arguments,
            call_id=self.call_id,
            context=CallContext(reason=reason) if reason else None,
        )
