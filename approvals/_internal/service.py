"""The approval service: submit (policy, grants, routes), decide (who may, quorum), expire.

Internal to approval-bot (not a stable API); agents import from `approvals`.

Every entry point — Slack clicks, the HTTP API, the CLI, the Python client —
goes through one `ApprovalService`, so the rules of who may decide and how a
request is routed live in one place.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from approvals._internal.edits import (
    check_arguments_schema,
    check_edit,
    current_version,
    version_of,
)
from approvals._internal.file_changes import compares, with_changes
from approvals._internal.grant_scopes import (
    Grant,
    ScopeOption,
    approved_call,
    call_hash,
    offered,
)
from approvals._internal.policy import Policy, PolicyDecision
from approvals._internal.questions import link_for, link_seconds
from approvals._internal.questions import offered as questions_offered
from approvals._internal.risk_hints import request_risks, shell_analysis
from approvals._internal.slack_ids import is_user_group
from approvals._internal.store.grants import GrantStore
from approvals._internal.store.store import ApprovalStore, CreateResult, VoteResult
from approvals.errors import InvalidRequest, NotAllowed
from approvals.models import (
    MAX_QUESTION,
    MAX_TEXT,
    ApprovalConfig,
    ApprovalEvent,
    ApprovalRequest,
    Decision,
    GrantScope,
    Proposal,
)
from approvals.webhooks import Callback

log = logging.getLogger(__name__)

#: Resolves a Slack user-group id to its members' user ids.
MembershipResolver = Callable[[str], Awaitable[frozenset[str]]]

#: Decisions from these channels are break-glass: an operator with access to the
#: bot's token or Redis decides outright (no reviewer list, no quorum).
TRUSTED_VIA = frozenset({"cli"})
#: The longest `Decision.decided_by`.
MAX_ACTOR = 200


@dataclass(frozen=True)
class Actor:
    """Who is deciding: a Slack user id (`U…`), or an operator name with `via`."""

    id: str
    via: str = "slack"


@dataclass(frozen=True)
class ExpiryResult:
    request_id: str
    action: Literal["expired", "approved", "escalated", "skipped"]
    request: ApprovalRequest | None = None


def draft_request(
    policy: Policy,
    event: ApprovalEvent,
    config: ApprovalConfig | None = None,
    *,
    now: datetime,
    principal: str | None = None,
    route: str | None = None,
    requester: str | None = None,
    metadata: dict[str, Any] | None = None,
    callback: Callback | None = None,
    notify: str | None = None,
) -> tuple[ApprovalRequest, PolicyDecision]:
    """The request `ApprovalService.create` stores for `event`, as the policy routes it (its
    route, channel, reviewers, quorum, deadline and what the route allows) with its risk hints
    (`approvals/_internal/risk_hints.py`), and the policy's verdict; nothing is stored
    (`approval-bot preview` draws it as the bot would post it). `InvalidRequest` for a route
    the policy does not have or `principal` may not name, a callback it does not allow, or an
    unbounded `arguments_schema`."""
    if callback is not None:
        policy.callbacks.check(callback)
    # Checked here, once, so that checking a reviewer's edit against it is bounded.
    check_arguments_schema(event.arguments_schema)
    config = config or ApprovalConfig()
    if route is not None and route not in policy.routes:
        known = ", ".join(sorted(policy.routes)) or "none"
        raise InvalidRequest(
            f"unknown route {route[:100]!r}; the policy's routes are: {known[:1000]}",
            details=[{"loc": ["route"], "msg": "unknown route", "type": "value_error"}],
        )
    # The shell command is parsed once, for the policy's rules and the request's risks.
    shell = shell_analysis(event)
    decision = policy.evaluate(event, config, requested_route=route, shell=shell)
    if route is not None and not policy.may_name(route, principal):
        if route != policy.evaluate(event, config, shell=shell).route_name:
            raise InvalidRequest(
                f"principal {principal!r} may not name route {route!r}: the policy's "
                f"routes.{route}.callers does not list it",
                details=[{"loc": ["route"], "msg": "route not allowed", "type": "value_error"}],
            )
    policy_route = decision.route
    # What the policy says over what the caller asked (one copy, only if anything differs).
    changes: dict[str, Any] = {}
    if decision.sensitivity != config.sensitivity:
        changes["sensitivity"] = decision.sensitivity
    if decision.allow_for_session and not config.allow_for_session:
        changes["allow_for_session"] = True
    tool_grants = decision.allow_tool_grants
    if config.allow_tool_grants != tool_grants:  # the route's word, never the caller's
        changes["allow_tool_grants"] = tool_grants
    edits = decision.allow_edits
    if config.allow_edits != edits:  # the route's word, never the caller's
        changes["allow_edits"] = edits
    questions = decision.allow_questions
    if config.allow_questions != questions:  # the route's word, never the caller's
        changes["allow_questions"] = questions
    effective = config.model_copy(update=changes) if changes else config
    # The route's deadline wins over the caller's: an agent must not shorten it to reach
    # an `on_timeout: approve` sooner.
    deadline = decision.deadline_seconds or config.deadline_seconds
    request = ApprovalRequest(
        event=event,
        config=effective,
        route=decision.route_name or "default",
        channel=policy_route.channel if policy_route else None,
        reviewers=tuple(policy_route.reviewers) if policy_route else (),
        quorum=decision.quorum if decision.action == "ask" else 1,
        requester=policy.slack_user_of(principal) or requester,
        principal=principal,
        requested_route=route,
        floor=decision.floor,
        metadata=metadata or {},
        callback=callback,
        notify=notify,
        deadline_at=(now + timedelta(seconds=deadline)) if deadline else None,
        risks=request_risks(event, shell),
    )
    return request, decision


class ApprovalService:
    """Routes requests by policy and decides them through the store's compare-and-set."""

    def __init__(
        self,
        store: ApprovalStore,
        policy: Policy | None = None,
        *,
        membership: MembershipResolver | None = None,
    ) -> None:
        self.store = store
        self.policy = policy or Policy()
        self.membership = membership
        self.grants = GrantStore(store.redis, store.keys, command_timeout=store.command_timeout)

    # -- submit ------------------------------------------------------------------------

    async def submit(
        self,
        event: ApprovalEvent,
        config: ApprovalConfig | None = None,
        *,
        principal: str | None = None,
        route: str | None = None,
        requester: str | None = None,
        metadata: dict[str, Any] | None = None,
        callback: Callback | None = None,
    ) -> ApprovalRequest:
        """Create the request for `event` (see `create`) and return it."""
        result = await self.create(
            event,
            config,
            principal=principal,
            route=route,
            requester=requester,
            metadata=metadata,
            callback=callback,
        )
        return result.request

    async def create(
        self,
        event: ApprovalEvent,
        config: ApprovalConfig | None = None,
        *,
        principal: str | None = None,
        route: str | None = None,
        requester: str | None = None,
        metadata: dict[str, Any] | None = None,
        callback: Callback | None = None,
        notify: str | None = None,
    ) -> CreateResult:
        """Create the request for `event`, asked by `principal` (the caller's identity, from
        its credentials; None for trusted in-process callers). A policy `allow`/`deny` or a
        session grant decides it at once (audited, never posted); otherwise it is posted to
        its route's channel. `route` names a policy route to ask on when no rule names one:
        only a route the policy lets `principal` name (`Policy.may_name`), or the one it
        picks anyway (`InvalidRequest` otherwise, and for a route the policy does not have);
        the policy's own route stays the floor of every field (`Policy.evaluate`), so a
        caller cannot get a laxer outcome by naming a route. `created` is false when the
        principal's call_id had already made this same request (`CallIdConflict` when it
        made a different one). A `callback` the policy does not allow, or an
        `arguments_schema` whose checks would not be bounded
        (`approvals._internal.edits.check_arguments_schema`), is `InvalidRequest` (nothing is
        stored).

        The person who may not decide it (`requester`) is the Slack user the policy ties
        `principal` to; `requester` adds one for trusted in-process callers only (the HTTP
        API never takes it from a caller)."""
        config = config or ApprovalConfig()
        try:
            # What the call changes in files, as diffs for reviewers (a hook's translation
            # has drawn them already, against the files as its command hook read them).
            if compares(event.tool_name) and not (event.context and event.context.files):
                event = await asyncio.to_thread(with_changes, event)
            else:
                event = with_changes(event)
        except Exception:  # the context explains a call; it never decides one
            log.warning("call context left out tool=%s", event.tool_name, exc_info=True)
        request, decision = draft_request(
            self.policy,
            event,
            config,
            now=self.store.now(),
            principal=principal,
            route=route,
            requester=requester,
            metadata=metadata,
            callback=callback,
            notify=notify,
        )
        effective = request.config
        # A policy allow/deny or a session grant decides at creation, in the same Lua
        # script: such a request is audited but never queued for Slack.
        verdict: Decision | None = None
        grant: Grant | None = None
        if decision.action in ("allow", "deny"):
            rule = ",".join(decision.winners) or "policy"
            by = f"policy:{rule}"[:MAX_ACTOR]  # several long rule names must not overflow it
            verdict = (
                Decision.approve(by=by, via="policy")
                if decision.action == "allow"
                else Decision.deny(
                    (decision.reason or f"denied by policy rule {rule}")[:MAX_TEXT],
                    by=by,
                    via="policy",
                )
            )
        elif effective.kind == "approval":  # a grant cannot pick an option or type an answer
            # Only a grant given to this caller (principal, session, agent) for this tool, on
            # this route, in the scope the reviewer chose.
            grant = await self.grants.find(principal, event, request.route)
            if grant is not None:
                reason = f"session grant {grant.id} ({grant.label}) from request {grant.request_id}"
                verdict = Decision.approve(
                    by=grant.decided_by or "unknown",
                    via="grant",
                    for_session=True,
                    scope=grant.scope,
                ).model_copy(update={"reason": reason[:MAX_TEXT]})
        # The grant is checked again inside the create script: one revoked since this lookup
        # decides nothing (the request is asked instead). The new request takes a question a
        # reviewer left for this caller's retry of the tool (`approvals/_internal/questions.py`).
        session = event.session_id
        link = self.store.keys.question(principal, session, event.tool_name) if session else None
        return await self.store.create(
            request,
            decision=verdict,
            grant_id=grant.id if grant is not None else None,
            question_link=link,
        )

    def scope_options(self, request: ApprovalRequest) -> list[ScopeOption]:
        """The grant scopes "approve for session" offers for `request` (`grants.offered`)."""
        return offered(request)

    # -- decide -------------------------------------------------------------------------

    async def may_decide(self, request: ApprovalRequest, actor: Actor) -> str | None:
        """None when `actor` may decide `request`; else the reason they may not."""
        if actor.via in TRUSTED_VIA:
            return None
        if request.requester and request.requester == actor.id:
            return "self"
        if not request.reviewers:
            return None
        users = {r for r in request.reviewers if not is_user_group(r)}
        if actor.id in users:
            return None
        for group in (r for r in request.reviewers if is_user_group(r)):
            if self.membership is not None and actor.id in await self.membership(group):
                return None
        return "not_reviewer"

    async def _open_for(
        self, request_id: str, actor: Actor, version: str | None
    ) -> tuple[ApprovalRequest, str] | VoteResult:
        """The pending request `actor` may decide and the version bound (`version`, else the
        current one), or the result that ends the attempt: `closed` (no longer pending),
        `stale` (edited since `version`). `NotAllowed` when the actor may not decide it."""
        request = await self.store.get(request_id)
        if not request.is_pending:
            return VoteResult("closed", request)
        seen = current_version(request) if version is None else version
        if seen != current_version(request):
            return VoteResult("stale", request)
        refusal = await self.may_decide(request, actor)
        if refusal == "self":
            raise NotAllowed(
                "you asked for this approval; someone else has to decide", details=refusal
            )
        if refusal is not None:
            raise NotAllowed("you are not one of the reviewers for this request", details=refusal)
        return request, seen

    async def decide(
        self,
        request_id: str,
        outcome: Literal["approve", "deny"],
        actor: Actor,
        *,
        reason: str | None = None,
        input: str | None = None,
        selection: str | None = None,
        for_session: bool = False,
        scope: GrantScope = "call",
        version: str | None = None,
    ) -> VoteResult:
        """Record `actor`'s decision. An approval is of the arguments proposed now (a
        reviewer's edit, `approvals/_internal/edits.py`, else the agent's). `version` is the
        version of the arguments the actor was shown ('' = the agent's own); a request
        edited since is left alone: `stale`, nothing recorded. Every decision control passes
        it; without it (trusted callers in-process) the version read here is the one bound,
        and the store's script checks it either way, so an edit landing meanwhile is never
        approved unseen. Raises `NotAllowed` (with `.details` = "self" or "not_reviewer")
        and `InvalidRequest`; a late or duplicate decision is a normal result (`closed` /
        `duplicate`) carrying the request as it stands. With `for_session`, an approval also
        asks for a grant of the chosen `scope` (one of `scope_options(request)`; never for an
        edited call) for the rest of the session: given when the request is approved with a
        quorum of its approving votes for the session, with the narrowest scope chosen, and
        covering exactly the call approved."""
        for name, text in (("reason", reason), ("input", input)):
            if text is not None and len(text) > MAX_TEXT:
                raise InvalidRequest(f"{name} is longer than {MAX_TEXT} characters", details=name)
        opened = await self._open_for(request_id, actor, version)
        if isinstance(opened, VoteResult):
            return opened
        request, seen = opened
        if outcome == "approve":
            self._check_answer(request, input, selection, for_session, scope)
        if actor.via in TRUSTED_VIA:
            decision = (
                Decision.approve(
                    by=actor.id,
                    via=actor.via,
                    input=input,
                    selection=selection,
                    for_session=for_session,
                    scope=scope,
                )
                if outcome == "approve"
                else Decision.deny(reason, by=actor.id, via=actor.via)
            )
            if outcome == "approve" and request.proposal is not None:
                decision = decision.model_copy(
                    update={
                        "edited_arguments": request.proposal.arguments,
                        "edited_by": request.proposal.by,
                    }
                )
            resolved = await self.store.resolve(request_id, decision, expected_version=seen)
            if resolved.stale:
                return VoteResult("stale", resolved.request)
            result = VoteResult("decided" if resolved.won else "closed", resolved.request)
        else:
            result = await self.store.vote(
                request_id,
                actor.id,
                outcome,
                reason=reason,
                via=actor.via,
                input=input,
                selection=selection,
                for_session=for_session,
                scope=scope,
                expected_escalations=request.escalations,
                proposal=request.proposal,
            )
            if result.status == "moved":
                # Escalated since the check above: check the actor against the new route.
                return await self.decide(
                    request_id,
                    outcome,
                    actor,
                    reason=reason,
                    input=input,
                    selection=selection,
                    for_session=for_session,
                    scope=scope,
                    version=seen,
                )
        decided = result.request.decision
        if result.status == "decided" and decided is not None and decided.for_session:
            await self._grant(result.request, decided.scope or "call")
        return result

    async def ask(
        self,
        request_id: str,
        actor: Actor,
        question: str,
        *,
        version: str | None = None,
    ) -> VoteResult:
        """`actor` asks the agent `question` instead of deciding (`approvals/_internal/
        questions.py`): the request ends `asked` (a deny-kind end) through the same
        compare-and-set as a decision, bound to `version` (what the actor was shown; a request
        edited since is `stale`) and to the route round the actor was checked on; on a quorum
        route one question ends it. Who may ask is who may decide (`NotAllowed` as in
        `decide`); a request that does not offer it, or an empty or too long question, is
        `InvalidRequest`. With a session, the caller's retry of the tool takes the question
        (`Keys.question`) within the time the route gave the request."""
        question = question.strip()
        if not question:
            raise InvalidRequest("a question is needed", details="question")
        if len(question) > MAX_QUESTION:
            raise InvalidRequest(
                f"question is longer than {MAX_QUESTION} characters", details="question"
            )
        opened = await self._open_for(request_id, actor, version)
        if isinstance(opened, VoteResult):
            return opened
        request, seen = opened
        if not questions_offered(request):
            raise InvalidRequest(
                "asking the agent is not offered for this request", details="question"
            )
        decision = Decision.ask(question, by=actor.id, via=actor.via)
        session = request.event.session_id
        link = None
        if session:
            key = self.store.keys.question(request.principal, session, request.event.tool_name)
            value = link_for(request, question, actor.id, decision.decided_at)
            link = (key, value, link_seconds(request))
        resolved = await self.store.resolve(
            request_id,
            decision,
            expected_version=seen,
            expected_escalations=request.escalations,
            link=link,
        )
        if resolved.moved:  # escalated since the check: check the actor against the new route
            return await self.ask(request_id, actor, question, version=seen)
        if resolved.stale:
            return VoteResult("stale", resolved.request)
        log.info(
            "asked id=%s by=%s won=%s linked=%s", request_id, actor.id, resolved.won, bool(link)
        )
        return VoteResult("decided" if resolved.won else "closed", resolved.request)

    async def edit(
        self,
        request_id: str,
        actor: Actor,
        arguments: Any,
        *,
        note: str | None = None,
        version: str | None = None,
    ) -> VoteResult:
        """`actor` approves `request_id` with edited `arguments` (checked by
        `approvals._internal.edits.check_edit`: `InvalidRequest` with `details` "arguments"). The
        edit
        is a proposal: earlier votes are dropped, it counts as the actor's approval, and on
        a quorum of 1 it decides. With `version` (what the actor was shown), a request
        edited since is left alone: `stale`. Refusals as in `decide`."""
        if note is not None and len(note) > MAX_TEXT:
            raise InvalidRequest(f"note is longer than {MAX_TEXT} characters", details="note")
        opened = await self._open_for(request_id, actor, version)
        if isinstance(opened, VoteResult):
            return opened
        request, seen = opened
        edited = check_edit(request, arguments)
        proposal = Proposal(
            arguments=edited,
            by=actor.id,
            at=self.store.now(),
            note=note or None,
            version=version_of(request, edited),
        )
        result = await self.store.propose(
            request_id,
            proposal,
            via=actor.via,
            seen_version=seen,
            expected_escalations=request.escalations,
        )
        if result.status == "moved":  # escalated since the check: check against the new route
            return await self.edit(request_id, actor, arguments, note=note, version=seen)
        log.info(
            "edit id=%s by=%s result=%s quorum=%s",
            request_id,
            actor.id,
            result.status,
            request.quorum,
        )
        return result

    def _check_answer(
        self,
        request: ApprovalRequest,
        input: str | None,
        selection: str | None,
        for_session: bool,
        scope: GrantScope = "call",
    ) -> None:
        config = request.config
        if config.kind == "choice":
            if selection is None or selection not in (config.options or ()):
                raise InvalidRequest(
                    f"choose one of: {', '.join(config.options or ())}", details="selection"
                )
        elif selection is not None:
            raise InvalidRequest("selection only applies to kind 'choice'", details="selection")
        if config.kind == "input" and not (input and input.strip()):
            raise InvalidRequest("this request needs a typed answer", details="input")
        if for_session and not config.allow_for_session:
            raise InvalidRequest(
                "approve-for-session is not offered for this request", details="for_session"
            )
        if for_session and request.proposal is not None:
            raise InvalidRequest(
                "approve-for-session is not offered for an edited call; approve it as edited",
                details="for_session",
            )
        if for_session and not request.event.session_id:
            raise InvalidRequest(
                "approve-for-session needs a session_id on the request", details="for_session"
            )
        if for_session and scope not in {o.scope for o in self.scope_options(request)}:
            raise InvalidRequest(
                f"approve-for-session with scope {scope!r} is not offered for this request",
                details="scope",
            )

    async def _grant(self, request: ApprovalRequest, scope: GrantScope) -> Grant | None:
        """Give the caller of `request` the grant its reviewers chose, for exactly the call
        they approved (`approved_call`: the edit, if any)."""
        approved = approved_call(request)
        if approved is None:
            return None
        shown = request.model_copy(update={"event": approved})
        option = next((o for o in self.scope_options(shown) if o.scope == scope), None)
        session = request.event.session_id
        if option is None or not session:
            return None
        now = self.store.now()
        grant = Grant(
            principal=request.principal,
            session_id=session,
            agent=request.event.agent,
            tool_name=request.event.tool_name,
            scope=option.scope,
            call=call_hash(approved) if option.scope == "call" else None,
            words=option.words,
            label=option.label,
            route=request.route,
            request_id=request.id,
            decided_by=request.decision.decided_by if request.decision else None,
            granted_at=now,
            expires_at=now + timedelta(seconds=self.policy.defaults.grant_ttl_seconds),
        )
        return await self.grants.give(grant)

    async def cancel(
        self,
        request_id: str,
        *,
        by: str | None = None,
        reason: str | None = None,
        via: str = "api",
        owner: str | None = None,
    ) -> VoteResult:
        """Withdraw a pending request; with `owner`, only one that principal made (another's
        is `NotFound`, exactly like an unknown id, and is left alone)."""
        result = await self.store.cancel(request_id, by=by, reason=reason, via=via, owner=owner)
        return VoteResult("decided" if result.won else "closed", result.request)

    async def cancel_call(
        self,
        call_id: str,
        *,
        principal: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        via: str = "api",
    ) -> VoteResult | None:
        """Withdraw the request `principal`'s `call_id` made, if it made one (None: it did not,
        or that request is gone): for a caller whose submit was cut off in flight."""
        result = await self.store.cancel_call(call_id, principal, by=by, reason=reason, via=via)
        if result is None:
            return None
        return VoteResult("decided" if result.won else "closed", result.request)

    # -- deadlines ------------------------------------------------------------------------

    async def expire_due(self, now: datetime | None = None, limit: int = 100) -> list[ExpiryResult]:
        """Apply each overdue request's route `on_timeout`: deny (status `expired`), approve,
        or escalate to the next route. Safe to run on every replica at once."""
        results = []
        for request_id in await self.store.due(now, limit):
            results.append(await self._expire_one(request_id))
        return results

    async def _expire_one(self, request_id: str) -> ExpiryResult:
        found = await self.store.get_many([request_id])
        request = found.get(request_id)
        if request is None or not request.is_pending or request.deadline_at is None:
            if request is None:
                await self.store.forget_deadline(request_id)
            return ExpiryResult(request_id, "skipped", request)
        action = self.policy.on_timeout(request.route, request.escalations)
        floor = request.floor  # a route the caller named: the policy's own route's floor
        if action.action == "escalate" and action.route is not None and action.route_name:
            seconds = action.deadline_seconds or request.config.deadline_seconds or 3600
            moved = await self.store.escalate(
                request,
                route=action.route_name,
                channel=action.route.channel,
                deadline_at=self.store.now() + timedelta(seconds=seconds),
                quorum=max(action.route.quorum, floor.quorum if floor else 1),
                reviewers=action.route.reviewers,
            )
            return ExpiryResult(request_id, "escalated" if moved else "skipped")
        # Only an explicit approve approves (anything else, known or not, denies), and on a
        # route its caller named, only where the policy's own route approves on timeout too.
        if action.action == "approve" and (floor is None or floor.approve_on_timeout):
            decision = Decision.approve(by="timeout", via="timeout")
            decision = decision.model_copy(update={"reason": "approved on timeout by route policy"})
            result = await self.store.resolve(
                request_id, decision, expected_deadline=request.deadline_at
            )
            return ExpiryResult(request_id, "approved" if result.won else "skipped", result.request)
        result = await self.store.resolve(
            request_id,
            Decision.deny("approval timeout", by="timeout", via="timeout"),
            status="expired",
            expected_deadline=request.deadline_at,
        )
        return ExpiryResult(request_id, "expired" if result.won else "skipped", result.request)
