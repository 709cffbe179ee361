"""The Redis store of approval requests: create, read, decide (Lua CAS), vote, escalate, audit.

Internal to approval-bot (not a stable API); agents import from `approvals`.

A request is one hash (`Keys.request`): `data` holds the request as created
(JSON) and the other fields hold what changes — `status`, `decision`, `route`,
`channel`, `deadline`, `quorum`, `reviewers`, `escalations`, `message`,
`vote:<user>`, `answers` / `answered` (a reviewer's question and the retry answering it,
`approvals/_internal/questions.py`). Every change of state is one Lua script
(`approvals/_internal/store/lua/`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any, Literal, TypeVar, cast

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from approvals._internal.grant_scopes import SCOPES
from approvals._internal.store.keys import Keys
from approvals.errors import CallIdConflict, NotFound, PayloadTooLarge, StoreUnavailable
from approvals.models import (
    DEFAULT_DEADLINE_SECONDS,
    MAX_EVENT_BYTES,
    Answered,
    ApprovalRequest,
    Decision,
    GrantScope,
    Proposal,
    Question,
    SlackMessage,
    Status,
    Vote,
    check_event_size,
)

log = logging.getLogger(__name__)

SCRIPT_NAMES = ("create", "resolve", "set_fields", "vote", "escalate", "propose")
OUTBOX_MAXLEN = 100_000
#: How often (seconds) a store has the scripts refresh the TTL of the shared streams (outbox,
#: audit) instead of on every write. Their TTL is the retention (days), so a refresh a minute
#: keeps it; a stream exists without a TTL only if it was deleted by hand and written again
#: within that minute.
SHARED_TTL_REFRESH_SECONDS = 60.0
#: The reason on a request whose call its caller withdrew (`cancel_call`) before it landed.
WITHDRAWN_IN_FLIGHT = "withdrawn by the caller before the request arrived (its submit was cut off)"

_STATUS_FOR_OUTCOME: dict[str, Status] = {
    "approve": "approved",
    "deny": "denied",
    "error": "error",
    "asked": "asked",
}


def load_script_source(name: str) -> str:
    return resources.files(__package__).joinpath(f"lua/{name}.lua").read_text()


def ts(dt: datetime) -> str:
    """The canonical text of a timestamp in Redis (epoch seconds, microseconds)."""
    return f"{dt.timestamp():.6f}"


def from_ts(text: str) -> datetime:
    return datetime.fromtimestamp(float(text), UTC)


@dataclass(frozen=True)
class CreateResult:
    request: ApprovalRequest
    created: bool


@dataclass(frozen=True)
class ResolveResult:
    """`won` is true for the one caller whose transition happened; `request` is the state after."""

    won: bool
    request: ApprovalRequest
    #: Nothing changed: the arguments were edited since the version the decider was shown.
    stale: bool = False
    #: Nothing changed: the request moved to another route round since the decider was
    #: checked (`expected_escalations`).
    moved: bool = False


@dataclass(frozen=True)
class VoteResult:
    """`status`: `decided` (this vote decided), `recorded` (quorum not yet reached),
    `duplicate` (this voter had voted) or `closed` (already decided by someone else);
    `moved` (nothing recorded) only from `ApprovalStore.vote` with `expected_escalations`
    when the request was escalated since; `stale` (nothing recorded) when the arguments were
    edited since the voter looked (`approvals/_internal/edits.py`)."""

    status: Literal["decided", "recorded", "duplicate", "closed", "moved", "stale"]
    request: ApprovalRequest
    approvals: int = 0


@dataclass(frozen=True)
class AuditEntry:
    entry_id: str
    request_id: str
    event: str
    status: str
    by: str
    via: str
    at: datetime
    reason: str
    route: str
    #: An edit, or an approval of edited arguments: the arguments (JSON).
    edited_arguments: str = ""

    def as_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.edited_arguments:
            extra["edited_arguments"] = json.loads(self.edited_arguments)
        return {
            **extra,
            "entry_id": self.entry_id,
            "id": self.request_id,
            "event": self.event,
            "status": self.status,
            "by": self.by,
            "via": self.via,
            "at": self.at.isoformat(),
            "reason": self.reason,
            "route": self.route,
        }


T = TypeVar("T")


#: Set inside an admitted store operation: one it calls runs on the same turn (a nested
#: operation waiting for a turn of its own could wait for ever behind its caller).
_ADMITTED: ContextVar[bool] = ContextVar("approvals_store_admitted", default=False)
_UNAVAILABLE = "the approval store (Redis) is unavailable; try again"


def _guard(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Redis errors become `StoreUnavailable`, and so does no answer within the store's
    `command_timeout` (an asyncio timeout; the bot's is `DEFAULT_COMMAND_TIMEOUT` in
    `approvals/_internal/store/connection.py`; None: unbounded, for the CLI's long exports).

    With `max_concurrent`, operations take turns: at most that many run at once, the
    others wait in order (up to `admission_timeout`, then `StoreUnavailable`), and the
    `command_timeout` of each starts with its turn. On a saturated event loop (thousands
    of agents at once) every operation started at once would finish late together and
    time out together; in turns, they finish in the order they came."""

    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> T:
        turns: asyncio.Semaphore | None = getattr(self, "turns", None)
        if turns is None or _ADMITTED.get():
            return await _bounded(self, fn, args, kwargs)
        if not turns.locked():
            await turns.acquire()  # a free turn is taken at once: nothing to time out
        else:
            try:
                async with asyncio.timeout(getattr(self, "admission_timeout", None)):
                    await turns.acquire()
            except TimeoutError as e:
                raise StoreUnavailable(_UNAVAILABLE) from e
        admitted = _ADMITTED.set(True)
        try:
            return await _bounded(self, fn, args, kwargs)
        finally:
            _ADMITTED.reset(admitted)
            turns.release()

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


