"""`/metrics`: the bot's Prometheus metrics, through `prometheus_client`.

Each `Bot` has its own `CollectorRegistry`, held by its `BotContext` as `ctx.metrics`. Label
values are bounded (`Metrics.configure` names the routes and principals; any other value is
kept for the first `LABEL_CAP` and is `other` after that), and what is read from Redis is set
by `scrape()` just before the text is generated. Why: docs/ARCHITECTURE.md, "Operating".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from approvals._internal.store.keys import Keys
    from approvals.models import ApprovalRequest

log = logging.getLogger(__name__)

#: Distinct values a free label keeps before further ones are `other`.
LABEL_CAP = 50
OTHER = "other"

#: Time from creation to a decision: seconds to days.
DECISION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)
#: Short latencies: create → posted, click → agent resumed, Slack calls, webhooks.
FAST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class LabelCap:
    """The values one label may take: the configured ones, then up to `cap` others."""

    def __init__(self, known: Iterable[str] = (), cap: int = LABEL_CAP) -> None:
        self.known = set(known)
        self.cap = cap
        self.seen: set[str] = set()

    def __call__(self, value: str | None) -> str:
        value = value or "none"
        if value in self.known or value in self.seen:
            return value
        if len(self.seen) < self.cap:
            self.seen.add(value)
            return value
        return OTHER


class Metrics:
    """Every metric the bot exposes, registered on its own registry."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.route = LabelCap(cap=LABEL_CAP)
        self.principal = LabelCap(cap=LABEL_CAP)
        self.method = LabelCap(cap=LABEL_CAP)
        self.error_code = LabelCap(cap=LABEL_CAP)

        # -- requests and decisions --------------------------------------------------
        self.api_requests = Counter(
            "approvals_api_requests",
            "Approval requests asked through the HTTP API, by outcome (created, or reused "
            "for a repeated call_id), route and principal.",
            ["outcome", "route", "principal"],
            registry=r,
        )
        self.hook_calls = Counter(
            "approvals_hook_calls",
            "Claude Code http hook calls answered, by decision (allow, deny, ask, none).",
            ["decision"],
            registry=r,
        )
        self.decisions = Counter(
            "approvals_decisions",
            "Requests decided (drawn on Slack by this replica), by outcome, route, principal.",
            ["outcome", "route", "principal"],
            registry=r,
        )
        self.time_to_decision = Histogram(
            "approvals_time_to_decision_seconds",
            "From a request's creation to its decision.",
            ["route"],
            buckets=DECISION_BUCKETS,
            registry=r,
        )
        self.create_to_posted = Histogram(
            "approvals_create_to_posted_seconds",
            "From a request's creation to its Slack message being posted.",
            ["route"],
            buckets=FAST_BUCKETS,
            registry=r,
        )
        self.click_to_resumed = Histogram(
            "approvals_click_to_resumed_seconds",
            "From a decision (a click, a CLI answer) to a waiting agent getting it back, by "
            "how it waited (api long-poll, hook).",
            ["via"],
            buckets=FAST_BUCKETS,
            registry=r,
        )
        self.slack_clicks = Counter(
            "approvals_slack_clicks",
            "Decision clicks in Slack, by result (decided, recorded, duplicate, closed, moved).",
            ["result"],
            registry=r,
        )
        self.slack_edits = Counter(
            "approvals_slack_edits",
            "Edit-and-approve submissions in Slack, by result (decided, recorded, duplicate, "
            "closed, moved).",
            ["result"],
            registry=r,
        )
        self.slack_clicks_unrecorded = Counter(
            "approvals_slack_clicks_unrecorded",
            "Clicks that could not be recorded because Redis was unreachable.",
            registry=r,
        )

        # -- Slack -------------------------------------------------------------------
        self.slack_posts = Counter(
            "approvals_slack_posts",
            "Request messages posted; `adopted` = a copy an earlier attempt had posted; "
            "`digest` = a digest message, `digest_row` = a request listed in one (storms).",
            ["how"],
            registry=r,
        )
        self.slack_updates = Counter(
            "approvals_slack_updates", "Request messages updated (chat.update).", registry=r
        )
        self.slack_updates_coalesced = Counter(
            "approvals_slack_updates_coalesced",
            "Outbox update entries not drawn because a later one of the same request was "
            "queued (it draws the newest state).",
            registry=r,
        )
        self.reminders_failed = Counter(
            "approvals_reminders_failed",
            "Reminders Slack did not take after retries (`retried`: released for the next "
            "tick; `refused`: a permanent error, logged; `lost`: one reviewer's DM of a round the "
            "others received, logged).",
            ["outcome"],
            registry=r,
        )
        self.slack_owed = Gauge(
            "approvals_slack_owed",
            "Outbox entries of this replica whose handling failed and will be retried.",
            registry=r,
        )
        self.slack_owed_retries = Counter(
            "approvals_slack_owed_retries",
            "Outbox entries whose handling failed (left owed, retried with backoff).",
            registry=r,
        )
        self.slack_api_seconds = Histogram(
            "approvals_slack_api_call_seconds",
            "Slack Web API call latency by method (each attempt).",
            ["method"],
            buckets=FAST_BUCKETS,
            registry=r,
        )
        self.slack_api_errors = Counter(
            "approvals_slack_api_errors",
            "Slack Web API calls that failed, by method and error (Slack's code, http_<status>,"
            " or the exception name).",
            ["method", "error"],
            registry=r,
        )
        self.slack_rate_limited = Counter(
            "approvals_slack_rate_limited",
            "Slack answered HTTP 429 (Retry-After waited out), by method.",
            ["method"],
            registry=r,
        )

        # -- webhooks ----------------------------------------------------------------
        self.webhook_attempts = Counter(
            "approvals_webhook_attempts", "Decision webhook delivery attempts.", registry=r
        )
        self.webhook_attempt_failures = Counter(
            "approvals_webhook_attempt_failures",
            "Webhook attempts that failed (retried or given up).",
            registry=r,
        )
        self.webhook_delivered = Counter(
            "approvals_webhook_delivered", "Webhook deliveries that succeeded.", registry=r
        )
        self.webhook_failed = Counter(
            "approvals_webhook_failed", "Webhook deliveries given up on.", registry=r
        )
        self.webhook_attempt_seconds = Histogram(
            "approvals_webhook_attempt_seconds",
            "Webhook attempt duration.",
            buckets=FAST_BUCKETS,
            registry=r,
        )

        # -- waiting, Redis, the outbox (set at scrape time) -------------------------
        self.waiters = Gauge(
            "approvals_waiters", "Agents waiting on this replica for a decision.", registry=r
        )
        self.long_polls = Gauge(
            "approvals_long_polls_parked",
            "HTTP requests parked on this replica waiting for a decision (API ?wait=, hook).",
            ["via"],
            registry=r,
        )
        self.pending = Gauge("approvals_pending", "Requests waiting for a decision.", registry=r)
        self.webhooks_retrying = Gauge(
            "approvals_webhooks_retrying", "Webhook deliveries waiting to retry.", registry=r
        )
        self.outbox_pending = Gauge(
            "approvals_outbox_pending_entries",
            "Outbox entries not yet handled: read by a replica but not acked, plus not read.",
            registry=r,
        )
        self.outbox_lag = Gauge(
            "approvals_outbox_oldest_unhandled_age_seconds",
            "Age of the oldest outbox entry not yet handled (0 when none).",
            registry=r,
        )
        self.redis_errors = Counter(
            "approvals_redis_errors",
            "Redis commands that failed (unreachable, timed out), by the part that saw it.",
            ["component"],
            registry=r,
        )

    def configure(self, *, routes: Iterable[str], principals: Iterable[str]) -> None:
        """The label values configuration names (always kept, never `other`)."""
        self.route.known = {*routes, "default"}
        self.principal.known = set(principals)

    def resumed(self, request: ApprovalRequest, via: str) -> None:
        """A waiting agent got its decision back: observe click → resumed."""
        if request.decision is not None:
            seconds = (datetime.now(UTC) - request.decision.decided_at).total_seconds()
            self.click_to_resumed.labels(via=via).observe(max(0.0, seconds))

    def parked(self, via: str) -> _Parked:
        return _Parked(self.long_polls.labels(via=via))

    async def scrape(self, redis: Redis, keys: Keys, *, waiting: int) -> bytes:
        """Read what lives in Redis, then the exposition text (a Redis that does not answer
        leaves those gauges as they were and counts an error)."""
        try:
            self.pending.set(await redis.zcard(keys.pending))
            self.webhooks_retrying.set(await redis.zcard(keys.webhook_retries))
            pending, age = await outbox_backlog(redis, keys)
            self.outbox_pending.set(pending)
            self.outbox_lag.set(age)
        except Exception as e:
            log.warning("metrics: reading Redis failed error=%r", e)
            self.redis_errors.labels(component="metrics").inc()
        self.waiters.set(waiting)
        return generate_latest(self.registry)


