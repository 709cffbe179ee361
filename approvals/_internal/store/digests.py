"""Digest messages: one Slack message listing many requests of a channel, for approval storms.

Internal to approval-bot (not a stable API); agents import from `approvals`.

`Digests` lists a request as a row of its channel's open digest (`digest_add.lua`), marks a
digest dirty when a row changes (`digest_touch.lua`), and holds the draw lock and the record
of each draw (`digest_begin.lua`, `digest_drawn.lua`) for bot/slack/delivery/digests.py. A
digest is one hash (`Keys.digest`); `Keys.digest_dirty` lists those whose message is behind.
The fields and why: docs/ARCHITECTURE.md, "Approval storms".
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Literal

from redis.asyncio import Redis

from approvals._internal.store.keys import Keys
from approvals._internal.store.store import load_script_source
from approvals.models import SlackMessage

SCRIPT_NAMES = ("digest_add", "digest_touch", "digest_begin", "digest_drawn")

#: Prefix of a request hash's field naming the digest that lists it in one route round.
FIELD_PREFIX = "digest:"

AddState = Literal["added", "already", "gone", "closed", "moved", "posted", "attempted", "busy"]


@dataclass(frozen=True)
class Added:
    """`added` / `already`: the request is a row of digest `digest_id`; `busy`: `holder` is
    posting it; otherwise it is not for a digest (`gone`, `closed`, `moved`, `posted`,
    `attempted`: an earlier attempt to post its own message may have landed)."""

    state: AddState
    digest_id: str = ""
    holder: str = ""


@dataclass(frozen=True)
class Row:
    request_id: str
    escalations: int


@dataclass(frozen=True)
class Digest:
    """A digest as stored: its rows in order, the version of its content, what is drawn."""

    digest_id: str
    channel: str
    rows: tuple[Row, ...]
    version: int
    drawn: int
    message: SlackMessage | None


@dataclass(frozen=True)
class Recheck:
    """Look in the channel's history again at `at` (epoch s) for copies of the digest's
    message posted since `since` that landed after it was posted or adopted (an attempt
    whose outcome nobody saw can land late)."""

    at: float
    since: float


@dataclass(frozen=True)
class DrawBegin:
    """`go`: draw it (`ts` '' = not posted yet; `earlier_at` is an earlier post attempt whose
    outcome nobody saw; `drawn` the version its message shows; `strays` second copies of it
    still to retire; `recheck` a look for late copies owed; `dms` reviewers still owed a DM
    about it); `busy`: `holder` draws it; `gone`: it expired."""

    state: Literal["go", "busy", "gone"]
    holder: str = ""
    ts: str = ""
    version: int = 0
    channel: str = ""
    earlier_at: float | None = None
    drawn: int = 0
    strays: tuple[str, ...] = ()
    recheck: Recheck | None = None
    dms: tuple[str, ...] = ()


def placements(row: dict[str, str]) -> list[tuple[int, str]]:
    """(round, digest id) of every digest that lists the request whose hash is `row`."""
    return sorted(
        (int(name[len(FIELD_PREFIX) :]), value)
        for name, value in row.items()
        if name.startswith(FIELD_PREFIX) and name[len(FIELD_PREFIX) :].isdigit()
    )


class Digests:
    """Reads and writes digests (one per process, shared client)."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._scripts = {
            name: redis.register_script(load_script_source(name)) for name in SCRIPT_NAMES
        }

    @property
    def ttl(self) -> int:
        return self.keys.retention_seconds

    def lock(self, digest_id: str) -> str:
        return self.keys.lock(f"digest:{digest_id}")

    async def add(
        self,
        request_id: str,
        escalations: int,
        channel: str,
        *,
        holder: str,
        max_rows: int,
        open_seconds: float,
        now: float,
        post_lock: str,
        gone_holder: str = "",
    ) -> Added:
        """List the request in the channel's open digest (or a new one)."""
        index = self.keys.digest_index(channel)
        for _ in range(20):  # another replica opening a digest at the same moment: read again
            raw = await self.redis.hget(index, "open")
            open_id = _text(raw) if raw else ""
            fresh = "dg_" + uuid.uuid4().hex[:16]
            result = await self._scripts["digest_add"](
                keys=[
                    self.keys.request(request_id),
                    post_lock,
                    index,
                    self.keys.digest(open_id or "-"),
                    self.keys.digest(fresh),
                    self.keys.digest_dirty,
                ],
                args=[
                    request_id,
                    escalations,
                    holder,
                    open_id,
                    fresh,
                    max_rows,
                    f"{now:.6f}",
                    open_seconds,
                    self.ttl,
                    channel,
                    gone_holder,
                ],
            )
            state = _text(result[0])
            if state == "retry":
                continue
            if state in ("added", "already"):
                return Added(state, digest_id=_text(result[1]))  # type: ignore[arg-type]
            if state == "busy":
                return Added("busy", holder=_text(result[1]))
            return Added(state)  # type: ignore[arg-type]
        raise RuntimeError("digest_add: the open digest kept changing")

    async def touch(self, digest_ids: list[str], now: float) -> None:
        """The requests listed in these digests changed: draw them again."""
        for digest_id in dict.fromkeys(digest_ids):
            await self._scripts["digest_touch"](
                keys=[self.keys.digest(digest_id), self.keys.digest_dirty],
                args=[digest_id, f"{now:.6f}", self.ttl],
            )

    async def due(self, now: float, count: int = 50) -> tuple[list[str], float | None]:
        """Digests due to be drawn at `now`, and when the next one is due (None: none)."""
        first = await self.redis.zrange(self.keys.digest_dirty, 0, 0, withscores=True)
        if not first:
            return [], None  # nothing dirty: one command
        next_at = float(first[0][1])
        if next_at > now:
            return [], next_at
        due = await self.redis.zrangebyscore(self.keys.digest_dirty, "-inf", now, 0, count)
        return [_text(d) for d in due], next_at

    async def get(self, digest_id: str) -> Digest | None:
        row = await self.redis.hgetall(self.keys.digest(digest_id))
        if not row:
            return None
        data = {_text(k): _text(v) for k, v in row.items()}
        rows = []
        for i in range(1, int(data.get("n", "0")) + 1):
            request_id, _, escalations = data.get(f"row:{i}", "").partition(" ")
            if request_id:
                rows.append(Row(request_id, int(escalations or 0)))
        ts = data.get("ts")
        channel = data.get("channel", "")
        return Digest(
            digest_id=digest_id,
            channel=channel,
            rows=tuple(rows),
            version=int(data.get("version", "0")),
            drawn=int(data.get("drawn", "0")),
            message=SlackMessage(channel=channel, ts=ts) if ts else None,
        )

    async def message(self, digest_id: str) -> SlackMessage | None:
        """Where the digest's message is, once posted."""
        channel, ts = await self.redis.hmget(self.keys.digest(digest_id), ["channel", "ts"])
        if not channel or not ts:
            return None
        return SlackMessage(channel=_text(channel), ts=_text(ts))

    async def begin(
        self, digest_id: str, *, holder: str, lock_seconds: int, now: float, gone_holder: str = ""
    ) -> DrawBegin:
        result = await self._scripts["digest_begin"](
            keys=[self.keys.digest(digest_id), self.lock(digest_id)],
            args=[holder, lock_seconds, f"{now:.6f}", gone_holder],
        )
        state = _text(result[0])
        if state == "gone":
            return DrawBegin("gone")
        if state == "busy":
            return DrawBegin("busy", holder=_text(result[1]))
        earlier, strays, recheck = _text(result[4]), _text(result[6]), _text(result[7])
        look = json.loads(recheck) if recheck else None
        return DrawBegin(
            "go",
            ts=_text(result[1]),
            version=int(_text(result[2])),
            channel=_text(result[3]),
            earlier_at=float(earlier) if earlier else None,
            drawn=int(_text(result[5])),
            strays=tuple(str(t) for t in json.loads(strays)) if strays else (),
            recheck=Recheck(float(look["at"]), float(look["since"])) if look else None,
            dms=tuple(_text(u) for u in result[8]),
        )

    async def drawn(
        self,
        digest_id: str,
        *,
        version: int | None,
        ts: str,
        now: float,
        next_in: float,
        holder: str,
        strays: list[str] | None = None,
        recheck: Recheck | Literal["done"] | None = None,
        dms: list[str] | None = None,
    ) -> tuple[int, int]:
        """Record the draw of `version` (None: it failed; draw again in `next_in`) and the
        message `ts` if it was posted now; frees the lock. `strays`: the second copies of
        the message still to retire (None: as recorded); while there are any, it is drawn
        again in `next_in`. `recheck`: a look for late copies owed ("done": none owed any
        more; None: as recorded); it is drawn again then. `dms`: the reviewers to DM about
        the message `ts` posted (or adopted) now, recorded as owed with it and sent by the
        next draw (`DrawBegin.dms`, `dm_sent`). Returns (version, drawn)."""
        if recheck == "done":
            look = "-"
        elif recheck is not None:
            look = json.dumps({"at": recheck.at, "since": recheck.since})
        else:
            look = ""
        result = await self._scripts["digest_drawn"](
            keys=[self.keys.digest(digest_id), self.lock(digest_id), self.keys.digest_dirty],
            args=[
                digest_id,
                "" if version is None else version,
                ts,
                f"{now:.6f}",
                next_in,
                holder,
                self.ttl,
                "" if strays is None else json.dumps(strays),
                look,
                json.dumps(dms) if dms else "",
            ],
        )
        return int(result[0]), int(result[1])

    async def dm_sent(self, digest_id: str, user: str) -> None:
        """The DM to `user` about the digest's message is done (sent, or given up)."""
        await self.redis.hdel(self.keys.digest(digest_id), f"dm:{user}")


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
