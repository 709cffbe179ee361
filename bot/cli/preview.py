"""`approval-bot preview`: what a request will look like in Slack, without Slack.

Given a tool call (`--tool`, `--args`, and the `request` command's other fields) or an
existing request's id, it draws, with the bot's own renderers (`bot.slack.render`), the
request's message (its risk lines and the parsed view of a shell command among them), its
row in a digest message (approval storms), and its dialogs: Details (when the message offers
it), Deny, Respond (kind `input`), Edit… (when the route lets reviewers edit), Ask the agent…
(where the route offers it) and the digest's Review. Each is masked as the bot sends it
(`bot.masking.masker.outbound`; the message is drawn masked) and printed twice: as a Block
Kit Builder link (paste it in a browser signed in to Slack) and as plain text.

A tool call is routed by the policy (`APPROVALS_POLICY_FILE`, `APPROVALS_DEFAULT_CHANNEL`)
as `ApprovalService.create` would route it (`draft_request`); nothing is stored. An id is
read from the bot's Redis (as `approval-bot show`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import quote

from bot.cli.connect import CliError, on_store, policy_for, run_async
from bot.cli.requests import add_call_arguments, call_from_arguments

if TYPE_CHECKING:
    from approvals.models import ApprovalRequest
    from bot.core.settings import Settings

#: Slack's Block Kit Builder: the payload, URL-encoded JSON, after the `#`.
BUILDER = "https://app.slack.com/block-kit-builder/#"
#: Every part, in the order printed.
PARTS = ("message", "details", "digest", "deny", "respond", "edit", "ask", "review")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "preview",
        help="show a request's Slack message and dialogs, without Slack",
        description="Draw a request as the bot would post it in Slack — its message, its "
        "digest row and its dialogs (details, deny, respond, edit, ask, review) — masked as "
        "the bot masks them, as Block Kit Builder links and as plain text. Give a tool call "
        "(--tool …) or the id of an existing request.",
    )
    p.add_argument("id", nargs="?", help="an existing request (read from the bot's Redis)")
    p.add_argument("--tool", help="the tool name of a call to draw (instead of an id)")
    add_call_arguments(p)
    p.add_argument(
        "--part", choices=PARTS, action="append", help="only this part (repeatable; default all)"
    )
    p.add_argument(
        "--json", action="store_true", help="one JSON object per part: name, builder_url, payload"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if bool(args.id) == bool(args.tool):
        print("approval-bot: give either a request id or --tool (not both)", file=sys.stderr)
        return 2
    out = sys.stdout
    if args.id:

        async def from_store(store: Any) -> int:
            request = await store.get(args.id)
            return show(request, args, out)

        return run_async(settings, on_store(settings, from_store))

    async def from_call() -> int:
        return show(draft(args, settings), args, out)

    return run_async(settings, from_call)


def draft(args: argparse.Namespace, settings: Settings) -> ApprovalRequest:
    """The request the bot would make for the call in `args` (nothing stored)."""
    from datetime import UTC, datetime

    from approvals._internal.service import draft_request
    from approvals.errors import InvalidRequest

    _, config, event = call_from_arguments(args)
    try:
        request, _ = draft_request(
            policy_for(settings), event, config, now=datetime.now(UTC), route=args.route
        )
    except InvalidRequest as e:
        raise CliError(e.message) from e
    return request


def parts(request: ApprovalRequest) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(name, what it is, payload) of each part, masked as the bot sends it."""
    from approvals._internal.edits import edits_offered
    from approvals._internal.questions import offered as questions_offered
    from approvals._internal.store.digests import Digest, Row
    from bot.masking.masker import outbound
    from bot.slack.action_ids import DETAILS
    from bot.slack.render import modals
    from bot.slack.render.digest_message import digest_message
    from bot.slack.render.edit_form import edit_text
    from bot.slack.render.request_message import message_for

    channel = request.channel or ""
    # The message is drawn masked (a `Masked` message: `outbound` sends it as it is).
    message = dict(outbound(message_for(request)))
    yield "message", "the request's message (chat.postMessage)", message
    offered = [b.get("accessory", {}).get("action_id") for b in message.get("blocks", [])]
    if DETAILS in offered:  # its reason, risks, parsed command and diffs in full
        yield "details", "the Details dialog (views.open)", outbound(modals.details_modal(request))
    digest = Digest("preview", channel, (Row(request.id, request.escalations),), 1, 0, None)
    drawn = digest_message(digest, {request.id: request})
    yield "digest", "its row in a digest message (an approval storm)", outbound(drawn)
    yield "deny", "the Deny dialog (views.open)", outbound(modals.deny_modal(request))
    if request.config.kind == "input":
        yield "respond", "the Respond dialog", outbound(modals.input_modal(request))
    text = edit_text(request) if edits_offered(request) else None
    if text is not None:
        yield "edit", "the Edit… dialog", outbound(modals.edit_modal(request, text))
    if questions_offered(request):
        yield "ask", "the Ask the agent… dialog", outbound(modals.ask_modal(request))
    yield "review", "the Review dialog of its digest row", outbound(modals.review_modal(request))


