"""Copies of a request's message in Slack: the metadata that marks them, and finding them.

Every request message carries Slack message metadata naming its request and
route round. When an attempt to post may have succeeded unseen (a replica died
with the post in flight, or Slack answered after the client gave up), the
dispatcher looks for such copies in `conversations.history` from the first
attempt on (with `include_all_metadata`) before posting again, and once more
when the request ends, so that every copy shows the outcome. A request posted as a reply in
a thread (a retry answering a reviewer's question, `approvals/_internal/questions.py`) is looked
for in that thread (`conversations.replies`: history lists no replies). Reading history
needs the `channels:history` / `groups:history` scopes (config/slack-manifest.yaml).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from approvals.models import ApprovalRequest, SlackMessage

#: Slack metadata `event_type` of a request message.
EVENT_TYPE = "approval_request"
#: Slack metadata `event_type` of a digest message (bot/slack/delivery/digests.py).
DIGEST_EVENT_TYPE = "approval_digest"
#: Seconds of clock difference allowed between this host and Slack when searching.
CLOCK_SLACK = 5.0
#: Messages per history page (Slack's documented maximum is 999) and most pages read.
PAGE = 200
MAX_PAGES = 20


def metadata(request: ApprovalRequest) -> dict[str, Any]:
    """The `metadata` argument of chat.postMessage / chat.update for this request."""
    return {
        "event_type": EVENT_TYPE,
        "event_payload": {"request_id": request.id, "escalations": request.escalations},
    }


def digest_metadata(digest_id: str) -> dict[str, Any]:
    """The `metadata` argument of a digest message."""
    return {"event_type": DIGEST_EVENT_TYPE, "event_payload": {"digest_id": digest_id}}


def is_digest_copy(message: dict[str, Any], digest_id: str, bot_id: str) -> bool:
    """Whether a history message is this bot's message of the digest."""
    meta = message.get("metadata")
    if not isinstance(meta, dict) or meta.get("event_type") != DIGEST_EVENT_TYPE:
        return False
    if bot_id and message.get("bot_id") != bot_id:
        return False
    payload = meta.get("event_payload")
    return isinstance(payload, dict) and payload.get("digest_id") == digest_id


def is_copy(message: dict[str, Any], request_id: str, escalations: int | None, bot_id: str) -> bool:
    """Whether a history message is this bot's message for the request (any round when
    `escalations` is None)."""
    meta = message.get("metadata")
    if not isinstance(meta, dict) or meta.get("event_type") != EVENT_TYPE:
        return False
    if bot_id and message.get("bot_id") != bot_id:
        return False
    payload = meta.get("event_payload")
    if not isinstance(payload, dict) or payload.get("request_id") != request_id:
        return False
    return escalations is None or payload.get("escalations") == escalations


async def find(
    call: Any,
    channel: str,
    request_id: str,
    escalations: int | None,
    *,
    since: float,
    bot_id: str,
    thread: str | None = None,
) -> list[SlackMessage]:
    """The bot's messages for the request in `channel` posted since `since` (epoch s),
    oldest first; with `thread` (its root's ts), the replies in that thread. `call(method,
    **kwargs)` makes one Slack call (the dispatcher's, with its retries and pacing)."""
    return await find_matching(
        call,
        channel,
        lambda message: is_copy(message, request_id, escalations, bot_id),
        since=since,
        thread=thread,
    )


async def find_matching(
    call: Any,
    channel: str,
    match: Callable[[dict[str, Any]], bool],
    *,
    since: float,
    thread: str | None = None,
) -> list[SlackMessage]:
    """The messages of `channel` since `since` (epoch s) that `match`, oldest first; with
    `thread` (its root's ts), the messages of that thread (`conversations.replies`)."""
    found: dict[str, SlackMessage] = {}
    cursor = None
    for _ in range(MAX_PAGES):
        kwargs: dict[str, Any] = {
            "channel": channel,
            "oldest": f"{max(0.0, since - CLOCK_SLACK):.6f}",
            "inclusive": True,
            "include_all_metadata": True,
            "limit": PAGE,
        }
        if cursor:
            kwargs["cursor"] = cursor
        if thread is not None:
            page = await call("conversations_replies", ts=thread, **kwargs)
        else:
            page = await call("conversations_history", **kwargs)
        for message in page.get("messages") or []:
            if match(message):
                ts = str(message["ts"])
                found[ts] = SlackMessage(channel=channel, ts=ts)
        cursor = (page.get("response_metadata") or {}).get("next_cursor")
        if not page.get("has_more") or not cursor:
            break
    return [found[ts] for ts in sorted(found, key=float)]
