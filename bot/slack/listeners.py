"""Slack entry points: button clicks and modal submissions, thin over `ApprovalService`.

Each listener acks first, reads the request id and the version of the arguments the control
was drawn on from the payload (`ids.read_control_value`, a modal's metadata), re-reads
Redis through the service, and decides through the store's compare-and-set, bound to that
version. The message itself is updated by the dispatcher (the decision queues an outbox
`update`), so a double click updates it once. Refused, late, duplicate or stale clicks (a
control drawn before a reviewer's edit) get an ephemeral explanation and change nothing.
A click in an ephemeral reply (`/approvals`, `/approvals ID`) redraws that reply through
its `response_url` once decided (or found stale), as the dispatcher redraws the message.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Literal, cast

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.errors import SlackApiError

from approvals._internal.edits import check_edit, current_version, edits_offered
from approvals._internal.questions import offered as questions_offered
from approvals._internal.service import Actor
from approvals._internal.store.connection import wait_until_done
from approvals._internal.store.store import VoteResult
from approvals.errors import InvalidRequest, NotAllowed, NotFound, StoreUnavailable
from approvals.models import MAX_QUESTION, ApprovalRequest, GrantScope
from bot.core.context import BotContext
from bot.slack import action_ids as ids
from bot.slack import home, replies
from bot.slack.render import edit_form as edits
from bot.slack.render import modals

log = logging.getLogger(__name__)

#: The ephemeral for a click that could not be recorded (Redis unreachable): nothing changed.
UNRECORDED = "Couldn't record your decision — try again."
_STORE_ERRORS = (StoreUnavailable, RedisConnectionError, RedisTimeoutError)

Body = dict[str, Any]


def register(app: AsyncApp, ctx: BotContext) -> Listeners:
    """Attach every Slack entry point of the bot to `app`, each run `Listeners.tracked`."""
    listeners = Listeners(ctx)
    track = listeners.tracked
    app.action(ids.APPROVE)(track(listeners.on_approve))
    app.action(ids.APPROVE_SESSION)(track(listeners.on_approve_session))
    app.action(ids.APPROVE_SESSION_PREFIX)(track(listeners.on_approve_session))
    app.action(ids.APPROVE_SESSION_TOOL)(track(listeners.on_approve_session))
    app.action(ids.DENY)(track(listeners.on_deny_button))
    app.action(ids.CHOOSE_PATTERN)(track(listeners.on_choose))
    app.action(ids.CHOOSE_SELECT)(track(listeners.on_choose))
    app.action(ids.RESPOND)(track(listeners.on_respond_button))
    app.action(ids.EDIT)(track(listeners.on_edit_button))
    app.action(ids.ASK)(track(listeners.on_ask_button))
    app.action(ids.REVIEW)(track(listeners.on_review_button))
    app.action(ids.DETAILS)(track(listeners.on_details_button))
    app.view(ids.DENY_MODAL)(track(listeners.on_deny_submit))
    app.view(ids.INPUT_MODAL)(track(listeners.on_input_submit))
    app.view(ids.EDIT_MODAL)(track(listeners.on_edit_submit))
    app.view(ids.ASK_MODAL)(track(listeners.on_ask_submit))
    app.view(ids.REVIEW_MODAL)(track(listeners.on_review_submit))
    app.command(ids.SLASH_COMMAND)(track(listeners.on_slash))
    app.event("app_home_opened")(track(listeners.on_home_opened))
    app.error(listeners.on_error)
    return listeners


def _action(body: Body) -> dict[str, Any]:
    actions = body.get("actions") or [{}]
    return dict(actions[0])


def _user(body: Body) -> str:
    return str((body.get("user") or {}).get("id", ""))


def _refusal_kind(why: object) -> Literal["self_approval", "not_reviewer"]:
    return "self_approval" if why == "self" else "not_reviewer"


def _channel(body: Body) -> str | None:
    channel = (body.get("channel") or {}).get("id")
    return str(channel) if channel else None


def _metadata(body: Body) -> ids.ModalMetadata:
    return ids.decode_metadata(str((body.get("view") or {}).get("private_metadata", "")))


def _block_value(body: Body, block_id: str) -> str | None:
    """The value of the first button in the actions block `block_id` of the message or view
    clicked (a select has no value of its own: its block's Deny button carries the id and
    version it was drawn on)."""
    surface = body.get("message") or body.get("view") or {}
    for block in surface.get("blocks", []):
        if block.get("type") == "actions" and block.get("block_id") == block_id:
            for element in block.get("elements", []):
                if element.get("type") == "button" and element.get("value"):
                    return str(element["value"])
    return None


def _question_problem(question: str) -> str | None:
    """Why a typed question cannot be asked (shown under its field), or None."""
    if not question:
        return "A question is required."
    if len(question) > MAX_QUESTION:
        return f"At most {MAX_QUESTION:,} characters, please ({len(question):,} typed)."
    return None


class Listeners:
    """The bound listener methods; dependencies live on `ctx`."""

    def __init__(self, ctx: BotContext) -> None:
        self.ctx = ctx
        #: Listener runs under way. slack-bolt (`process_before_response=False`) answers
        #: Slack at `ack()` and runs the rest of a listener in a task of its own that nothing
        #: awaits; `finish` lets `Bot.stop` wait for them before it closes Redis and the
        #: Slack client under them.
        self._running: set[asyncio.Task[Any]] = set()

    def tracked(self, listener: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        """`listener`, its runs counted in `_running` (bolt reads the arguments to pass from
        the wrapped function's signature, which `functools.wraps` keeps)."""

        @functools.wraps(listener)
        async def run(*args: Any, **kwargs: Any) -> None:
            task = asyncio.current_task()
            if task is not None:
                self._running.add(task)
            try:
                await listener(*args, **kwargs)
            finally:
                self._running.discard(task)

        return run

    @property
    def running(self) -> int:
        """Listener runs under way."""
        return len(self._running)

    async def finish(self) -> None:
        """Wait for the listener runs under way (a click's decision, its ephemeral, a modal
        being opened): a click Slack was told we took is carried out before the bot stops.
        Whatever is still running when this is cancelled (`Bot.stop` bounds each step) is
        cancelled with it, so nothing touches Redis after the bot closed it."""
        await wait_until_done(self._running)

    # -- buttons ---------------------------------------------------------------------

    async def _guarded(self, body: Body, work: Awaitable[Any], channel: str | None = None) -> None:
        """Run what a listener does after `ack()`; if Redis cannot be reached, the clicker is
        told nothing was recorded (the request stays as it was) and it is logged. A click on
        the App Home tab redraws that tab."""
        try:
            await work
            if (body.get("view") or {}).get("type") == "home" and self.ctx.home is not None:
                await self.ctx.home.publish(_user(body))
        except _STORE_ERRORS as e:
            action = _action(body).get("action_id") or (body.get("view") or {}).get("callback_id")
            log.warning(
                "click not recorded: store unavailable user=%s action=%s error=%s",
                _user(body),
                action,
                type(e).__name__,
            )
            self.ctx.metrics.slack_clicks_unrecorded.inc()
            self.ctx.metrics.redis_errors.labels(component="listeners").inc()
            await self._ephemeral(body, UNRECORDED, channel=channel)

    async def on_approve(self, ack: AsyncAck, body: Body) -> None:
        await ack()
        # The button names the version of the arguments it approves (`ids.control_value`).
        request_id, version = ids.read_control_value(str(_action(body).get("value", "")))
        await self._guarded(body, self._decide(body, request_id, "approve", version=version))

    async def on_approve_session(self, ack: AsyncAck, body: Body) -> None:
        """Approve for session with the scope of the button clicked (`ids.SESSION_SCOPES`),
        for the version of the arguments the button was drawn on."""
        await ack()
        action = _action(body)
        request_id, version = ids.read_control_value(str(action.get("value", "")))
        scope = ids.SESSION_SCOPES.get(str(action.get("action_id", "")), "call")
        decision = self._decide(
            body,
            request_id,
            "approve",
            for_session=True,
            scope=cast(GrantScope, scope),
            version=version,
        )
        await self._guarded(body, decision)

    async def on_choose(self, ack: AsyncAck, body: Body) -> None:
        await ack()
        await self._guarded(body, self._choose(body))

    async def _choose(self, body: Body) -> None:
        action = _action(body)
        if action.get("type") == "static_select":
            block = str(action.get("block_id", ""))
            raw_index = (action.get("selected_option") or {}).get("value", "")
            # A select has no value: its block's Deny button names the id and version.
            value = _block_value(body, block) or block.removeprefix(ids.ACTIONS_BLOCK + ":")
        else:
            value = str(action.get("value", ""))
            raw_index = str(ids.choice_index(str(action.get("action_id", ""))))
        request_id, version = ids.read_control_value(value)
        request = await self._load(body, request_id)
        if request is None:
            return
        options = request.config.options or ()
        index = int(raw_index) if str(raw_index).isdigit() else -1
        if not 0 <= index < len(options):
            await self._ephemeral(body, modals.refusal_text("stale_option", request))
            return
        await self._decide(body, request_id, "approve", selection=options[index], version=version)

    async def on_deny_button(self, ack: AsyncAck, body: Body) -> None:
        await ack()
        await self._guarded(body, self._open_modal(body, "deny"))

    async def on_respond_button(self, ack: AsyncAck, body: Body) -> None:
        await ack()
        await self._guarded(body, self._open_modal(body, "input"))

    async def on_edit_button(self, ack: AsyncAck, body: Body) -> None:
        await ack()
        await self._guarded(body, self._open_modal(body, "edit"))

    async def on_ask_button(self, ack: AsyncAck, body: Body) -> None:
        """Ask the agent…: the question dialog, bound to the version the button was drawn on."""
        await ack()
        await self._guarded(body, self._open_modal(body, "ask"))

    async def on_review_button(self, ack: AsyncAck, body: Body) -> None:
        """A digest row's Review…: the request in full, decided in the modal."""
        await ack()
        await self._guarded(body, self._open_modal(body, "review"))

    async def _open_modal(
        self, body: Body, which: Literal["deny", "input", "edit", "review", "ask"]
    ) -> None:
        value = str(_action(body).get("value", ""))
        version: str | None = None
        if which == "review":  # a digest row: the dialog is drawn (and bound) as it is now
            request_id, listed_round = ids.read_review_value(value)
        else:
            (request_id, version), listed_round = ids.read_control_value(value), None
        request = await self._load(body, request_id)
        if request is None:
            return
        if not request.is_pending:
            await self._ephemeral(body, modals.refusal_text("already_decided", request))
            await self._redraw_reply(body, request)
            return
        if which == "review" and listed_round != request.escalations:
            await self._ephemeral(body, modals.refusal_text("moved", request))
            return
        if version is not None and version != current_version(request):
            # Drawn before a reviewer's edit: no dialog for arguments the clicker never saw.
            await self._ephemeral(body, modals.refusal_text("edited_since", request))
            await self._redraw_reply(body, request)
            return
        refusal = await self.ctx.service.may_decide(request, Actor(_user(body)))
        if refusal is not None:
            await self._ephemeral(body, modals.refusal_text(_refusal_kind(refusal), request))
            return
        message = body.get("message") or {}
        channel, ts = _channel(body), message.get("ts")
        reply = replies.reply_of(body)
        if which == "edit":
            text = edits.edit_text(request) if edits_offered(request) else None
            if text is None:
                why = (
                    "The arguments are too long to edit in Slack."
                    if edits_offered(request)
                    else "Editing is not offered for this request."
                )
                await self._ephemeral(body, why)
                return
            view = modals.edit_modal(request, text, channel=channel, ts=ts, reply=reply)
        elif which == "review":
            view = modals.review_modal(request, channel=channel, ts=ts)
        elif which == "ask":
            if not questions_offered(request):
                await self._ephemeral(body, "Asking the agent is not offered for this request.")
                return
            view = modals.ask_modal(request, channel=channel, ts=ts, reply=reply)
        else:
            view = (modals.deny_modal if which == "deny" else modals.input_modal)(
                request, channel=channel, ts=ts, reply=reply
            )
        try:
            await self.ctx.slack.views_open(trigger_id=body.get("trigger_id"), view=view)
        except SlackApiError as e:
            log.warning("views.open failed id=%s error=%s", request.id, e.response.get("error"))
            await self._ephemeral(body, "Slack would not open the dialog; please try again.")

    async def on_details_button(self, ack: AsyncAck, body: Body) -> None:
        """Details: the agent's whole reason and the whole diffs, in a modal (pushed onto the
        review modal when clicked inside it). It decides nothing."""
        await ack()
        await self._guarded(body, self._open_details(body))

    async def _open_details(self, body: Body) -> None:
        request = await self._load(body, str(_action(body).get("value", "")))
        if request is None:
            return
        # Whoever sees the request's own message (its channel), or may see it in their lists.
        seen_there = bool(request.channel) and _channel(body) == request.channel
        if not seen_there and not await home.HomeLists(self.ctx).may_see(request, _user(body)):
            await self._ephemeral(body, modals.refusal_text("not_reviewer", request))
            return
        view = modals.details_modal(request)
        trigger = body.get("trigger_id")
        try:
            if (body.get("view") or {}).get("type") == "modal":
                await self.ctx.slack.views_push(trigger_id=trigger, view=view)
            else:
                await self.ctx.slack.views_open(trigger_id=trigger, view=view)
        except SlackApiError as e:
            log.warning("details not opened id=%s error=%s", request.id, e.response.get("error"))
            await self._ephemeral(body, "Slack would not open the details; please try again.")

    # -- App Home and /approvals ---------------------------------------------------------

    async def on_home_opened(self, body: Body) -> None:
        event = body.get("event") or {}
        user = str(event.get("user") or "")
        if event.get("tab", "home") != "home" or not user or self.ctx.home is None:
            return
        try:
            await self.ctx.home.opened(user)
        except _STORE_ERRORS:
            log.warning("home not published: store unavailable user=%s", user)

    async def on_slash(self, ack: AsyncAck, body: Body) -> None:
        """`/approvals`, `/approvals ID`, `/approvals help`: answered ephemerally in the ack."""
        user = str(body.get("user_id") or "")
        words = str(body.get("text") or "").split()
        try:
            answer = await self._slash_answer(user, words)
        except _STORE_ERRORS:
            answer = {
                "response_type": "ephemeral",
                "text": "The approval store is unavailable; try again.",
            }
        await ack(**answer)

    async def _slash_answer(self, user: str, words: list[str]) -> dict[str, Any]:
        lists = home.HomeLists(self.ctx)
        if not words:
            return home.slash_list((await lists.for_user(user)).waiting)
        if words[0].lower() in ("help", "-h", "--help") or len(words) > 1:
            return home.slash_help()
        try:
            request = await self.ctx.store.get(words[0])
        except NotFound:
            request = None
        if request is None or not await lists.may_see(request, user):
            return {
                "response_type": "ephemeral",
                "text": "No such request waits for you (or it is not one you may see).",
            }
        return home.slash_one(request)

    # -- modals ---------------------------------------------------------------------------

    async def on_deny_submit(self, ack: AsyncAck, body: Body) -> None:
        meta = _metadata(body)
        reason = self._view_value(body, ids.REASON_BLOCK, ids.REASON_ACTION)
        await ack()
        decision = self._decide(
            body,
            meta.request_id,
            "deny",
            reason=reason or None,
            channel=meta.channel,
            version=meta.version,
        )
        await self._guarded(body, decision, meta.channel)

    async def on_input_submit(self, ack: AsyncAck, body: Body) -> None:
        meta = _metadata(body)
        answer = self._view_value(body, ids.INPUT_BLOCK, ids.INPUT_ACTION)
        if not answer.strip():
            await ack(**modals.modal_errors(ids.INPUT_BLOCK, "An answer is required."))
            return
        await ack()
        decision = self._decide(
            body,
            meta.request_id,
            "approve",
            input=answer,
            channel=meta.channel,
            version=meta.version,
        )
        await self._guarded(body, decision, meta.channel)

    async def on_ask_submit(self, ack: AsyncAck, body: Body) -> None:
        """The Ask the agent… dialog: the question (required, at most `MAX_QUESTION`), asked
        through the service, bound to the version the dialog was drawn on."""
        meta = _metadata(body)
        question = self._view_value(body, ids.QUESTION_BLOCK, ids.QUESTION_ACTION).strip()
        problem = _question_problem(question)
        if problem is not None:
            await ack(**modals.modal_errors(ids.QUESTION_BLOCK, problem))
            return
        await ack()
        work = self._ask(body, meta.request_id, question, meta.version, meta.channel)
        await self._guarded(body, work, meta.channel)

    async def on_review_submit(self, ack: AsyncAck, body: Body) -> None:
        """The review modal of a digest row: the decision chosen, bound to the version of the
        arguments the modal showed; the same service path (and checks) as the buttons."""
        meta = _metadata(body)
        values = ((body.get("view") or {}).get("state") or {}).get("values") or {}
        chosen = (values.get(ids.REVIEW_DECISION_BLOCK) or {}).get(ids.REVIEW_DECISION_ACTION) or {}
        decision = str((chosen.get("selected_option") or {}).get("value") or "")
        text = self._view_value(body, ids.REVIEW_TEXT_BLOCK, ids.REVIEW_TEXT_ACTION).strip()
        if not decision:
            await ack(**modals.modal_errors(ids.REVIEW_DECISION_BLOCK, "Choose a decision."))
            return
        if decision == ids.REVIEW_RESPOND and not text:
            await ack(**modals.modal_errors(ids.REVIEW_TEXT_BLOCK, "An answer is required."))
            return
        if decision == ids.REVIEW_ASK and (problem := _question_problem(text)) is not None:
            await ack(**modals.modal_errors(ids.REVIEW_TEXT_BLOCK, problem))
            return
        await ack()
        await self._guarded(body, self._review(body, meta, decision, text), meta.channel)

    async def _review(self, body: Body, meta: ids.ModalMetadata, decision: str, text: str) -> None:
        common: dict[str, Any] = {"channel": meta.channel, "version": meta.version}
        request = await self._load(body, meta.request_id)
        if request is None:
            return
        # Only what the dialog offers for this request's kind, spelled exactly as offered.
        if decision not in {value for value, _label in modals.review_options(request)}:
            await self._ephemeral(
                body, modals.refusal_text("stale_option", request), channel=meta.channel
            )
            return
        if decision == ids.REVIEW_DENY:
            await self._decide(body, request.id, "deny", reason=text or None, **common)
        elif decision == ids.REVIEW_RESPOND:
            await self._decide(body, request.id, "approve", input=text, **common)
        elif decision == ids.REVIEW_APPROVE:
            await self._decide(body, request.id, "approve", **common)
        elif decision == ids.REVIEW_ASK:
            await self._ask(body, request.id, text, meta.version, meta.channel)
        else:
            index = int(decision.removeprefix(ids.REVIEW_CHOOSE))
            options = request.config.options or ()
            await self._decide(body, request.id, "approve", selection=options[index], **common)

    async def on_edit_submit(self, ack: AsyncAck, body: Body) -> None:
        """Approve with edits: read the JSON back (masks restored), check it (object, the
        agent's schema) and answer errors in the modal; else decide through the service."""
        meta = _metadata(body)
        text = self._view_value(body, ids.EDIT_BLOCK, ids.EDIT_ACTION)
        note = self._view_value(body, ids.NOTE_BLOCK, ids.NOTE_ACTION).strip()
        arguments: Any = None
        try:
            request = await self.ctx.store.get(meta.request_id)
            arguments = edits.read_edit(request, text)
            check_edit(request, arguments)
        except NotFound:
            await ack(**modals.modal_errors(ids.EDIT_BLOCK, modals.refusal_text("not_found")))
            return
        except edits.EditError as e:
            await ack(**modals.modal_errors(ids.EDIT_BLOCK, str(e)))
            return
        except InvalidRequest as e:
            problem = edits.problem_text(request, e.message, arguments)
            await ack(**modals.modal_errors(ids.EDIT_BLOCK, problem))
            return
        except _STORE_ERRORS:
            await ack(**modals.modal_errors(ids.EDIT_BLOCK, UNRECORDED))
            return
        await ack()
        work = self._edit(body, meta, arguments, note or None)
        await self._guarded(body, work, meta.channel)

    async def _edit(
        self, body: Body, meta: ids.ModalMetadata, arguments: dict[str, Any], note: str | None
    ) -> None:
        user = _user(body)
        channel = meta.channel
        try:
            result = await self.ctx.service.edit(
                meta.request_id,
                Actor(user, via="slack"),
                arguments,
                note=note,
                version=meta.version,
            )
        except NotFound:
            await self._ephemeral(body, modals.refusal_text("not_found"), channel=channel)
            return
        except NotAllowed as e:
            request = await self.ctx.store.get(meta.request_id)
            await self._ephemeral(
                body, modals.refusal_text(_refusal_kind(e.details), request), channel=channel
            )
            return
        except InvalidRequest as e:
            await self._ephemeral(body, f"That did not work: {e.message}", channel=channel)
            return
        self.ctx.metrics.slack_edits.labels(result=result.status).inc()
        log.info("edit id=%s user=%s result=%s", meta.request_id, user, result.status)
        await self._explain(body, result, channel)
        await self._redraw_reply(body, result.request)

    async def _explain(self, body: Body, result: VoteResult, channel: str | None) -> None:
        """Tell the clicker why their click changed nothing (late, duplicate, stale)."""
        kinds: dict[str, modals.RefusalKind] = {
            "closed": "already_decided",
            "duplicate": "already_voted",
            "stale": "edited_since",
        }
        kind = kinds.get(result.status)
        if kind is not None:
            await self._ephemeral(body, modals.refusal_text(kind, result.request), channel=channel)

    @staticmethod
    def _view_value(body: Body, block_id: str, action_id: str) -> str:
        values = ((body.get("view") or {}).get("state") or {}).get("values") or {}
        return str(((values.get(block_id) or {}).get(action_id) or {}).get("value") or "")

    # -- deciding -----------------------------------------------------------------------

    async def _load(self, body: Body, request_id: str) -> ApprovalRequest | None:
        try:
            return await self.ctx.store.get(request_id)
        except NotFound:
            await self._ephemeral(body, modals.refusal_text("not_found"))
            return None

    async def _decide(
        self,
        body: Body,
        request_id: str,
        outcome: Literal["approve", "deny"],
        *,
        version: str,
        reason: str | None = None,
        input: str | None = None,
        selection: str | None = None,
        for_session: bool = False,
        scope: GrantScope = "call",
        channel: str | None = None,
    ) -> VoteResult | None:
        """Decide as the clicker, for the `version` of the arguments the control was drawn
        on (every Slack control names one: `ids.control_value`, a modal's metadata)."""
        user = _user(body)
        decided = self.ctx.service.decide(
            request_id,
            outcome,
            Actor(user, via="slack"),
            reason=reason,
            input=input,
            selection=selection,
            for_session=for_session,
            scope=scope,
            version=version,
        )
        return await self._attempt(body, request_id, decided, channel, f"click outcome={outcome}")

    async def _ask(
        self,
        body: Body,
        request_id: str,
        question: str,
        version: str,
        channel: str | None,
    ) -> VoteResult | None:
        """Ask the agent `question` as the clicker, for the `version` the dialog was drawn on:
        the request ends `asked` (`ApprovalService.ask`); late, stale or refused as `_decide`."""
        asked = self.ctx.service.ask(
            request_id, Actor(_user(body), via="slack"), question, version=version
        )
        return await self._attempt(body, request_id, asked, channel, "question")

    async def _attempt(
        self,
        body: Body,
        request_id: str,
        attempt: Coroutine[Any, Any, VoteResult],
        channel: str | None,
        what: str,
    ) -> VoteResult | None:
        """Run a decision (`attempt`) for the clicker: a refusal, an unknown id or bad input
        is an ephemeral message; otherwise the clicker is told how it went, an `/approvals`
        reply is redrawn, and it is counted and logged (`what`: the log line's event)."""
        user = _user(body)
        event = what.split(" ", 1)[0]
        try:
            result = await attempt
        except NotFound:
            await self._ephemeral(body, modals.refusal_text("not_found"), channel=channel)
            return None
        except NotAllowed as e:
            request = await self.ctx.store.get(request_id)
            log.info("%s refused id=%s user=%s why=%s", event, request_id, user, e.details)
            await self._ephemeral(
                body, modals.refusal_text(_refusal_kind(e.details), request), channel=channel
            )
            return None
        except InvalidRequest as e:
            await self._ephemeral(body, f"That did not work: {e.message}", channel=channel)
            return None
        self.ctx.metrics.slack_clicks.labels(result=result.status).inc()
        await self._explain(body, result, channel)
        await self._redraw_reply(body, result.request)
        log.info(
            "%s id=%s user=%s result=%s route=%s principal=%s",
            what,
            request_id,
            user,
            result.status,
            result.request.route,
            result.request.principal or "-",
        )
        return result

    async def _redraw_reply(self, body: Body, request: ApprovalRequest) -> None:
        await replies.redraw(self.ctx, body, request)

    async def _ephemeral(self, body: Body, text: str, *, channel: str | None = None) -> None:
        """Tell the clicker `text`, ephemerally in the channel clicked in; a click on the App
        Home tab (no channel) is told in the app's DM with them."""
        channel = channel or _channel(body)
        user = _user(body)
        home_tab = (body.get("view") or {}).get("type") == "home"
        if not user or self.ctx.slack is None or not (channel or home_tab):
            log.info("ephemeral not sent (no channel) user=%s text=%s", user, text)
            return
        try:
            if channel:
                await self.ctx.slack.chat_postEphemeral(channel=channel, user=user, text=text)
            else:
                await self.ctx.slack.chat_postMessage(channel=user, text=text)
        except SlackApiError as e:
            log.warning("ephemeral failed user=%s error=%s", user, e.response.get("error"))

    async def on_error(self, error: Exception, body: Body) -> None:
        log.error("slack listener error type=%s error=%r", body.get("type"), error)