class _Parked:
    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge

    def __enter__(self) -> None:
        self.gauge.inc()

    def __exit__(self, *exc: object) -> None:
        self.gauge.dec()


def _entry_ms(entry_id: object) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    return int(text.split("-", 1)[0])


async def outbox_backlog(redis: Redis, keys: Keys, group: str = "bot") -> tuple[int, float]:
    """(entries not yet handled, age in seconds of the oldest one) of the outbox: those read
    and not acked (the group's pending list) and those no consumer has read yet."""
    stream = keys.outbox
    if not await redis.exists(stream):
        return 0, 0.0
    groups = {str(g["name"]): g for g in await redis.xinfo_groups(stream)}
    info = groups.get(group)
    oldest: list[int] = []
    if info is None:  # no replica has read it yet: everything is unhandled
        count = int(await redis.xlen(stream))
        first = await redis.xrange(stream, count=1)
        oldest += [_entry_ms(first[0][0])] if first else []
    else:
        pending = int(info["pending"])
        unread = await redis.xrange(stream, min=f"({info['last-delivered-id']}", count=1)
        lag = info.get("lag")
        if lag is None:  # Redis < 7: count the unread entries
            lag = len(await redis.xrange(stream, min=f"({info['last-delivered-id']}") or [])
        count = pending + int(lag or 0)
        if pending:
            summary = await redis.xpending(stream, group)
            oldest.append(_entry_ms(summary["min"]))
        if unread:
            oldest.append(_entry_ms(unread[0][0]))
    age = max(0.0, time.time() - min(oldest) / 1000) if oldest else 0.0
    return count, age


CONTENT_TYPE = CONTENT_TYPE_LATEST
#: The app's Metrics (the API's error middleware counts Redis errors on it).
METRICS = web.AppKey("metrics", Metrics)
