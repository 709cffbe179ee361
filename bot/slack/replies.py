"""Ephemeral replies (`/approvals`, `/approvals ID`): which one a click came from, and
redrawing it through its `response_url` once the click is handled.

A reply is drawn once, when the slash command is answered; Slack keeps it only in the
clicker's client. So that it follows the request like the channel message (which the
dispatcher redraws), a click in it — a decision, or a stale control that recorded nothing —
redraws it as things stand: the one request (`/approvals ID`), or the clicker's waiting list
(`/approvals`, whose actions blocks are `approval_actions:<id>`). A modal opened from a reply
carries the reply in its metadata (`ids.Reply`) and redraws it when submitted. Slack accepts
a `response_url` for 30 minutes; a redraw that fails is logged, the decision stands.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.webhook.async_client import AsyncWebhookClient

from approvals.models import ApprovalRequest
from bot.core.context import BotContext
from bot.masking.masker import outbound
from bot.slack import action_ids as ids
from bot.slack import home

log = logging.getLogger(__name__)

Body = dict[str, Any]


def reply_of(body: Body) -> ids.Reply | None:
    """The ephemeral reply a control was clicked in, or a modal was opened from, if any."""
    view = body.get("view") or {}
    if body.get("type") == "view_submission":
        return ids.decode_metadata(str(view.get("private_metadata", ""))).reply
    container = body.get("container") or {}
    url = body.get("response_url")
    if not container.get("is_ephemeral") or not isinstance(url, str) or not url:
        return None
    action = (body.get("actions") or [{}])[0]
    block = str(action.get("block_id", ""))
    return ids.Reply(url, listed=block.startswith(ids.ACTIONS_BLOCK + ":"))


async def redraw(ctx: BotContext, body: Body, request: ApprovalRequest) -> None:
    """Redraw the reply `body` came from (nothing when it came from elsewhere)."""
    reply = reply_of(body)
    if reply is None:
        return
    if reply.listed:
        user = str((body.get("user") or {}).get("id", ""))
        answer = home.slash_list((await home.HomeLists(ctx).for_user(user)).waiting)
    else:
        answer = home.slash_one(request)
    payload = outbound({**answer, "replace_original": True})
    try:
        response = await AsyncWebhookClient(reply.url, timeout=10).send_dict(payload)
    except Exception as e:  # an unreachable or expired response_url: nothing to undo
        log.warning("reply not redrawn id=%s error=%s", request.id, type(e).__name__)
        return
    if response.status_code != 200:
        log.warning("reply not redrawn id=%s status=%s", request.id, response.status_code)