def builder_url(payload: dict[str, Any]) -> str:
    """A Block Kit Builder link: a message's blocks, or a modal view as it is."""
    shown = payload if payload.get("type") == "modal" else {"blocks": payload.get("blocks", [])}
    return BUILDER + quote(json.dumps(shown, ensure_ascii=False, separators=(",", ":")), safe="")


def show(request: ApprovalRequest, args: argparse.Namespace, out: TextIO) -> int:
    from approvals._internal.policy import UNROUTED_CHANNEL

    wanted = set(args.part or PARTS)
    if request.channel == UNROUTED_CHANNEL and not args.json:
        print(
            f"(route {request.route} has no Slack channel yet: {UNROUTED_CHANNEL} stands in; "
            "set APPROVALS_DEFAULT_CHANNEL or the route's channel)\n",
            file=out,
        )
    for name, what, payload in parts(request):
        if name not in wanted:
            continue
        if args.json:
            line = {"part": name, "builder_url": builder_url(payload), "payload": payload}
            print(json.dumps(line, ensure_ascii=False), file=out)
            continue
        print(f"== {name}: {what}", file=out)
        print(builder_url(payload), file=out)
        print(as_text(payload), file=out)
        print(file=out)
    return 0


# -- plain text --------------------------------------------------------------------------------


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _text(obj: Any) -> str:
    if isinstance(obj, dict):
        return _unescape(str(obj.get("text", "")))
    return ""


def _element(element: dict[str, Any]) -> str:
    kind = element.get("type")
    if kind == "button":
        return f"[{_text(element.get('text'))}]"
    if kind in ("static_select", "external_select"):
        options = [_text(o.get("text")) for o in element.get("options", [])]
        shown = ", ".join(options[:10]) + (", …" if len(options) > 10 else "")
        return f"[{_text(element.get('placeholder')) or 'Choose'} ▾ {shown}]"
    if kind == "plain_text_input":
        initial = element.get("initial_value")
        return "\n".join(f"  | {line}" for line in initial.splitlines()) if initial else "  | ____"
    return f"[{kind}]"


def _block(block: dict[str, Any]) -> list[str]:
    kind = block.get("type")
    if kind == "header":
        title = _text(block.get("text"))
        return [title, "=" * min(len(title), 78)]
    if kind == "section":
        lines = _text(block.get("text")).splitlines() or [""]
        accessory = block.get("accessory")
        if isinstance(accessory, dict):
            lines[-1] += f"  {_element(accessory)}"
        return lines
    if kind == "context":
        return ["  " + " · ".join(_text(e) for e in block.get("elements", []))]
    if kind == "actions":
        return [" ".join(_element(e) for e in block.get("elements", []))]
    if kind == "input":
        label = _text(block.get("label"))
        optional = " (optional)" if block.get("optional") and "optional" not in label else ""
        lines = [f"{label}{optional}:", _element(block.get("element", {}))]
        hint = _text(block.get("hint"))
        return [*lines, f"  ({hint})"] if hint else lines
    if kind == "divider":
        return ["-" * 40]
    return [f"[{kind} block]"]


def as_text(payload: dict[str, Any]) -> str:
    """A message or a modal view as plain text: what a reviewer reads, mrkdwn left as it is."""
    lines: list[str] = []
    if payload.get("type") == "modal":
        title = _text(payload.get("title"))
        lines += [f"┌ {title} ┐", ""]
    for block in payload.get("blocks", []):
        lines += _block(block)
        lines.append("")
    if payload.get("type") == "modal":
        lines.append(f"[{_text(payload.get('close'))}]  [{_text(payload.get('submit'))}]")
    elif payload.get("text"):
        lines.append(f"(notification: {_unescape(str(payload['text']))})")
    return "\n".join(lines).rstrip()