async def _bounded(self: Any, fn: Callable[..., Awaitable[T]], args: Any, kwargs: Any) -> T:
    try:
        async with asyncio.timeout(getattr(self, "command_timeout", None)):
            return await fn(self, *args, **kwargs)
    except (RedisConnectionError, RedisTimeoutError, TimeoutError) as e:
        # The text agents see names no host, port or driver message (kept in the chain).
        raise StoreUnavailable(_UNAVAILABLE) from e


class ApprovalStore:
    """All reads and writes of approval requests. One per process, sharing one client."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        *,
        default_deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
        clock: Callable[[], float] = time.time,
        command_timeout: float | None = None,
        max_concurrent: int | None = None,
        admission_timeout: float | None = None,
    ) -> None:
        self.redis = redis
        self.command_timeout = command_timeout
        #: Turns for store operations (see `_guard`); None: every operation runs at once.
        self.turns = asyncio.Semaphore(max_concurrent) if max_concurrent else None
        self.admission_timeout = admission_timeout
        self.keys = keys
        self.default_deadline_seconds = default_deadline_seconds
        self.clock = clock
        self._scripts: dict[str, AsyncScript] = {
            name: redis.register_script(load_script_source(name)) for name in SCRIPT_NAMES
        }
        self._shared_ttl_at = float("-inf")
        self._decided_hooks: list[Callable[[ApprovalRequest], None]] = []

    def on_decided(self, hook: Callable[[ApprovalRequest], None]) -> None:
        """Call `hook(request)` whenever `resolve()` on this store wins, or a `vote()` or
        `propose()` decides the request, with the request as the deciding script left it
        (read from Redis by the script that committed it, so as true as a read). The bot's
        `Waiter` settles the callers waiting in this process at once, without the pub/sub
        hop and the re-read. A hook that raises is logged; the decision stands."""
        self._decided_hooks.append(hook)

    def _refresh_shared_ttl(self, *, consume: bool = True) -> str:
        """'1' when this call's script should (re)set the TTLs of the shared streams (outbox,
        audit): the first write of this store, then once every `SHARED_TTL_REFRESH_SECONDS`.
        Only streams: they stay when emptied, where an index zset vanishes with its last
        member and is written with its TTL every time."""
        now = time.monotonic()
        if now - self._shared_ttl_at < SHARED_TTL_REFRESH_SECONDS:
            return ""
        if consume:
            self._shared_ttl_at = now
        return "1"

    def _row(self, flat: list[Any]) -> dict[str, str]:
        """A hash as a script returns it (HGETALL's flat list) as a dict."""
        items = [v.decode() if isinstance(v, bytes) else str(v) for v in flat]
        return dict(zip(items[::2], items[1::2], strict=True))

    def _decision_keys(self, request_id: str) -> list[str]:
        """KEYS of the scripts that take a request out of pending (resolve.lua, vote.lua)."""
        k = self.keys
        return [k.request(request_id), k.pending, k.deadlines, k.outbox, k.audit, k.webhook_queue]

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def _ttl(self, deadline_at: datetime) -> int:
        remaining = max(0.0, (deadline_at - self.now()).total_seconds())
        return int(remaining) + self.keys.retention_seconds

    # -- create ----------------------------------------------------------------

    @_guard
    async def create(
        self,
        request: ApprovalRequest,
        *,
        decision: Decision | None = None,
        grant_id: str | None = None,
        question_link: str | None = None,
        _replacing: str = "",
        _status: Status | None = None,
    ) -> CreateResult:
        """Store a new pending request and queue its Slack post — or, with `decision`, store
        it already decided (a policy rule, a session grant): audited, never posted.

        Idempotent on (`principal`, `event.call_id`): a second create with the same call id
        and the same fingerprint returns the first request and writes nothing; with a
        different fingerprint it raises `CallIdConflict` (never the old request, whose
        decision applies to what was shown then). A call id its caller withdrew before the
        create landed (`cancel_call`) makes the request already cancelled: never posted,
        never approvable. `grant_id`: the session grant `decision` comes from; if it was
        revoked (or expired) since it was looked up, the request is created pending instead
        (asked on Slack), in the same script as the check. `question_link`: the caller's
        question link (`Keys.question`); the new request takes a reviewer's question left there
        (`answers`: it is the retry that answers it, `approvals/_internal/questions.py`).

        A call id whose request ended `asked` makes a new request when the call comes with
        another reason (the agent's answer; the same reason is a replay: the asked request)."""
        if request.status != "pending":
            raise ValueError("only pending requests can be created")
        now = self.now()
        deadline_at = request.deadline_at
        if deadline_at is None:
            seconds = request.config.deadline_seconds or self.default_deadline_seconds
            deadline_at = now + timedelta(seconds=seconds)
        deadline_at = from_ts(ts(deadline_at))  # canonical precision
        request = request.model_copy(update={"created_at": now, "deadline_at": deadline_at})
        stored = request.model_dump_json().encode()
        # The event and the metadata are parts of the stored text: when it is within the limit
        # so is each; only a bigger one is measured part by part (the whole may be larger).
        if len(stored) > MAX_EVENT_BYTES:
            check_event_size(request.event)
            metadata_size = len(request.model_dump_json(include={"metadata"}).encode())
            if metadata_size > MAX_EVENT_BYTES:
                raise PayloadTooLarge(
                    f"request metadata is {metadata_size} bytes; the limit is "
                    f"{MAX_EVENT_BYTES} bytes (2 MiB)"
                )
        call_id = request.event.call_id
        key = self.keys.request(request.id)
        result = await self._scripts["create"](
            keys=[
                key,
                self.keys.call(call_id, request.principal) if call_id else key,
                self.keys.pending,
                self.keys.deadlines,
                self.keys.outbox,
                self.keys.audit,
                self.keys.webhook_queue,
                self.keys.grant(grant_id) if grant_id else key,
                question_link or key,
            ],
            args=[
                request.id,
                stored,
                ts(now),
                ts(deadline_at),
                self._ttl(deadline_at),
                self.keys.retention_seconds,
                "1" if call_id else "0",
                request.route,
                request.channel or "",
                request.principal or request.event.agent or "",
                OUTBOX_MAXLEN,
                request.quorum,
                json.dumps(list(request.reviewers)),
                (_status or _STATUS_FOR_OUTCOME[decision.outcome]) if decision else "",
                decision.model_dump_json() if decision else "",
                decision.decided_by or "" if decision else "",
                decision.via if decision else "",
                decision.reason or "" if decision else "",
                _replacing,
                "1" if request.callback is not None else "",
                request.fingerprint,
                # A create decided at once writes only the audit stream: it asks for the
                # refresh without using up this minute's (the outbox would miss it).
                self._refresh_shared_ttl(consume=decision is None),
                "1" if grant_id and decision else "",
                "1" if question_link else "",
            ],
        )
        code, request_id = int(result[0]), str(result[1])
        if code == 3:
            # Withdrawn in flight: the caller gave up on this call before it landed here.
            log.info("create of a withdrawn call id=%s call_id=%s", request.id, call_id)
            withdrawn = Decision.deny(WITHDRAWN_IN_FLIGHT, by=request.principal, via="cancel")
            return await self.create(
                request, decision=withdrawn, _replacing="-", _status="cancelled"
            )
        if code == 4:
            log.info("grant gone before the create id=%s grant=%s: asking", request.id, grant_id)
            return await self.create(request, _replacing=_replacing, question_link=question_link)
        if code == 2:
            raise CallIdConflict(
                f"call_id {call_id!r} was already used for a different request ({request_id}); "
                "use a new call_id for a new call",
                details={"id": request_id},
            )
        created = code == 1
        if created and decision is not None:
            status = _status or _STATUS_FOR_OUTCOME[decision.outcome]
            request = request.model_copy(update={"status": status, "decision": decision})
        if created and len(result) > 2 and result[2]:
            answers = Question.model_validate_json(_text(result[2]))
            request = request.model_copy(update={"answers": answers})
        if created:
            log.info(
                "request created id=%s tool=%s route=%s principal=%s",
                request_id,
                request.event.tool_name,
                request.route,
                request.principal or "-",
            )
            return CreateResult(request, True)
        try:
            existing = await self.get(request_id)
        except NotFound:
            # The call-id marker outlived its (expired) request: create anew, replacing the
            # marker only if it still names that request (another replica may have just done
            # the same: then its request is the one).
            return await self.create(
                request, decision=decision, question_link=question_link, _replacing=request_id
            )
        if existing.status == "asked" and _reason(existing) != _reason(request):
            # A reviewer asked, and the call comes again with the agent's answer: a new request
            # (the same call id with the same reason is a replay, answered as asked).
            log.info("call id of an asked request used again id=%s call_id=%s", request_id, call_id)
            return await self.create(
                request, decision=decision, question_link=question_link, _replacing=request_id
            )
        log.info("request reused id=%s call_id=%s", request_id, call_id)
        return CreateResult(existing, False)

    # -- read ------------------------------------------------------------------

    @_guard
    async def get(self, request_id: str) -> ApprovalRequest:
        """The request as it is now; `NotFound` if unknown or expired."""
        found = await self.get_many([request_id])
        request = found.get(request_id)
        if request is None:
            raise NotFound(f"no approval request with id {request_id!r}")
        return request

    @_guard
    async def get_many(self, request_ids: Iterable[str]) -> dict[str, ApprovalRequest]:
        """The requests that exist among `request_ids`, in one round trip."""
        ids = list(dict.fromkeys(request_ids))
        if not ids:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for request_id in ids:
                pipe.hgetall(self.keys.request(request_id))
            rows = await pipe.execute()
        return {i: self._from_hash(row) for i, row in zip(ids, rows, strict=True) if row}

    @_guard
    async def get_with_row(self, request_id: str) -> tuple[ApprovalRequest, dict[str, str]] | None:
        """The request and its whole hash (the Slack bookkeeping fields too: see
        `Posting.history`) in one read; None if unknown or expired."""
        row: dict[str, str] = await self.redis.hgetall(self.keys.request(request_id))  # type: ignore[assignment]
        return (self._from_hash(row), row) if row else None

    @_guard
    async def status_many(self, request_ids: Iterable[str]) -> dict[str, str | None]:
        """Just the status of each id (None when unknown), in one round trip."""
        ids = list(dict.fromkeys(request_ids))
        if not ids:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for request_id in ids:
                pipe.hget(self.keys.request(request_id), "status")
            rows = await pipe.execute()
        return dict(zip(ids, rows, strict=True))

    def _from_hash(self, row: dict[str, str]) -> ApprovalRequest:
        request = ApprovalRequest.model_validate_json(row["data"])
        update: dict[str, Any] = {"status": row.get("status", request.status)}
        if row.get("decision"):
            update["decision"] = Decision.model_validate_json(row["decision"])
        if row.get("message"):
            update["message"] = SlackMessage.model_validate_json(row["message"])
        if "route" in row:
            update["route"] = row["route"]
        if "channel" in row:
            update["channel"] = row["channel"] or None
        if row.get("deadline"):
            update["deadline_at"] = from_ts(row["deadline"])
        if row.get("quorum"):
            update["quorum"] = int(row["quorum"])
        if row.get("reviewers"):
            update["reviewers"] = tuple(json.loads(row["reviewers"]))
        if row.get("escalations"):
            update["escalations"] = int(row["escalations"])
        if row.get("proposal"):
            update["proposal"] = Proposal.model_validate_json(row["proposal"])
        if row.get("answers"):
            update["answers"] = Question.model_validate_json(row["answers"])
        if row.get("answered"):
            update["answered"] = Answered.model_validate_json(row["answered"])
        votes = [Vote.model_validate_json(v) for k, v in row.items() if k.startswith("vote:")]
        if votes:
            update["votes"] = tuple(sorted(votes, key=lambda v: v.at))
        return request.model_copy(update=update)

    @_guard
    async def list_pending(
        self, limit: int = 100, *, created_before: float | None = None
    ) -> list[ApprovalRequest]:
        """Pending requests, oldest first; with `created_before` (epoch seconds), only those
        created at or before it."""
        if created_before is None:
            ids = await self.redis.zrange(self.keys.pending, 0, max(0, limit - 1))
        else:
            ids = await self.redis.zrangebyscore(
                self.keys.pending, "-inf", created_before, start=0, num=max(1, limit)
            )
        found = await self.get_many(ids)
        return [found[i] for i in ids if i in found and found[i].is_pending]

    @_guard
    async def due(self, now: datetime | None = None, limit: int = 100) -> list[str]:
        """Ids of pending requests whose deadline has passed."""
        moment = (now or self.now()).timestamp()
        ids = await self.redis.zrangebyscore(
            self.keys.deadlines, "-inf", moment, start=0, num=limit
        )
        return [str(i) for i in ids]

    @_guard
    async def forget_deadline(self, request_id: str) -> None:
        """Drop a deadline whose request no longer exists (it expired from Redis)."""
        await self.redis.zrem(self.keys.deadlines, request_id)

    # -- decide ----------------------------------------------------------------

    @_guard
    async def resolve(
        self,
        request_id: str,
        decision: Decision,
        *,
        status: Status | None = None,
        expected_deadline: datetime | None = None,
        owner: str | None = None,
        expected_version: str | None = None,
        expected_escalations: int | None = None,
        link: tuple[str, str, int] | None = None,
    ) -> ResolveResult:
        """Move a pending request to a terminal status. Exactly one concurrent caller wins;
        the others get `won=False` and the request as the winner left it.

        `expected_deadline` makes the move conditional on the deadline being unchanged
        (a sweeper must not expire a request that was just escalated). With `owner`, a
        request another principal made is `NotFound`, like an unknown id, and is left as
        it is (checked in the same script: no read before). With `expected_version` (the
        version of the arguments the decider was shown, `approvals/_internal/edits.py`),
        a request edited since is left as it is: `stale`; with `expected_escalations` (the
        route round the decider was checked against), one escalated since: `moved`. `link`:
        (key, value, TTL) of a question link written with the decision
        (`approvals/_internal/questions.py`)."""
        new_status = status or _STATUS_FOR_OUTCOME[decision.outcome]
        if new_status == "pending":
            raise ValueError("cannot resolve to pending")
        now = self.now()
        result = await self._scripts["resolve"](
            keys=[
                *self._decision_keys(request_id),
                link[0] if link else self.keys.request(request_id),
            ],
            args=[
                request_id,
                new_status,
                decision.model_dump_json(),
                ts(now),
                self.keys.retention_seconds,
                self.keys.decided_channel,
                decision.decided_by or "",
                decision.via,
                decision.reason or decision.question or "",  # an `asked` entry: the question
                OUTBOX_MAXLEN,
                ts(expected_deadline) if expected_deadline else "",
                self._refresh_shared_ttl(),
                "" if owner is None else "1",
                owner or "",
                "" if expected_version is None else "1",
                expected_version or "",
                "" if expected_escalations is None else str(expected_escalations),
                link[1] if link else "",
                link[2] if link else 0,
            ],
        )
        code = int(result[0])
        if code == -1:
            raise NotFound(f"no approval request with id {request_id!r}")
        request = self._from_hash(self._row(result[-1]))
        if code == 5:
            return ResolveResult(False, request, stale=True)
        if code == 4:
            return ResolveResult(False, request, moved=True)
        if code == 1:
            self._decided(request)
            log.info(
                "request decided id=%s status=%s by=%s via=%s route=%s principal=%s",
                request_id,
                new_status,
                decision.decided_by,
                decision.via,
                request.route,
                request.principal or "-",
            )
        return ResolveResult(code == 1, request)

    async def cancel(
        self,
        request_id: str,
        *,
        by: str | None = None,
        reason: str | None = None,
        via: str = "api",
        owner: str | None = None,
    ) -> ResolveResult:
        """Withdraw a pending request (the agent no longer needs it); with `owner`, only one
        that principal made (another's is `NotFound`, see `resolve`)."""
        decision = Decision.deny(reason or "cancelled", by=by, via=via)
        return await self.resolve(request_id, decision, status="cancelled", owner=owner)

    @_guard
    async def cancel_call(
        self,
        call_id: str,
        principal: str | None = None,
        *,
        by: str | None = None,
        reason: str | None = None,
        via: str = "api",
    ) -> ResolveResult | None:
        """Withdraw the request `principal`'s `call_id` made, if any (None: it made none, or
        that request is gone). For a caller whose create was cut off in flight: it may have
        landed without the caller learning its id, or still be on its way: then the call id is
        marked withdrawn and the create, when it lands, writes the request cancelled. The
        call-id marker names one request for that request's whole life (replaced only once it
        has expired), the mark is set only where no marker is (NX), and the cancel itself is
        the atomic resolve (only a pending request changes), so the steps need no script of
        their own."""
        key = self.keys.call(call_id, principal)
        marker = await self.redis.get(key)
        if marker is None:
            # Nothing landed yet; a create still in flight must not land approvable: mark the
            # call withdrawn (create.lua then writes it cancelled). NX: a create that landed
            # in between wins the key, and is cancelled below like any other.
            ttl = self._ttl(self.now() + timedelta(seconds=self.default_deadline_seconds))
            if await self.redis.set(key, "- withdrawn", nx=True, ex=ttl):
                return None
            marker = await self.redis.get(key)
            if marker is None:
                return None
        text = marker.decode() if isinstance(marker, bytes) else str(marker)
        request_id = text.split(" ", 1)[0]
        if request_id == "-":
            return None  # withdrawn before: nothing of it landed
        try:
            return await self.cancel(request_id, by=by, reason=reason, via=via)
        except NotFound:
            return None

    @_guard
    async def vote(
        self,
        request_id: str,
        user: str,
        outcome: Literal["approve", "deny"],
        *,
        reason: str | None = None,
        via: str = "slack",
        input: str | None = None,
        selection: str | None = None,
        for_session: bool = False,
        scope: GrantScope | None = None,
        expected_escalations: int | None = None,
        proposal: Proposal | None = None,
    ) -> VoteResult:
        """Count one reviewer's vote; any deny denies, `quorum` approvals approve.
        Each reviewer counts once (a second vote is `duplicate` and changes nothing).
        With `expected_escalations` (the count the voter was checked against), a request
        escalated since is left alone: `moved`. The vote is for `proposal` (the edit the
        voter saw; None: the agent's own arguments): if that is no longer what is proposed,
        nothing is recorded: `stale`. With `for_session`, the vote names the grant `scope`
        its reviewer chose; the approval is for the session only when a quorum of the
        approving votes chose one, and then for the narrowest scope chosen (`vote.lua`)."""
        now = self.now()
        chosen = (scope or "call") if for_session and outcome == "approve" else None
        vote = Vote(user=user, outcome=outcome, at=now, reason=reason, scope=chosen)
        # The decision if this vote decides, and one per session scope a quorum may choose.
        sessions = ["", "", ""]
        if outcome == "approve":
            decision = Decision.approve(by=user, via=via, input=input, selection=selection)
            if proposal is not None:
                decision = decision.model_copy(
                    update={"edited_arguments": proposal.arguments, "edited_by": proposal.by}
                )
            else:  # an edited call is never approved for the session (`ApprovalService`)
                sessions = [
                    decision.model_copy(
                        update={"for_session": True, "scope": name}
                    ).model_dump_json()
                    for name in SCOPES
                ]
        else:
            decision = Decision.deny(reason, by=user, via=via)
        result = await self._scripts["vote"](
            keys=self._decision_keys(request_id),
            args=[
                request_id,
                user,
                outcome,
                vote.model_dump_json(),
                decision.model_dump_json(),
                ts(now),
                self.keys.retention_seconds,
                self.keys.decided_channel,
                via,
                reason or "",
                OUTBOX_MAXLEN,
                "" if expected_escalations is None else str(expected_escalations),
                proposal.version if proposal else "",
                _arguments_json(proposal.arguments) if proposal else "",
                self._refresh_shared_ttl(),
                *sessions,
            ],
        )
        return await self._vote_result(request_id, result)

    async def _vote_result(self, request_id: str, result: list[Any]) -> VoteResult:
        code = int(result[0])
        if code == -1:
            raise NotFound(f"no approval request with id {request_id!r}")
        # The vote script answers with the request's hash as its last element (no re-read).
        last = result[-1]
        request = (
            self._from_hash(self._row(last))
            if isinstance(last, list) and last
            else await self.get(request_id)
        )
        kinds: dict[
            int, Literal["decided", "recorded", "duplicate", "closed", "moved", "stale"]
        ] = {
            1: "decided",
            0: "closed",
            2: "duplicate",
            3: "recorded",
            4: "moved",
            5: "stale",
        }
        if code == 1 and not request.is_pending:
            self._decided(request)
        approvals = sum(1 for v in request.votes if v.outcome == "approve")
        return VoteResult(kinds[code], request, approvals)

    def _decided(self, request: ApprovalRequest) -> None:
        """Run the `on_decided` hooks (a hook that raises is logged, the decision stands)."""
        for hook in self._decided_hooks:
            try:
                hook(request)
            except Exception:
                log.exception("decided hook failed id=%s", request.id)

    @_guard
    async def propose(
        self,
        request_id: str,
        proposal: Proposal,
        *,
        via: str = "slack",
        seen_version: str = "",
        expected_escalations: int | None = None,
    ) -> VoteResult:
        """Record a reviewer's edit: earlier votes are dropped and the edit counts as its
        author's approval of it (on a quorum of 1 that decides: approved with
        `edited_arguments`). `seen_version` is the version the editor looked at: if the
        arguments were edited since, nothing is recorded (`stale`)."""
        now = self.now()
        vote = Vote(user=proposal.by, outcome="approve", at=now, reason=proposal.note)
        decision = Decision.approve(by=proposal.by, via=via).model_copy(
            update={
                "edited_arguments": proposal.arguments,
                "edited_by": proposal.by,
                "reason": proposal.note,
            }
        )
        result = await self._scripts["propose"](
            keys=self._decision_keys(request_id),
            args=[
                request_id,
                proposal.by,
                proposal.model_dump_json(),
                proposal.version,
                vote.model_dump_json(),
                decision.model_dump_json(),
                ts(now),
                self.keys.retention_seconds,
                self.keys.decided_channel,
                via,
                OUTBOX_MAXLEN,
                "" if expected_escalations is None else str(expected_escalations),
                seen_version,
                _arguments_json(proposal.arguments),
            ],
        )
        return await self._vote_result(request_id, result)

    @_guard
    async def escalate(
        self,
        request: ApprovalRequest,
        *,
        route: str,
        channel: str,
        deadline_at: datetime,
        quorum: int,
        reviewers: Iterable[str],
    ) -> bool:
        """Move a pending request whose deadline passed to another route; false if it was
        decided or moved meanwhile (conditional on its deadline being unchanged)."""
        if request.deadline_at is None:
            raise ValueError("request has no deadline")
        result = await self._scripts["escalate"](
            keys=[
                self.keys.request(request.id),
                self.keys.deadlines,
                self.keys.outbox,
                self.keys.audit,
                self.keys.pending,
            ],
            args=[
                request.id,
                ts(request.deadline_at),
                route,
                channel,
                ts(deadline_at),
                quorum,
                json.dumps(list(reviewers)),
                ts(self.now()),
                self._ttl(deadline_at),
                OUTBOX_MAXLEN,
            ],
        )
        moved = int(result[0]) == 1
        if moved:
            log.info("request escalated id=%s route=%s channel=%s", request.id, route, channel)
        return moved

    # -- Slack bookkeeping -------------------------------------------------------

    @_guard
    async def set_message(self, request_id: str, message: SlackMessage) -> bool:
        """Record where the request's Slack message is; false if the request is gone."""
        written = await self._scripts["set_fields"](
            keys=[self.keys.request(request_id)],
            args=["message", message.model_dump_json()],
        )
        return bool(written)

    # -- audit -------------------------------------------------------------------------

    @_guard
    async def audit_entries(
        self,
        *,
        since: datetime | None = None,
        request_id: str | None = None,
        count: int = 10_000,
    ) -> list[AuditEntry]:
        """Audit entries, oldest first; `since` filters by time, `request_id` by request."""
        start = f"{int(since.timestamp() * 1000)}-0" if since else "-"
        rows = cast(
            list[tuple[str, dict[str, str]]],
            await self.redis.xrange(self.keys.audit, min=start, max="+", count=count),
        )
        entries = [
            AuditEntry(
                entry_id=entry_id,
                request_id=f.get("id", ""),
                event=f.get("event", ""),
                status=f.get("status", ""),
                by=f.get("by", ""),
                via=f.get("via", ""),
                at=from_ts(f["at"]) if f.get("at") else self.now(),
                reason=f.get("reason", ""),
                route=f.get("route", ""),
                edited_arguments=f.get("edited_arguments", ""),
            )
            for entry_id, f in rows
        ]
        if request_id:
            entries = [e for e in entries if e.request_id == request_id]
        return entries

    @_guard
    async def ping(self) -> bool:
        return bool(await self.redis.ping())


def _reason(request: ApprovalRequest) -> str | None:
    context = request.event.context
    return context.reason if context is not None else None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _arguments_json(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), default=str)
