"""Team review policy: routes, rules, and deciding what a policy says about one event.

Internal to approval-bot (not a stable API); agents import from `approvals`.

A `Policy` names routes (a channel, its reviewers, quorum, deadline and what happens then)
and rules (a `Match`, then `allow`, `deny` or `ask` on a route); `Policy.evaluate` folds every
matching rule (`merge_outcomes`: deny > ask > allow), and no match asks on the `default` route.
`approvals._internal.policy_file` reads a file. Pure: no Redis, no Slack, no environment. How
patterns and shell commands match: docs/ARCHITECTURE.md, "The policy".
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
)

from approvals._internal.merge import RuleOutcome, merge_outcomes
from approvals._internal.shell.matching import CommandMatch, rule_matches
from approvals._internal.shell.model import Analysis, RiskCode
from approvals._internal.shell.view import analysis_of, is_command_event
from approvals._internal.slack_ids import CHANNEL_ID, REVIEWER_ID
from approvals.models import (
    MAX_DEADLINE_SECONDS,
    MAX_TEXT,
    ApprovalConfig,
    ApprovalEvent,
    EventKind,
    RouteFloor,
    Sensitivity,
)
from approvals.webhooks import CallbackPolicy

Action = Literal["allow", "deny", "ask"]
OnTimeout = Literal["deny", "approve", "escalate"]

DEFAULT_ROUTE = "default"
#: The default route's channel when none is configured (no APPROVALS_DEFAULT_CHANNEL).
#: Requests routed there are not posted to Slack: the bot ends them with an error naming
#: the setting, or, with Slack off, they wait for a decision from the CLI or the API.
UNROUTED_CHANNEL = "C0UNROUTED"
MAX_QUORUM = 20
#: `callers: ["*"]`: any principal may name the route.
ANY_CALLER = "*"
#: A principal's name (`bot/http/principals.py` `NAME`: an API token's name).
_PRINCIPAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_LEVEL: dict[str, int] = {"low": 0, "pii": 1, "secret": 2}
_STRICTEST_FIRST: tuple[Sensitivity, ...] = ("secret", "pii", "low")
_FROZEN = ConfigDict(extra="forbid", frozen=True)


def _channel_id(value: str) -> str:
    if not CHANNEL_ID.fullmatch(value):
        raise ValueError(f"{value!r} is not a Slack channel id (C…, G… or D…, not a #name)")
    return value


def _reviewer_id(value: str) -> str:
    if not REVIEWER_ID.fullmatch(value):
        raise ValueError(f"{value!r} is not a Slack user id (U…, W…) or user-group id (S…)")
    return value


def _caller(value: str) -> str:
    if value != ANY_CALLER and not _PRINCIPAL.fullmatch(value):
        raise ValueError(f"{value!r} is not a principal name (an API token's name) or '*'")
    return value


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ValueError(f"invalid regex {pattern!r}: {e}") from e


def _regex(value: str) -> str:
    _compile(value)
    return value


def _name_pattern(pattern: str) -> re.Pattern[str]:
    """`/…/` is a regex searched in the name; anything else a glob over the whole name."""
    if len(pattern) > 1 and pattern.startswith("/") and pattern.endswith("/"):
        return _compile(pattern[1:-1])
    return re.compile(r"\A" + fnmatch.translate(pattern))


def _listify(value: Any) -> Any:
    """Let a single value stand for a one-entry list (`tool: Bash`)."""
    return [value] if isinstance(value, str) else value


ChannelId = Annotated[str, AfterValidator(_channel_id)]
ReviewerId = Annotated[str, AfterValidator(_reviewer_id)]
Caller = Annotated[str, AfterValidator(_caller)]
Regex = Annotated[str, AfterValidator(_regex)]
Names = Annotated[list[str] | None, BeforeValidator(_listify), Field(min_length=1)]


def argument_text(event: ApprovalEvent, name: str) -> str | None:
    """The text an argument pattern is matched against; None when the argument is missing.

    Strings as they are, lists of strings joined by spaces (`["rm", "-rf"]` →
    `rm -rf`), anything else as compact JSON. `command`, `path` and `cwd` fall
    back to the event's own fields when the arguments do not carry them.
    """
    if name in event.arguments:
        value = event.arguments[name]
    elif name in ("command", "path", "cwd"):
        value = getattr(event, name)
    else:
        return None
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return " ".join(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


class Match(BaseModel):
    """What a rule matches: every field given must match; any entry of a list may."""

    model_config = _FROZEN

    kind: Annotated[list[EventKind] | None, BeforeValidator(_listify), Field(min_length=1)] = None
    tool: Names = None
    agent: Names = None
    session: Names = None
    sensitivity: Annotated[
        list[Sensitivity] | None, BeforeValidator(_listify), Field(min_length=1)
    ] = None
    arguments: dict[str, Regex] | None = None
    #: The shell command, parsed (`approvals/_internal/shell/`): program, subcommand, flags in
    #: any spelling, read_only. Only events carrying a shell command match.
    command: CommandMatch | None = None
    #: Any of these risks was detected in the shell command (`risks_of`).
    risks: Annotated[list[RiskCode] | None, BeforeValidator(_listify), Field(min_length=1)] = None

    _names: dict[str, tuple[re.Pattern[str], ...]] = PrivateAttr(default_factory=dict)
    _arguments: dict[str, re.Pattern[str]] = PrivateAttr(default_factory=dict)

    @field_validator("tool", "agent", "session")
    @classmethod
    def _check_patterns(cls, value: list[str] | None) -> list[str] | None:
        for pattern in value or ():
            _name_pattern(pattern)
        return value

    def model_post_init(self, context: Any, /) -> None:
        self._names = {
            field: tuple(_name_pattern(p) for p in getattr(self, field) or ())
            for field in ("tool", "agent", "session")
        }
        self._arguments = {k: re.compile(v) for k, v in (self.arguments or {}).items()}

    @property
    def is_command_rule(self) -> bool:
        """Whether it matches on the parsed shell command (`command` or `risks`)."""
        return self.command is not None or self.risks is not None

    def matches(
        self,
        event: ApprovalEvent,
        sensitivity: Sensitivity = "low",
        action: Action = "ask",
        shell: Callable[[], Analysis] | None = None,
    ) -> bool:
        """Whether the event matches; `action` folds a command matcher over the simple
        commands (allow: every one; ask, deny: any), `shell` gives the event's parsed
        command (parsed here when not given)."""
        if self.kind is not None and event.kind not in self.kind:
            return False
        if self.sensitivity is not None and sensitivity not in self.sensitivity:
            return False
        for field, value in (
            ("tool", event.tool_name),
            ("agent", event.agent),
            ("session", event.session_id),
        ):
            patterns = self._names[field]
            if patterns and (value is None or not any(p.search(value) for p in patterns)):
                return False
        for name, pattern in self._arguments.items():
            text = argument_text(event, name)
            if text is None or not pattern.search(text):
                return False
        if self.is_command_rule:
            if not is_command_event(event):
                return False
            analysis = shell() if shell is not None else analysis_of(event)
            return rule_matches(action, self.command, self.risks, analysis)
        return True


class _Once:
    """An event's shell analysis, made when first asked for (`Match.matches`' `shell`)."""

    __slots__ = ("analysis", "event")

    def __init__(self, event: ApprovalEvent, analysis: Analysis | None = None) -> None:
        self.event = event
        self.analysis = analysis

    def __call__(self) -> Analysis:
        if self.analysis is None:
            self.analysis = analysis_of(self.event)
        return self.analysis


class Route(BaseModel):
    """Where and by whom a request is reviewed, and what its deadline does."""

    model_config = _FROZEN

    channel: ChannelId
    #: Slack user (U…/W…) and user-group (S…) ids allowed to decide.
    reviewers: list[ReviewerId] = Field(default_factory=list)
    #: Approvals needed; any deny denies.
    quorum: int = Field(default=1, ge=1, le=MAX_QUORUM)
    deadline_seconds: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_SECONDS)
    on_timeout: OnTimeout = "deny"
    escalate_to: str | None = None
    #: Escalate only while the request has been escalated fewer times than this.
    max_escalations: int = Field(default=3, ge=1, le=10)
    allow_for_session: bool = False
    #: Offer "approve every call of this tool for the session" (otherwise only this exact
    #: call, or a command prefix for shell tools).
    allow_tool_grants: bool = False
    #: Offer "Edit…" (approve with edited arguments) on kind `approval` requests whose agent
    #: can run an edited call (`approvals/_internal/edits.py`).
    allow_edits: bool = True
    #: Offer "Ask the agent…" on kind `approval` requests: a reviewer's question instead of a
    #: decision (`approvals/_internal/questions.py`).
    allow_questions: bool = True
    dm_reviewers: bool = False
    #: Remind reviewers who have not acted this long after the request was asked
    #: (`bot/slack/delivery/reminders.py`), then every `remind_every` seconds; `remind_via`: a DM
    # to each,
    #: or one reply in the message's thread.
    remind_after: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_SECONDS)
    remind_every: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_SECONDS)
    remind_via: Literal["dm", "thread"] = "dm"
    #: Principals (API token names; `*`: any) that may ask for this route by name (`route:`
    #: in a request). The policy's own choice still sets the floor: `Policy.evaluate`.
    callers: list[Caller] = Field(default_factory=list)


class Rule(BaseModel):
    """A named rule: when `match` matches, `allow`, `deny` (with a reason) or `ask` on a route."""

    model_config = _FROZEN

    name: str = Field(min_length=1, max_length=100)
    match: Match = Field(default_factory=Match)
    action: Action
    reason: str | None = Field(default=None, min_length=1, max_length=MAX_TEXT)
    #: `ask` only: the route to ask on (default: `default`).
    route: str | None = None
    #: `ask` only: raise the request's sensitivity (never lowers it).
    sensitivity: Sensitivity | None = None
    #: `ask` only: approvals needed, instead of the route's quorum.
    quorum: int | None = Field(default=None, ge=1, le=MAX_QUORUM)


class PrincipalLink(BaseModel):
    """A principal (an API token's name) tied to the person its agent acts for."""

    model_config = _FROZEN

    #: That person's Slack user id: they may not decide their own agent's requests.
    slack_user: Annotated[str, AfterValidator(_reviewer_id)]

    @field_validator("slack_user")
    @classmethod
    def _user_not_group(cls, value: str) -> str:
        if value.startswith("S"):
            raise ValueError(f"{value!r} is a user group; give the person's user id (U…, W…)")
        return value


class PolicyDefaults(BaseModel):
    """Values a route or request does not set itself."""

    model_config = _FROZEN

    deadline_seconds: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_SECONDS)
    grant_ttl_seconds: float = Field(default=8 * 3600, gt=0, le=MAX_DEADLINE_SECONDS)


