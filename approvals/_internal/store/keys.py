"""Every Redis key name and its time-to-live; no key is spelled anywhere else.

Internal to approval-bot (not a stable API); agents import from `approvals`.

For Redis Cluster, give a prefix with a hash tag (e.g. ``{approvals}``): all
keys then share one slot and every Lua script stays legal.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from urllib.parse import quote

#: How long a decided request (and its audit trail) is kept: 30 days.
DEFAULT_RETENTION_SECONDS = 30 * 24 * 3600


@dataclass(frozen=True)
class Keys:
    """Builds the key names under one prefix."""

    prefix: str = "approvals"
    retention_seconds: int = DEFAULT_RETENTION_SECONDS

    def request(self, request_id: str) -> str:
        """Hash: status, data (request JSON), decision JSON, message JSON, votes JSON."""
        return f"{self.prefix}:req:{request_id}"

    def call(self, call_id: str, principal: str | None = None) -> str:
        """String: `<request id> <fingerprint>` of the request a principal's call_id created
        (idempotent create). Per principal, so one caller's ids never touch another's."""
        owner = quote(principal, safe="") if principal else "-"
        return f"{self.prefix}:call:{owner}:{quote(call_id, safe='')}"

    @property
    def pending(self) -> str:
        """Sorted set: pending request ids scored by creation time."""
        return f"{self.prefix}:pending"

    @property
    def deadlines(self) -> str:
        """Sorted set: pending request ids scored by deadline (epoch seconds)."""
        return f"{self.prefix}:deadlines"

    @property
    def outbox(self) -> str:
        """Stream: work for Slack (post / update), read by the bot's consumer group."""
        return f"{self.prefix}:outbox"

    @property
    def home_viewers(self) -> str:
        """Sorted set: Slack users who opened the App Home tab, scored by when
        (`bot/slack/home.py`)."""
        return f"{self.prefix}:home_viewers"

    @property
    def audit(self) -> str:
        """Stream: one entry per transition (who, what, when, via)."""
        return f"{self.prefix}:audit"

    @property
    def decided_channel(self) -> str:
        """Pub/sub channel: a request id is published when it leaves pending."""
        return f"{self.prefix}:decided"

    def grant(self, grant_id: str) -> str:
        """String: one approve-for-session grant (JSON,
        `approvals._internal.grant_scopes.Grant`)."""
        return f"{self.prefix}:grant:{quote(grant_id, safe='')}"

    def grant_bucket(
        self, principal: str | None, session_id: str, agent: str | None, tool_name: str
    ) -> str:
        """Set: the ids of the grants given to one caller (principal, session, agent) for one
        tool. The parts are hashed together, so no caller can spell another's key."""
        parts = json.dumps([principal, session_id, agent, tool_name])
        return f"{self.prefix}:grants:{hashlib.sha256(parts.encode()).hexdigest()[:32]}"

    def question(self, principal: str | None, session_id: str, tool_name: str) -> str:
        """String: a reviewer's question left for one caller's retry (a `Question` as JSON,
        `approvals/_internal/questions.py`): the caller's next pending request for the tool in
        the session takes it (`create.lua`). Hashed like `grant_bucket`."""
        parts = json.dumps([principal, session_id, tool_name])
        return f"{self.prefix}:asked:{hashlib.sha256(parts.encode()).hexdigest()[:32]}"

    @property
    def grants(self) -> str:
        """Sorted set: every grant id, scored by when it expires (listing, revoking)."""
        return f"{self.prefix}:grants"

    def usergroup(self, group_id: str) -> str:
        """Set: cached members of a Slack user group."""
        return f"{self.prefix}:ugroup:{group_id}"

    def digest_index(self, channel: str) -> str:
        """Hash: `open`, the id of the channel's digest taking new rows (store/digests.py)."""
        return f"{self.prefix}:digests:{quote(channel, safe='')}"

    def digest(self, digest_id: str) -> str:
        """Hash: one digest message: `channel`, `n`, `row:<i>` (`<request id> <round>`),
        `version`, `drawn`, `ts`, `posted_at`, `posting` (approvals/_internal/store/digests.py)."""
        return f"{self.prefix}:digest:{digest_id}"

    @property
    def digest_dirty(self) -> str:
        """Sorted set: digest ids whose Slack message is behind, scored by when to draw it."""
        return f"{self.prefix}:digests:dirty"

    def lock(self, name: str) -> str:
        """String: a short-lived lock (e.g. the sweeper's)."""
        return f"{self.prefix}:lock:{name}"

    @property
    def webhook_queue(self) -> str:
        """Stream: webhook deliveries to attempt now, read by the `webhooks` consumer group."""
        return f"{self.prefix}:webhooks:queue"

    @property
    def webhook_retries(self) -> str:
        """Sorted set: delivery ids scored by when their next attempt is due (epoch seconds)."""
        return f"{self.prefix}:webhooks:retry"

    @property
    def webhook_index(self) -> str:
        """Sorted set: every delivery id scored by when it was opened (for listing)."""
        return f"{self.prefix}:webhooks:index"

    def webhook(self, delivery_id: str) -> str:
        """Hash: one webhook delivery (request, url, status, body, counts)."""
        return f"{self.prefix}:webhook:{delivery_id}"

    def webhook_attempts(self, delivery_id: str) -> str:
        """List: one JSON entry per delivery attempt, oldest first."""
        return f"{self.prefix}:webhook:{delivery_id}:attempts"

    def webhook_secret(self, principal: str) -> str:
        """Hash: a principal's webhook signing secret (current, previous, previous_until)."""
        return f"{self.prefix}:whsecret:{quote(principal, safe='')}"

    def replica(self, consumer: str) -> str:
        """String: a live replica's heartbeat (its run token), expiring a few seconds after
        the replica stops refreshing it (approvals/_internal/store/outbox.py)."""
        return f"{self.prefix}:replica:{consumer}"

    def pattern(self) -> str:
        """Glob matching every key under this prefix (tests, cleanup)."""
        return f"{self.prefix}:*"
