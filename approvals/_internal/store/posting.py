"""The record of posting a request's Slack message: post lock, attempts, extra copies.

Posting is not idempotent at Slack, so each attempt is counted in the request's
hash before it is made (`posting:<escalations>`: first attempt time, count,
channel). An attempt that finds an earlier one counted may be following a post
whose outcome nobody saw (a crash, a client timeout): the dispatcher then looks
in the channel's history before posting again (bot/slack/delivery/copies.py). Every message
found or posted is recorded: the first as the request's `message`, any other as
an entry of `copies`, so the outcome is drawn on all of them.
A retry that answers a reviewer's question is posted in the asked request's thread; once it
is recorded there, the asked request is marked answered (`answered`, idempotent: a replica that
takes the entry over after a crash marks it if the first did not).
Scripts: approvals/_internal/store/lua/begin_post.lua,
approvals/_internal/store/lua/record_message.lua, approvals/_internal/store/lua/answered.lua.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from redis.asyncio import Redis

from approvals._internal.store.keys import Keys
from approvals._internal.store.store import OUTBOX_MAXLEN, load_script_source
from approvals.models import Answered, SlackMessage

SCRIPT_NAMES = ("begin_post", "record_message", "answered")
#: Prefix of a request hash's fields naming a reviewer still owed a DM: `dm:<round>:<user>`.
DM_PREFIX = "dm:"

BeginState = Literal["go", "gone", "closed", "moved", "posted", "busy"]


@dataclass(frozen=True)
class Begin:
    """`go`: post now (`earlier_at` is the first earlier attempt, if any); `busy`: `holder`
    is posting it; otherwise nothing to post (`gone`, `closed`, `moved`, `posted`)."""

    state: BeginState
    holder: str = ""
    earlier_at: float | None = None
    earlier_attempts: int = 0


@dataclass(frozen=True)
class Attempts:
    """The attempts made to post one route round of a request."""

    escalations: int
    channel: str
    first_at: float
    count: int


class Posting:
    """Reads and writes the posting record of requests (one per process, shared client)."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._scripts = {
            name: redis.register_script(load_script_source(name)) for name in SCRIPT_NAMES
        }

    def lock(self, request_id: str, escalations: int) -> str:
        # One lock per route round a request is posted on: an escalation posts it again.
        return self.keys.lock(f"post:{request_id}:{escalations}")

    async def begin(
        self,
        request_id: str,
        escalations: int,
        channel: str,
        *,
        holder: str,
        lock_seconds: int,
        now: float,
        gone_holder: str = "",
    ) -> Begin:
        """Take the post lock (or take it over from `gone_holder`) and count one attempt."""
        result = await self._scripts["begin_post"](
            keys=[self.keys.request(request_id), self.lock(request_id, escalations)],
            args=[holder, lock_seconds, escalations, channel, f"{now:.6f}", gone_holder],
        )
        state = _text(result[0])
        if state == "busy":
            return Begin("busy", holder=_text(result[1]))
        if state == "go":
            first = _text(result[1])
            return Begin(
                "go",
                earlier_at=float(first) if first else None,
                earlier_attempts=int(_text(result[2])),
            )
        if state in ("gone", "closed", "moved", "posted"):
            return Begin(state)  # type: ignore[arg-type]
        raise RuntimeError(f"begin_post answered {result!r}")

    async def record(
        self,
        request_id: str,
        escalations: int,
        message: SlackMessage,
        dms: Sequence[str] = (),
    ) -> tuple[Literal["gone", "message", "copy"], str, list[str]]:
        """Record a message of the request and free its post lock. Returns whether it became
        the request's message or an extra copy, the request's status now, and the reviewers
        still owed a DM about the message: `dms` when this call recorded it, those not sent
        yet (`dm_sent`) when it was recorded before."""
        result = await self._scripts["record_message"](
            keys=[self.keys.request(request_id), self.lock(request_id, escalations)],
            args=[message.model_dump_json(), escalations, json.dumps(list(dms)) if dms else ""],
        )
        code = int(result[0])
        if code == 0:
            return "gone", "", []
        if code == 2:
            return "copy", _text(result[1]), []
        return "message", _text(result[1]), [_text(u) for u in result[2]]

    async def answered(self, asked_id: str, answer: Answered) -> bool:
        """Mark the asked request `asked_id` answered by `answer` (its retry, posted in its
        thread) and queue the redraw of its message; False when it already was (or is gone)."""
        marked = await self._scripts["answered"](
            keys=[self.keys.request(asked_id), self.keys.outbox],
            args=[asked_id, answer.model_dump_json(), OUTBOX_MAXLEN, self.keys.retention_seconds],
        )
        return bool(marked)

    async def dm_sent(self, request_id: str, escalations: int, user: str) -> None:
        """The DM to `user` about the request's message of that round is done (sent, or
        given up): no replica sends it again."""
        await self.redis.hdel(self.keys.request(request_id), f"{DM_PREFIX}{escalations}:{user}")

    @staticmethod
    def dms_owed(row: dict[str, str], escalations: int) -> list[str]:
        """The reviewers still owed a DM about the message of round `escalations`, from the
        request's hash."""
        prefix = f"{DM_PREFIX}{escalations}:"
        return [name[len(prefix) :] for name in row if name.startswith(prefix)]

    async def release(self, request_id: str, escalations: int) -> None:
        await self.redis.delete(self.lock(request_id, escalations))

    async def history(
        self, request_id: str, row: dict[str, str] | None = None
    ) -> tuple[list[SlackMessage], list[Attempts]]:
        """The extra copies recorded for a request and the attempts counted for each round;
        from `row` (the request's hash, just read) when the caller has it."""
        if row is None:
            row = await self.redis.hgetall(self.keys.request(request_id))  # type: ignore[assignment]
        assert row is not None
        copies = [SlackMessage.model_validate_json(c) for c in json.loads(row.get("copies", "[]"))]
        attempts = []
        for name, raw in row.items():
            if name.startswith("posting:"):
                data = json.loads(raw)
                attempts.append(
                    Attempts(
                        int(name.split(":", 1)[1]),
                        str(data["channel"]),
                        float(data["first"]),
                        int(data["n"]),
                    )
                )
        return copies, sorted(attempts, key=lambda a: a.escalations)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