class PolicyDecision(BaseModel):
    """What the policy says about one event."""

    model_config = ConfigDict(frozen=True)

    action: Action
    #: The winning rank's reasons joined by a blank line.
    reason: str | None = None
    #: Names of every rule that matched, in file order.
    matched: tuple[str, ...] = ()
    #: Names of the matched rules at the winning rank.
    winners: tuple[str, ...] = ()
    #: `ask` only: where to ask.
    route_name: str | None = None
    route: Route | None = None
    #: The caller's sensitivity, raised by the winning rules' overrides.
    sensitivity: Sensitivity = "low"
    quorum: int = 1
    #: `ask` only: the route's (or the policy default's) deadline, else the caller's.
    deadline_seconds: float | None = None
    #: `ask` only: what the route offers the reviewer (approve for session, whole-tool
    #: grants, edits); on a route the caller named, only what both routes offer.
    allow_for_session: bool = False
    allow_tool_grants: bool = False
    allow_edits: bool = True
    allow_questions: bool = True
    #: `ask` on a route the caller named instead of the policy's own: what the request keeps
    #: of the policy's route (`RouteFloor`).
    floor: RouteFloor | None = None


class TimeoutAction(BaseModel):
    """What happens when a request's deadline passes on a route."""

    model_config = ConfigDict(frozen=True)

    action: OnTimeout
    #: `escalate` only: the new route and its deadline.
    route_name: str | None = None
    route: Route | None = None
    deadline_seconds: float | None = None


class Policy(BaseModel):
    """Routes, rules, sensitivity routes and defaults.

    Build one with `load_policy`, `parse_policy` or `default_policy`
    (`approvals._internal.policy_file`):
    they also check that every route named exists, which
    `evaluate` relies on.
    """

    model_config = _FROZEN

    routes: dict[str, Route] = Field(default_factory=dict)
    rules: list[Rule] = Field(default_factory=list)
    #: Requests at (or above, if no stricter entry) this sensitivity ask on this route.
    sensitivity_routes: dict[Sensitivity, str] = Field(default_factory=dict)
    defaults: PolicyDefaults = Field(default_factory=PolicyDefaults)
    #: Where decision callbacks may go (`approvals/webhooks.py`); none by default.
    callbacks: CallbackPolicy = Field(default_factory=CallbackPolicy)
    #: API principals tied to the person they act for (`{ci-agent: {slack_user: U…}}`).
    principals: dict[str, PrincipalLink] = Field(default_factory=dict)

    def deadline_for(self, route: Route) -> float | None:
        """The route's deadline, else the policy default (None: no policy deadline)."""
        if route.deadline_seconds is not None:
            return route.deadline_seconds
        return self.defaults.deadline_seconds

    def slack_user_of(self, principal: str | None) -> str | None:
        """The Slack user a principal acts for (who may then not decide its requests)."""
        link = self.principals.get(principal) if principal else None
        return link.slack_user if link else None

    def may_name(self, route_name: str, principal: str | None) -> bool:
        """Whether a caller may ask for `route_name` by name: a principal only a route whose
        `callers` lists it (or `*`); a trusted in-process caller (no principal: it holds the
        store's own credentials) any route."""
        route = self.routes.get(route_name)
        if route is None:
            return False
        return principal is None or ANY_CALLER in route.callers or principal in route.callers

    def evaluate(
        self,
        event: ApprovalEvent,
        config: ApprovalConfig | None = None,
        *,
        requested_route: str | None = None,
        shell: Analysis | None = None,
    ) -> PolicyDecision:
        """Fold every matching rule into one decision; no match → ask on the default route.
        `shell` is the event's shell command parsed already (`draft_request` parses it once
        for the policy and the request's risks); else it is parsed if a rule asks.

        `requested_route` is a route the caller named (who may name which is `may_name`,
        checked by the caller of this). It is where the request is asked — channel,
        reviewers, escalation chain — only when no rule names a route and no sensitivity
        route applies; then the policy's own route still sets the floor, field by field:
        the larger quorum; a timeout that approves only when both routes' do, and then the
        later of their deadlines; approve-for-session, whole-tool grants and edits only
        where both offer them (`PolicyDecision.floor` keeps what an escalation or a deadline
        needs of it). A caller can make a request stricter by naming a route, never laxer.
        """
        config = config or ApprovalConfig()
        once = _Once(event, shell)  # the command is parsed once, if a rule asks
        matched = [
            r for r in self.rules if r.match.matches(event, config.sensitivity, r.action, once)
        ]
        merged = merge_outcomes(RuleOutcome(decision=r.action, reason=_reason(r)) for r in matched)
        action: Action = "ask" if merged.decision == "none" else merged.decision
        winners = [r for r in matched if r.action == action]
        levels = [config.sensitivity, *(r.sensitivity for r in winners if r.sensitivity)]
        sensitivity = max(levels, key=_LEVEL.__getitem__)
        decision = PolicyDecision(
            action=action,
            reason=merged.reason,
            sensitivity=sensitivity,
            matched=tuple(r.name for r in matched),
            winners=tuple(r.name for r in winners),
        )
        if action != "ask":
            return decision
        best = max(winners, key=self._rule_quorum, default=None)  # first of the strictest
        named = best.route if best else None
        route_name = named or DEFAULT_ROUTE
        quorum = self._rule_quorum(best) if best and named else self._route_quorum(route_name)
        if best and not named and best.quorum:
            quorum = best.quorum
        strict_name = self._sensitivity_route(sensitivity)
        if strict_name is not None:
            route_name = strict_name
            quorum = max(quorum, self._route_quorum(strict_name))
        route = self.routes.get(route_name)  # None only in an unchecked Policy()
        deadline = self.deadline_for(route) if route else self.defaults.deadline_seconds
        update: dict[str, Any] = {
            "route_name": route_name,
            "route": route,
            "quorum": quorum,
            "deadline_seconds": deadline if deadline is not None else config.deadline_seconds,
            "allow_for_session": bool(route and route.allow_for_session),
            "allow_tool_grants": bool(route and route.allow_tool_grants),
            "allow_edits": route.allow_edits if route else True,
            "allow_questions": route.allow_questions if route else True,
        }
        chosen = self.routes.get(requested_route) if requested_route else None
        if (
            chosen is not None
            and route is not None
            and requested_route != route_name
            and named is None
            and strict_name is None
        ):
            update |= self._floored(route_name, route, quorum, requested_route, chosen)
            if update["deadline_seconds"] is None:
                update["deadline_seconds"] = config.deadline_seconds
        return decision.model_copy(update=update)

    def _floored(
        self, own_name: str, own: Route, quorum: int, name: str | None, chosen: Route
    ) -> dict[str, Any]:
        """The decision's fields for asking on `chosen` (the caller's route) with the policy's
        own route `own` (and its `quorum`) as the floor."""
        approves = own.on_timeout == "approve" and chosen.on_timeout == "approve"
        own_deadline, deadline = self.deadline_for(own), self.deadline_for(chosen)
        if approves:  # approved on timeout no sooner than the policy's own route would
            deadline = max((d for d in (own_deadline, deadline) if d is not None), default=None)
        elif deadline is None:
            deadline = own_deadline
        floor = RouteFloor(route=own_name, quorum=quorum, approve_on_timeout=approves)
        return {
            "route_name": name,
            "route": chosen,
            "quorum": max(quorum, chosen.quorum),
            "deadline_seconds": deadline,
            "allow_for_session": own.allow_for_session and chosen.allow_for_session,
            "allow_tool_grants": own.allow_tool_grants and chosen.allow_tool_grants,
            "allow_edits": own.allow_edits and chosen.allow_edits,
            "allow_questions": own.allow_questions and chosen.allow_questions,
            "floor": floor,
        }

    def on_timeout(self, route_name: str, escalations: int = 0) -> TimeoutAction:
        """What a request on `route_name`, escalated `escalations` times so far, does on timeout.

        Escalation stops (deny) once `max_escalations` is reached; a route no
        longer in the policy (removed by a reload) denies.
        """
        route = self.routes.get(route_name)
        if route is None:
            return TimeoutAction(action="deny")
        if route.on_timeout == "escalate" and route.escalate_to in self.routes:
            if escalations < route.max_escalations:
                target = self.routes[route.escalate_to]
                return TimeoutAction(
                    action="escalate",
                    route_name=route.escalate_to,
                    route=target,
                    deadline_seconds=self.deadline_for(target),
                )
            return TimeoutAction(action="deny")
        return TimeoutAction(action="approve" if route.on_timeout == "approve" else "deny")

    def _rule_quorum(self, rule: Rule) -> int:
        return rule.quorum or self._route_quorum(rule.route or DEFAULT_ROUTE)

    def _route_quorum(self, name: str) -> int:
        route = self.routes.get(name)
        return route.quorum if route else 1

    def _sensitivity_route(self, sensitivity: Sensitivity) -> str | None:
        for level in _STRICTEST_FIRST:
            if _LEVEL[level] <= _LEVEL[sensitivity] and level in self.sensitivity_routes:
                return self.sensitivity_routes[level]
        return None

    def escalates_to(self, name: str) -> str | None:
        """The route `name` escalates to at its deadline, if it does and that route exists."""
        route = self.routes.get(name)
        if route and route.on_timeout == "escalate" and route.escalate_to in self.routes:
            return route.escalate_to
        return None


def _reason(rule: Rule) -> str | None:
    if rule.reason is None and rule.action == "deny":
        return f"denied by policy rule {rule.name!r}"
    return rule.reason
